"""hgraph: a Pregel-style graph engine with push, block-pull and hybrid messaging.

    import hgraph
    g = hgraph.Graph.from_edges(src, dst, weights)
    result = hgraph.run(program, g, tasks=4, mode="hybrid")     # see hgraph.api.run
"""

from hgraph import io
from hgraph.api import Result, run
from hgraph.exactsum import ExactSum, exact_sum
from hgraph.graph import Graph
from hgraph.program import Update, VertexProgram

__all__ = ["ExactSum", "Graph", "Result", "Update", "VertexProgram", "exact_sum", "io", "run"]
