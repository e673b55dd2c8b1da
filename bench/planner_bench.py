"""Planner DP time per graph and solver beside the reference's wall_s (results.csv), as ratios.

For every DP2fix (approx) and DPfix (exact) row of the reference's results.csv (tests/data) this solves
the same graph, budget and strategy with ``planner.solver.make_solver(..., units="reference").dp(budget)`` — family
construction included, the cg.txt parse excluded — checks the row's model numbers, and prints
our seconds next to the reference's ``wall_s`` (g++ -O3, one core). Rows where the reference
timed out (TIMEOUT / SKIPPED) are run in a child process with the same 150 s limit; they have
no numbers to match, so the check is that the plan is no worse than the published DP.cpp and
the approximate DP2fix plans at that budget (both are chains of the exact family): time-centric
recompute, memory-centric checkpoint memory.

    python3 bench/planner_bench.py                      # the whole grid
    python3 bench/planner_bench.py --graphs vgg19,unet --solvers DP2fix
    python3 bench/planner_bench.py --graphs googlenet --solvers DPfix   # all 18 exact GoogLeNet rows

Every solve runs in a forked child under ``--limit`` seconds (a row past it is TIMEOUT); a
solve over ``--slow`` seconds (default 10, the issue's bar for the exact DP) is flagged SLOW.
``lsets`` is the family's set count (the exact DP's lower sets). ``--generated B1,B2,...``
adds branchy ``synth.build_cnn(blocks=B)`` graphs (Inception + DenseNet blocks, ~1,000 lower
sets per block: 5 → 5,060, 29 → ~29,000) solved by the exact DP, both strategies, at the
``N%act`` labels and ``unlimited`` (min_DP/min_DP2 are the reference's own searches; they have
no meaning for a graph it never ran):

    python3 bench/planner_bench.py --solvers DPfix --generated 5,8,12,16,24,29 --limit 60
    python3 bench/planner_bench.py --graphs none --generated 5,29        # generated graphs only
    python3 bench/planner_bench.py --solvers DPfix --strategies time     # one side only
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from forked import TIMEOUT, run_limited  # noqa: E402  (bench/ is not a package)
import refdata  # noqa: E402

from planner import cg, synth  # noqa: E402
from planner.solver import make_solver  # noqa: E402

FAMILY = {"DP2fix": "approx", "DPfix": "exact"}
KEYS = ("model_recompute_cost", "model_peak_bytes", "ckpt_bytes", "blocks", "n_lower_sets")


def _solve(path_or_graph, budget, family, strategy):
    """(wall s, CPU s, status, model numbers); CPU time shows what a shared machine hides."""
    g = cg.read(path_or_graph) if isinstance(path_or_graph, str) else path_or_graph
    t0, c0 = time.perf_counter(), time.process_time()
    r = make_solver(g, solver=family, strategy=strategy, units="reference").dp(budget)
    return (time.perf_counter() - t0, time.process_time() - c0, r.status,
            tuple(getattr(r, k) for k in KEYS))


def _solve_limited(limit, *args):
    """:func:`_solve` in a forked child (it shares the parsed graph) under ``limit`` seconds."""
    got = run_limited(limit, _solve, *args)
    if got == TIMEOUT:
        return limit, limit, "TIMEOUT", None
    if isinstance(got, str):
        return 0.0, 0.0, got, None
    return got


def generated_rows(blocks_list, strategies):
    """(name, graph, rows) of branchy synth CNNs, rows shaped like results.csv's (no numbers)."""
    labels = [f"{pct}%act" for pct in range(20, 101, 10)] + ["unlimited"]
    for blocks in blocks_list:
        g = synth.build_cnn(blocks=blocks)
        act_sum = int(g.var_bytes[g.is_activation].sum())
        name = f"cnn{blocks}"
        rows = []
        for strategy in strategies:
            for label in labels:
                budget = 100_000_000_000 if label == "unlimited" else act_sum * int(label[:-4]) // 100
                rows.append({"graph": name, "solver": "DPfix", "strategy": strategy,
                             "budget_label": label, "budget_bytes": str(budget),
                             "status": "GENERATED", "wall_s": ""})
        yield name, g, rows


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
    ap.add_argument("--strategies", default="time,memory",
                    help="comma list of strategies to run (default: time,memory)")
    ap.add_argument("--limit", type=float, default=150.0,
                    help="seconds per solve, every row (default 150, the reference's limit)")
    ap.add_argument("--slow", type=float, default=10.0, help="flag solves over this (default 10 s)")
    ap.add_argument("--generated", default="",
                    help="comma list of block counts of generated branchy CNN graphs (exact DP)")
    args = ap.parse_args(argv)
    rows = list(csv.DictReader(open(refdata.RESULTS)))
    graphs = set(args.graphs.split(",")) if args.graphs else None
    parsed = {}
    if args.generated and "DPfix" in args.solvers.split(","):
        for name, g, grows in generated_rows([int(b) for b in args.generated.split(",")],
                                             tuple(args.strategies.split(","))):
            parsed[name] = g
            rows.extend(grows)
            if graphs is not None:
                graphs.add(name)
    solvers = set(args.solvers.split(","))
    labels = set(args.labels.split(",")) if args.labels else None
    strategies = set(args.strategies.split(","))
    published = {(r["graph"], r["solver"], r["strategy"], r["budget_label"]): r for r in rows}
    per = defaultdict(lambda: [0.0, 0.0, 0, 0, 0, 0])  # ours, ref, rows, mismatches, slow, lsets
    bad = slow = 0
    print(f"{'graph':10} {'solver':7} {'strat':6} {'budget':10} {'lsets':>7} {'ours_s':>8} "
          f"{'cpu_s':>8} {'ref_s':>8} {'ref/ours':>9}  check")
    for row in rows:
        if row["solver"] not in solvers or (graphs and row["graph"] not in graphs):
            continue
        if labels and row["budget_label"] not in labels:
            continue
        if row["strategy"] not in strategies:
            continue
        if row["graph"] not in parsed:
            path = refdata.graph(row['graph'])
            if not path.exists():
                continue
            parsed[row["graph"]] = cg.read(path)
        secs, cpu, status, got = _solve_limited(args.limit, parsed[row["graph"]],
                                                int(row["budget_bytes"]), FAMILY[row["solver"]],
                                                row["strategy"])
        if row["status"] == "GENERATED":
            check = status
        elif status == "TIMEOUT":
            check = f"TIMEOUT after {args.limit:.0f} s (ref {row['status'][:13]})"
        elif row["status"] == "OK":
            want = tuple(int(row[k]) for k in KEYS)
            check = "match" if (status == "OK" and got == want) else f"MISMATCH {got} != {want}"
        elif row["status"] == "IMPOSSIBLE":
            check = "match" if status == "IMPOSSIBLE" else f"MISMATCH {status}"
        else:
            check = (f"{status} (ref {row['status'][:13]})" if status != "OK"
                     else _no_worse(row, got, published))
        if secs > args.slow:
            check += f"  SLOW (> {args.slow:g} s)"
        generated = row["status"] == "GENERATED"
        ref_s = float(row["wall_s"]) if row["wall_s"] else 150.0
        ref_txt = "-" if generated else (row["wall_s"] or ">150")
        ratio = ref_s / secs if secs > 0 and not generated else float("nan")
        lsets = got[4] if got is not None else -1
        print(f"{row['graph']:10} {row['solver']:7} {row['strategy']:6} {row['budget_label']:10} "
              f"{lsets:>7} {secs:8.3f} {cpu:8.3f} {ref_txt:>8} {ratio:9.2f}  {check}", flush=True)
        agg = per[(row["graph"], row["solver"])]
        agg[0] += secs
        agg[1] += 0.0 if generated else ref_s
        agg[2] += 1
        agg[3] += check.startswith("MISMATCH")
        agg[4] += secs > args.slow
        agg[5] = max(agg[5], lsets)
        bad += check.startswith("MISMATCH")
        slow += secs > args.slow
    print("\nper graph and solver (reference TIMEOUT/SKIPPED rows counted as 150 s; generated "
          "graphs have no reference time):")
    print(f"{'graph':10} {'solver':7} {'lsets':>7} {'rows':>4} {'ours_s':>9} {'ref_s':>9} "
          f"{'ref/ours':>9} {'slow':>4} mismatches")
    for (gname, solver), (ours, ref, n, mm, sl, ls) in sorted(per.items()):
        print(f"{gname:10} {solver:7} {ls:>7} {n:4d} {ours:9.2f} {ref:9.2f} "
              f"{ref / max(ours, 1e-9):9.2f} {sl:4d} {mm}")
    print(f"\nmismatching rows: {bad}; rows over {args.slow:g} s: {slow}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
