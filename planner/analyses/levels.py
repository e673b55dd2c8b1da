"""Longest-path topological levels of the activation graph, as a block-centric vertex program.

Each engine block relaxes its own edges to a fixpoint in one superstep and only what crosses
blocks travels as messages, so a plan's level analysis takes a few supersteps, not the graph's
depth. The levels order the nodes for :mod:`planner.analyses.segments`.

Example::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph
    >>> g = DPGraph(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]),
    ...             src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]))   # a diamond
    >>> levels(g, tasks=2).tolist()
    [0, 1, 1, 2]
"""

from __future__ import annotations

import numpy as np

import hgraph
from planner.analyses.engine import EngineOptions, options, run_program
from planner.arrays import distinct, ranges

__all__ = ["BlockLevels", "levels", "level_graph"]


#: "Unreachable" in :func:`_by_cuts` (far below any level, and no overflow when added to).
_NEG = -(1 << 60)


#: :func:`_waves` first relaxes every edge at once, round after round, while the rounds done
#: times the edges stay under this many (a Kahn wave's step costs ~20 NumPy calls to the
#: round's four, which tells on deep graphs such as densenet; figures: bench/NOTES_scale.md).
RELAX_WORK = 1 << 21


def _waves(src: np.ndarray, dst: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """``max(vals, vals[u] + 1)`` propagated along every path of the edges (local ids)
    (``vals``: [size] or [size, columns]).

    Small edge sets are relaxed all at once until nothing changes (one round per level);
    past :data:`RELAX_WORK`, one NumPy step per Kahn wave finishes from where the rounds
    stopped (their values lie between the start and the fixpoint, so the waves reach the
    same fixpoint)."""
    size = vals.shape[0]
    vals = vals.copy()
    for _ in range(max(1, RELAX_WORK // max(1, src.size))):
        new = vals.copy()
        np.maximum.at(new, dst, vals[src] + 1)
        if np.array_equal(new, vals):
            return vals
        vals = new
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    ptr = np.searchsorted(src, np.arange(size + 1))
    indeg = np.bincount(dst, minlength=size)
    frontier = np.flatnonzero(indeg == 0)
    while frontier.size:
        starts, stops = ptr[frontier], ptr[frontier + 1]
        cnt = stops - starts
        total = int(cnt.sum())
        if total == 0:
            break
        idx = ranges(starts, cnt)
        tgt = dst[idx]
        np.maximum.at(vals, tgt, np.repeat(vals[frontier] + 1, cnt, axis=0))
        np.subtract.at(indeg, tgt, 1)
        frontier = distinct(tgt[indeg[tgt] == 0])
    return vals


def _by_cuts(src: np.ndarray, dst: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """:func:`_waves` for edges with ``src < dst``, in a few NumPy steps on deep graphs.

    A *cut* ``c`` is a position no edge jumps over (every edge from before ``c`` lands at
    ``c`` at the latest), so the positions split into segments ``[c_k, c_k+1)`` whose edges
    stay inside or land on the next cut. Waves inside all segments at once (as many as the
    deepest segment, not the whole depth) give each node ``local`` (paths from inside its
    segment) and ``dist`` (longest path from its segment's cut); the cuts' levels then follow
    ``x_k+1 = max(b_k, x_k + a_k)``, an associative recurrence solved by a doubling scan.
    """
    size = vals.size
    reach = np.full(size, -1, np.int64)
    np.maximum.at(reach, src, dst)
    before = np.concatenate(([-1], np.maximum.accumulate(reach)[:-1]))
    cut = before <= np.arange(size)
    seg = np.cumsum(cut) - 1
    inside = seg[src] == seg[dst]
    init = np.empty((size, 2), np.int64)
    init[:, 0] = vals
    init[:, 1] = np.where(cut, 0, _NEG)
    local, dist = _waves(src[inside], dst[inside], init).T
    dist = np.where(dist > _NEG // 2, dist, _NEG)
    # segment k -> cut k + 1: x_k+1 = max(b_k, x_k + a_k)
    cuts = np.flatnonzero(cut)
    a = np.full(cuts.size - 1, _NEG, np.int64)
    b = vals[cuts[1:]].astype(np.int64)
    xs, xk = src[~inside], seg[src[~inside]]
    np.maximum.at(a, xk, dist[xs] + 1)
    np.maximum.at(b, xk, local[xs] + 1)
    step = 1
    while step < a.size:                  # inclusive scan of the maps x -> max(b, x + a)
        a2 = np.maximum(a[step:] + a[:-step], _NEG)
        b2 = np.maximum(b[step:], b[:-step] + a[step:])
        a[step:], b[step:] = a2, b2
        step *= 2
    x = np.concatenate(([vals[0]], np.maximum(b, vals[0] + a)))
    reached = dist > _NEG
    return np.where(reached, np.maximum(local, x[seg] + dist), local)


def _local_longest(preds: np.ndarray, start: int, vals: np.ndarray) -> np.ndarray:
    """Longest-path relaxation inside one block.

    ``preds``: int64 [size, dmax] global predecessor ids (-1 padded); ``vals``: the levels the
    block starts from (its own and what other blocks sent). Returns ``max(vals, level(u) + 1)``
    propagated along every in-block path — no per-vertex loop: by segments between cuts
    (:func:`_by_cuts`) when ids follow a topological order inside the block, else by Kahn waves.
    """
    size = vals.size
    rows, cols = np.nonzero((preds >= start) & (preds < start + size))
    if rows.size == 0:
        return vals
    src = preds[rows, cols] - start
    if np.all(src < rows):
        return _by_cuts(src, rows, vals)
    return _waves(src, rows, vals)


class BlockLevels(hgraph.VertexProgram):
    """Longest-path levels, block-centric: each block relaxes its own edges to a fixpoint in
    one superstep (:func:`_local_longest`), and only what crosses blocks travels as messages.

    Supersteps: how often a longest path crosses from one block to a later-updated one (a few
    when ids follow the topological order, as synthetic graphs' do), not the graph's depth.
    Column ``preds``: int64 [n, dmax], predecessors padded with -1; optional column ``floor``:
    the level a vertex starts from (0 without it). On a cg.txt's variable graph
    (:mod:`planner.cg_shards`) parameters and inputs start at -1, so what they send (0) lifts
    no activation: the activations' levels are the activation graph's.
    """

    value_dtype = message_dtype = np.int64
    combiner = np.maximum

    def init(self, block):
        floor = block.columns.get("floor")
        start = np.zeros(block.size, np.int64) if floor is None else floor.astype(np.int64)
        vals = _local_longest(block.columns["preds"], block.start, start)
        return vals, np.ones(block.size, bool)

    def update(self, ctx, block, values, inbox, has_message):
        start = np.where(has_message, np.maximum(values, inbox), values)
        if not np.any(start > values):
            return hgraph.Update(values, respond=np.zeros(block.size, bool))
        new = _local_longest(block.columns["preds"], block.start, start)
        return hgraph.Update(new, respond=new > values)

    def message(self, src_values, weights):
        return src_values + 1


def _padded_preds(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """int64 [n, max in-degree] (at least one column): predecessors of each node, -1 padded."""
    deg = np.bincount(dst, minlength=n)
    dmax = max(1, int(deg.max(initial=0)))
    out = np.full((n, dmax), -1, np.int64)
    if src.size:
        order = np.lexsort((src, dst))
        d = dst[order]
        first = np.searchsorted(d, d)
        out[d, np.arange(d.size) - first] = src[order]
    return out



def level_graph(g) -> hgraph.Graph:
    """The engine graph :class:`BlockLevels` runs on (edges src -> dst, column ``preds``)."""
    return hgraph.Graph.from_edges(g.src, g.dst, n=g.n,
                                   columns={"preds": _padded_preds(g.n, g.src, g.dst)})


def levels(g, *, opts: EngineOptions | None = None, with_supersteps: bool = False, **engine):
    """int64 [n]: topological level of each node of the activation graph ``g`` (src -> dst).

    ``opts`` (or ``tasks=``, ``blocks=`` … as keywords) say how the engine runs;
    ``with_supersteps=True`` returns ``(levels, supersteps)``.
    """
    res = run_program(options(opts, engine), BlockLevels(), level_graph(g))
    lv = np.asarray(res.values, dtype=np.int64)
    return (lv, res.supersteps) if with_supersteps else lv


def var_levels(sharded, nodes: np.ndarray, opts: EngineOptions) -> tuple[np.ndarray, int]:
    """``(levels, supersteps)``: :func:`levels` of the activation graph from its cg.txt's
    variable graph read in shards (``sharded``, :func:`planner.cg_shards.read`), on the
    workers that read it; ``nodes``: the activations' variable ids (ascending: the activation
    graph's node order). Only the activations' levels come back, cut beside each worker."""
    res = run_program(opts, BlockLevels(), sharded, keep=_VAR_LEVELS, gather=False)
    from planner.analyses.engine import session

    with session(opts) as s:
        level = s.gather_rows(_VAR_LEVELS, nodes)
        s.drop(_VAR_LEVELS)
    return np.asarray(level, np.int64), res.supersteps


#: The kept column of :func:`var_levels` (dropped once read).
_VAR_LEVELS = "levels.var"
