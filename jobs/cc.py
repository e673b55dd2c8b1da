"""``hgraph submit cc``: weakly connected components by min-label propagation.

Every vertex starts with its own id as label and repeatedly takes the smallest label among its
neighbours, ignoring edge direction (the job runs the program on the graph with every edge also
reversed). ``--out`` gets each vertex's component label: the smallest vertex id in its component,
the same labelling ``scipy.sparse.csgraph.connected_components(directed=True,
connection="weak")`` gives up to renumbering.

Example::

    hgraph submit cc --graph examples/tiny.edges --tasks 2 --out labels.tsv
"""

from __future__ import annotations

import numpy as np

import hgraph
from jobs import common

NAME = "cc"
HELP = "weakly connected components (label = smallest vertex id in the component)"


class MinLabel(hgraph.VertexProgram):
    """Min-label propagation along out-edges; on a symmetric graph, connected components."""

    value_dtype = message_dtype = np.int64
    combiner = np.minimum

    def init(self, block):
        return np.asarray(block.ids, dtype=np.int64).copy(), np.ones(block.size, dtype=bool)

    def update(self, ctx, block, values, inbox, has_message):
        smaller = has_message & (inbox < values)
        return hgraph.Update(np.where(smaller, inbox, values), respond=smaller)

    def message(self, src_values, weights):
        return src_values


def symmetrize(graph):
    """The same vertices with every edge present in both directions (weights kept)."""
    src = np.concatenate([graph.src, graph.dst])
    dst = np.concatenate([graph.dst, graph.src])
    weights = np.concatenate([graph.weights, graph.weights])
    return hgraph.Graph.from_edges(src, dst, weights=weights, n=graph.n)


def add_arguments(parser) -> None:
    common.add_engine_arguments(parser)


def main(args) -> int:
    return common.run_engine_job(args, lambda graph: MinLabel(), prepare_graph=symmetrize)


if __name__ == "__main__":
    raise SystemExit(common.module_main(NAME))
