"""``hgraph submit pagerank``: PageRank by power iteration, as networkx defines it.

``PR(v) = (1 - d) / n + d * (sum over edges u->v of PR(u) * w(u,v) / W(u) + D / n)`` where
``W(u)`` is u's total out-weight and ``D`` the rank held by dangling vertices (no out-edges),
spread evenly — :func:`networkx.pagerank`'s model with uniform teleport. Starting from ``1/n``
the job runs exactly ``--iterations`` iterations (supersteps 1..k); ``--out`` gets each
vertex's rank.

The vertex program is :class:`hgraph.algorithms.PageRank`: a value is the pair (rank,
rank / out-weight), the second part being what a vertex sends, so a message needs only the
source value and the edge weight (as in HybridGraph's b-pull); the dangling mass is an exact-sum
aggregator, so the ranks are bit-identical for any ``--tasks``/``--blocks``/``--mode``.

Example (``hgraph submit pagerank --graph g.edges --iterations 50 --out rank.tsv``)::

    >>> import os, tempfile
    >>> from jobs.cli import main
    >>> d = tempfile.mkdtemp()
    >>> graph = os.path.join(d, "g.edges")
    >>> _ = open(graph, "w").write("0 1 2.0\\n1 2 1.0\\n0 2 5.0\\n3 4 1.0\\n")
    >>> main(["submit", "pagerank", "--graph", graph, "--iterations", "50",
    ...       "--out", os.path.join(d, "rank.tsv")])
    0
    >>> ranks = [float(line.split()[1]) for line in open(os.path.join(d, "rank.tsv"))]
    >>> round(sum(ranks), 6), max(range(5), key=ranks.__getitem__)     # vertex 2 ranks highest
    (1.0, 2)
"""

from __future__ import annotations

import numpy as np

from hgraph.algorithms import PageRank, pagerank
from hgraph.common.errors import HGraphError
from jobs import common

NAME = "pagerank"
HELP = "PageRank by power iteration (--iterations, --damping; networkx's model)"

__all__ = ["NAME", "HELP", "PageRank", "add_arguments", "main"]


def add_arguments(parser) -> None:
    common.add_engine_arguments(parser)
    parser.add_argument("--iterations", type=int, default=30, help="power iterations (default 30)")
    parser.add_argument("--damping", type=float, default=0.85,
                        help="damping factor d in [0, 1] (default 0.85)")


def main(args) -> int:
    if args.iterations < 0:
        raise HGraphError(f"--iterations must be >= 0, got {args.iterations}")
    if not 0.0 <= args.damping <= 1.0:
        raise HGraphError(f"--damping must be in [0, 1], got {args.damping}")
    prepared = {}

    def prepare(graph):
        if graph.n == 0:
            raise HGraphError(f"{args.graph}: the graph has no vertices")
        if graph.num_edges and float(np.min(graph.weights)) < 0:
            raise HGraphError(f"{args.graph}: pagerank needs non-negative edge weights")
        prepared["program"], with_weights = pagerank(graph, args.iterations, args.damping)
        return with_weights

    return common.run_engine_job(args, lambda graph: prepared["program"], prepare_graph=prepare,
                                 output=lambda result, graph: np.asarray(result.values)[:, 0],
                                 progress_total=args.iterations + 1)


if __name__ == "__main__":
    from jobs.cli import module_main

    raise SystemExit(module_main(NAME))
