"""Statistics of every ``L_v = {v} ∪ ancestors(v)`` (the approximate DP's family), on the engine.

For every node ``v``: ``|L_v|``, ``m(L_v)``, ``t(L_v)``, the boundary ``∂L_v`` with
``t(∂L_v)``/``m(∂L_v)`` and ``m(A(L_v)) + m(B(L_v))`` (FORMAT.md §4.2) — what the DP's family
holds (:func:`planner.dp_families.approx_family` orders them) — and the two terms the replay
holds beyond that model (``left_out``, bench/NOTES_scale.md, issue 37, seventh session): the
gradients of parameters and inputs written by backward functions of nodes outside ``L_v``
(run before the block ending at ``L_v``; never freed), and ``m`` of the nodes of ``A(L_v)``
whose backward reads their own output (the model counts only their gradients).

**Why descendants, not ancestors.** ``m(L_v)`` is not a combinable quantity (paths overlap), so
sets are bitsets. Holding them *by column* makes every statistic local: vertex ``u`` carries
``D_u`` = the set of ``v`` with ``u ∈ L_v`` (its descendants and itself), and

* ``u ∈ ∂L_v``  ⇔ ``v ∈ D_u`` and ``v ∉ D_w`` for some successor ``w``: ``D_u & OR_w ~D_w``;
* ``w ∈ A(L_v)`` ⇔ ``v ∉ D_w`` and ``v ∈ D_u`` for some predecessor ``u``: ``~D_w & OR_u D_u``;
* ``u ∈ B(L_v)`` ⇔ ``v ∉ D_u`` and ``w ∈ A(L_v)`` for some successor ``w``: ``~D_u & OR_w A_w``;

all with ``np.bitwise_or`` combiners; per-set sums are array aggregators (exact int64 sums).
A parameter's gradient is live at ``L_v`` unless every function writing it lies in ``L_v``:
for one writer ``u`` that is ``u ∈ L_v``, a sum over ``D_u`` like ``m(L_v)``'s; a gradient
several functions write (tied weights; none in the synthetic or reference graphs) is counted
once, on the intersection of their ``D_u`` (:func:`_shared_inside`).
**Why segment-local.** Between two strict separators (:mod:`planner.analyses.segments`) every
``L_v`` is the prefix before its segment plus a local part, so the columns only span one
segment: O(n · segment width) memory instead of O(n²), and supersteps bounded by the longest
path inside a segment. Every result is identical for any ``tasks``, ``blocks`` and ``mode``.

Example::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph
    >>> g = DPGraph(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]),
    ...             src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]))   # a diamond
    >>> s = local_stats(g, tasks=3, blocks=2)
    >>> s.mL.tolist(), s.mAB.tolist()
    ([4, 6, 6, 9], [4, 5, 5, 0])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import hgraph
from planner.analyses.engine import (EngineOptions, options, put_by_var, run_program, session,
                                     var_graph)
from planner.analyses.segments import Segments, segments
from planner.bitsets import pack, unpack, words_for

__all__ = ["LocalStats", "local_stats"]

#: Rows of column bits transposed at a time (:func:`_transpose_local`).
TRANSPOSE_ROWS = 1 << 16


class _LocalDescendants(hgraph.VertexProgram):
    """Descendants-or-self within a segment, as bits over the segment's local positions.

    Runs on the reversed graph; an edge whose weight is 0 comes from the separator that ends
    the receiver's segment (a different segment's columns) and carries nothing. Supersteps:
    the longest path inside one segment, not the graph's depth.
    """

    value_dtype = message_dtype = np.uint64
    combiner = np.bitwise_or

    def __init__(self, words: int):
        self.words = words
        self.value_shape = self.message_shape = (words,)

    def init(self, block):
        vals = np.zeros((block.size, self.words), np.uint64)
        loc = block.columns["loc"]
        vals[np.arange(block.size), loc // 64] = np.uint64(1) << (loc % 64).astype(np.uint64)
        return vals, np.ones(block.size, bool)

    def update(self, ctx, block, values, inbox, has_message):
        new = values | np.where(has_message[:, None], inbox, np.uint64(0))
        return hgraph.Update(new, respond=np.any(new != values, axis=1))

    def message(self, src_values, weights):
        return np.where((weights != 0)[:, None], src_values, np.uint64(0))


#: Edge kinds of :class:`_LocalSetStats`' bidirectional graph (edge weights).
_REV, _FWD, _REV_X, _FWD_X = 1.0, 2.0, 3.0, 4.0


#: Layout of :class:`_LocalSetStats` values: six sections of ``words`` uint64 each.
_D, _OUT_REV, _OUT_FWD, _BND, _A, _B = range(6)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


class _LocalSetStats(hgraph.VertexProgram):
    """:class:`_SetStats` over segment-local columns: ``∂``, ``A``, ``B`` of every ``L_v``.

    A separator plays two roles: first node of its own segment (columns of that segment) and
    successor of the previous one's nodes (edges ``_FWD_X``/``_REV_X``; there its ``D`` is
    empty, so it sends all ones backwards and collects ``A`` for the previous segment's
    columns). Per-column sums go to array aggregators indexed by topological position
    (column ``base`` + bit; ``abase`` for ``A``, which for a separator is the previous
    segment's base).
    """

    value_dtype = message_dtype = np.uint64
    combiner = np.bitwise_or
    always_update = True
    max_supersteps = 3
    aggregators = {"size": "sum", "mL": "sum", "tL": "sum", "t_bnd": "sum", "m_bnd": "sum",
                   "mAB": "sum", "pgL": "sum", "mAo": "sum"}

    def __init__(self, words: int, n: int):
        self.words, self.n = words, n
        self.value_shape = (6 * words,)
        self.message_shape = (2 * words,)

    def _sec(self, values, k):
        return values[:, k * self.words:(k + 1) * self.words]

    def init(self, block):
        w = self.words
        vals = np.zeros((block.size, 6 * w), np.uint64)
        valid = block.columns["valid"]
        d = block.columns["desc"] & valid    # as it is: a node's bits lie in its segment;
        # a variable with no valid bit (a parameter of planner.cg_shards' graph) holds none
        vals[:, :w] = d
        vals[:, w:2 * w] = ~d & valid
        vals[:, 2 * w:3 * w] = d
        return vals, np.ones(block.size, bool)

    def _sums(self, bits, base, weights):
        """int64 [n] by position: Σ weights[r] over set bits b of row r, at base[r] + b."""
        out = np.zeros(self.n, np.int64)
        r, b = np.nonzero(unpack(bits, 64 * self.words))     # a block may hold no vertex
        if r.size:
            np.add.at(out, base[r] + b, weights[r])
        return out

    def update(self, ctx, block, values, inbox, has_message):
        w = self.words
        new = values.copy()
        d = self._sec(values, _D)
        valid = block.columns["valid"]
        sep = block.columns["sep"]
        inbox = np.where(has_message[:, None], inbox, np.uint64(0))
        if ctx.superstep == 1:
            bnd = d & inbox[:, :w]
            a = np.where(sep[:, None], inbox[:, w:], ~d & inbox[:, w:] & valid)
            new[:, _BND * w:(_BND + 1) * w] = bnd
            new[:, _A * w:(_A + 1) * w] = a
            new[:, _OUT_REV * w:(_OUT_REV + 1) * w] = a
            new[:, _OUT_FWD * w:(_OUT_FWD + 1) * w] = 0
            return hgraph.Update(new, respond=np.ones(block.size, bool))
        if ctx.superstep == 2:
            b = ~d & inbox[:, :w] & valid
            new[:, _B * w:(_B + 1) * w] = b
            c = block.columns
            m, t, base, abase = c["m"], c["t"], c["base"], c["abase"]
            one = np.ones(block.size, np.int64)
            aggs = {"size": self._sums(d, base, one), "mL": self._sums(d, base, m),
                    "tL": self._sums(d, base, t),
                    "t_bnd": self._sums(self._sec(new, _BND), base, t),
                    "m_bnd": self._sums(self._sec(new, _BND), base, m),
                    "mAB": self._sums(self._sec(new, _A), abase, m) + self._sums(b, base, m),
                    "pgL": self._sums(d, base, c["pg"]),
                    "mAo": self._sums(self._sec(new, _A), abase, c["mo"])}
            return hgraph.Update(new, respond=np.zeros(block.size, bool), aggregates=aggs)
        return hgraph.Update(new, respond=np.ones(block.size, bool))

    def message(self, src_values, weights):
        w = self.words
        out = np.zeros((src_values.shape[0], 2 * w), np.uint64)
        rev = weights == _REV
        revx = weights == _REV_X
        fwd = (weights == _FWD) | (weights == _FWD_X)
        out[rev, :w] = src_values[rev, _OUT_REV * w:(_OUT_REV + 1) * w]
        # a separator towards the previous segment: ~D = all ones in superstep 0, then its A
        rx = src_values[revx, _OUT_REV * w:(_OUT_REV + 1) * w]
        first = np.any(src_values[revx, _OUT_FWD * w:(_OUT_FWD + 1) * w] != 0, axis=1)  # step 0
        out[revx, :w] = np.where(first[:, None], _ALL, rx)
        out[fwd, w:] = src_values[fwd, _OUT_FWD * w:(_OUT_FWD + 1) * w]
        return out


@dataclass
class LocalStats:
    """Per-node statistics of ``L_v`` from segment-local sets (row = node ``v``).

    ``L_v`` = the positions before ``seg.sstart[v]`` plus ``lloc[v]`` (bits over local positions
    of ``v``'s segment, the start separator at bit 0); ``bndloc[v]``: ``∂L_v`` likewise (it has
    nothing before the segment start). ``size``, ``mL``, ``tL``, ``t_bnd``, ``m_bnd``, ``mAB``:
    int64 [n], per node. ``grads_out``: the parameters' and inputs' gradients written by the
    backward functions of nodes outside ``L_v``, each gradient once; ``outputs_A``: ``m`` of
    the nodes of ``A(L_v)`` whose backward reads their own output (``left_out``: both, what
    the replay holds beyond the model's ``m(A) + m(B)``; all in the graph's units).
    """

    seg: Segments
    lloc: np.ndarray
    bndloc: np.ndarray
    size: np.ndarray
    mL: np.ndarray
    tL: np.ndarray
    t_bnd: np.ndarray
    m_bnd: np.ndarray
    mAB: np.ndarray
    grads_out: np.ndarray
    outputs_A: np.ndarray
    supersteps: int = 0

    @property
    def left_out(self) -> np.ndarray:
        """int64 [n]: ``grads_out + outputs_A``, what
        :func:`planner.dp_families.approx_family` adds to ``mAB`` with ``left_out``."""
        return self.grads_out + self.outputs_A

    def member(self, nodes, v) -> np.ndarray:
        """bool: ``nodes[k] ∈ L_{v[k]}`` (broadcast), from positions and local bits only."""
        seg = self.seg
        v = np.asarray(v)
        u = np.asarray(nodes)
        sj = seg.sstart[v]
        lu = seg.loc[u]
        bit = ((self.lloc[v, lu // 64] >> (lu % 64).astype(np.uint64)) & np.uint64(1)) == 1
        return (seg.pos[u] <= sj) | ((seg.sstart[u] == sj) & bit)

    def dense_sets(self) -> tuple[np.ndarray, np.ndarray]:
        """uint64 [n, ⌈n/64⌉] row bitsets of ``L_v`` and ``∂L_v``: the dense representation
        (n² bits), for the DP on graphs small enough to hold it."""
        seg = self.seg
        n = seg.pos.size
        W = words_for(n)
        out = []
        for local, prefix in ((self.lloc, True), (self.bndloc, False)):
            x = np.zeros((n, n), bool)
            if prefix:
                x[:, :] = seg.pos[seg.node_at][None, :] < seg.sstart[:, None]   # positions before
                x[:, :] = x[:, seg.pos]                                         # by node
            v, b = np.nonzero(unpack(local, 64 * local.shape[1]))
            x[v, seg.node_at[seg.sstart[v] + b]] = True
            out.append(pack(x, W))
        return out[0], out[1]


def _transpose_local(cols: np.ndarray, seg: Segments, words: int) -> np.ndarray:
    """Column bits (row u: the local columns v with bit) -> row bits (row v: the local u).
    In chunks of :data:`TRANSPOSE_ROWS` rows: unpacked, a row is 64 bytes a word and its set
    bits 16 bytes each, several times the packed rows; whole, that was the driver's largest
    transient of the analyses (bench/NOTES_scale.md, "Where the driver's memory goes")."""
    n = seg.pos.size
    out = np.zeros((n, words), np.uint64)
    for lo in range(0, n, TRANSPOSE_ROWS):
        u, b = np.nonzero(unpack(cols[lo:lo + TRANSPOSE_ROWS], 64 * words))
        u += lo
        v = seg.node_at[seg.sstart[u] + b]
        lu = seg.loc[u]
        np.bitwise_or.at(out, (v, lu // 64), np.uint64(1) << (lu % 64).astype(np.uint64))
    return out


#: Names of the statistics' columns kept on the workers between their two runs.
_DESC, _SETS = "local_stats.desc", "local_stats.sets"


def _grad_writes(g):
    """``(pg, shared, total)`` of the gradients of parameters and inputs the nodes' backward
    functions write (:attr:`~planner.activation_graph.ActivationGraph.grad_writes`, in the
    graph's units): ``pg`` int64 [n], per node the gradients it alone writes (summed on the
    engine); ``shared`` ``(node, var, m)`` sorted by variable, the writes of gradients several
    nodes write (:func:`_shared_inside`); ``total``: every gradient once."""
    node, var, nbytes = g.grad_writes
    w = nbytes // g.ratio
    order = np.lexsort((node, var))
    node, var, w = node[order], var[order], w[order]
    starts = np.flatnonzero(np.r_[True, var[1:] != var[:-1]]) if var.size else var
    counts = np.diff(np.r_[starts, var.size])
    many = np.repeat(counts > 1, counts)
    pg = np.bincount(node[~many], weights=w[~many], minlength=g.n).astype(np.int64)
    return pg, (node[many], var[many], w[many]), int(w[starts].sum())


def _shared_inside(seg: Segments, desc: np.ndarray, shared) -> np.ndarray:
    """int64 [n] by node: the gradients several nodes write whose writers all lie in ``L_v``.

    Why it needs no global sets: a node of an earlier segment is an ancestor of every node of a
    later one (its start separator has every node before it as an ancestor), so for ``v`` in a
    later segment than a gradient's last writers' all writers lie in ``L_v``, and for ``v``
    in that segment the writers there must all be ancestors-or-self of ``v``: ``v``'s bit in
    the AND of their descendant columns ``desc`` (by node, as the statistics' first run left
    them). On the driver: such gradients are a handful (tied weights) or none."""
    n = seg.pos.size
    node, var, w = shared
    inside = np.zeros(n + 1, np.int64)
    if not var.size:
        return inside[:n]
    starts = np.flatnonzero(np.r_[True, var[1:] != var[:-1]])
    counts = np.diff(np.r_[starts, var.size])
    at = seg.sstart[node]
    last = np.maximum.reduceat(at, starts)                 # the writers' latest segment
    keep = at == np.repeat(last, counts)
    both = np.bitwise_and.reduceat(desc[node[keep]], np.flatnonzero(
        np.r_[True, var[keep][1:] != var[keep][:-1]]), axis=0)
    np.add.at(inside, last + 1, w[starts])                 # v after that segment: all in
    inside = np.cumsum(inside)[seg.sstart]
    k, b = np.nonzero(unpack(both, 64 * desc.shape[1]))
    local = np.zeros(n, np.int64)
    np.add.at(local, last[k] + b, w[starts][k])           # v in it: the AND's bits
    return inside + local[seg.pos]


def _stats_columns(g, seg: Segments, pg: np.ndarray) -> dict:
    """The per-vertex columns :class:`_LocalSetStats` reads but ``desc``, by node: ``pg`` the
    gradients a node's backward alone writes, ``mo`` its ``m`` where its backward reads its
    own output."""
    n, W = g.n, seg.words
    sep_pos = np.flatnonzero(seg.sep[seg.node_at])
    nxt = np.r_[sep_pos, n]
    seg_end = nxt[np.searchsorted(sep_pos, seg.sstart, side="right")]
    width = seg_end - seg.sstart     # valid columns: the node's own segment's width
    valid = pack(np.arange(64 * W)[None, :] < width[:, None], W)
    prev_start = np.r_[0, sep_pos][np.maximum(np.searchsorted(sep_pos, seg.sstart), 0)]
    abase = np.where(seg.sep, prev_start, seg.sstart)
    return {"valid": valid, "sep": seg.sep, "m": g.m, "t": g.t, "base": seg.sstart,
            "abase": abase, "pg": pg, "mo": np.where(g.reads_output, g.m, 0)}


def _stats_graph(g, seg: Segments, cross: np.ndarray, pg: np.ndarray) -> hgraph.Graph:
    """The bidirectional graph :class:`_LocalSetStats` runs on: its edge kinds as weights and
    the per-vertex columns it reads but ``desc`` (kept on the workers by the run before)."""
    both_src = np.concatenate([g.dst, g.src])
    both_dst = np.concatenate([g.src, g.dst])
    both_w = np.concatenate([np.where(cross, _REV_X, _REV), np.where(cross, _FWD_X, _FWD)])
    return hgraph.Graph.from_edges(both_src, both_dst, weights=both_w, n=g.n,
                                   columns=_stats_columns(g, seg, pg))


#: Columns :func:`_on_variables` hands the workers (dropped once read).
_PUT = "local_stats.put."


def _on_variables(sharded, g, seg: Segments, o: EngineOptions, s, pg: np.ndarray):
    """``(desc, bnd, aggregates, supersteps)`` of the two runs on a cg.txt's variable graph
    on the workers (:mod:`planner.cg_shards`): the columns go to them by variable (0 for
    parameters and inputs: no valid bit, so they hold and send nothing), an edge into a
    separator is weighed by its source there (its predecessors all lie in the segment before:
    such an edge always crosses), and only the activations' rows come back."""
    W, var = seg.words, g.var
    names = []

    def put(name, values):
        put_by_var(s, _PUT + name, values, sharded, var)
        names.append(_PUT + name)

    put("loc", seg.loc)
    put("sep", seg.sep)
    rev = sharded.view([("reversed", ("sep", (1.0, 0.0)))])
    r1 = run_program(o, _LocalDescendants(W), rev, keep=_DESC, gather=False,
                     inputs={"loc": _PUT + "loc", "sep": _PUT + "sep"})
    desc = np.asarray(s.gather_rows(_DESC, var), np.uint64).reshape(g.n, W)
    for name, values in _stats_columns(g, seg, pg).items():
        if name != "sep":
            put(name, values)
    both = sharded.view([("reversed", ("sep", (_REV, _REV_X))), ("forward", (None, _FWD))])
    r2 = run_program(o, _LocalSetStats(W, g.n), both, keep=_SETS, gather=False,
                     inputs={"desc": _DESC, **{n[len(_PUT):]: n for n in names if
                                               not n.endswith(".loc")}})
    agg = {k: np.asarray(r2.aggregates[k], dtype=np.int64)[seg.pos]
           for k in _LocalSetStats.aggregators}
    bnd = np.asarray(s.gather_rows(_SETS, var, slice(_BND * W, (_BND + 1) * W)), np.uint64)
    for name in names:
        s.drop(name)
    return desc, bnd, agg, r1.supersteps + r2.supersteps


def local_stats(g, *, opts: EngineOptions | None = None, seg: Segments | None = None,
                level=None, **engine) -> LocalStats:
    """Statistics of every ``L_v`` in O(n · segment width) memory and few supersteps.

    Between two strict separators every set is the prefix before the segment plus a local
    part, so bitsets only span a segment (:class:`Segments`): local descendants on the
    reversed graph (supersteps = longest path inside a segment), then :class:`_LocalSetStats`
    (3 supersteps). The same numbers for any tasks/blocks/mode.
    """
    o = options(opts, engine)
    n = g.n
    if seg is None:
        seg = segments(g, opts=o, level=level)
    W = seg.words
    steps = seg.supersteps
    pg, shared, total = _grad_writes(g)
    sharded = var_graph(o, g, release=True)
    if sharded is not None:          # on the variable graph the workers read
        with session(o) as s:
            desc, bnd, agg, more = _on_variables(sharded, g, seg, o, s, pg)
            s.drop(_DESC)
            s.drop(_SETS)
        return _finish(g, seg, desc, bnd, agg, steps + more, pg, shared, total)
    # an edge into a separator from its predecessors crosses into the next segment
    cross = seg.sep[g.dst] & (seg.sstart[g.dst] != seg.sstart[g.src])
    rev = hgraph.Graph.from_edges(g.dst, g.src, weights=np.where(cross, 0.0, 1.0), n=n,
                                  columns={"loc": seg.loc})
    with session(o) as s:
        # the descendants stay on the workers as the next run's column "desc" (the driver
        # reads them too, for L_v's rows), and of that run's six sections a vertex only ∂L_v's
        # comes here, cut beside each worker: the rest is read by no one
        r1 = run_program(o, _LocalDescendants(W), rev, keep=_DESC)
        steps += r1.supersteps
        desc = np.asarray(r1.values, dtype=np.uint64).reshape(n, W)
        del rev, r1        # each engine run's inputs and results go as soon as read: the
        # driver's peak is what is alive at once (bench/NOTES_scale.md)
        both = _stats_graph(g, seg, cross, pg)
        r2 = run_program(o, _LocalSetStats(W, n), both, keep=_SETS, inputs={"desc": _DESC},
                         gather=False)
        del both
        steps += r2.supersteps
        agg = {k: np.asarray(r2.aggregates[k], dtype=np.int64)[seg.pos]
               for k in _LocalSetStats.aggregators}
        del r2
        bnd = np.asarray(s.gather(_SETS, slice(_BND * W, (_BND + 1) * W)), np.uint64)
        s.drop(_DESC)
        s.drop(_SETS)
    return _finish(g, seg, desc, bnd, agg, steps, pg, shared, total)


def _finish(g, seg: Segments, desc, bnd, agg, steps, pg, shared, total) -> LocalStats:
    """The :class:`LocalStats` of the runs' descendants, boundaries and sums (by node);
    ``pg``, ``shared``, ``total``: :func:`_grad_writes`."""
    W = seg.words
    bndloc = _transpose_local(bnd, seg, W)
    del bnd
    inside = _shared_inside(seg, desc, shared)
    lloc = _transpose_local(desc, seg, W)
    del desc
    pm = np.r_[0, np.cumsum(g.m[seg.node_at])]
    pt = np.r_[0, np.cumsum(g.t[seg.node_at])]
    ppg = np.r_[0, np.cumsum(pg[seg.node_at])]
    inside += ppg[seg.sstart] + agg["pgL"]
    return LocalStats(seg=seg, lloc=lloc, bndloc=bndloc,
                      size=seg.sstart + agg["size"], mL=pm[seg.sstart] + agg["mL"],
                      tL=pt[seg.sstart] + agg["tL"], t_bnd=agg["t_bnd"], m_bnd=agg["m_bnd"],
                      mAB=agg["mAB"], grads_out=total - inside, outputs_A=agg["mAo"],
                      supersteps=steps)
