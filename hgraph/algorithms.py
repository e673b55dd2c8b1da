"""The graph algorithms as vertex programs: SSSP, connected components (min label), PageRank.

These are the real programs, not examples: applications on the engine, its tests and its
benchmarks all run these classes (one copy each). Each is deterministic for any partitioning:
min combiners are exact, PageRank's float sums are folded by the engine in source order, and PageRank's dangling mass is an exact sum
(:func:`hgraph.exactsum.exact_sum`) — a plain float sum of per-block partials would change in the
last bits with the number of blocks.
"""

from __future__ import annotations

import numpy as np

import hgraph
from hgraph.exactsum import exact_sum
from hgraph.generators import powerlaw_graph


class SSSP(hgraph.VertexProgram):
    """Distances from ``source``; a vertex that improves sends ``distance + weight``."""

    value_dtype = message_dtype = np.float64
    combiner = np.minimum

    def __init__(self, source: int):
        self.source = int(source)

    def init(self, block):
        is_source = block.ids == self.source
        return np.where(is_source, 0.0, np.inf), is_source          # values, responding

    def update(self, ctx, block, values, inbox, has_message):
        better = has_message & (inbox < values)
        # the vertices that improved send next; the others vote to halt
        return hgraph.Update(np.where(better, inbox, values), respond=better,
                             aggregates={"improved": int(better.sum())})

    aggregators = {"improved": "sum"}

    def message(self, src_values, weights):
        return src_values + weights


class MinLabel(hgraph.VertexProgram):
    """Min-label propagation; on a symmetric graph the label is the component's smallest id."""

    value_dtype = message_dtype = np.int64
    combiner = np.minimum
    aggregators = {"changed": "sum", "largest": "max"}

    def init(self, block):
        return block.ids.copy(), np.ones(block.size, bool)

    def update(self, ctx, block, values, inbox, has_message):
        smaller = has_message & (inbox < values)
        new = np.where(smaller, inbox, values)
        return hgraph.Update(new, respond=smaller,
                             aggregates={"changed": int(smaller.sum()),
                                         "largest": int(new.max(initial=-1))})

    def message(self, src_values, weights):
        return src_values


class PageRank(hgraph.VertexProgram):
    """networkx's PageRank (uniform teleport, dangling mass spread evenly), fixed iterations.

    The value is ``(rank, rank / out_weight)``; the second part is what the vertex sends.
    Needs the graph column ``out_weight``.
    """

    value_dtype = message_dtype = np.float64
    value_shape = (2,)
    combiner = np.add
    aggregators = {"dangling": "sum"}
    always_update = True

    def __init__(self, n: int, iterations: int, damping: float = 0.85, initial_dangling: float = 0.0):
        self.n, self.iterations, self.damping = n, iterations, damping
        self.initial_dangling = initial_dangling
        self.max_supersteps = iterations + 1

    def _values(self, rank, out_weight):
        share = np.divide(rank, out_weight, out=np.zeros_like(rank), where=out_weight > 0)
        return np.stack([rank, share], axis=1)

    def _dangling(self, rank, out_weight):
        return {"dangling": exact_sum(rank[out_weight <= 0])}

    def init(self, block):
        rank = np.full(block.size, 1.0 / self.n)
        ow = block.columns["out_weight"]
        return self._values(rank, ow), np.ones(block.size, bool)

    def update(self, ctx, block, values, inbox, has_message):
        ow = block.columns["out_weight"]
        if ctx.superstep == 1:
            dangling = self.initial_dangling
        else:
            dangling = float(ctx.aggregates["dangling"])
        received = np.where(has_message, inbox, 0.0)
        rank = (1 - self.damping) / self.n + self.damping * (received + dangling / self.n)
        more = ctx.superstep < self.iterations
        return hgraph.Update(self._values(rank, ow), respond=np.full(block.size, more),
                             halt=np.full(block.size, not more),
                             aggregates=self._dangling(rank, ow))

    def message(self, src_values, weights):
        return src_values[:, 1] * weights


def pagerank(graph, iterations: int, damping: float = 0.85):
    """(program, graph with the ``out_weight`` column) for :class:`PageRank` on ``graph``."""
    out_weight = np.bincount(graph.src, weights=graph.weights, minlength=graph.n)
    initial = float(np.count_nonzero(out_weight <= 0)) / graph.n
    return (PageRank(graph.n, iterations, damping, initial),
            graph.with_columns(out_weight=out_weight))


def symmetrize(graph):
    """The graph with every edge also reversed (for connected components)."""
    return hgraph.Graph.from_edges(np.concatenate([graph.src, graph.dst]),
                                   np.concatenate([graph.dst, graph.src]), n=graph.n)


def hybrid_comparison(n: int = 200_000, m: int = 2_000_000, tasks: int = 4, blocks: int = 2,
                      seed: int = 1, runtime: str = "local") -> dict:
    """SSSP from a median-degree vertex of :func:`powerlaw_graph` in push, pull and hybrid mode.

    From an ordinary vertex the frontier starts tiny (push is cheaper), floods the hubs (block-pull
    is cheaper) and then dies out (push again), so hybrid mode has to switch both ways.

    Returns the bytes each mode moved across workers, hybrid's switches and mode trace, and
    whether the three results are bit-identical — the hybrid acceptance check (hybrid switches
    at least twice and moves at most 1.05 x the bytes of the better pure mode)."""
    g = powerlaw_graph(n, m, seed)
    degree = g.out_degree
    source = int(np.flatnonzero(degree == int(np.median(degree)))[0])
    engine = hgraph.EngineOptions(tasks=tasks, blocks=blocks, runtime=runtime)
    runs = {mode: hgraph.run(SSSP(source), g, engine.replace(mode=mode))
            for mode in ("push", "pull", "hybrid")}
    hybrid = runs["hybrid"]
    return {
        "vertices": n, "edges": g.num_edges, "tasks": tasks, "blocks": blocks, "source": source,
        "bytes": {mode: r.total_bytes for mode, r in runs.items()},
        "switches": hybrid.switches,
        "trace": [(row["mode"], row["active"], row["bytes"]) for row in hybrid.stats],
        "ratio": hybrid.total_bytes / min(runs["push"].total_bytes, runs["pull"].total_bytes),
        "identical": all(r.values.tobytes() == hybrid.values.tobytes() for r in runs.values()),
        "values": hybrid.values,
    }
