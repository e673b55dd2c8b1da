"""Quality at scale: the capped approximate DP against the uncapped one, recompute gap in %.

The approximate DP above ``planner.dp.scale.EXACT_LIMIT`` activations runs with a window
and a front cap (``dp_window``/``dp_front_cap``: the strategy's defaults from
``planner.dp.scale.plan_options``); with both 0 it is the exact approximate DP (same family, same
recurrence), which is quadratic. This bench plans the same graph, budget and strategy both
ways through the public API (``planner.plan(path, budget=..., solver="approx",
dp_window=..., dp_front_cap=...)``, bytes units, replay-checked) on ``hgraph graph synth``
graphs of both generators (transformer: ``synth.build``; branchy CNN: ``synth.build_cnn``) and
prints each plan's replayed recompute cost and the gap ``(capped − uncapped) / uncapped``.
The capped options are passed explicitly, so rows below EXACT_LIMIT measure them too.

Each plan runs in a forked child under ``--limit`` seconds; an uncapped plan that does not
finish is reported as TIMEOUT and larger sizes of that generator are skipped. The uncapped
plans (the slow half, independent of the capping) are kept in ``--workdir`` as JSON, one file
per graph file content, budget and strategy, and read back on a rerun with the same workdir
(``unc_s`` is then the time of the run that made it, marked ``*``).

    python3 bench/quality_bench.py --max-nodes 2000                 # the smallest rows
    python3 bench/quality_bench.py --sizes 2000,4000,8000 --limit 1800
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from forked import TIMEOUT, run_limited  # noqa: E402  (bench/ is not a package)

from hgraph.common.fileio import write_text  # noqa: E402
from planner import cg, synth  # noqa: E402
from planner.dp import scale  # noqa: E402

GENERATORS = ("transformer", "cnn")


def write_graph(kind: str, nodes: int, work: Path) -> Path:
    """A synth graph of at least ``nodes`` activations (default sizes of each generator)."""
    path = work / f"cg_{kind}_{nodes}.txt"
    if not path.exists():
        if kind == "transformer":
            g = synth.build(layers=synth.layers_for_nodes(nodes))
        else:
            g = synth.build_cnn(blocks=synth.cnn_blocks_for_nodes(nodes))
        cg.write(g, path)
    return path


def _plan(path, budget, strategy, window, cap):
    from hgraph.common.errors import InfeasibleError
    import planner

    t0 = time.perf_counter()
    try:
        p = planner.plan(str(path), budget=budget, solver="approx", strategy=strategy,
                         limits=planner.SolverLimits(dp_window=window, dp_front_cap=cap))
    except InfeasibleError as err:
        return {"status": "INFEASIBLE", "seconds": time.perf_counter() - t0, "detail": str(err)}
    return {"status": "OK", "seconds": time.perf_counter() - t0,
            "recompute": int(p.recompute_cost), "model": int(p.report["model_recompute_cost"]),
            "ckpt": int(p.report.get("ckpt_bytes", 0) or 0),
            "peak": int(p.peak_bytes), "budget": int(p.budget_bytes), "blocks": int(p.blocks),
            "nodes": int(p.nodes)}


def plan_limited(limit: float, *args) -> dict:
    got = run_limited(limit, _plan, *args)
    if isinstance(got, str):
        return {"status": got, "seconds": limit if got == TIMEOUT else 0.0}
    return got


def uncapped_cached(limit: float, path: Path, budget: str, strategy: str, work: Path):
    """The uncapped plan's row, from ``work`` when a previous run stored it (``cached``)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    keep = work / f"uncapped_{digest}_{budget.replace('%', 'pct')}_{strategy}.json"
    if keep.exists():
        return dict(json.loads(keep.read_text()), cached=True)
    got = plan_limited(limit, path, budget, strategy, 0, 0)
    if got["status"] == "OK":
        write_text(keep, json.dumps(got) + "\n")
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2000,4000,8000,16000,32000",
                    help="activation counts, ascending (default 2000,...,32000)")
    ap.add_argument("--max-nodes", type=int, default=None, help="skip sizes above this")
    ap.add_argument("--generators", default=",".join(GENERATORS))
    ap.add_argument("--budgets", default="40%,50%,70%")
    ap.add_argument("--strategy", choices=["time", "memory"], default="time")
    ap.add_argument("--limit", type=float, default=1800.0, help="seconds per plan (default 1800)")
    ap.add_argument("--workdir", default=None,
                    help="where graphs and uncapped plans are kept (reused when given again)")
    ap.add_argument("--window", type=int, default=None, help="capped run's window (default: "
                    "plan_options')")
    ap.add_argument("--cap", type=int, default=None, help="capped run's front cap (default: "
                    "plan_options')")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    if args.max_nodes is not None:
        sizes = [n for n in sizes if n <= args.max_nodes]
    window, cap = scale.plan_options(scale.EXACT_LIMIT + 1, args.window, args.cap, args.strategy)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="hgraph-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"capped: dp_window {window}, dp_front_cap {cap} ({args.strategy}-centric); "
          f"uncapped: both 0")
    print(f"{'generator':12} {'nodes':>7} {'budget':>6} {'capped':>10} {'cap_s':>8} "
          f"{'uncapped':>10} {'unc_s':>8} {'gap_%':>7}")
    worst = 0.0
    for kind in args.generators.split(","):
        for n in sizes:
            path = write_graph(kind, n, work)
            timed_out = False
            for budget in args.budgets.split(","):
                c = plan_limited(args.limit, path, budget, args.strategy, window, cap)
                u = uncapped_cached(args.limit, path, budget, args.strategy, work)
                timed_out |= u["status"] == "TIMEOUT"
                if c["status"] == "OK" and u["status"] == "OK":
                    gap = 100.0 * (c["recompute"] - u["recompute"]) / max(1, u["recompute"])
                    worst = max(worst, gap)
                    gap_txt = f"{gap:7.2f}" + ("  OVER 1%" if gap > 1.0 else "")
                else:
                    gap_txt = f"{'-':>7}"
                nodes = c.get("nodes", u.get("nodes", n))

                def cell(r):
                    return f"{r['recompute']:>10,}" if r["status"] == "OK" else f"{r['status']:>10}"

                print(f"{kind:12} {nodes:>7,} {budget:>6} {cell(c)} {c['seconds']:8.1f} "
                      f"{cell(u)} {u['seconds']:7.1f}{'*' if u.get('cached') else ' '} {gap_txt}",
                      flush=True)
            if timed_out:
                print(f"{kind}: the uncapped DP ran past {args.limit:.0f} s at {n:,} nodes; "
                      f"larger sizes skipped")
                break
    print(f"largest gap: {worst:.2f}% (recompute = the replayed plan's recompute cost, reference "
          f"cost model)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
