"""Each solve of a plan's budget fit: DP budget, model peak, replayed peak, excess, seconds.

Why: ``planner.api.fit`` solves the DP, emits and replays the chain, and re-solves at a lower
DP budget while the replayed peak is over the budget (the DP's model leaves out what its
chain does not decide). At 10^6 activations a solve and its replay take minutes, so how many
the fit runs decides the plan's wall time (bench/NOTES_scale.md, issue 37: four where two
do). This prints, for each solve of one ``planner.plan`` call, what the fit saw: the DP
budget asked, the chain's model peak, its replayed peak, the excess (replay − model), the
replayed recompute and the seconds of the solve with its emission and replay. It wraps
``planner.api._solve_and_replay``: a diagnostic, nothing of the plan changes.

``--parts`` also says what the excess is made of (:func:`parts`): the schedule is walked
again to the replay's peak, and what is live there is set against the DP's model term of the
block whose op it is (FORMAT.md §4.2: ``ckpt + 2·m(V_i) + m(A(L_i)) + m(B(L_i))``). Why: the
fit would solve once if the excess were known before the first solve; what it is made of
says whether it is a quantity of the graph (bench/NOTES_scale.md, issue 37, seventh session:
it is not; it is the parameters' gradients accumulated above the peak and later blocks'
values and gradients beyond ``m(A) + m(B)``, less the peak block's slack, which the chain's
cut decides).

Run (``--single``: the segmented DP off, the single-process walk)::

    python3 bench/fit_trace.py --graph W/cg_transformer_100000.txt --budget 50% --tasks 4
    python3 bench/fit_trace.py --graph W/cg_transformer_20000.txt --parts
    python3 bench/fit_trace.py --graph W/t5k.txt --budget 40% --window 32 --parts
    python3 bench/fit_trace.py --graph W/cg_transformer_20000.txt --left-out-model

``--left-out-model`` (an experiment, up to :data:`LEFT_OUT_LIMIT` activations) raises the DP's
``m(A) + m(B)`` of every state ``L_v`` by :func:`left_out`, what the replay held beyond the
model term in every trace; the fit then solves once where it solved twice, the model peak
equal to the replayed one or above it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parts(a, found) -> tuple[dict, dict]:
    """``(where, terms)``: what is live at the replay's peak of ``found`` (decision, model,
    schedule, replay) on the analysis ``a``, against the model term of the peak op's block
    ``i``. ``where``: the op, its kind and function, the block, the blocks, ``m(V_i)``.
    ``terms`` (bytes, adding up to the excess): values of earlier blocks less the checkpoints
    the model counts, the block's values and gradients less ``2·m(V_i)``, later blocks' values
    and gradients less ``m(A) + m(B)``, gradients of earlier blocks' activations (the model
    has none; none were live in any trace: a backward op runs in the block of the gradients
    it writes), the parameters' and inputs' gradients (never freed: the model has none), and
    the block's term less the chain's model peak."""
    from planner.walk import ScheduleWalker

    decision, model, schedule, sim = found
    g, ag, stage = a.g, a.ir, decision.stage

    class AtPeak(ScheduleWalker):
        def visit(self, s, op):
            if s == sim.peak_step:
                self.snap = (np.fromiter(self.value_of, np.int64),
                             np.fromiter(self.grad_of, np.int64), op.index, op.grads)

        def finish(self, n):
            return self.snap

    vals, grads, f, listed = AtPeak(g, False).walk(schedule.ops)
    nf, cols = g.num_forward, g.columns
    # the block being processed: a backward op runs in the block of the activations whose
    # gradients it lists (FORMAT.md §4.7 (b)), else in its output's; a forward op in its output's
    outs = cols.out_var[cols.out_ptr[f]:cols.out_ptr[f + 1]][list(listed)] if f >= nf else []
    node = ag.node_of_var[np.asarray(outs, np.int64)]
    node = node[node >= 0]
    i = int(stage[node].min() if node.size else stage[ag.node_of_var[g.forward_output[f % nf]]])
    k = int(stage.max()) + 1
    later = np.zeros(ag.n, bool)                   # checkpoints: a successor in a later block
    later[ag.src[stage[ag.dst] > stage[ag.src]]] = True
    ckpt = int(np.bincount(stage[later], weights=ag.bytes[later], minlength=k)[:i].sum())
    L = stage <= i
    block = int(ag.bytes[stage == i].sum())
    mab = int(ag.bytes[ag.to_mask(ag.above(L))].sum() + ag.bytes[ag.to_mask(ag.below(L))].sum())
    term = ckpt + 2 * block + mab

    def by_block(v):                               # bytes of earlier, the block, later
        node = ag.node_of_var[v]
        node = node[node >= 0]
        w = np.sign(stage[node] - i) + 1
        return np.bincount(w, weights=ag.bytes[node], minlength=3).astype(np.int64)

    fv, gv = by_block(vals), by_block(grads)
    act = np.asarray(g.is_activation, bool)
    pg = int(np.asarray(g.var_bytes, np.int64)[grads[~act[grads]]].sum())
    terms = dict(values_earlier_over_ckpt=int(fv[0]) - ckpt,
                 block_over_2m=int(fv[1] + gv[1]) - 2 * block,
                 later_over_mA_mB=int(fv[2] + gv[2]) - mab,
                 input_grads=int(gv[0]), param_input_grads=pg,
                 block_term_under_model=term - int(model.model_peak_bytes))
    assert sum(terms.values()) == sim.peak_bytes - model.model_peak_bytes, terms
    where = dict(op=int(sim.peak_step), kind="backward" if f >= nf else "forward",
                 function=int(f), block=i, blocks=k, block_bytes=block)
    return where, terms


def parts_line(where: dict, terms: dict) -> str:
    """:func:`parts` as the trace prints it."""
    return (f"  at the peak, op {where['op']:,} ({where['kind']} {where['function']}, block "
            f"{where['block']:,} of {where['blocks']:,}, m(V_i) {where['block_bytes']:,}): "
            + ", ".join(f"{n} {v:+,}" for n, v in terms.items()))


#: ``--left-out-model`` holds every ``L_v`` as an n-bit row: n²/8 bytes.
LEFT_OUT_LIMIT = 30_000


def left_out(g, ag, level) -> np.ndarray:
    """Per node ``v``, what the replay holds beyond the DP's term of a block ending at ``L_v``
    (``ckpt + 2·m(V_i) + m(A) + m(B)``) in the traces of bench/NOTES_scale.md (issue 37,
    seventh session): the values of ``A(L_v)`` whose backward reads its own output (an
    ``output`` tag: the model counts only their gradients), and the parameters' and inputs'
    gradients written by the backward functions of the nodes outside ``L_v`` (run before
    block ``i``; never freed). An experiment, not the planner's: the lower sets as dense bit
    rows (:data:`LEFT_OUT_LIMIT`), their closure one topological level at a time."""
    from planner.arrays import ranges
    from planner.cg import TAGS

    n, nf, c = ag.n, g.num_forward, g.columns
    act = np.asarray(g.is_activation, bool)
    vb = np.asarray(g.var_bytes, np.int64)
    b = ag.func + nf                                       # each node's backward function
    cnt = c.in_ptr[b + 1] - c.in_ptr[b]
    at = ranges(c.in_ptr[b], cnt)
    row = np.repeat(np.arange(n), cnt)
    reads_out = np.zeros(n, bool)
    reads_out[row[(c.in_tag[at] == TAGS.index("output")) & (c.in_var[at] == ag.var[row])]] = True
    cnt = c.out_ptr[b + 1] - c.out_ptr[b]
    out = c.out_var[ranges(c.out_ptr[b], cnt)]
    row = np.repeat(np.arange(n), cnt)
    pg = np.bincount(row[~act[out]], weights=vb[out[~act[out]]], minlength=n).astype(np.int64)
    words = (n + 63) // 64
    anc = np.zeros((n, words), np.uint64)                  # L_v, closed level by level
    anc[np.arange(n), np.arange(n) // 64] = np.uint64(1) << (np.arange(n) % 64).astype(np.uint64)
    by_level = np.argsort(level[ag.dst], kind="stable")
    bounds = np.searchsorted(level[ag.dst][by_level], np.arange(int(level.max()) + 2))
    for lo, hi in zip(bounds[1:-1].tolist(), bounds[2:].tolist()):
        e = by_level[lo:hi]
        np.bitwise_or.at(anc, ag.dst[e], anc[ag.src[e]])
    extra = np.zeros(n, np.int64)
    w_out = ag.bytes * reads_out
    for lo in range(0, n, 512):
        x = np.unpackbits(anc[lo:lo + 512].view(np.uint8), axis=1, bitorder="little")[:, :n]
        x = x.astype(bool)
        r, e = np.nonzero(x[:, ag.src] & ~x[:, ag.dst])   # edges leaving L_v: into A(L_v)
        a = np.zeros_like(x)
        a[r, ag.dst[e]] = True
        extra[lo:lo + 512] = a @ w_out + (int(pg.sum()) - x @ pg)
    return extra


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--budget", default="50%")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--runtime", default="ray", choices=("local", "ray"))
    ap.add_argument("--single", action="store_true",
                    help="plan with the segmented DP off (the single-process walk)")
    ap.add_argument("--window", type=int, default=None,
                    help="the approximate DP's window (SolverLimits.dp_window; 0: none)")
    ap.add_argument("--front-cap", type=int, default=None,
                    help="the approximate DP's front cap (SolverLimits.dp_front_cap; 0: none)")
    ap.add_argument("--left-out-model", action="store_true",
                    help=f"an experiment: the DP's m(A)+m(B) of every L_v raised by what the "
                         f"model leaves out (left_out; up to {LEFT_OUT_LIMIT:,} activations)")
    ap.add_argument("--parts", action="store_true",
                    help="also what the excess is made of at each replay's peak (a second walk)")
    args = ap.parse_args(argv)

    from hgraph import EngineOptions
    from hgraph.common.errors import HGraphError
    from planner import api
    from planner.dp import scale
    from planner.options import SolverLimits

    if args.single:
        scale.SEGMENTED_LIMIT = sys.maxsize
    solve_and_replay = api._solve_and_replay

    def traced(a, s, dp_budget, check):
        t0 = time.perf_counter()
        found = solve_and_replay(a, s, dp_budget, check)
        took = time.perf_counter() - t0
        if found is None:
            print(f"DP budget {dp_budget:,} B: no chain ({took:.1f} s)", flush=True)
            return found
        model, sim = found[1], found[3]
        print(f"DP budget {dp_budget:,} B: model peak {model.model_peak_bytes:,}, replayed "
              f"{sim.peak_bytes:,} (excess {sim.peak_bytes - model.model_peak_bytes:,}), "
              f"recompute {sim.recompute_cost:,}, {took:.1f} s", flush=True)
        if args.parts:
            print(parts_line(*parts(a, found)), flush=True)
        return found

    api._solve_and_replay = traced
    if args.left_out_model:
        from planner import solver

        seen, analyse, approx_family = {}, api.analyse, solver.approx_family

        def analysed(g, opts, sharded=None):
            seen["a"] = a = analyse(g, opts, sharded)
            if a.ir.n > LEFT_OUT_LIMIT:
                raise SystemExit(f"fit_trace: --left-out-model holds every lower set as bits: "
                                 f"{a.ir.n:,} activations is over {LEFT_OUT_LIMIT:,}")
            return a

        def raised(dg, **kw):
            fam = approx_family(dg, **kw)
            a = seen["a"]
            extra = left_out(a.g, a.ir, a.level)
            fam.mAB = fam.mAB + np.where(fam.node >= 0, extra[np.maximum(fam.node, 0)], 0)
            return fam

        api.analyse, solver.approx_family = analysed, raised
    t0 = time.perf_counter()
    try:
        p = api.plan(args.graph, args.budget,
                     engine=EngineOptions(tasks=args.tasks, runtime=args.runtime),
                     limits=SolverLimits(dp_window=args.window, dp_front_cap=args.front_cap))
    except HGraphError as err:             # a bad graph or budget: one line, no traceback
        print(f"fit_trace: {err}", file=sys.stderr)
        return 2
    print(f"budget {p.budget_bytes:,} B: peak {p.peak_bytes:,}, recompute "
          f"{p.recompute_cost:,}, {time.perf_counter() - t0:.1f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
