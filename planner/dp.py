"""The recomputation DP of Kusumoto et al. (NeurIPS'19) over a family of lower sets.

A plan is a chain ``∅ = L0 ⊊ L1 ⊊ … ⊊ Lk = V`` of lower sets of the activation graph; block
``Vi = Li \\ L(i-1)`` keeps its new boundary nodes ``∂Li ∩ Vi`` (checkpoints) in the forward pass
and recomputes the rest before its backward pass. The DP (FORMAT.md §4.3) keeps, for every lower
set, the Pareto front of ``(saved, ckpt)`` — compute saved (to maximise) against checkpoint
memory (to minimise) — and relaxes every transition ``Li ⊊ Lj`` whose peak
``ckpt + 2·(m(Lj) − m(Li)) + m(A(Lj)) + m(B(Lj))`` fits the budget. Time-centric plans take the
front entry of V with the largest ``saved`` (least recomputation), memory-centric ones the smallest.

Why it matches the reference number for number although it runs in a different order: in the
reference a front entry ``(s, c)`` of state ``j``, once dominated, never comes back, so the
entry that survives at ``(s, c)`` is the *first* arrival with exactly that value, and arrivals
come in (source id, source saved) order — the peak sort only serves its ``break``. This module
computes each front in one vectorized step ("pull": all feasible sources of ``j`` at once) and
breaks ties the same way, by the smallest (source id, source saved).

Speed, approximate family (N + 1 sets): sources are filtered first by a per-source key
(``min ckpt − 2·m(L)``, the same test as the reference's ``break`` on the cheapest entry), then
by one membership bit, and only the feasible prefix of each source front is expanded
(``c + peak ≤ B``); everything is NumPy over arrays, one Python step per state.

Speed, exact family (every lower set; GoogLeNet: 27,358 sets, 121M inclusion pairs, where the
unpruned DP would expand ~10^10 entries). :class:`_ExactSearch` computes only what the
strategy's plan can depend on, and keeps the reference's plan and tie-breaks exactly:

* Time-centric: A*-style pruning by an admissible lower bound on the final recompute. The last
  block holds a sink, so all checkpoints together fit in ``cap0 = B − 2·m(sink)``; an entry
  ``(s, c)`` of ``L_j`` can therefore still save at most the fractional knapsack of the
  non-sink nodes outside ``L_j`` (value ``t``, weight ``m``, capacity ``cap0 − c``), so its
  plans recompute at least ``T − s − knapsack_j(cap0 − c)``. Entries above a bound ``g`` are
  dropped — before expansion too, per (source, target) pair at the source's best corner
  ``(s_max + dt, c_min + dm)``, which also cuts each source front to a suffix of large
  enough ``saved``. ``g`` starts at the root's bound and grows by 2, 4, 8, … until V is
  reached (on GoogLeNet the root bound is within ~13 of the optimum; failed passes are cheap).
* Memory-centric: the plan is V's least-ckpt entry (most saved among those). Feasibility
  reads only ``c`` and both quantities add along a chain, so one entry per state — the
  lexicographic minimum of ``(c, −saved)``, ties to the least source id — reproduces it
  with its predecessors; pairs are pruned by the approximate DP's ckpt (its chain is a
  chain of the exact family, so an upper bound) and by ``m(∂L_j) − m(∂L_i) ≤ dm ≤ m(∂L_j)``.
* Why pruning keeps the plan: a dropped entry's bound exceeds ``g`` ≥ the optimum, so it
  neither reaches the optimum nor weakly dominates an entry that does; every entry on the
  optimal chain, and every candidate with the same value (the first-arrival tie-break),
  survives with the same predecessor. ``tests/test_dp_conformance.py`` checks this against
  the unpruned DP on random DAGs.
* Work per pass: the inclusion matrix (``L_i ⊆ L_j`` as packed bits, built once per family
  from the cover relation and reused by every budget) gives a state's sources as one row; a
  whole size level of targets (sources lie in smaller levels) is handled at once, in
  chunks: pairs by ``nonzero``, ``dt``/``dm`` by 16-bit weighted-popcount tables on
  ``∂L_j ∩ L_i``, knapsack bounds by one ``searchsorted`` over all states' prefix sums, the
  per-(state, saved) minimum and per-state Pareto cut by segmented array operations.

Example::

    >>> from planner import cg
    >>> from planner.dp import solve
    >>> g = cg.read("../shared/graphs/cg_vgg19.txt")                     # doctest: +SKIP
    >>> r = solve(g, 0.6 * 4_004_508_676, family="approx", units="reference")  # doctest: +SKIP
    >>> r.status, r.model_recompute_cost, r.blocks                           # doctest: +SKIP
    ('OK', 18, 38)

Signature::

    solve(graph, budget, family="approx"|"exact", strategy="time"|"memory",
          units="bytes"|"reference", max_lower_sets=200_000, fallback=False) -> DPResult
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from hgraph.errors import HGraphError
from planner.dp_families import (DEFAULT_MAX_LOWER_SETS, DPGraph, Family, approx_family,
                                 exact_family)

FAMILIES = ("approx", "exact")
STRATEGIES = ("time", "memory")
UNITS = ("bytes", "reference")


@dataclass
class DPResult:
    """A solved (or impossible) DP. Memory fields are bytes (reference units × ``comp_ratio``)."""

    status: str                       # "OK" | "IMPOSSIBLE"
    family: str
    strategy: str
    units: str
    budget_bytes: int
    budget_units: int                 # the budget the DP compared against (scaled in reference units)
    comp_ratio: int                   # 1 in bytes units
    n_lower_sets: int
    forward_cost: int                 # T(V)
    chain: list = field(default_factory=list)   # [L0=∅, L1, …, Lk=V], each a sorted int array of nodes
    chain_ids: list = field(default_factory=list)
    blocks: int = 0
    saved: int = 0
    model_recompute_cost: int = 0
    model_peak_bytes: int = 0
    ckpt_bytes: int = 0
    fell_back: bool = False
    seconds: float = 0.0

    @property
    def impossible(self) -> bool:
        return self.status == "IMPOSSIBLE"

    def checkpoints(self) -> np.ndarray:
        """Nodes kept in the forward pass: ``∪ ∂Li ∩ Vi`` over the chain (sorted node indices)."""
        return self._checkpoints if hasattr(self, "_checkpoints") else np.zeros(0, np.int64)


def reference_ratio(budget: int, act_sum: int) -> tuple[int, int]:
    """The reference's 32-bit scaling (FORMAT.md §2.1): ``(comp_ratio, scaled budget)``."""
    b, ratio = int(budget), 1
    while b > 1e8:
        b //= 10
        ratio *= 10
    mem = int(act_sum) // ratio
    while mem > 1e8:
        mem //= 10
        b //= 10
        ratio *= 10
    return ratio, b


# ----------------------------------------------------------------------------- graph adapter
def _activation_arrays(graph):
    """(bytes, t, src, dst) of the activation graph (FORMAT.md §4.1) from what the caller has.

    Accepts a :class:`DPGraph`-like object with ``m``/``t``/``src``/``dst`` (bytes in ``m``), an
    object with ``m``, ``t`` and CSR ``pred_indptr``/``pred_indices`` (the activation graph), or
    a parsed ``cg`` graph (:func:`planner.cg.read`).
    """
    if hasattr(graph, "functions") and hasattr(graph, "var_bytes"):
        return _arrays_from_cg(graph)
    m = np.asarray(graph.m, dtype=np.int64)
    t = np.asarray(graph.t, dtype=np.int64)
    if hasattr(graph, "src") and hasattr(graph, "dst"):
        return m, t, np.asarray(graph.src, np.int64), np.asarray(graph.dst, np.int64)
    for ip, ix in (("pred_indptr", "pred_indices"), ("preds_indptr", "preds_indices")):
        if hasattr(graph, ip):
            indptr = np.asarray(getattr(graph, ip), np.int64)
            dst = np.repeat(np.arange(m.size), np.diff(indptr))
            return m, t, np.asarray(getattr(graph, ix), np.int64), dst
    raise TypeError(f"cannot read an activation graph from {type(graph).__name__}")


def _arrays_from_cg(g):
    forward = [f for f in g.functions if f.direction == "forward"]
    out_var = np.array([f.outputs[0] for f in forward], dtype=np.int64)
    acts = np.sort(out_var)
    node_of = np.full(len(g.var_bytes), -1, dtype=np.int64)
    node_of[acts] = np.arange(acts.size)
    bytes_ = np.asarray(g.var_bytes, dtype=np.int64)[acts]
    t = np.ones(acts.size, dtype=np.int64)
    src, dst = [], []
    for f in forward:
        v = node_of[f.outputs[0]]
        if f.type.startswith("Conv"):
            t[v] = 10
        ins = np.array([a for a, _tag in f.inputs], dtype=np.int64)
        ins = node_of[ins] if ins.size else ins
        ins = ins[ins >= 0]
        src.append(ins)
        dst.append(np.full(ins.size, v))
    return bytes_, t, np.concatenate(src), np.concatenate(dst)


# ----------------------------------------------------------------------------- the DP
@dataclass
class _Fronts:
    """All Pareto fronts, appended state by state; entry order = (state id, saved) order.

    Within a state both ``saved`` and ``ckpt`` ascend, so ``glob`` (state · span + ckpt) and
    ``glob_s`` (state · span_s + saved) are globally sorted: one ``searchsorted`` finds, for
    many sources at once, where their feasible prefix ends or their useful suffix starts.
    """

    s: np.ndarray
    c: np.ndarray
    pred: np.ndarray
    state: np.ndarray
    ptr: np.ndarray
    glob: np.ndarray          # state · span + c: globally sorted, for a ragged searchsorted
    glob_s: np.ndarray        # state · span_s + s: likewise (only when span_s is set)
    span: int = 1
    span_s: int = 0
    size: int = 0

    @classmethod
    def empty(cls, n_states: int, capacity: int = 1 << 16):
        z = lambda: np.zeros(capacity, np.int64)  # noqa: E731
        return cls(z(), z(), z(), z(), np.zeros(n_states + 1, np.int64), z(), z())

    def _reserve(self, k: int) -> None:
        """Room for ``k`` more entries (capacity doubles, so appends are amortised O(1))."""
        if self.size + k > self.s.size:
            cap = max(2 * self.s.size, self.size + k)
            for name in ("s", "c", "pred", "state", "glob", "glob_s"):
                arr = getattr(self, name)
                new = np.zeros(cap, np.int64)
                new[:self.size] = arr[:self.size]
                setattr(self, name, new)

    def append(self, j: int, s, c, pred):
        k = np.size(s)
        self._reserve(k)
        sl = slice(self.size, self.size + k)
        self.s[sl], self.c[sl], self.pred[sl], self.state[sl] = s, c, pred, j
        self.glob[sl] = j * self.span + c
        if self.span_s:
            self.glob_s[sl] = j * self.span_s + s
        self.size += k
        self.ptr[j + 1] = self.size

    def extend(self, states, s, c, pred):
        """Append entries of several states at once (sorted by state, then saved).

        Returns the first and last index (within the call) of each state's run.
        """
        k = states.size
        self._reserve(k)
        sl = slice(self.size, self.size + k)
        self.s[sl], self.c[sl], self.pred[sl], self.state[sl] = s, c, pred, states
        self.glob[sl] = states * self.span + c
        if self.span_s:
            self.glob_s[sl] = states * self.span_s + s
        first = np.flatnonzero(np.r_[True, states[1:] != states[:-1]])
        last = np.r_[first[1:], k] - 1
        self.ptr[states[first] + 1] = self.size + last + 1
        self.size += k
        return first, last


def _bit_nodes(row: np.ndarray) -> np.ndarray:
    bits = np.unpackbits(row.astype("<u8").view(np.uint8), bitorder="little")
    return np.flatnonzero(bits)


def _best_per_saved(ns, nc, e):
    """For each distinct ``ns``: the least ``nc``, ties to the least entry ``e`` (first arrival).

    Returns the winners sorted by ``ns``. Dense buckets over the ``ns`` range when it is
    narrow and the input large (saved values are bounded by T(V)), a lexsort otherwise; both
    give the same winners.
    """
    lo, hi = int(ns.min()), int(ns.max())
    width = hi - lo + 1
    if ns.size <= 4096 or width > 4 * ns.size + 1024:
        order = np.lexsort((e, nc, ns))
        ns, nc, e = ns[order], nc[order], e[order]
        first = np.r_[True, ns[1:] != ns[:-1]]
        return ns[first], nc[first], e[first]
    INF = np.iinfo(np.int64).max
    k = ns - lo
    best = np.full(width, INF, np.int64)
    np.minimum.at(best, k, nc)
    win = nc == best[k]
    beste = np.full(width, INF, np.int64)
    np.minimum.at(beste, k[win], e[win])
    present = np.flatnonzero(best < INF)
    return present + lo, best[present], beste[present]


def expand_fronts(fronts: _Fronts, starts, cnt, dt, dm):
    """Every candidate of one target: ``cnt[k]`` front entries of source k from ``starts[k]``,
    each shifted by that transition's ``(dt[k], dm[k])``; returns (entry ids, saved, ckpt)."""
    total = int(cnt.sum())
    e = np.repeat(starts - np.cumsum(cnt) + cnt, cnt) + np.arange(total)
    return e, fronts.s[e] + np.repeat(dt, cnt), fronts.c[e] + np.repeat(dm, cnt)


def run_dp(fam: Family, t: np.ndarray, m: np.ndarray, budget: int,
           max_recompute: int | None = None, max_ckpt: int | None = None) -> _Fronts:
    """Pareto fronts of every state of ``fam`` under ``budget`` (all quantities in DP units).

    ``max_recompute`` / ``max_ckpt`` drop front entries whose recompute so far
    (``t(L) − saved``) or checkpoint memory exceeds the bound. Both only grow along a chain, so
    when the bound is at least the optimum's value, every entry of every optimal chain — and its
    first-arrival predecessor — survives: the pruned DP returns the same plan (see ``solve``).
    """
    L = fam.num_sets
    fronts = _Fronts.empty(L)
    span = int(m.sum()) + 1
    use_offset = span * L < (1 << 62)
    fronts.span = span if use_offset else 0
    fronts.append(0, np.zeros(1, np.int64), np.zeros(1, np.int64), np.full(1, -1, np.int64))
    INF = np.iinfo(np.int64).max // 4
    key = np.full(L, INF, dtype=np.int64)          # min ckpt − 2·m(L), for the break test
    key[0] = 0 - 2 * int(fam.mL[0])
    sets = fam.sets
    if fam.kind == "exact":
        end_of = np.searchsorted(fam.size, fam.size, side="left")   # sources: strictly smaller
    else:
        end_of = np.arange(L)
    two_mL = 2 * fam.mL
    # approx family: ids ascend with m(L) and L_i ⊆ L_j ⟺ v_i ∈ L_j — scan only the window
    # of sources whose m(L) can fit (the peak break), test one bit per source
    node = fam.node if fam.kind == "approx" and fam.node is not None else None
    for j in range(1, L):
        thr = budget - int(two_mL[j]) - int(fam.mAB[j])
        end = int(end_of[j])
        lo = 0
        if node is not None:                 # key_i ≥ −2·m(L_i): sources below cannot fit
            lo = int(np.searchsorted(two_mL, -thr, side="left"))
        src = lo + np.flatnonzero(key[lo:end] <= thr)
        if src.size == 0:
            fronts.ptr[j + 1] = fronts.size
            continue
        if node is not None:
            v = node[src]
            sub = v < 0
            vv = v[~sub]
            sub[~sub] = ((sets[j][vv // 64] >> (vv % 64).astype(np.uint64)) & np.uint64(1)) == 1
        else:
            sub = np.all((sets[src] & ~sets[j]) == 0, axis=1)
        src = src[sub]
        if src.size == 0:
            fronts.ptr[j + 1] = fronts.size
            continue
        # dt, dm: ∂Lj minus the part already inside Li (∂Lj ∩ Li = ∂Lj ∩ ∂Li)
        bn = _bit_nodes(fam.bnd[j])
        if bn.size:
            member = (sets[src[:, None], (bn // 64)[None, :]]
                      >> (bn % 64).astype(np.uint64)) & np.uint64(1)
            member = member.astype(np.int64)
            dt = fam.t_bnd[j] - member @ t[bn]
            dm = fam.m_bnd[j] - member @ m[bn]
        else:
            dt = np.zeros(src.size, np.int64)
            dm = np.zeros(src.size, np.int64)
        room = thr + two_mL[src]                      # c must satisfy c ≤ B − peak
        starts = fronts.ptr[src]
        stops = fronts.ptr[src + 1]
        if use_offset:
            stops = np.minimum(stops, np.searchsorted(fronts.glob[:fronts.size], src * span + room,
                                                      side="right"))
        cnt = stops - starts
        keep = cnt > 0
        if not keep.all():
            src, starts, cnt, dt, dm = src[keep], starts[keep], cnt[keep], dt[keep], dm[keep]
        total = int(cnt.sum())
        if total == 0:
            fronts.ptr[j + 1] = fronts.size
            continue
        e, ns, nc = expand_fronts(fronts, starts, cnt, dt, dm)
        if not use_offset:
            ok = nc - np.repeat(dm, cnt) <= np.repeat(room, cnt)
            e, ns, nc = e[ok], ns[ok], nc[ok]
            if e.size == 0:
                fronts.ptr[j + 1] = fronts.size
                continue
        if max_recompute is not None or max_ckpt is not None:
            ok = np.ones(ns.size, bool)
            if max_recompute is not None:
                ok &= ns >= int(fam.tL[j]) - max_recompute
            if max_ckpt is not None:
                ok &= nc <= max_ckpt
            if not ok.all():
                ns, nc, e = ns[ok], nc[ok], e[ok]
                if ns.size == 0:
                    fronts.ptr[j + 1] = fronts.size
                    continue
        ns, nc, e = _best_per_saved(ns, nc, e)
        # Pareto: keep an entry only if every larger-saved entry costs strictly more
        later_min = np.r_[np.minimum.accumulate(nc[::-1])[::-1][1:], INF]
        pareto = nc < later_min
        fronts.append(j, ns[pareto], nc[pareto], e[pareto])
        key[j] = int(nc[pareto].min()) - int(two_mL[j])
    return fronts


# ----------------------------------------------------------------------------- exact family search
_INF = np.iinfo(np.int64).max // 4


def _ratio_order(m: np.ndarray, t: np.ndarray, items: np.ndarray) -> np.ndarray:
    """``items`` by ``t/m`` descending, exactly (``m = 0`` first): the fractional-knapsack order.

    Exact rationals, not floats: a misordered pair would make the bound inadmissible.
    """
    def key(v):
        return (0, 0) if m[v] == 0 else (1, -Fraction(int(t[v]), int(m[v])))
    return np.array(sorted(items.tolist(), key=key), dtype=np.int64)


#: Per-state knapsack tables (two int64 [L, items] arrays) up to this many cells; past it
#: the bound uses one table over all nodes, capped by the compute outside the set.
KNAPSACK_TABLE_MAX_CELLS = 1 << 23


def _chunk_bits(words: int) -> int:
    """Chunk width of the weighted-popcount tables: 16 bits while they stay small, else 8."""
    return 16 if words <= 8 else 8


def _bit_weights(n: int, w: np.ndarray, words: int) -> np.ndarray:
    """[64·words / k, 2^k] tables (``k`` = :func:`_chunk_bits`): entry ``[p, x]`` = Σ ``w``
    over the set bits of chunk ``p`` = ``x`` of a bitset row — a weighted popcount by one
    lookup per chunk."""
    k = _chunk_bits(words)
    tab = np.zeros((64 * words // k, 1 << k), np.int64)
    x = np.arange(1 << k)
    for v in range(n):
        tab[v // k] += w[v] * ((x >> (v % k)) & 1)
    return tab


def _nonzero2(mask: np.ndarray):
    """``np.nonzero`` of a 2-D mask, by one flat scan (2–3× faster than the 2-D form)."""
    flat = np.flatnonzero(mask)
    return np.divmod(flat, mask.shape[1])


def _segment_pareto(seg: np.ndarray, ns: np.ndarray, nc: np.ndarray) -> np.ndarray:
    """Pareto mask over entries sorted by (seg, ns): keep if every later entry of the segment
    costs strictly more. One suffix minimum over all segments: each segment's costs are
    lifted above every later segment's (ranks of ``nc`` plus ``seg``·(#ranks + 1))."""
    _, rank = np.unique(nc, return_inverse=True)
    v = rank.astype(np.int64) + (seg - seg[0]) * (int(rank.max()) + 2)
    later = np.r_[np.minimum.accumulate(v[::-1])[::-1][1:], _INF]
    return v < later


class _ExactSearch:
    """The exact family's DP at one budget, searched with admissible bounds (module docstring).

    States are processed a size level at a time (sources of a set are smaller sets, so a
    level's fronts depend only on earlier levels), in chunks of targets, every step one NumPy
    operation over all (source, target) pairs or candidate entries of the chunk. It holds
    what every pass reads: the family's inclusion matrix, weighted-popcount tables for
    ``dt``/``dm`` and, per state, the cumulative tables of the checkpoint knapsack.
    """

    def __init__(self, fam: Family, g: DPGraph, budget: int, cells: int = 1 << 22):
        self.fam, self.B, self.cells = fam, int(budget), cells
        self.T = int(g.t.sum())
        self.L = fam.num_sets
        self.end = self.L - 1
        self.two_mL = 2 * fam.mL
        self.thr = self.B - self.two_mL - fam.mAB           # c_i − 2·m(L_i) ≤ thr_j: feasible
        self.sub = fam.subset_matrix()
        self.span = int(g.m.sum()) + 1                      # > any ckpt
        has_succ = np.zeros(g.n, bool)
        has_succ[g.src] = True
        sinks = np.flatnonzero(~has_succ)
        # c_final + 2·m(last block) ≤ B, and the last block holds a sink: room for checkpoints
        self.cap0 = self.B - 2 * int(g.m[sinks].min()) if sinks.size else self.B
        tables = self._tables(fam, g, has_succ)
        self.tab_t, self.tab_m = tables["tab_t"], tables["tab_m"]
        self.k_m, self.k_t, self.k_div = tables["k_m"], tables["k_t"], tables["k_div"]
        self.cm, self.ct, self.flat_cm = tables["cm"], tables["ct"], tables["flat_cm"]
        self.ks0 = self.knapsack(np.arange(self.L), np.full(self.L, max(self.cap0, 0)))
        self.levels = np.flatnonzero(np.r_[True, fam.size[1:] != fam.size[:-1], True])

    # --------------------------------------------------------------- per-state quantities
    def _tables(self, fam: Family, g: DPGraph, has_succ: np.ndarray) -> dict:
        """Budget-free tables, kept on the family for the next budget (same ``m`` and ``t``):
        weighted-popcount tables, and per state the prefix sums of ``m`` and ``t`` over
        the checkpointable nodes outside it in exact ``t/m`` order (plus one flat sorted copy
        of the ``m`` sums for pair lookups)."""
        key = (g.m.tobytes(), g.t.tobytes(), has_succ.tobytes())
        cached = fam.cache.get("search_tables")
        if cached is not None and cached["key"] == key:
            return cached
        words = fam.sets.shape[1]
        order = _ratio_order(g.m, g.t, np.flatnonzero(has_succ))
        k_m, k_t = g.m[order], g.t[order]
        if self.L * max(order.size, 1) <= KNAPSACK_TABLE_MAX_CELLS:
            outside = ~fam.members(g.n)[order].T            # [L, items]
        else:                                               # one row: every item counts
            outside = np.ones((1, order.size), bool)
        z = np.zeros((outside.shape[0], 1), np.int64)
        cm = np.hstack([z, np.cumsum(outside * k_m, axis=1)])
        ct = np.hstack([z, np.cumsum(outside * k_t, axis=1)])
        flat_cm = None
        if cm.shape[0] * self.span < (1 << 62):             # row·span + cm: globally sorted
            flat_cm = (np.arange(cm.shape[0])[:, None] * self.span + cm[:, 1:]).ravel()
        tables = dict(key=key, tab_t=_bit_weights(g.n, g.t, words),
                      tab_m=_bit_weights(g.n, g.m, words), k_m=k_m, k_t=k_t,
                      k_div=np.maximum(k_m, 1), cm=cm, ct=ct, flat_cm=flat_cm)
        fam.cache["search_tables"] = tables
        return tables

    def knapsack(self, states: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """Most ``t`` that checkpoints of total ``m ≤ cap`` (≥ 0) outside ``L_state`` can hold.

        The fractional knapsack (greedy by ``t/m``), floored: an upper bound on the compute a
        completion from that state can still save with ``cap`` memory left, per pair.
        """
        N = self.k_m.size
        if N == 0:
            return np.zeros(states.size, np.int64)
        per_state = self.cm.shape[0] == self.L
        rows = states if per_state else np.zeros_like(states)
        cap = np.minimum(cap, self.span - 1)               # past m(V) nothing more fits
        if self.flat_cm is not None:
            k = np.searchsorted(self.flat_cm, rows * self.span + cap, side="right") - rows * N
        else:                                              # row·span would overflow: per row
            k = np.empty(rows.size, np.int64)
            for r in np.unique(rows):
                at = rows == r
                k[at] = np.searchsorted(self.cm[r, 1:], cap[at], side="right")
        kk = np.minimum(k, N - 1)
        frac = (cap - self.cm[rows, k]) * self.k_t[kk] // self.k_div[kk]
        best = self.ct[rows, k] + np.where(k < N, frac, 0)
        if not per_state:                                  # nothing inside L can be saved again
            best = np.minimum(best, self.T - self.fam.tL[states])
        return best

    def deltas(self, tgt: np.ndarray, src: np.ndarray):
        """``(dt, dm)`` of each pair ``L_src → L_tgt``: ``t``, ``m`` of ``∂L_tgt \\ L_src``."""
        bits = _chunk_bits(self.fam.sets.shape[1])
        per_word, mask = 64 // bits, np.uint64((1 << bits) - 1)
        bnd, sets = self.fam.bnd, self.fam.sets
        dt = self.fam.t_bnd[tgt]
        dm = self.fam.m_bnd[tgt]
        for w in range(sets.shape[1]):
            word = bnd[tgt, w] & sets[src, w]               # ∂L_j ∩ L_i, one word
            nz = np.flatnonzero(word)
            if nz.size == 0:
                continue
            word = word[nz]
            for k in range(per_word):
                x = ((word >> np.uint64(k * bits)) & mask).astype(np.intp)
                dt[nz] -= self.tab_t[w * per_word + k, x]
                dm[nz] -= self.tab_m[w * per_word + k, x]
        return dt, dm

    def chunks(self, keyc: np.ndarray, smax: np.ndarray | None = None,
               need: np.ndarray | None = None):
        """Yield ``(lo, tgt, src)`` per chunk of targets: every candidate (target, source) pair.

        A source ``i`` of ``j`` is a proper subset whose cheapest entry passes the peak test
        (``keyc[i] ≤ thr[j]``) and, when given, whose largest ``saved`` reaches ``need[j]``.
        Sources lie in smaller size levels, so a level's targets are filtered together (in
        chunks of at most ``cells`` pairs), over the live sources only.
        """
        for a, b in zip(self.levels[1:-1], self.levels[2:]):
            a, b = int(a), int(b)
            live = np.flatnonzero(keyc[:a] < _INF)
            if live.size == 0:
                continue
            step = max(1, self.cells // live.size)
            for lo in range(a, b, step):
                hi = min(b, lo + step)
                ok = keyc[None, live] <= self.thr[lo:hi, None]
                if need is not None:
                    ok &= smax[None, live] >= need[lo:hi, None]
                r, c = self._subsets(lo, hi, live, ok)
                if r.size:
                    yield lo, lo + r, live[c]

    def _subsets(self, lo: int, hi: int, live: np.ndarray, ok: np.ndarray):
        """(row, column) of ``ok`` [hi−lo, live] where ``L_live ⊆ L_(lo+row)``."""
        if self.sub is not None:
            if live.size * 4 >= live[-1] + 1:              # dense: unpack the whole prefix
                n = int(live[-1]) + 1
                rows = np.unpackbits(self.sub[lo:hi, :(n + 7) // 8], axis=1, count=n,
                                     bitorder="little").view(bool)
                if live.size < n:
                    rows = rows[:, live]
            else:
                rows = ((self.sub[lo:hi][:, live >> 3] >> (live & 7).astype(np.uint8)) & 1)
                rows = rows.view(bool)
            return _nonzero2(rows & ok)
        r, c = _nonzero2(ok)
        sets = self.fam.sets
        sub = np.all((sets[live[c]] & ~sets[lo + r]) == 0, axis=1)
        return r[sub], c[sub]

    @staticmethod
    def _store(fronts: _Fronts, st, ns, nc, pred, keyc, smax, cmin, two_mL):
        """Append a chunk's fronts (sorted by state, saved) and their per-state summaries."""
        first, last = fronts.extend(st, ns, nc, pred)
        s0 = st[first]
        cmin[s0], smax[s0] = nc[first], ns[last]
        keyc[s0] = nc[first] - two_mL[s0]

    # --------------------------------------------------------------- time-centric
    def lower_bound_root(self) -> int:
        """Least recompute any plan can have: ``T − knapsack(∅, cap0)``."""
        return self.T if self.cap0 < 0 else self.T - int(self.ks0[0])

    def _s_floor(self, tgt: np.ndarray, bound: int, nc: np.ndarray) -> np.ndarray:
        """Least ``saved`` an entry of ``L_tgt`` with ckpt ``nc`` needs for its bound to fit
        (``T + 1``: none does): ``T − bound − knapsack(tgt, cap0 − nc)``, ``T − bound`` at V."""
        cap = self.cap0 - nc
        out = np.where(cap >= 0, self.T - bound - self.knapsack(tgt, np.maximum(cap, 0)),
                       self.T + 1)
        return np.where(tgt == self.end, self.T - bound, out)

    def pareto(self, bound: int) -> _Fronts:
        """The DP's fronts, keeping only entries whose recompute lower bound is ≤ ``bound``.

        An entry ``(s, c)`` of ``L_j`` can finish with at most ``knapsack(j, cap0 − c)``
        more compute saved, so its plans recompute at least
        ``lb = T − s − knapsack(j, cap0 − c)`` (``T − s`` at V). Before expanding a source's
        front the same bound, taken at the source's best corner ``(s_max + dt, c_min + dm)``,
        drops whole pairs and cuts the front to the suffix of large enough ``saved``; the
        feasible prefix (``c ≤ room``) is cut as in :func:`run_dp`.
        """
        L, T, end = self.L, self.T, self.end
        fronts = _Fronts.empty(L)
        fronts.span, fronts.span_s = self.span, T + 2
        fronts.append(0, np.zeros(1, np.int64), np.zeros(1, np.int64), np.full(1, -1, np.int64))
        keyc = np.full(L, _INF, np.int64)                # c_min − 2·m(L): the peak test
        smax = np.full(L, -_INF, np.int64)
        cmin = np.zeros(L, np.int64)
        keyc[0], smax[0] = -int(self.two_mL[0]), 0
        need = T - bound - self.fam.t_bnd - self.ks0    # s_max + dt + knapsack ≥ T − bound
        need[end] = T - bound
        if self.cap0 < 0:
            need[:end] = _INF                           # no checkpoint fits: only ∅ → V
        for lo, tgt, src in self.chunks(keyc, smax, need):
            out = self._pareto_chunk(lo, tgt, src, bound, fronts, smax, cmin)
            if out is not None:
                self._store(fronts, *out, keyc, smax, cmin, self.two_mL)
        fronts.ptr = np.maximum.accumulate(fronts.ptr)  # empty fronts: ptr[j+1] = ptr[j]
        return fronts

    def _pareto_chunk(self, lo, tgt, src, bound, fronts, smax, cmin):
        """Bounded fronts of a chunk's targets from its pairs: (state, ns, nc, pred) or None."""
        dt, dm = self.deltas(tgt, src)
        s_lo = self._s_floor(tgt, bound, cmin[src] + dm)    # at the source's best corner
        keep = smax[src] + dt >= s_lo
        if not keep.any():
            return None
        tgt, src, dt, dm, s_lo = tgt[keep], src[keep], dt[keep], dm[keep], s_lo[keep]
        room = self.thr[tgt] + self.two_mL[src]
        size = fronts.size
        starts = np.searchsorted(fronts.glob_s[:size], src * fronts.span_s
                                 + np.clip(s_lo - dt, 0, self.T + 1), side="left")
        stops = np.searchsorted(fronts.glob[:size], src * fronts.span
                                + np.clip(room, -1, self.span - 1), side="right")
        cnt = np.maximum(stops - starts, 0)
        total = int(cnt.sum())
        if total == 0:
            return None
        e = np.repeat(starts - np.cumsum(cnt) + cnt, cnt) + np.arange(total)
        pair = np.repeat(np.arange(cnt.size), cnt)
        ns = fronts.s[e] + dt[pair]
        nc = fronts.c[e] + dm[pair]
        st = tgt[pair]
        ok = ns >= self._s_floor(st, bound, nc)
        if not ok.any():
            return None
        width = self.T + 2                              # (state, saved) as one key
        key, nc, e = _best_per_saved((st[ok] - lo) * width + ns[ok], nc[ok], e[ok])
        st, ns = lo + key // width, key % width
        keep = _segment_pareto(st, ns, nc)
        return st[keep], ns[keep], nc[keep], e[keep]

    def time_fronts(self) -> _Fronts:
        """Iterative deepening on the recompute bound from the root's lower bound.

        Each pass is exact once its bound is at least the optimum (it reaches V); the bound
        grows by 2, 4, 8, … so the passes that fail cost less than the one that succeeds. A
        pass at ``bound ≥ T`` prunes nothing a plan could use: empty V there is IMPOSSIBLE.
        """
        bound, step = self.lower_bound_root(), 2
        while True:
            fronts = self.pareto(min(bound, self.T))
            if _has_end(fronts) or bound >= self.T:
                return fronts
            bound, step = bound + step, 2 * step

    # --------------------------------------------------------------- memory-centric
    def lexmin(self, cbound: int = _INF) -> _Fronts:
        """Memory-centric fronts reduced to one entry per state: least ckpt, then most saved.

        Feasibility reads only ``c`` and both ``c`` and ``saved`` add along a chain, so the
        lexicographic minimum of ``(c, −saved)`` at a state extends to the lexicographic
        minimum at V — which is the front entry the memory-centric plan takes. Every
        candidate with that value comes from its source's own minimum, so breaking ties by the
        smallest source id gives the full DP's predecessor (first arrival) too. Entries above
        ``cbound`` (at least the optimum's ckpt) are dropped: ckpt only grows.
        """
        L = self.L
        fronts = _Fronts.empty(L)
        fronts.span = self.span
        fronts.append(0, np.zeros(1, np.int64), np.zeros(1, np.int64), np.full(1, -1, np.int64))
        keyc = np.full(L, _INF, np.int64)
        smax = np.full(L, -_INF, np.int64)
        cmin = np.zeros(L, np.int64)
        entry = np.full(L, -1, np.int64)
        keyc[0], smax[0], entry[0] = -int(self.two_mL[0]), 0, 0
        for _lo, tgt, src in self.chunks(keyc):
            tgt, src = self._lexmin_candidates(tgt, src, cmin, cbound)
            if tgt.size == 0:
                continue
            dt, dm = self.deltas(tgt, src)
            nc = cmin[src] + dm
            ok = nc <= cbound
            if not ok.any():
                continue
            tgt, src, nc, ns = tgt[ok], src[ok], nc[ok], smax[src[ok]] + dt[ok]
            first = self._lexmin_pick(tgt, nc, ns)
            st = tgt[first]
            entry[st] = fronts.size + np.arange(st.size)
            self._store(fronts, st, ns[first], nc[first], entry[src[first]], keyc, smax, cmin,
                        self.two_mL)
        fronts.ptr = np.maximum.accumulate(fronts.ptr)
        return fronts

    def _lexmin_candidates(self, tgt, src, cmin, cbound):
        """Pairs that may hold their target's least ``c + dm``, before computing ``dm``.

        ``∂L_j ∩ L_i ⊆ ∂L_i``, so ``m(∂L_j) − m(∂L_i) ≤ dm ≤ m(∂L_j)``: a pair whose lower
        end exceeds ``cbound`` or another pair's upper end (same target) cannot win, nor tie.
        """
        m_bnd = self.fam.m_bnd
        hi = cmin[src] + m_bnd[tgt]
        lo = hi - np.minimum(m_bnd[src], m_bnd[tgt])
        starts = np.flatnonzero(np.r_[True, tgt[1:] != tgt[:-1]])
        seg = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, tgt.size]))
        ok = (lo <= cbound) & (lo <= np.minimum.reduceat(hi, starts)[seg])
        return tgt[ok], src[ok]

    @staticmethod
    def _lexmin_pick(tgt, nc, ns):
        """Per run of equal ``tgt`` (ascending; sources ascending within): the index of the
        least ``nc``, then the largest ``ns``, then the first (least source id)."""
        starts = np.flatnonzero(np.r_[True, tgt[1:] != tgt[:-1]])
        seg = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, tgt.size]))
        best = nc == np.minimum.reduceat(nc, starts)[seg]
        s = np.where(best, ns, -_INF)
        best &= s == np.maximum.reduceat(s, starts)[seg]
        idx = np.flatnonzero(best)
        return idx[np.r_[True, tgt[idx][1:] != tgt[idx][:-1]]]

    def memory_fronts(self, upper: int | None = None) -> _Fronts:
        """:meth:`lexmin` pruned at ``upper`` (a feasible plan's ckpt), unpruned if that fails."""
        if upper is not None:
            fronts = self.lexmin(upper)
            if _has_end(fronts):
                return fronts
        return self.lexmin()


def solve(graph, budget, family: str = "approx", strategy: str = "time", units: str = "bytes",
          max_lower_sets: int = DEFAULT_MAX_LOWER_SETS, fallback: bool = False) -> DPResult:
    """Plan recomputation for ``graph`` under ``budget`` bytes; see the module docstring."""
    if family not in FAMILIES:
        raise HGraphError(f"unknown DP family {family!r}; expected one of {', '.join(FAMILIES)}")
    if strategy not in STRATEGIES:
        raise HGraphError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if units not in UNITS:
        raise HGraphError(f"unknown units {units!r}; expected one of {', '.join(UNITS)}")
    budget = int(budget)
    if budget < 0:
        raise HGraphError(f"budget must be non-negative, got {budget}")
    t0 = time.perf_counter()
    bytes_, t, src, dst = _activation_arrays(graph)
    if units == "reference":
        ratio, b_units = reference_ratio(budget, int(bytes_.sum()))
        m = bytes_ // ratio
    else:
        ratio, b_units, m = 1, budget, bytes_
        if int(bytes_.sum()) * 4 >= (1 << 62):
            raise HGraphError("graph too large for 64-bit byte accounting")
    g = DPGraph(m=m, t=t, src=src, dst=dst)
    if family == "exact":
        fam = exact_family(g, max_lower_sets=max_lower_sets, fallback=fallback)
    else:
        fam = approx_family(g)
    return _solve_family(fam, g, budget, b_units, ratio, strategy, units, t0)


def solve_family(fam: Family, g: DPGraph, budget_units: int, strategy: str = "time",
                 comp_ratio: int = 1, units: str = "bytes") -> DPResult:
    """Run the DP on a prebuilt family (reuse one family across budgets)."""
    return _solve_family(fam, g, int(budget_units) * comp_ratio, int(budget_units), comp_ratio,
                         strategy, units, time.perf_counter())


def _has_end(fronts: _Fronts) -> bool:
    end = fronts.ptr.size - 2
    return bool(fronts.ptr[end + 1] > fronts.ptr[end])


def bounded_fronts(fam: Family, g: DPGraph, b_units: int, strategy: str) -> _Fronts:
    """The DP's fronts, as far as the chosen strategy's plan needs them (module docstring).

    The exact family is searched by :class:`_ExactSearch` (knapsack-bounded fronts for
    time-centric plans, one entry per state for memory-centric ones); the approximate family
    runs the pull DP, bounded by :func:`_objective_bounded` when it is big.
    """
    if fam.kind == "exact":
        search = _ExactSearch(fam, g, b_units)
        if strategy == "time":
            return search.time_fronts()
        return search.memory_fronts(_approx_memory_upper(g, b_units))
    if fam.num_sets <= 4096:
        return run_dp(fam, g.t, g.m, b_units)
    return _objective_bounded(fam, g, b_units, strategy)


def _approx_memory_upper(g: DPGraph, b_units: int) -> int | None:
    """The approximate DP's memory-centric ckpt: a feasible exact-family plan's, so an upper
    bound on the exact optimum (``L_v`` sets are lower sets). ``None`` when it has no plan."""
    try:
        fam = approx_family(g)
    except HGraphError:                    # several sinks: no approximate family
        return None
    fronts = run_dp(fam, g.t, g.m, b_units)
    end = fam.num_sets - 1
    lo, hi = fronts.ptr[end], fronts.ptr[end + 1]
    return int(fronts.c[lo]) if hi > lo else None


def _objective_bounded(fam: Family, g: DPGraph, b_units: int, strategy: str) -> _Fronts:
    """:func:`run_dp` pruned by a bound on the strategy's objective, raised until V is reached.

    Time-centric plans minimise the recompute, which only grows along a chain; memory-centric
    ones the checkpoint memory, likewise. A DP that drops entries above a bound ``g`` therefore
    returns the exact optimum (with the reference's tie-breaks) as soon as it reaches V at all:
    start small, multiply by 4 until it does (at the largest bound nothing is pruned, so an
    empty V front there is IMPOSSIBLE).
    """
    if strategy == "time":
        top, bound = int(g.t.sum()), 16
        while True:
            fronts = run_dp(fam, g.t, g.m, b_units, max_recompute=bound)
            if _has_end(fronts) or bound >= top:
                return fronts
            bound = min(top, bound * 4)
    top = int(g.m.sum())
    bound = 0
    while True:
        fronts = run_dp(fam, g.t, g.m, b_units, max_ckpt=bound)
        if _has_end(fronts) or bound >= top:
            return fronts
        bound = min(top, max(bound * 4, top // 1024, 1))


def _solve_family(fam, g, budget, b_units, ratio, strategy, units, t0) -> DPResult:
    fronts = bounded_fronts(fam, g, b_units, strategy)
    res = DPResult(status="IMPOSSIBLE", family=fam.kind if not fam.fell_back else "approx",
                   strategy=strategy, units=units, budget_bytes=int(budget), budget_units=b_units,
                   comp_ratio=ratio, n_lower_sets=fam.num_sets, forward_cost=int(g.t.sum()),
                   fell_back=fam.fell_back)
    end = fam.num_sets - 1
    lo, hi = fronts.ptr[end], fronts.ptr[end + 1]
    if hi > lo:
        entry = int(hi - 1) if strategy == "time" else int(lo)
        _fill_chain(res, fam, fronts, entry, g)
    res.seconds = time.perf_counter() - t0
    return res


def _fill_chain(res: DPResult, fam: Family, fronts: _Fronts, entry: int, g: DPGraph) -> None:
    entries = []
    while entry >= 0:
        entries.append(entry)
        entry = int(fronts.pred[entry])
    entries.reverse()
    states = [int(fronts.state[e]) for e in entries]
    peak = 0
    for a, b in zip(entries[:-1], entries[1:]):
        i, j = int(fronts.state[a]), int(fronts.state[b])
        step = int(fronts.c[a]) + 2 * int(fam.mL[j] - fam.mL[i]) + int(fam.mAB[j])
        peak = max(peak, step)
    saved, ckpt = int(fronts.s[entries[-1]]), int(fronts.c[entries[-1]])
    res.status = "OK"
    res.chain_ids = states
    res.chain = [_bit_nodes(fam.sets[s]) for s in states]
    res.blocks = len(states) - 1
    res.saved = saved
    res.model_recompute_cost = res.forward_cost - saved
    res.model_peak_bytes = peak * res.comp_ratio
    res.ckpt_bytes = ckpt * res.comp_ratio
    ck = [np.intersect1d(_bit_nodes(fam.bnd[j]), np.setdiff1d(res.chain[k + 1], res.chain[k]))
          for k, j in enumerate(states[1:])]
    res._checkpoints = np.concatenate(ck) if ck else np.zeros(0, np.int64)
