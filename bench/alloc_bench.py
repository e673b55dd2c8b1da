"""Allocator strategies side by side: naive / pool / static arena / lower bound.

For every zoo model and reference graph, at the budgets the DP can plan, the schedule is executed
(real kernels for zoo models, stand-in replay for the reference graphs) with each allocator. The
table shows the planner's predicted peak, two meters of the pool run -- the tracked peak (the
executor's count of the plan's live buffers, ``tracked_peak_bytes``) and the measured peak (a
meter outside the plan, ``measured_peak_bytes``: tracemalloc on NumPy, the CuPy pool's used
bytes on CuPy; kernel temporaries and the pool's kept blocks included) --, the bytes each
strategy reserved, the static arena's gap to the lower bound, for zoo models whether the
parameter gradients are bitwise equal to a plain run's, and ``rcost``, the schedule's
recomputation cost in the reference's cost model (% of one forward pass). Exit status 1 if any acceptance check
fails (tracked > predicted, replay's tracked != predicted, arena gap > 5%, gradients differ); the
measured peak is reported, not checked (the prediction counts plan buffers only).

    python3 bench/alloc_bench.py [--backend numpy|cupy] [--graphs vgg19,resnet50] [--zoo-only]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import refdata  # noqa: E402  (bench/ is not a package)

from planner import cg, simulate  # noqa: E402
from planner.execute import backend as backend_mod, executor, export, plans, zoo  # noqa: E402

REFERENCE = ["vgg19", "unet", "resnet50", "googlenet", "densenet"]


def mib(n):
    return f"{n / 2**20:10.2f}"


def bench_graph(label, g, be, recycle, count, ladder):
    rows, ok = [], True
    real = executor.has_real_ops(g)
    plain = executor.run(g, executor.plain_schedule(g), executor.RunOptions(recycle=False),
                         backend=be) if real else None
    for fraction, s in plans.feasible_budgets(g, count=count, ladder=ladder):
        sim = simulate.replay(g, s)
        res = {a: executor.run(g, s, executor.RunOptions(allocator=a, recycle=recycle), backend=be) for a in ("naive", "pool", "static")}
        tracked = res["pool"].tracked_peak_bytes
        measured = res["pool"].measured_peak_bytes
        arena = res["static"].arena
        grads = (all(executor.gradients_equal(plain.param_grads, r.param_grads) for r in res.values())
                 if real else None)
        rcost = 100.0 * sim.recompute_cost / sim.forward_cost
        good = (tracked <= sim.peak_bytes if recycle else tracked == sim.peak_bytes) \
            and arena["gap_pct"] <= 5.0 and grads is not False
        ok &= good
        rows.append(f"{label:16s} {fraction:5.2f}S {mib(sim.peak_bytes)} {mib(tracked)} {mib(measured)} "
                    f"{mib(res['naive'].reserved_bytes)} {mib(res['pool'].reserved_bytes)} "
                    f"{mib(arena['arena_bytes'])} {mib(arena['lower_bound_bytes'])} {arena['gap_pct']:6.2f}% "
                    f"{'-' if grads is None else str(grads):>5s} {rcost:5.0f}% {'ok' if good else 'FAIL'}")
    return rows, ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="numpy")
    p.add_argument("--graphs", default=",".join(REFERENCE))
    p.add_argument("--zoo-only", action="store_true")
    p.add_argument("--budgets", type=int, default=3, help="budgets per graph (default 3)")
    args = p.parse_args(argv)
    be = backend_mod.get(args.backend)
    meter = "the CuPy pool used bytes" if be.is_gpu else "tracemalloc"
    print(f"backend {be.name} ({be.device}); MiB; tracked = the plan's count of live bytes (pool run); "
          f"measured = {meter}, pool run; naive/pool/static = bytes reserved")
    print(f"{'graph':16s} {'budget':>6s} {'predicted':>10s} {'tracked':>10s} {'measured':>10s} "
          f"{'naive':>10s} {'pool':>10s} "
          f"{'static':>10s} {'lower bnd':>10s} {'gap':>7s} {'grads':>5s} {'rcost':>6s}")
    ok, t0 = True, time.perf_counter()
    for name in zoo.MODELS:
        rows, good = bench_graph(f"zoo:{name}", export.to_cg(zoo.build(name)), be, True, args.budgets,
                                 plans.LADDER)
        print("\n".join(rows), flush=True)
        ok &= good
    if not args.zoo_only:
        for name in args.graphs.split(","):
            g = cg.read(refdata.graph(name))
            rows, good = bench_graph(name, g, be, False, args.budgets, plans.LADDER)
            print("\n".join(rows), flush=True)
            ok &= good
    print(f"{'all checks passed' if ok else 'SOME CHECKS FAILED'} in {time.perf_counter() - t0:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
