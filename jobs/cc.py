"""``hgraph submit cc``: weakly connected components by min-label propagation.

Every vertex starts with its own id as label and repeatedly takes the smallest label among its
neighbours, ignoring edge direction: the job runs :class:`hgraph.algorithms.MinLabel` on the graph
with every edge also reversed (:func:`hgraph.algorithms.symmetrize`). ``--out`` gets each vertex's
component label, the smallest vertex id in its component — the partition
``scipy.sparse.csgraph.connected_components(directed=True, connection="weak")`` finds.

Example (``hgraph submit cc --graph g.edges --tasks 2 --out -``: two components)::

    >>> import os, tempfile
    >>> from jobs.cli import main
    >>> d = tempfile.mkdtemp()
    >>> graph = os.path.join(d, "g.edges")
    >>> _ = open(graph, "w").write("0 1 2.0\\n1 2 1.0\\n0 2 5.0\\n3 4 1.0\\n")
    >>> main(["submit", "cc", "--graph", graph, "--tasks", "2", "--out", "-"])  # doctest: +NORMALIZE_WHITESPACE
    0	0
    1	0
    2	0
    3	3
    4	3
    0
"""

from __future__ import annotations

from hgraph.algorithms import MinLabel, symmetrize
from jobs import common

NAME = "cc"
HELP = "weakly connected components (label = smallest vertex id in the component)"

__all__ = ["NAME", "HELP", "MinLabel", "symmetrize", "add_arguments", "main"]


def add_arguments(parser) -> None:
    common.add_engine_arguments(parser)


def main(args) -> int:
    return common.run_engine_job(args, lambda graph: MinLabel(), prepare_graph=symmetrize)


if __name__ == "__main__":
    from jobs.cli import module_main

    raise SystemExit(module_main(NAME))
