"""The exact DP on one thread and on every core, alternately in one process: wall ratios.

Each solve builds everything from the parsed graph (family, bounds, passes), as one
``hgraph submit plan`` does; ``HGRAPH_THREADS=1`` (jobs inline, :mod:`planner.threads`) is the
baseline and the default (one thread per core) the candidate, run one after the other per row
and repeat, so a machine that changes speed between runs changes both. The plans must be the
same: the recompute, ckpt and a hash of the chain are compared on every run.

    python3 bench/threads_bench.py                                    # cnn29's hard rows
    python3 bench/threads_bench.py --blocks 12 --rows time:20,memory:90 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner import synth, threads  # noqa: E402
from planner.solver import make_solver  # noqa: E402


def _solve(g, strategy: str, budget: int):
    """(wall s, the plan's identity) of one exact solve from scratch."""
    t0 = time.perf_counter()
    r = make_solver(g, solver="exact", strategy=strategy, units="reference").dp(budget)
    return time.perf_counter() - t0, (r.status, r.model_recompute_cost, r.ckpt_bytes,
                                      hash(tuple(r.chain_ids)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=29, help="generated branchy CNN (synth)")
    ap.add_argument("--rows", default="time:20,time:30,memory:20,memory:90",
                    help="comma list of strategy:percent-of-activations")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    g = synth.build_cnn(blocks=args.blocks)
    act = int(g.var_bytes[g.is_activation].sum())
    rows = [(s, int(p)) for s, p in (r.split(":") for r in args.rows.split(","))]
    cores = threads.workers()
    print(f"cnn{args.blocks}: {cores} threads (this machine's cores) against 1, "
          f"{args.repeat} alternating runs per row")
    print(f"{'row':<12} {'1 thread s':>22} {f'{cores} threads s':>22} {'median ratio':>13}")
    ok = True
    for strategy, pct in rows:
        times = {"1": [], "N": []}
        plans = set()
        for _ in range(args.repeat):
            for mode in ("1", "N"):
                if mode == "1":
                    os.environ["HGRAPH_THREADS"] = "1"
                else:
                    os.environ.pop("HGRAPH_THREADS", None)
                wall, plan = _solve(g, strategy, act * pct // 100)
                times[mode].append(wall)
                plans.add(plan)
        os.environ.pop("HGRAPH_THREADS", None)
        same = len(plans) == 1
        ok &= same
        ratio = np.median(np.array(times["1"]) / np.array(times["N"]))
        print(f"{strategy + ' ' + str(pct) + '%':<12} "
              f"{' '.join(f'{t:.2f}' for t in times['1']):>22} "
              f"{' '.join(f'{t:.2f}' for t in times['N']):>22} "
              f"{ratio:>12.2f}x{'' if same else '  PLANS DIFFER'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
