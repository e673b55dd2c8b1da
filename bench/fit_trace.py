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

The terms ``--parts`` found (the parameters' and inputs' gradients written, the values of
``A(L)`` whose backward reads its own output) are now in the DP's family
(:attr:`planner.analyses.local_stats.LocalStats.left_out`), so on the scale path the excess
is ~0 and the fit solves once (tests/test_local_stats_left_out.py checks the terms per
state against a brute-force sum).
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
