"""Lower-set families for the Kusumoto et al. recomputation DP, with the per-set quantities it needs.

The DP of :mod:`planner.dp` walks a chain ``∅ = L0 ⊊ L1 ⊊ … ⊊ Lk = V`` of lower sets of the
activation graph. Which lower sets it may use is the *family*:

* ``approx`` (the reference's ``DP2.cpp``, "DP2fix" ordering): ∅ plus ``L_v = {v} ∪ ancestors(v)``
  for every node, numbered by ``m(L)`` ascending with ties broken by ``|L|`` (then by ``v``);
  N + 1 sets.
* ``exact`` (``DP.cpp`` with lower sets sorted by size, "DPfix"): every lower set, numbered by
  size. Their number can explode (GoogLeNet: 27,358 for 134 nodes), so enumeration stops with a
  clear :class:`~hgraph.common.errors.HGraphError` past ``max_lower_sets`` — unless the caller asked to
  fall back to the approximate family.

Sets are held in one of two ways (the DP reads either, :mod:`planner.dp.subsets`): rows of a
``uint64`` bitset matrix (``sets``/``bnd``, ``words`` per set), or, for the approximate family on
big graphs, segment-local bits (``local``, :class:`planner.analyses.local_stats.LocalStats`).
The approximate family is always built from the engine's statistics
(:mod:`planner.analyses.local_stats`); the exact one enumerates lower sets here. Alongside each
set the family holds what the transition formula of FORMAT.md §4.2 reads: ``|L|``, ``m(L)``, the boundary
``∂L = {v ∈ L : some successor ∉ L}`` (its ``t`` and ``m`` sums) and ``m(A(L)) + m(B(L))`` with
``A(L)`` the successors outside ``L`` and ``B(L)`` the predecessors of ``A(L)`` outside ``L``
(``A ∩ B`` counted twice, as the reference does).

Example::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph, approx_family, exact_family
    >>> g = DPGraph(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]),
    ...             src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]))   # a diamond
    >>> approx_family(g).num_sets, approx_family(g, dense=False).num_sets, exact_family(g).num_sets
    (5, 5, 6)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hgraph.common.errors import HGraphError
from hgraph.common.progress import current as current_progress
from planner.activation_graph import ActivationGraph
from planner.analyses.local_stats import local_stats
from planner.arrays import distinct, ranges, run_starts
from planner.bitsets import unpack
from planner.lower_sets import DEFAULT_MAX_LOWER_SETS, TooManyLowerSets
from planner.threads import map_ordered

__all__ = ["DEFAULT_MAX_LOWER_SETS", "DPGraph", "Family", "approx_family", "exact_family",
           "SUBSET_MATRIX_MAX_BYTES"]


#: Largest inclusion matrix :meth:`Family.subset_matrix` builds (GoogLeNet's fits well under
#: it; its size: bench/NOTES_scale.md).
SUBSET_MATRIX_MAX_BYTES = 512 * 2**20

_ONE = np.uint64(1)


class DPGraph(ActivationGraph):
    """An activation graph given by its arrays: ``m`` (memory in the DP's units), ``t``,
    edges ``src -> dst`` (deduplicated); node ``k`` stands for itself (variable and function
    ``k``). The planner's own graphs are :meth:`ActivationGraph.from_cg` and its units views
    (:meth:`~planner.activation_graph.ActivationGraph.with_ratio`); this constructor is for
    graphs that have no cg file behind them (tests, benches, the MILP's oracle)."""

    def __init__(self, m, t, src, dst):
        m = np.asarray(m, dtype=np.int64)
        n = int(m.shape[0])
        super().__init__(np.arange(n), np.arange(n), m, t, src, dst)


@dataclass
class Family:
    """Lower sets in DP order (id 0 is ∅, the last is V) with the quantities transitions read.

    Sets are dense bitsets (``sets``/``bnd``) or segment-local (``local``), never both.
    """

    kind: str
    size: np.ndarray        # int64 [L]: |L|
    mL: np.ndarray          # int64 [L]: m(L)
    tL: np.ndarray          # int64 [L]: t(L)
    t_bnd: np.ndarray       # int64 [L]: t(∂L)
    m_bnd: np.ndarray       # int64 [L]: m(∂L)
    mAB: np.ndarray         # int64 [L]: m(A(L)) + m(B(L))
    sets: np.ndarray | None = None   # uint64 [L, words]: the sets (dense)
    bnd: np.ndarray | None = None    # uint64 [L, words]: ∂L (dense)
    node: np.ndarray | None = None   # approx only: int64 [L], the v of L_v (-1 for ∅)
    local: object = None             # approx only: LocalStats behind segment-local sets
    covers: tuple | None = None      # exact only: (k, v, id of L_k ∪ {v}), every one-node step
    fell_back: bool = False
    left_out: bool = False  # approx only: mAB holds LocalStats.left_out too (approx_family)
    supersteps: int = 0     # engine supersteps its statistics took (approx; 0 when given)
    cache: dict = field(default_factory=dict, repr=False, compare=False)   # budget-free tables

    @property
    def num_sets(self) -> int:
        return int(self.size.size)

    def members(self, n: int) -> np.ndarray:
        """bool [n, L]: row v says which sets hold node v (node-major, for per-node gathers)."""
        if "members" not in self.cache:
            self.cache["members"] = np.ascontiguousarray(unpack(self.sets, n).T)
        return self.cache["members"]

    def subset_matrix(self) -> np.ndarray | None:
        """Packed bits [L, 8·⌈L/64⌉] (little bit order): bit i of row j iff ``L_i ⊆ L_j``.

        Built once per family and reused by every budget and strategy, so the DP reads the
        sources of a state as one row instead of testing every smaller set's bitset. Only for
        the size-ordered exact family, and only while the matrix stays under
        :data:`SUBSET_MATRIX_MAX_BYTES`; ``None`` otherwise (callers test bitsets instead).
        """
        if "subsets" not in self.cache:
            L = self.num_sets
            ok = self.kind == "exact" and L * ((L + 7) // 8) <= SUBSET_MATRIX_MAX_BYTES
            self.cache["subsets"] = (_subset_matrix(self.size, self.covers[0], self.covers[2])
                                     if ok else None)
        return self.cache["subsets"]


def _byte_tables(w: np.ndarray, words: int) -> np.ndarray:
    """[8·words, 256] int64: entry ``[p, x]`` = Σ ``w`` over the set bits of byte ``p`` = ``x``
    of a packed row (little bit order) — a weighted popcount by one lookup per byte."""
    wp = np.zeros(64 * words, np.int64)
    wp[:w.size] = w
    bits = (np.arange(256)[:, None] >> np.arange(8)) & 1              # [256, 8]
    return wp.reshape(-1, 8) @ bits.T


def _packed_sums(rows: np.ndarray, tab: np.ndarray) -> np.ndarray:
    """Exact row sums of a weight over packed uint64 rows (:func:`_byte_tables`)."""
    by = np.ascontiguousarray(rows).astype("<u8", copy=False).view(np.uint8)   # [R, 8·words]
    return tab[np.arange(by.shape[1]), by].sum(axis=1)


def _set_stats(g: DPGraph, sets: np.ndarray, chunk: int = 4096):
    """|L|, m(L), ∂L, t(∂L), m(∂L), m(A)+m(B) for every row of ``sets`` (vectorized in chunks,
    the chunks side by side on every core: :mod:`planner.threads`).

    The edge tests run node-major (an edge's endpoints are two row gathers, not two column
    gathers of a set-major matrix); few edges cross, so ``∂L``, ``A`` and ``B`` are kept as
    (set, node) lists — ``∂L`` ORed into its words — and every weighted sum reads packed rows
    a byte at a time (:func:`_byte_tables`) or adds the listed nodes: cnn29's 29,252 sets of
    1,411 nodes in a fifth of the time of set-major columns and integer matmuls."""
    L, W = sets.shape
    tab_m, tab_t = _byte_tables(g.m, W), _byte_tables(g.t, W)
    size = _packed_sums(sets, _byte_tables(np.ones(g.n, np.int64), W))
    mL, tL = _packed_sums(sets, tab_m), _packed_sums(sets, tab_t)
    parts = map_ordered(lambda lo: _edge_stats(g, sets[lo:lo + chunk]),
                        range(0, L if g.src.size else 0, chunk))
    bnd = np.vstack([b for b, _ in parts]) if parts else np.zeros_like(sets)
    mAB = np.concatenate([a for _, a in parts]) if parts else np.zeros(L, np.int64)
    m_bnd, t_bnd = _packed_sums(bnd, tab_m), _packed_sums(bnd, tab_t)
    return size, mL, tL, bnd, t_bnd, m_bnd, mAB


def _edge_stats(g: DPGraph, sets: np.ndarray):
    """``(∂L as words, m(A) + m(B))`` of each row of ``sets`` (one chunk of :func:`_set_stats`)."""
    n, R = g.n, sets.shape[0]
    bnd = np.zeros_like(sets)
    mAB = np.zeros(R, np.int64)
    xt = np.ascontiguousarray(unpack(sets, n).T)                  # [n, rows]: node-major
    e, r = np.nonzero(xt[g.src] & ~xt[g.dst])                     # edge leaves L
    key = distinct(r * n + g.src[e])                              # ∂L: (set, node) once
    rb, vb = key // n, key % n
    np.bitwise_or.at(bnd, (rb, vb >> 6), _ONE << (vb & 63).astype(np.uint64))
    a = np.zeros_like(xt)
    a[g.dst[e], r] = True
    key = distinct(r * n + g.dst[e])                              # A(L)
    e, r = np.nonzero(a[g.dst] & ~xt[g.src])                      # pred outside L of a node of A
    key2 = distinct(r * n + g.src[e])                             # B(L)
    for k in (key, key2):                                         # A ∩ B counted twice
        np.add.at(mAB, k // n, g.m[k % n])
    return bnd, mAB


def _subset_matrix(size: np.ndarray, low: np.ndarray, tgt: np.ndarray) -> np.ndarray:
    """Inclusion matrix of a family sorted by size from its covers ``low ⋖ tgt`` (``L_tgt =
    L_low ∪ {v}``): ``sub(L) = {L} ∪ ⋃ sub(L \\ {v})``. Rows are OR-reduced per set a size
    level at a time, so the whole matrix costs one pass over the covers (~|family| · width),
    not a test per pair. The covers are the ones :func:`exact_family` found while listing the
    sets (finding them again by row keys cost more than building the whole matrix)."""
    L = size.size
    sub = np.zeros((L, (L + 63) // 64), np.uint64)
    ids = np.arange(L)
    sub[ids, ids // 64] = _ONE << (ids % 64).astype(np.uint64)
    order = np.lexsort((low, tgt))
    low, tgt = low[order], tgt[order]
    bounds = np.flatnonzero(np.r_[True, size[1:] != size[:-1], True])
    cut = np.searchsorted(tgt, bounds)
    for a, i0, i1 in zip(bounds[1:-1].tolist(), cut[1:-1].tolist(), cut[2:].tolist()):
        if i1 > i0:
            t = tgt[i0:i1]
            starts = run_starts(t)
            w = (a + 63) // 64                                 # sources' bits all lie below a
            sub[t[starts], :w] |= np.bitwise_or.reduceat(sub[low[i0:i1], :w], starts, axis=0)
    return sub.astype("<u8", copy=False).view(np.uint8)


def approx_family(g: DPGraph, stats=None, dense: bool = True, opts=None,
                  left_out: bool = False, **engine) -> Family:
    """∅ plus every ``L_v``, numbered by (m(L), |L|, v) — the reference DP2 with a strict order.

    ``stats``: the engine's :class:`~planner.analyses.local_stats.LocalStats` (computed with
    ``opts``/``engine`` keywords when not given; the family's ``supersteps`` then says how
    many the engine ran). ``dense``: hold the sets as n-bit rows (the DP's one-bit subset
    test; n² bits) or segment-local (big graphs).

    ``left_out``: ``mAB`` also holds what the replay holds beyond the model's ``m(A) + m(B)``
    at a block ending at ``L_v`` (``LocalStats.left_out``: the parameters' and inputs'
    gradients already written, the values of ``A(L_v)`` whose backward reads its output).
    Both are functions of ``L_v`` alone, so the walks, segments and scans read them unchanged.
    Why: without them the first chain of a fit on the scale path replayed up to ~5 MB over
    the budget and the fit solved it again (bench/NOTES_scale.md, issue 37, seventh session).
    The solver asks for it on the scale path with a window or front cap, in bytes units, both
    strategies: the terms are what the replay holds, whatever the DP minimises, and a
    memory-centric chain is re-fitted by the same replay (on a 2,644-activation transformer
    at 30-70 % its chains recompute as little or less and peak lower). Not below
    :data:`planner.dp.scale.EXACT_LIMIT` (the DP's plans there stay the reference's), nor on
    the scale path with neither (whose plan is the dense DP's, tested), nor in the
    reference's units (its own accounting). Still left out:
    the gradients a block's own backward writes before the block's peak (a term of the step's
    source state, which ``mAB`` of its target cannot hold), so the fit's re-solve stays.
    """
    sinks = np.flatnonzero(np.bincount(g.src, minlength=g.n) == 0)
    if sinks.size != 1:
        raise HGraphError(f"the approximate DP needs a single sink (the loss); this graph has "
                          f"{sinks.size} nodes without successors")
    supersteps = 0
    if stats is None:
        with current_progress().stage("lower-set statistics (engine)"):
            stats = local_stats(g, opts=opts, **engine)
        supersteps = stats.supersteps
    z = np.zeros(1, np.int64)
    size, mL = np.r_[z, stats.size], np.r_[z, stats.mL]
    order = np.lexsort((np.arange(size.size), size, mL))
    cols = dict(size=size[order], mL=mL[order], tL=np.r_[z, stats.tL][order],
                t_bnd=np.r_[z, stats.t_bnd][order], m_bnd=np.r_[z, stats.m_bnd][order],
                mAB=np.r_[z, stats.mAB + stats.left_out if left_out else stats.mAB][order],
                node=np.arange(-1, g.n, dtype=np.int64)[order])
    if not dense:
        return Family("approx", local=stats, supersteps=supersteps, left_out=left_out, **cols)
    sets, bnd = stats.dense_sets()
    zw = np.zeros((1, sets.shape[1]), np.uint64)
    return Family("approx", sets=np.vstack([zw, sets])[order], bnd=np.vstack([zw, bnd])[order],
                  supersteps=supersteps, left_out=left_out, **cols)


def _lower_set_levels(g: DPGraph, limit: int):
    """Yield the lower sets of each size 0, 1, …, n as uint64 bitset matrices (rows sorted),
    each with the covers that made it: ``(parent, v, child)``, the parent's row in the level
    before, the node added and the child's row here (:func:`planner.dp.chain_bound` reads
    them: every state's one-node steps, at no extra pass).

    A child of ``L`` adds a node ``v ∉ L`` none of whose predecessors is outside ``L`` (``v``
    is *free* in ``L``). The free nodes are carried from parent to child: a child ``L ∪ {v}``
    has its parent's free nodes but ``v``, plus the successors of ``v`` whose predecessors
    all lie in it — one test of a packed predecessor mask per (cover, out-edge), where
    testing every edge against every set of a level cost several times more. The children's
    rows are then sorted word by word and deduplicated.
    """
    W = g.words
    n = g.n
    node_word = np.arange(n) // 64
    node_bit = _ONE << (np.arange(n) % 64).astype(np.uint64)
    succ_ptr, succ = g.succs_csr()
    preds = np.zeros((n, W), np.uint64)                        # packed predecessor masks
    np.bitwise_or.at(preds, (g.dst, node_word[g.src]), node_bit[g.src])
    level = np.zeros((1, W), np.uint64)
    free = np.zeros((1, W), np.uint64)                         # per row: its free nodes
    sources = np.flatnonzero(np.bincount(g.dst, minlength=n) == 0)
    np.bitwise_or.at(free[0], node_word[sources], node_bit[sources])
    covers = tuple(np.zeros(0, np.int64) for _ in range(3))
    total = 0
    while level.shape[0]:
        yield level, covers
        total += level.shape[0]
        if total > limit:
            return
        r, v = np.nonzero(unpack(free, n))                     # (row, free node) pairs
        if r.size == 0:
            return
        k = np.arange(r.size)
        child = level[r]
        child[k, node_word[v]] |= node_bit[v]
        cfree = free[r]
        cfree[k, node_word[v]] &= ~node_bit[v]
        cnt = succ_ptr[v + 1] - succ_ptr[v]                    # v's out-edges: newly free?
        ck = np.repeat(k, cnt)
        w = succ[ranges(succ_ptr[v], cnt)]
        ok = ~np.any(preds[w] & ~child[ck], axis=1)
        np.bitwise_or.at(cfree, (ck[ok], node_word[w[ok]]), node_bit[w[ok]])
        level, inverse = _unique_rows(child)
        free = np.empty_like(level)
        free[inverse] = cfree                                  # a set's free nodes: one value
        covers = (r, v, inverse)


def _unique_rows(rows: np.ndarray):
    """The distinct rows, sorted by word 0, then word 1, … (``np.unique(rows, axis=0)``'s
    order, without its structured-dtype round trip), and each input row's index among them."""
    order = np.lexsort(rows.T[::-1])
    rows = rows[order]
    keep = np.r_[True, np.any(rows[1:] != rows[:-1], axis=1)]
    inverse = np.empty(order.size, np.int64)
    inverse[order] = np.cumsum(keep) - 1
    return rows[keep], inverse


def exact_family(g: DPGraph, max_lower_sets: int = DEFAULT_MAX_LOWER_SETS,
                 fallback: bool = False, opts=None) -> Family:
    """Every lower set, numbered by size (DPfix). Past ``max_lower_sets``: an error, or the
    approximate family if ``fallback`` (built on the engine with ``opts``)."""
    levels, covers = [], []
    total = 0
    for level, (parent, v, child) in _lower_set_levels(g, max_lower_sets):
        levels.append(level)
        covers.append(np.stack([parent + total - (levels[-2].shape[0] if len(levels) > 1
                                                  else 0), v, child + total]))
        total += level.shape[0]
        if total > max_lower_sets:
            if fallback:
                fam = approx_family(g, opts=opts)
                fam.fell_back = True
                return fam
            raise TooManyLowerSets(
                f"exact DP: the graph has more than {max_lower_sets:,} lower sets "
                f"({g.n} nodes); raise the limit (--max-lower-sets / max_lower_sets), "
                f"pass --fallback (fallback=True) to use the approximate family instead, "
                f"or use the approximate solver (--solver approx)")
    sets = np.vstack(levels)            # levels come out by size already: the DPfix order
    size, mL, tL, bnd, t_bnd, m_bnd, mAB = _set_stats(g, sets)
    return Family("exact", size, mL, tL, t_bnd, m_bnd, mAB, sets=sets, bnd=bnd,
                  covers=tuple(np.concatenate(covers, axis=1)))
