"""hgraph: a Pregel-style graph engine with push, block-pull and hybrid messaging."""

from hgraph.program import Update, VertexProgram

__all__ = ["Update", "VertexProgram"]
