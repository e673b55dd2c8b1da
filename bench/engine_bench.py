"""Engine benchmark: sssp in-process vs SciPy's Dijkstra, and Ray actors vs in-process.

One run prints two ratios on the same seeded random graph (default 1M vertices, 10M edges,
power-law degrees, uniform weights in [1, 2)):

1. ``hgraph.run(SSSP)`` in-process with ``--tasks`` workers (default 4) against
   ``scipy.sparse.csgraph.dijkstra`` from the same source — wall seconds of the solve each, the
   graph already built (the engine's partitioning is inside its timed call);
2. the same run on Ray actors (one per task, embedded local Ray started and warmed before the
   clock) against the in-process run.

Both engine results are checked against SciPy's distances before any ratio is printed.

    python3 bench/engine_bench.py                       # the acceptance size (1M / 10M)
    python3 bench/engine_bench.py --vertices 20000 --edges 200000   # a quick check
    python3 bench/engine_bench.py --json out/engine_bench.json

Timings on a shared machine vary; repeat ``--repeat`` times and the best is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def make_graph(n: int, m: int, seed: int, kind: str = "powerlaw", exponent: float = 0.8):
    """Seeded random directed graph: ``m`` distinct edges, no self-loops, weights in [1, 2).

    ``powerlaw``: endpoints drawn with probability ~ rank^-exponent (Zipf; with 0.8 the degrees
    follow a power law of exponent ~2.25; ranks randomly permuted
    over the ids, so hubs are spread across the range partitions); ``uniform``: endpoints uniform.
    Duplicate edges are dropped so that SciPy (which would sum duplicates) sees the same graph.
    """
    rng = np.random.default_rng(seed)
    if kind == "powerlaw":
        # Inverse CDF of the continuous density ~ x^-exponent on [1, n+1), floored to a rank.
        a = 1.0 - exponent
        top = (n + 1.0) ** a - 1.0
        perm = rng.permutation(n)

        def draw(k):
            rank = np.floor((1.0 + rng.random(k) * top) ** (1.0 / a)).astype(np.int64) - 1
            return perm[np.clip(rank, 0, n - 1)]
    elif kind == "uniform":
        def draw(k):
            return rng.integers(0, n, size=k)
    else:
        raise ValueError(kind)
    src = np.empty(0, dtype=np.int64)
    dst = np.empty(0, dtype=np.int64)
    need = m
    while need > 0:
        extra = int(need * 1.1) + 16
        s = np.concatenate([src, draw(extra)]).astype(np.int64)
        d = np.concatenate([dst, draw(extra)]).astype(np.int64)
        keep = s != d
        s, d = s[keep], d[keep]
        key = s * n + d
        _, first = np.unique(key, return_index=True)
        first.sort()
        src, dst = s[first], d[first]
        need = m - len(src)
    src, dst = src[:m], dst[:m]
    weights = 1.0 + rng.random(m)
    return src, dst, weights


def save_edgelist(path, src, dst, weights, header: str) -> None:
    """The graph as ``src dst weight`` lines (weights at full precision), written atomically."""
    from hgraph.common.fileio import atomic_write

    with atomic_write(path, "w", encoding="ascii") as handle:
        handle.write(f"# {header}\n")
        np.savetxt(handle, np.column_stack([src, dst, weights]), fmt=["%d", "%d", "%.17g"])


def best_of(repeat: int, fn):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vertices", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=10_000_000)
    parser.add_argument("--kind", choices=["powerlaw", "uniform"], default="powerlaw")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--blocks", type=int, default=1)
    parser.add_argument("--mode", choices=["push", "pull", "hybrid"], default="hybrid")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each timing; best reported")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray comparison")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--save-graph", default=None, metavar="FILE",
                        help="also write the generated graph as an edge list (src dst weight), "
                             "for `hgraph submit sssp --graph FILE --source SOURCE --stats ...`")
    args = parser.parse_args(argv)

    import scipy
    import scipy.sparse as sp
    from scipy.sparse.csgraph import dijkstra

    import hgraph
    from hgraph.algorithms import SSSP
    from hgraph.common.progress import mode_runs

    n, m = args.vertices, args.edges
    t0 = time.perf_counter()
    src, dst, weights = make_graph(n, m, args.seed, args.kind)
    gen_s = time.perf_counter() - t0
    source = int(np.argmax(np.bincount(src, minlength=n)))  # a hub: most of the graph is reachable

    if args.save_graph:
        save_edgelist(args.save_graph, src, dst, weights, header=f"engine_bench graph: {args.kind}, "
                      f"{n} vertices, {m} edges, seed {args.seed}; sssp source {source}")
        print(f"wrote {args.save_graph}")

    t0 = time.perf_counter()
    graph = hgraph.Graph.from_edges(src, dst, weights=weights, n=n)
    build_s = time.perf_counter() - t0
    csr = sp.csr_matrix((weights, (src, dst)), shape=(n, n))

    print(f"graph: {args.kind}, {n:,} vertices, {graph.num_edges:,} edges, seed {args.seed}, "
          f"source {source} (generated in {gen_s:.1f} s, hgraph.Graph built in {build_s:.1f} s)")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}, "
          f"numpy {np.__version__}, scipy {scipy.__version__}")

    scipy_s, expected = best_of(args.repeat, lambda: dijkstra(csr, directed=True, indices=source))
    reachable = int(np.isfinite(expected).sum())
    print(f"scipy.sparse.csgraph.dijkstra: {scipy_s:.3f} s  ({reachable:,} reachable)")

    def engine(runtime):
        return hgraph.run(SSSP(source), graph, hgraph.EngineOptions(tasks=args.tasks,
                                                                    blocks=args.blocks,
                                                                    mode=args.mode,
                                                                    runtime=runtime))

    local_s, result = best_of(args.repeat, lambda: engine("local"))
    _check(result.values, expected, "in-process")
    modes = [row["mode"] for row in result.stats]
    local_steps_s = _after_first(result.stats)
    total_bytes = int(sum(row["bytes"] for row in result.stats))
    print(f"hgraph in-process, {args.tasks} tasks x {args.blocks} blocks, {args.mode}: "
          f"{local_s:.3f} s ({local_steps_s:.3f} s in supersteps 1..), {len(result.stats)} supersteps, "
          f"{total_bytes:,} bytes across workers, "
          f"modes {mode_runs(modes)}")
    ratio_scipy = local_s / scipy_s
    print(f"RATIO in-process / scipy dijkstra = {ratio_scipy:.2f}x  (target <= 3x)")

    record = {
        "graph": {"kind": args.kind, "vertices": n, "edges": int(graph.num_edges), "seed": args.seed,
                  "source": source, "reachable": reachable},
        "tasks": args.tasks, "blocks": args.blocks, "mode": args.mode, "repeat": args.repeat,
        "scipy_dijkstra_s": scipy_s, "inprocess_s": local_s, "inprocess_supersteps_after_first_s": local_steps_s,
        "inprocess_supersteps": len(result.stats), "inprocess_bytes": total_bytes,
        "ratio_inprocess_over_scipy": ratio_scipy,
        "cpus": os.cpu_count(), "python": platform.python_version(),
    }

    if not args.no_ray:
        from hgraph.runtime.ray_connect import ensure_ray

        t0 = time.perf_counter()
        ensure_ray()
        hgraph.run(SSSP(0), hgraph.Graph.from_edges([0], [1], n=2),
                   hgraph.EngineOptions(tasks=args.tasks, runtime="ray"))
        print(f"ray: started and warmed in {time.perf_counter() - t0:.1f} s (not timed below)")
        ray_s, ray_result = best_of(args.repeat, lambda: engine("ray"))
        _check(ray_result.values, expected, "ray")
        ratio_ray = ray_s / local_s
        ray_steps_s = _after_first(ray_result.stats)
        print(f"hgraph ray actors, {args.tasks} tasks: {ray_s:.3f} s ({ray_steps_s:.3f} s in "
              f"supersteps 1..; the rest is partitioning, starting the actors and shipping their "
              f"blocks, and superstep 0)")
        print(f"RATIO ray / in-process = {ratio_ray:.2f}x  "
              f"(supersteps 1.. only: {ray_steps_s / local_steps_s:.2f}x)")
        record.update(ray_s=ray_s, ray_supersteps_after_first_s=ray_steps_s, ratio_ray_over_inprocess=ratio_ray,
                      ratio_ray_over_inprocess_after_first=ray_steps_s / local_steps_s)

    if args.json:
        from hgraph.common.fileio import write_text

        write_text(args.json, json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


def _after_first(stats):
    """Seconds of supersteps 1.. (superstep 0 also pays for the workers' start)."""
    return float(sum(row["seconds"] for row in stats[1:]))


def _check(values, expected, label):
    values = np.asarray(values)
    if not np.array_equal(values, expected):
        bad = np.flatnonzero(~((values == expected) | (np.isinf(values) & np.isinf(expected))))
        if len(bad):
            i = bad[0]
            raise SystemExit(f"{label}: distances differ from scipy at {len(bad)} vertices, "
                             f"e.g. vertex {i}: {values[i]!r} vs {expected[i]!r}")


if __name__ == "__main__":
    raise SystemExit(main())
