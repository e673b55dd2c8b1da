"""planner.emit: the emitted schedules equal the reference's, line for line."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from conftest import data_path
from planner import cg, chen, emit, simulate
from planner.activation_graph import ActivationGraph
from planner.emit import hoist_forgets
from planner.schedule import Schedule
from planner.units import scale_units


def recover_chain(g, schedule, ag: ActivationGraph | None = None, search: bool = True,
                  max_passes: int = 3) -> list:
    """The chain of lower sets behind a reference schedule (best effort; for cross-checks).

    Checkpoints are implicit in a schedule, but the backward phase shows the blocks: block i's
    recomputations (forward computes that are not a ReLU-exception pair ``compute f`` +
    ``compute f+M/2``) come right before its backward computes, and a backward compute lists the
    gradients of the activations of its own block. So the activation gradients produced between
    two recomputation runs form a block. A block whose nodes are all checkpoints has no
    recomputation and merges with its neighbour: inside a segment, the recomputed nodes' block is
    taken whole and every later split point that leaves a lower set is used (these blocks hold
    only checkpoints). With ``search`` (the default) the split points
    inside segments that keep lower sets are toggled greedily (up to ``max_passes`` sweeps) while
    that lengthens the agreement of :func:`emit`'s output with ``schedule`` (common prefix +
    suffix). Callers compare ``emit(recover_chain(s)) == s`` to know whether it succeeded.

    Returns bool masks (∅ excluded, ending with V).
    """
    ag = ag if ag is not None else ActivationGraph.from_cg(g)
    nf = len(g.forward)
    ops = schedule.ops if hasattr(schedule, "ops") else list(schedule)
    comps = [op for op in ops if op.kind == "compute"]
    first_bw = nf                           # the forward phase computes each function once
    sinks = ag.sinks.tolist()
    segments = []
    current = []
    prev_backward = True
    produced = np.zeros(ag.n, dtype=bool)
    recomputed = np.zeros(ag.n, dtype=bool)
    i = first_bw
    if (len(comps) > first_bw + 1 and comps[first_bw].index < nf
            and comps[first_bw + 1].index < nf
            and ag.node_of_var[g.forward[comps[first_bw].index].outputs[0]] in sinks):
        segments.append([])                 # the last block is the loss alone
        i += 1
    while i < len(comps):
        op = comps[i]
        if op.index < nf:
            nxt = comps[i + 1] if i + 1 < len(comps) else None
            y = int(ag.node_of_var[g.forward[op.index].outputs[0]])
            if nxt is not None and nxt.index == op.index + nf and produced[y]:
                pass                    # ReLU-exception pair: y's block was processed already
            else:
                recomputed[y] = True
                if prev_backward and current:
                    segments.append(current)
                    current = []
            prev_backward = False
        else:
            bw = g.functions[op.index]
            for j in op.grads:
                v = ag.node_of_var[bw.outputs[j]]
                if v >= 0:
                    current.append(int(v))
                    produced[v] = True
            prev_backward = True
        i += 1
    if current:
        segments.append(current)
    if segments:                # sinks (the loss) get no gradient: they belong to the last block
        segments[0] = np.flatnonzero(~produced).tolist() + segments[0]
    boundaries = []                         # lower sets between segments, highest first
    candidates = []                         # lower sets inside segments (split points)
    structured = set()                      # the recomputed block whole, the rest one by one
    done = np.zeros(ag.n, dtype=bool)
    for seg in segments:
        top = ~done
        boundaries.append(top)
        seg = list(dict.fromkeys(seg))
        below = top.copy()
        below[seg] = False
        last_rec = max((q for q, v in enumerate(seg) if recomputed[v]), default=-1)
        for p in range(1, len(seg)):
            low = below.copy()
            low[seg[p:]] = True
            if ag.is_lower_set(low):
                if p > last_rec:
                    structured.add(len(candidates))
                candidates.append(low)
        done = ~below
    boundaries = [b for b in boundaries if b.any()]

    def chain_of(chosen):
        sets = boundaries + [candidates[c] for c in sorted(chosen)]
        return sorted(sets, key=lambda m: int(m.sum()))

    if not search or not candidates:
        return chain_of(structured)
    want = schedule.dumps().split("\n")

    def score(chosen):
        got = emit.emit(g, chain_of(chosen), ag).dumps().split("\n")
        if got == want:
            return None
        pre = next(i for i, (x, y) in enumerate(zip(got + [None], want + [""])) if x != y)
        suf = next(i for i, (x, y) in enumerate(zip(got[::-1] + [None], want[::-1] + [""]))
                   if x != y)
        return pre + suf

    chosen, best = set(), score(set())
    for start in (structured, set(range(len(candidates)))):
        sc = score(start)
        if sc is None or (best is not None and sc > best):
            chosen, best = set(start), sc
    for _ in range(max_passes):
        if best is None:
            break
        improved = False
        for c in range(len(candidates)):
            trial = chosen ^ {c}
            sc = score(trial)
            if sc is None or sc > best:
                chosen, best, improved = trial, sc, True
                if sc is None:
                    break
        if not improved:
            break
    return chain_of(chosen)



def _runs():
    rows = list(csv.DictReader(open(data_path("reference", "results.csv"))))
    index = {(r["graph"], r["solver"], r["strategy"], r["budget_label"]): r for r in rows}
    for path in sorted(data_path("reference", "schedules").glob("*.txt")):
        graph, solver, strategy, label = path.stem.split("_", 3)
        yield path, index[(graph, solver, strategy, label.replace("pct", "%"))]


_GRAPHS = {}


def _graph(name):
    if name not in _GRAPHS:
        g = cg.read(data_path("graphs", f"cg_{name}.txt"))
        _GRAPHS[name] = (g, ActivationGraph.from_cg(g))
    return _GRAPHS[name]


def test_chen_schedules_equal_the_reference_files():
    runs = [(p, r) for p, r in _runs() if r["solver"] == "Chen"]
    assert len(runs) == 7
    for path, row in runs:
        g, ag = _graph(row["graph"])
        plan = chen.solve(g, int(row["budget_bytes"]), units="reference", ag=ag)
        assert emit.emit(g, plan.chain, ag).dumps() == path.read_text(), path.name


def test_every_reference_schedule_is_reemitted_from_its_recovered_chain():
    """DP, DP2, DP2fix (time and memory) and Chen: 47 schedules, all reproduced exactly."""
    runs = list(_runs())
    assert len(runs) == 47
    for path, row in runs:
        g, ag = _graph(row["graph"])
        ref = Schedule.read(path)
        chain = recover_chain(g, ref, ag)
        assert emit.emit(g, chain, ag).dumps() == path.read_text(), path.name


def test_recovered_chains_have_the_rows_model_quantities():
    """The chain read back from a schedule has the DP's model cost, peak and checkpoint bytes.

    (Blocks made only of checkpoints leave no trace in a schedule, so ``blocks`` can differ.)
    """
    same_blocks = 0
    for path, row in _runs():
        g, ag = _graph(row["graph"])
        chain = recover_chain(g, Schedule.read(path), ag, search=False)
        u = scale_units(int(row["budget_bytes"]), int(ag.bytes.sum()), "reference")
        model = ag.with_ratio(u.ratio).chain_model(chain)
        assert model["recompute_cost"] == int(row["model_recompute_cost"]), path.name
        assert u.to_bytes(model["peak"]) == int(row["model_peak_bytes"]), path.name
        assert u.to_bytes(model["ckpt"]) == int(row["ckpt_bytes"]), path.name
        same_blocks += model["blocks"] == int(row["blocks"])
    assert same_blocks >= 41


def _naive_hoist(g, ops):
    """The reference's optimizer literally: bubble each forget up, front to back."""
    nf = len(g.forward)

    def touches(c, f):
        key = (f.index, f.which)
        if c.index < nf:
            fn = g.forward[c.index]
            return key[1] == "forward" and (key[0] in [a for a, _ in fn.inputs]
                                            or key[0] == fn.outputs[0])
        bw = g.functions[c.index]
        if key[1] == "forward":
            return any(a == key[0] and t in ("input", "output") for a, t in bw.inputs)
        return (any(a == key[0] and t == "gradient" for a, t in bw.inputs)
                or any(bw.outputs[j] == key[0] for j in c.grads))

    ops = list(ops)
    for i in range(len(ops)):
        if ops[i].kind != "forget":
            continue
        j = i
        while j > 0 and not (ops[j - 1].kind == "compute" and touches(ops[j - 1], ops[j])):
            ops[j - 1], ops[j] = ops[j], ops[j - 1]
            j -= 1
    return ops


@pytest.mark.parametrize("name", ["vgg19", "unet", "resnet50"])
def test_linear_hoisting_equals_bubbling_and_plain_schedules_are_valid(name):
    g, ag = _graph(name)
    for budget in (int(0.6 * ag.bytes.sum()), 10**11):
        plan = chen.solve(g, budget, ag=ag)
        plain = emit.emit(g, plan.chain, ag, optimize=False)
        assert hoist_forgets(g, plain.ops) == _naive_hoist(g, plain.ops)
        opt = emit.emit(g, plan.chain, ag)
        r_plain, r_opt = simulate.replay(g, plain), simulate.replay(g, opt)
        assert r_plain.violations == [] and r_opt.violations == []
        assert r_opt.peak_bytes <= r_plain.peak_bytes
        assert r_opt.recompute_cost == r_plain.recompute_cost


def test_trivial_chains():
    g, ag = _graph("vgg19")
    everything = emit.emit(g, [np.ones(ag.n, dtype=bool)], ag)     # one block: all recomputed
    r = simulate.replay(g, everything)
    assert r.violations == [] and r.recompute_cost >= r.forward_cost
    assert emit.emit(g, [0, ag.all_bits], ag).dumps() == everything.dumps()   # ∅ is optional
    with pytest.raises(ValueError, match="end with V"):
        emit.emit(g, [[0]], ag)
    with pytest.raises(ValueError, match="lower set"):
        emit.emit(g, [[ag.n - 1], ag.all_bits], ag)
