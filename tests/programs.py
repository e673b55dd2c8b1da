"""The reference programs the tests use live in :mod:`hgraph.examples` (importable by Ray workers)."""

from hgraph.examples import (SSSP, MinLabel, PageRank, hybrid_comparison, pagerank,  # noqa: F401
                             powerlaw_graph, random_graph, symmetrize)
