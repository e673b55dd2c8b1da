"""Planner DP time per graph and solver beside the reference's wall_s (results.csv), as ratios.

For every DP2fix (approx) and DPfix (exact) row of ../shared/reference/results.csv this solves
the same graph, budget and strategy with ``planner.solver.Solver(..., units="reference").dp(budget)`` — family
construction included, the cg.txt parse excluded — checks the row's model numbers, and prints
our seconds next to the reference's ``wall_s`` (g++ -O3, one core). Rows where the reference
timed out (TIMEOUT / SKIPPED) are run in a child process with the same 150 s limit; they have
no numbers to match, so the check is that the plan is no worse than the published DP.cpp and
the approximate DP2fix plans at that budget (both are chains of the exact family): time-centric
recompute, memory-centric checkpoint memory.

    python3 bench/planner_bench.py                      # the whole grid
    python3 bench/planner_bench.py --graphs vgg19,unet --solvers DP2fix
    python3 bench/planner_bench.py --graphs googlenet --solvers DPfix   # all 18 exact GoogLeNet rows
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing as mp
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner import cg  # noqa: E402
from planner.solver import Solver  # noqa: E402

SHARED = ROOT.parent / "shared"
FAMILY = {"DP2fix": "approx", "DPfix": "exact"}
KEYS = ("model_recompute_cost", "model_peak_bytes", "ckpt_bytes", "blocks", "n_lower_sets")


def _solve(path_or_graph, budget, family, strategy):
    """(wall s, CPU s, status, model numbers); CPU time shows what a shared machine hides."""
    g = cg.read(path_or_graph) if isinstance(path_or_graph, str) else path_or_graph
    t0, c0 = time.perf_counter(), time.process_time()
    r = Solver(g, solver=family, strategy=strategy, units="reference").dp(budget)
    return (time.perf_counter() - t0, time.process_time() - c0, r.status,
            tuple(getattr(r, k) for k in KEYS))


def _child(q, *args):
    q.put(_solve(*args))


def _solve_limited(limit, *args):
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q, *args))
    p.start()
    p.join(limit)
    if p.is_alive():
        p.terminate()
        p.join()
        return limit, limit, "TIMEOUT", None
    return q.get()


def _no_worse(row, got, published) -> str:
    """Check line of a row the reference did not finish: ours against DP.cpp and DP2fix."""
    key = 0 if row["strategy"] == "time" else 2       # recompute, or ckpt bytes (KEYS order)
    what = "recompute" if key == 0 else "ckpt"
    parts, worse = [], False
    for solver in ("DP", "DP2fix"):
        other = published.get((row["graph"], solver, row["strategy"], row["budget_label"]))
        if other is not None and other["status"] == "OK":
            theirs = int(other[KEYS[key]])
            worse |= got[key] > theirs
            parts.append(f"{solver} {theirs}")
    head = "MISMATCH worse than" if worse else "finished, ≤"
    return f"{head} {', '.join(parts)}: {what} {got[key]}, blocks {got[3]}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", default="", help="comma list (default: all with a cg file)")
    ap.add_argument("--solvers", default="DP2fix,DPfix")
    ap.add_argument("--labels", default="", help="comma list of budget labels (default: all)")
    ap.add_argument("--limit", type=float, default=150.0,
                    help="seconds per solve where the reference timed out (default 150)")
    args = ap.parse_args(argv)
    rows = list(csv.DictReader(open(SHARED / "reference" / "results.csv")))
    graphs = set(args.graphs.split(",")) if args.graphs else None
    solvers = set(args.solvers.split(","))
    labels = set(args.labels.split(",")) if args.labels else None
    published = {(r["graph"], r["solver"], r["strategy"], r["budget_label"]): r for r in rows}
    parsed = {}
    per = defaultdict(lambda: [0.0, 0.0, 0, 0])      # ours, ref, rows, mismatches
    bad = 0
    print(f"{'graph':10} {'solver':7} {'strat':6} {'budget':10} {'ours_s':>8} {'cpu_s':>8} "
          f"{'ref_s':>8} {'ref/ours':>9}  check")
    for row in rows:
        if row["solver"] not in solvers or (graphs and row["graph"] not in graphs):
            continue
        if labels and row["budget_label"] not in labels:
            continue
        path = SHARED / "graphs" / f"cg_{row['graph']}.txt"
        if not path.exists():
            continue
        args_ = (str(path), int(row["budget_bytes"]), FAMILY[row["solver"]], row["strategy"])
        ref_ok = row["status"] in ("OK", "IMPOSSIBLE")
        if ref_ok:
            if path not in parsed:
                parsed[path] = cg.read(path)
            secs, cpu, status, got = _solve(parsed[path], *args_[1:])
        else:
            secs, cpu, status, got = _solve_limited(args.limit, *args_)
        if row["status"] == "OK":
            want = tuple(int(row[k]) for k in KEYS)
            check = "match" if (status == "OK" and got == want) else f"MISMATCH {got} != {want}"
        elif row["status"] == "IMPOSSIBLE":
            check = "match" if status == "IMPOSSIBLE" else f"MISMATCH {status}"
        else:
            check = (f"{status} (ref {row['status'][:13]})" if status != "OK"
                     else _no_worse(row, got, published))
        ref_s = float(row["wall_s"]) if row["wall_s"] else 150.0
        ref_txt = row["wall_s"] or ">150"
        ratio = ref_s / secs if secs > 0 else float("inf")
        print(f"{row['graph']:10} {row['solver']:7} {row['strategy']:6} {row['budget_label']:10} "
              f"{secs:8.3f} {cpu:8.3f} {ref_txt:>8} {ratio:9.2f}  {check}", flush=True)
        agg = per[(row["graph"], row["solver"])]
        agg[0] += secs
        agg[1] += ref_s
        agg[2] += 1
        agg[3] += check.startswith("MISMATCH")
        bad += check.startswith("MISMATCH")
    print("\nper graph and solver (reference TIMEOUT/SKIPPED rows counted as 150 s):")
    print(f"{'graph':10} {'solver':7} {'rows':>4} {'ours_s':>9} {'ref_s':>9} {'ref/ours':>9} mismatches")
    for (gname, solver), (ours, ref, n, mm) in sorted(per.items()):
        print(f"{gname:10} {solver:7} {n:4d} {ours:9.2f} {ref:9.2f} {ref / max(ours, 1e-9):9.2f} {mm}")
    print(f"\nmismatching rows: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
