"""``hgraph submit pagerank``: PageRank by power iteration, as networkx defines it.

``PR(v) = (1 - d) / n + d * (sum over edges u->v of PR(u) * w(u,v) / W(u) + D / n)`` where
``W(u)`` is u's total out-weight and ``D`` the rank held by dangling vertices (no out-edges),
spread evenly — the same model as :func:`networkx.pagerank` with uniform personalization.
Starting from ``1/n``, the job runs exactly ``--iterations`` iterations (supersteps 1..k) and
``--out`` gets each vertex's rank.

A vertex's value is the pair (rank, rank / out-weight): the second part is what it sends, so a
message needs only the source value and the edge weight (as in HybridGraph's b-pull, where
``getMessages`` sees one fragment). The dangling mass travels as a sum aggregator in fixed point
(int64 units of 2**-52): integer sums are associative, so the result is bit-identical for any
``--tasks``/``--blocks``/``--mode`` (the engine folds the float message sums in source order).

Example::

    hgraph submit pagerank --graph examples/tiny.edges --iterations 50 --out rank.tsv
"""

from __future__ import annotations

import numpy as np

import hgraph
from hgraph.errors import HGraphError
from jobs import common

NAME = "pagerank"
HELP = "PageRank by power iteration (--iterations, --damping; networkx's model)"

#: Graph column holding each vertex's total out-weight (added by the job).
OUT_WEIGHT = "out_weight"

#: Fixed-point scale of the dangling-mass aggregator (ranks sum to 1, so int64 holds it).
SCALE = float(2 ** 52)


class PageRank(hgraph.VertexProgram):
    """Fixed-iteration PageRank; see the module docstring for the model."""

    value_dtype = np.float64
    value_shape = (2,)
    message_dtype = np.float64
    combiner = np.add
    aggregators = {"dangling": "sum"}
    always_update = True

    def __init__(self, n: int, iterations: int, damping: float, initial_dangling: float):
        self.n = int(n)
        self.iterations = int(iterations)
        self.damping = float(damping)
        self.initial_dangling = float(initial_dangling)
        # Superstep 0 sends the initial ranks; supersteps 1..iterations update.
        self.max_supersteps = self.iterations + 1

    def _values(self, rank, out_weight):
        share = np.divide(rank, out_weight, out=np.zeros_like(rank), where=out_weight > 0)
        return np.stack([rank, share], axis=1)

    def init(self, block):
        rank = np.full(block.size, 1.0 / self.n)
        return self._values(rank, block.columns[OUT_WEIGHT]), np.full(block.size, self.iterations > 0)

    def update(self, ctx, block, values, inbox, has_message):
        out_weight = block.columns[OUT_WEIGHT]
        if ctx.superstep > self.iterations:
            # Past the last iteration (only if the engine runs on): keep the values.
            return hgraph.Update(values, respond=np.zeros(block.size, dtype=bool),
                                 halt=np.ones(block.size, dtype=bool))
        if ctx.superstep <= 1:
            dangling = self.initial_dangling
        else:
            dangling = float(ctx.aggregates["dangling"]) / SCALE
        received = np.where(has_message, inbox, 0.0)
        rank = (1.0 - self.damping) / self.n + self.damping * (received + dangling / self.n)
        more = ctx.superstep < self.iterations
        return hgraph.Update(
            self._values(rank, out_weight),
            respond=np.full(block.size, more),
            halt=np.full(block.size, not more),
            aggregates={"dangling": np.int64(np.round(rank[out_weight <= 0] * SCALE)
                                             .astype(np.int64).sum())},
        )

    def message(self, src_values, weights):
        return src_values[:, 1] * weights


def with_out_weight(graph):
    """The graph with an ``out_weight`` column (sum of each vertex's out-edge weights)."""
    out_weight = np.bincount(graph.src, weights=graph.weights, minlength=graph.n).astype(np.float64)
    return graph.with_columns(**{OUT_WEIGHT: out_weight})


def add_arguments(parser) -> None:
    common.add_engine_arguments(parser)
    parser.add_argument("--iterations", type=int, default=30,
                        help="power iterations (default 30)")
    parser.add_argument("--damping", type=float, default=0.85,
                        help="damping factor d in [0, 1] (default 0.85)")


def main(args) -> int:
    if args.iterations < 0:
        raise HGraphError(f"--iterations must be >= 0, got {args.iterations}")
    if not 0.0 <= args.damping <= 1.0:
        raise HGraphError(f"--damping must be in [0, 1], got {args.damping}")

    def make_program(graph):
        if graph.n == 0:
            raise HGraphError(f"{args.graph}: the graph has no vertices")
        out_weight = graph.columns[OUT_WEIGHT]
        if graph.num_edges and float(np.min(graph.weights)) < 0:
            raise HGraphError(f"{args.graph}: pagerank needs non-negative edge weights")
        initial_dangling = float(np.count_nonzero(out_weight <= 0)) / graph.n
        return PageRank(graph.n, args.iterations, args.damping, initial_dangling)

    return common.run_engine_job(args, make_program, prepare_graph=with_out_weight,
                                 output=lambda result, graph: np.asarray(result.values)[:, 0],
                                 progress_total=args.iterations + 1)


if __name__ == "__main__":
    raise SystemExit(common.module_main(NAME))
