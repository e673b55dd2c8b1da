"""Each solve of a plan's budget fit: DP budget, model peak, replayed peak, excess, seconds.

Why: ``planner.api.fit`` solves the DP, emits and replays the chain, and re-solves at a lower
DP budget while the replayed peak is over the budget (the DP's model leaves out what its
chain does not decide). At 10^6 activations a solve and its replay take minutes, so how many
the fit runs decides the plan's wall time (bench/NOTES_scale.md, issue 37: four where two
do). This prints, for each solve of one ``planner.plan`` call, what the fit saw: the DP
budget asked, the chain's model peak, its replayed peak, the excess (replay − model), the
replayed recompute and the seconds of the solve with its emission and replay. It wraps
``planner.api._solve_and_replay``: a diagnostic, nothing of the plan changes.

Run (``--single``: the segmented DP off, the single-process walk)::

    python3 bench/fit_trace.py --graph W/cg_transformer_100000.txt --budget 50% --tasks 4
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--budget", default="50%")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--runtime", default="ray", choices=("local", "ray"))
    ap.add_argument("--single", action="store_true",
                    help="plan with the segmented DP off (the single-process walk)")
    args = ap.parse_args(argv)

    from hgraph import EngineOptions
    from hgraph.common.errors import HGraphError
    from planner import api
    from planner.dp import scale

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
        return found

    api._solve_and_replay = traced
    t0 = time.perf_counter()
    try:
        p = api.plan(args.graph, args.budget,
                     engine=EngineOptions(tasks=args.tasks, runtime=args.runtime))
    except HGraphError as err:             # a bad graph or budget: one line, no traceback
        print(f"fit_trace: {err}", file=sys.stderr)
        return 2
    print(f"budget {p.budget_bytes:,} B: peak {p.peak_bytes:,}, recompute "
          f"{p.recompute_cost:,}, {time.perf_counter() - t0:.1f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
