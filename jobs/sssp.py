"""``hgraph submit sssp``: single-source shortest paths (Bellman-Ford style, min combiner).

Edge weights come from the graph file (1.0 for an unweighted edge); ``--out`` gets each vertex's
distance from ``--source`` (``inf`` when unreachable). Weights must be non-negative for the
result to equal Dijkstra's.

Example::

    hgraph submit sssp --graph examples/tiny.edges --source 0 --tasks 2 --out dist.tsv
"""

from __future__ import annotations

import numpy as np

import hgraph
from hgraph.errors import HGraphError
from jobs import common

NAME = "sssp"
HELP = "single-source shortest paths from --source (distances; inf when unreachable)"


class SSSP(hgraph.VertexProgram):
    """Distances from ``source``: a vertex that improves sends ``distance + weight`` onward."""

    value_dtype = message_dtype = np.float64
    combiner = np.minimum

    def __init__(self, source: int):
        self.source = int(source)

    def init(self, block):
        values = np.full(block.size, np.inf)
        is_source = block.ids == self.source
        values[is_source] = 0.0
        return values, is_source

    def update(self, ctx, block, values, inbox, has_message):
        better = has_message & (inbox < values)
        return hgraph.Update(np.where(better, inbox, values), respond=better)

    def message(self, src_values, weights):
        return src_values + weights


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
    raise SystemExit(common.module_main(NAME))
