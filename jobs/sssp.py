"""``hgraph submit sssp``: single-source shortest paths (Bellman-Ford style, min combiner).

Edge weights come from the graph file (1.0 for an unweighted edge); ``--out`` gets each vertex's
distance from ``--source`` (``inf`` when unreachable). Weights must be non-negative for the
result to equal Dijkstra's. The vertex program is :class:`hgraph.algorithms.SSSP` (one copy, the
one the engine's tests check against SciPy).

Example (``hgraph submit sssp --graph g.edges --source 0 --tasks 2 --out -``; vertices 3 and 4
are unreachable from 0)::

    >>> import os, tempfile
    >>> from jobs.cli import main
    >>> d = tempfile.mkdtemp()
    >>> graph = os.path.join(d, "g.edges")
    >>> _ = open(graph, "w").write("0 1 2.0\\n1 2 1.0\\n0 2 5.0\\n3 4 1.0\\n")
    >>> main(["submit", "sssp", "--graph", graph, "--source", "0", "--tasks", "2", "--out", "-"])  # doctest: +NORMALIZE_WHITESPACE
    0	0.0
    1	2.0
    2	3.0
    3	inf
    4	inf
    0
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
