"""Rows + the recomputation DP: rows within the budget first, then the DP plans what remains.

A row plan (:mod:`planner.rows.plan`) leaves two kinds of memory: the band buffers of its
regions, which only the band count changes, and the *whole* tensors -- the values of the ops
outside the regions (the classifier, ops on maps too small for the bands) and the region outputs /
inputs stored between the passes. When the row plan alone does not fit ``budget_bytes``,
:func:`combine` asks the recomputation DP (:class:`planner.solver.Solver`) which whole tensors to
drop after the forward and recompute in the backward:

* the DP runs on the activation graph of the whole training graph with the region-internal
  activations at 0 bytes (they never exist whole under the row plan, so only what remains
  counts), at a ladder of budgets (fractions of what remains);
* from each schedule it emits, the whole ops it computes more than once become the row plan's
  ``recompute`` set (the loss never is), and the regions one of whose outputs it computes more
  than once its ``resweep`` set: their outputs -- the whole maps a row plan keeps between the
  passes -- are dropped after the forward and remade by one more forward band sweep of the
  region right before the backward first reads them (so the DP acts on what rows keep);
* every distinct pair is walked (:func:`planner.rows.plan.with_recompute`: the same step list
  the executor runs, so the prediction is exact), and the pair with the fewest extra FLOPs whose
  predicted peak fits the budget wins.

It is sequential, not a joint search: the band count and policy are the caller's (or ``auto``'s),
and the DP cannot touch the band buffers nor what the backward of the region at the peak reads
and writes (its input map, that map's gradient, its outputs' gradients) -- on VGG-16 the
rows-alone peak sits exactly there (the stage-2 backward holds pool1's value, its gradient and
pool2's gradient), so the DP finds nothing to drop; it pays off where checkpoints of other regions
or whole tensors are idle at the peak (ResNet-50's block outputs, U-Net's skips).
"""

from __future__ import annotations

import numpy as np

from hgraph.common.errors import HGraphError
from planner import search
from planner.activation_graph import ActivationGraph
from planner.emit import emit_decision
from planner.rows.plan import RowPlan, plan, with_recompute
from planner.solver import make_solver

#: DP budgets tried, as fractions of the bytes of the whole tensors that remain.
LADDER = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05)


def remaining_graph(p: RowPlan) -> ActivationGraph:
    """The activation graph with the bytes of region-internal activations set to 0."""
    g = p.graph
    ag = ActivationGraph.from_cg(g)
    internal = (p.region >= 0) & ~p.outputs
    node = ag.node_of_var[p.layers.out_var[internal]]
    nbytes = ag.bytes.copy()
    nbytes[node[node >= 0]] = 0
    out = ActivationGraph(ag.var, ag.func, nbytes, ag.t, ag.src, ag.dst)
    out.node_of_var = ag.node_of_var
    return out


def recomputations(g, schedule) -> np.ndarray:
    """int64 [forward ops]: how many times ``schedule`` recomputes each forward op (computes it
    beyond the first time)."""
    nf = len(g.forward)
    idx = np.asarray([op.index for op in schedule.ops if op.kind == "compute" and op.index < nf],
                     dtype=np.int64)
    return np.maximum(np.bincount(idx, minlength=nf) - 1, 0)


def recomputed_whole_ops(p: RowPlan, schedule) -> tuple:
    """(whole ops, regions): the whole ops (outside regions, not the loss) that ``schedule``
    computes more than once, and the regions one of whose outputs it computes more than once
    (they are swept again in the backward: ``RowPlan.resweep``)."""
    twice = recomputations(p.graph, schedule) > 0
    loss = np.asarray([op == "softmax_cross_entropy" for op in p.layers.ops], dtype=bool)
    regions = np.unique(p.region[twice & p.outputs])
    return tuple(np.flatnonzero(twice & (p.region < 0) & ~loss).tolist()), tuple(regions.tolist())


def idle_at_peak(q: RowPlan) -> list:
    """Moves that could lower the peak of ``q``'s walk, from the whole maps held at its peak step:
    ``("op", i)`` recompute a whole op (not the loss) whose value is held but not used there,
    ``("region", r)`` sweep region ``r`` again for such an output of it, ``("open", i)`` let
    downsampling op ``i`` (a region output whose value or gradient is held there, whole) not end
    its region, so that map never exists whole."""
    w, ly = q.walk, q.layers
    s = int(np.argmax(w.live))
    used = set(w.steps[s].reads) | {k for k, _ in w.steps[s].writes}
    producer = {int(v): i for i, v in enumerate(ly.out_var.tolist())}
    out = []
    for key in w.held_at(s):
        if key[0] not in ("v", "g") or key[1] not in producer:
            continue
        i = producer[key[1]]
        r = int(q.region[i])
        if r >= 0 and q.outputs[i] and ly.h_out[i] < ly.h_in[i] and i not in q.open_stages:
            out.append(("open", i))
        if key[0] != "v" or key in used:
            continue
        if r >= 0 and q.outputs[i] and r not in q.resweep:
            out.append(("region", r))
        elif r < 0 and ly.ops[i] != "softmax_cross_entropy" and i not in q.recompute:
            out.append(("op", i))
    return sorted(set(out))


def _move(q: RowPlan, kind: str, u: int, opts=None) -> RowPlan | None:
    """``q`` after one move of :func:`idle_at_peak` (None when the re-plan refuses it; ``opts``:
    how its engine analyses run)."""
    dp = {"search": "walk", "candidates": 0}
    if kind != "open":
        return with_recompute(q, q.recompute + ((u,) if kind == "op" else ()), dp=dp,
                              resweep=q.resweep + ((u,) if kind == "region" else ()))
    try:
        n = plan(q.graph, q.bands, q.policy, opts, prune=q.prune, open_stages=q.open_stages + (u,))
    except HGraphError:
        return None
    swept = np.flatnonzero(q.outputs & np.isin(q.region, q.resweep))
    regions = {int(n.region[i]) for i in swept if n.region[i] >= 0 and n.outputs[i]}
    return with_recompute(n, [i for i in q.recompute if n.region[i] < 0], dp=dp, resweep=regions)


def walk_search(p: RowPlan, rounds: int = 12, opts=None) -> list:
    """Greedy search on the exact walk: from ``p``, make the move of :func:`idle_at_peak` that
    lowers the predicted peak most; repeat while one does. Returns every plan on the way (each
    lower than the last). ``opts``: how the re-plans' engine analyses run (EngineOptions)."""
    out, q = [], p
    for _ in range(rounds):
        best = None
        for kind, u in idle_at_peak(q):
            c = _move(q, kind, u, opts)
            if c is not None and c.predicted_peak_bytes < (best or q).predicted_peak_bytes:
                best = c
        if best is None:
            break
        out.append(best)
        q = best
    return out


def candidates(p: RowPlan, opts=None) -> list:
    """Every plan that :func:`combine` chooses from: the DP's schedules at a ladder of budgets
    (:func:`recomputed_whole_ops`) and the plans of :func:`walk_search` (the DP's memory model
    does not see the band buffers and the whole gradients a region's backward holds, so its
    choices can miss the walk's peak)."""
    ag = remaining_graph(p)
    solver = make_solver(p.graph, opts=opts, ag=ag)
    remaining = int(ag.bytes.sum())

    def whole_ops(fraction):
        """(ops recomputed whole, regions swept again) of the DP's plan at ``fraction``."""
        status, decision, _ = solver.solve(max(1, int(fraction * remaining)))
        return None if status != "OK" else \
            recomputed_whole_ops(p, emit_decision(p.graph, decision, solver.ag))

    found = [with_recompute(p, ops, resweep=regions,
                            dp={"search": "dp", "dp_budget_bytes": int(fraction * remaining),
                                "remaining_bytes": remaining, "candidates": 0})
             for fraction, (ops, regions) in search.at_budgets(whole_ops, LADDER, key=lambda c: c)]
    return found + walk_search(p, opts=opts)


def choose(p: RowPlan, found: list, budget_bytes: int, peak=None) -> RowPlan:
    """The plan of ``found`` with the fewest extra FLOPs whose peak (``peak(plan)``, default
    its activations) fits ``budget_bytes`` (InfeasibleError naming the smallest peak found, as
    ``min_budget_bytes`` too, when none does)."""
    peak = peak or _activations
    best = search.pick(
        found, budget_bytes, lambda q: (peak(q), (q.flops()["extra_flops"], peak(q))),
        lambda low, _: (f"rows {p.bands} {p.policy} + DP: no plan fits {budget_bytes:,} B; "
                        f"the smallest predicted peak is {low:,} B"),
        reachable=[peak(p)])          # rows alone: reached, not picked here (combine takes it first)
    best.dp = {**best.dp, "candidates": len(found), "rows_alone_peak_bytes": int(p.predicted_peak_bytes)}
    return best


def combine(p: RowPlan, budget_bytes: int, opts=None, peak=None) -> RowPlan:
    """``p`` itself when it fits ``budget_bytes``, else the cheapest of :func:`candidates` that
    fits (InfeasibleError naming the smallest peak found when none does). ``peak``: a plan's
    peak as the budget counts it (default its activations, ``predicted_peak_bytes``; the whole
    step: ``planner.rows.step.predict_rows``)."""
    peak = peak or _activations
    if peak(p) <= budget_bytes:
        return p
    return choose(p, candidates(p, opts), budget_bytes, peak)


def _activations(q: RowPlan) -> int:
    return int(q.predicted_peak_bytes)
