"""Hybrid benchmark: sssp on a power-law graph in push, pull and hybrid mode, through the CLI.

The graph (default 200,000 vertices, 2,000,000 edges, :func:`hgraph.generators.powerlaw_graph`)
is written as an edge list and each mode runs as ``hgraph submit sssp --graph FILE --source S
--tasks 4 --blocks 2 --mode MODE --stats FILE`` — the product path, stats file included. The
source is a median-degree vertex, so the frontier starts small (push is cheaper), floods the
hubs (block-pull is cheaper) and dies out (push again). Printed: bytes across workers per mode,
hybrid's switches, its bytes over the better pure mode (acceptance: at most 1.05x, at least two
switches) and hybrid's ``--stats`` trace, one superstep a line. Exit status 1 if the check fails
or the three outputs differ.

    python3 bench/hybrid_bench.py
    python3 bench/hybrid_bench.py --vertices 50000 --edges 500000     # a quick look
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.cli import main as hgraph_main  # noqa: E402
from hgraph.generators import powerlaw_graph  # noqa: E402

MODES = ("push", "pull", "hybrid")


def write_edges(path: Path, g) -> None:
    rows = np.column_stack([g.src, g.dst, g.weights])
    np.savetxt(path, rows, fmt=["%d", "%d", "%.17g"], delimiter="\t")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vertices", type=int, default=200_000)
    parser.add_argument("--edges", type=int, default=2_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--runtime", choices=("local", "ray"), default="local")
    args = parser.parse_args(argv)

    g = powerlaw_graph(args.vertices, args.edges, args.seed)
    degree = g.out_degree
    source = int(np.flatnonzero(degree == int(np.median(degree)))[0])
    with tempfile.TemporaryDirectory(prefix="hgh") as tmp:
        tmp = Path(tmp)
        graph = tmp / "powerlaw.edges"
        write_edges(graph, g)
        print(f"graph: powerlaw, {g.n:,} vertices, {g.num_edges:,} edges, seed {args.seed}; "
              f"sssp from median-degree vertex {source}; {args.tasks} tasks x {args.blocks} blocks, "
              f"{args.runtime}")
        stats, outputs = {}, {}
        for mode in MODES:
            out, st = tmp / f"{mode}.tsv", tmp / f"{mode}.json"
            code = hgraph_main(["submit", "sssp", "--graph", str(graph), "--source", str(source),
                                "--tasks", str(args.tasks), "--blocks", str(args.blocks),
                                "--mode", mode, "--runtime", args.runtime, "--progress", "off",
                                "--out", str(out), "--stats", str(st)])
            if code != 0:
                return code
            stats[mode] = json.loads(st.read_text())
            outputs[mode] = out.read_bytes()
    total = {mode: sum(row["bytes"] for row in rows) for mode, rows in stats.items()}
    modes = [row["mode"] for row in stats["hybrid"]]
    switches = sum(a != b for a, b in zip(modes, modes[1:]))
    best = min(total["push"], total["pull"])
    ratio = total["hybrid"] / best
    identical = len(set(outputs.values())) == 1
    for mode in MODES:
        print(f"{mode:>6}: {total[mode]:>12,} bytes across workers, {len(stats[mode])} supersteps")
    print("hybrid --stats trace (superstep, mode, active, messages, bytes):")
    for row in stats["hybrid"]:
        print(f"  {row['superstep']:>3}  {row['mode']:<5} {row['active']:>9,} {row['messages']:>10,} "
              f"{row['bytes']:>11,}")
    ok = switches >= 2 and ratio <= 1.05 and identical
    print(f"RATIO hybrid / min(push, pull) = {ratio:.3f}x  (target <= 1.05x); switches {switches} "
          f"(target >= 2); outputs identical: {identical}  -> {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
