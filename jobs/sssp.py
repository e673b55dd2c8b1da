"""``hgraph submit sssp``: single-source shortest paths (Bellman-Ford style, min combiner).

Edge weights come from the graph file (1.0 for an unweighted edge); ``--out`` gets each vertex's
distance from ``--source`` (``inf`` when unreachable). Weights must be non-negative for the
result to equal Dijkstra's. The vertex program is :class:`hgraph.algorithms.SSSP` (one copy, the
one the engine's tests check against SciPy).

Example::

    hgraph submit sssp --graph examples/tiny.edges --source 0 --tasks 2 --out dist.tsv
"""

from __future__ import annotations

import numpy as np

from hgraph.algorithms import SSSP
from hgraph.common.errors import HGraphError
from jobs import common

NAME = "sssp"
HELP = "single-source shortest paths from --source (distances; inf when unreachable)"

__all__ = ["NAME", "HELP", "SSSP", "add_arguments", "main"]


def add_arguments(parser) -> None:
    common.add_engine_arguments(parser)
    parser.add_argument("--source", type=int, default=0, help="source vertex id (default 0)")


def main(args) -> int:
    def make_program(graph):
        common.check_vertex("--source", args.source, graph)
        if graph.num_edges and float(np.min(graph.weights)) < 0:
            raise HGraphError(f"{args.graph}: sssp needs non-negative edge weights")
        return SSSP(args.source)

    return common.run_engine_job(args, make_program)


if __name__ == "__main__":
    from jobs.cli import module_main

    raise SystemExit(module_main(NAME))
