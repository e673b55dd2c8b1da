"""The exact family's DP at one budget, computing only what the strategy's plan can depend on.

Speed, exact family (every lower set; GoogLeNet: 27,358 sets, 121M inclusion pairs, where the
unpruned DP would expand ~10^10 entries). :class:`ExactSearch` computes only what the
strategy's plan can depend on, and keeps the reference's plan and tie-breaks exactly:

* Time-centric: A*-style pruning by an admissible lower bound on the final recompute. The last
  block holds a sink, so all checkpoints together fit in ``cap0 = B − 2·m(sink)``; an entry
  ``(s, c)`` of ``L_j`` can therefore still save at most the fractional knapsack of the
  non-sink nodes outside ``L_j`` (value ``t``, weight ``m``, capacity ``cap0 − c``), so its
  plans recompute at least ``T − s − knapsack_j(cap0 − c)`` (per-state tables for every
  family size, :mod:`planner.dp.knapsack`). Entries above a bound ``g`` are dropped, and so
  are entries above the state's ckpt ceiling (every node still to run needs room for itself
  and its successors: :meth:`ExactSearch._ckpt_ceiling`). Cheap forms of the same bound
  come first: per target, sources whose best ``saved`` cannot reach ``knapsack_j(cap0 −
  m(∂L_j))`` (every entry of ``L_j`` holds ``∂L_j``) are skipped before the inclusion scan;
  per (source, target) pair, the bound at the source's best corner ``(s_max + dt,
  c_min + dm)`` with the knapsack's tangent upper bound drops the pair or cuts the source
  front to a suffix of large enough ``saved``; the exact knapsack is read for the Pareto
  fronts' entries only (testing every candidate, even by the tangent bound, costs more than
  the per-saved minimum it would spare: cnn12 at 20 %, 20M candidates). ``g`` starts at the root's
  bound and grows until V is reached — doubling steps while the passes are small, then
  steps sized to multiply the entries by about 4, since the pass that reaches V overshoots
  the optimum by up to one step and dominates the cost.
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
  ``∂L_j ∩ L_i``, knapsack bounds by one vectorized binary search over the states' ragged
  tables (or three gathers, for the tangent bound), the per-(state, saved) minimum and
  per-state Pareto cut by segmented array operations.

Example::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph, exact_family
    >>> from planner.dp.fronts import end_entry
    >>> g = DPGraph(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]),
    ...             src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]))   # a diamond
    >>> f = ExactSearch(exact_family(g), g, 20).time_fronts()
    >>> e = end_entry(f, "time"); int(f.s[e]), int(f.c[e])
    (12, 8)
"""

from __future__ import annotations

import numpy as np

from hgraph.progress import current as current_progress
from planner.arrays import distinct, ranges
from planner.bitsets import unpack
from planner.dp.fronts import (INF, Fronts, best_per_saved, end_entry, has_end, run_starts,
                               segment_pareto)
from planner.dp.knapsack import KnapsackBound
from planner.dp.subsets import pair_transitions

__all__ = ["ExactSearch", "DEEPENING_GROWTH"]

#: Time-centric deepening: once passes are big, each failed pass's successor aims at this
#: many times its entries (:meth:`ExactSearch._next_step`). The growth per unit of bound
#: slows as the bound rises, so a pass lands short of the aim (×1.5–2.5 for an aim of 4;
#: an aim of 2 took 10 passes to densenet's optimum at 40 %, 0.9 s more than 4).
DEEPENING_GROWTH = 4.0
#: Time-centric deepening: a failed pass whose fronts grew less than this runs the lexmin pass.
LEXMIN_STALL = 1.25


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


def _approx_inclusion(fam, n: int):
    """The approximate family's inclusion matrix (packed as :meth:`Family.subset_matrix`) and
    its levels, kept on the family.

    ``L_i ⊆ L_j ⟺ v_i ∈ L_j`` (∅ in every set), so the matrix is the sets' bits with columns
    taken in family order. Ids ascend with ``(m(L), |L|)``, so a set's proper subsets have
    smaller ids; a level is a run of consecutive ids none of which holds another (they are
    then independent), found greedily once per family.
    """
    if "approx_inclusion" not in fam.cache:
        L = fam.num_sets
        bits = unpack(fam.sets, n)[:, np.maximum(fam.node, 0)]
        bits[:, fam.node < 0] = True
        packed = np.zeros((L, 8 * ((L + 63) // 64)), np.uint8)
        packed[:, :(L + 7) // 8] = np.packbits(bits, axis=1, bitorder="little")
        low = np.tril(bits, -1)
        low[:, 0] = False
        last = np.where(low.any(axis=1), L - 1 - np.argmax(low[:, ::-1], axis=1), -1)
        starts = [0, 1] if L > 1 else [0]
        for j, p in enumerate(last[2:].tolist(), start=2):   # once per family, scalar ints
            if p >= starts[-1]:
                starts.append(j)
        fam.cache["approx_inclusion"] = (packed, np.array(starts + [L], np.int64))
    return fam.cache["approx_inclusion"]


def _best_per_key(key, nc, e):
    """:func:`~planner.dp.fronts.best_per_saved` (per ``key``: least ``nc``, then least ``e``)
    by one ``minimum.at`` where it would use dense buckets: ``nc`` and ``e`` packed into one
    int64 (``(nc − min)·E + (e − min)`` orders as ``(nc, e)``), which spares its second
    scatter and the gather that finds each bucket's winners (cnn29 at 30 %: 117M candidates
    per solve). Same winners; falls back to it where the packing would not fit."""
    if key.size <= 256:
        return best_per_saved(key, nc, e)
    klo, khi = int(key.min()), int(key.max())
    width = khi - klo + 1
    if width > 4 * key.size + 1024:
        return best_per_saved(key, nc, e)
    clo, elo = int(nc.min()), int(e.min())
    E = int(e.max()) - elo + 1
    if (int(nc.max()) - clo + 1) * E >= INF:         # best starts at INF
        return best_per_saved(key, nc, e)
    v = nc - clo
    v *= E
    v += e
    v -= elo
    best = np.full(width, INF, np.int64)
    np.minimum.at(best, key - klo, v)
    present = np.flatnonzero(best < INF)
    b = best[present]
    return present + klo, b // E + clo, b % E + elo


class ExactSearch:
    """The exact family's DP at one budget, searched with admissible bounds (module docstring).

    States are processed a size level at a time (sources of a set are smaller sets, so a
    level's fronts depend only on earlier levels), in chunks of targets, every step one NumPy
    operation over all (source, target) pairs or candidate entries of the chunk. It holds
    what every pass reads: the family's inclusion matrix, weighted-popcount tables for
    ``dt``/``dm`` and, per state, the cumulative tables of the checkpoint knapsack.
    """

    def __init__(self, fam, g, budget: int, cells: int = 1 << 22):
        self.fam, self.B, self.cells = fam, int(budget), cells
        self.T = int(g.t.sum())
        self.L = fam.num_sets
        self.end = self.L - 1
        self.two_mL = 2 * fam.mL
        self.thr = self.B - self.two_mL - fam.mAB           # c_i − 2·m(L_i) ≤ thr_j: feasible
        if fam.kind == "exact":
            self.sub = fam.subset_matrix()
            self.levels = np.flatnonzero(np.r_[True, fam.size[1:] != fam.size[:-1], True])
            self.tab_t, self.tab_m = self._popcount_tables(fam, g)
            self.pairs = None
        else:                                               # dense approximate family
            self.sub, self.levels = _approx_inclusion(fam, g.n)
            self.pairs = pair_transitions(fam, g.t, g.m)
        self.span = int(g.m.sum()) + 1                      # > any ckpt
        has_succ = np.zeros(g.n, bool)
        has_succ[g.src] = True
        sinks = np.flatnonzero(~has_succ)
        # c_final + 2·m(last block) ≤ B, and the last block holds a sink: room for checkpoints
        self.cap0 = self.B - 2 * int(g.m[sinks].min()) if sinks.size else self.B
        self.g = g
        self.knapsack = None                                # time-centric only: _bound_tables
        self.ks_bnd = self.cmax = None

    # --------------------------------------------------------------- per-state quantities
    @staticmethod
    def _popcount_tables(fam, g):
        """Weighted-popcount tables of ``t`` and ``m`` (budget-free, kept on the family)."""
        key = (g.m.tobytes(), g.t.tobytes())
        cached = fam.cache.get("popcount")
        if cached is None or cached[0] != key:
            words = fam.sets.shape[1]
            cached = (key, _bit_weights(g.n, g.t, words), _bit_weights(g.n, g.m, words))
            fam.cache["popcount"] = cached
        return cached[1], cached[2]

    def deltas(self, tgt: np.ndarray, src: np.ndarray):
        """``(dt, dm)`` of each pair ``L_src → L_tgt``: ``t``, ``m`` of ``∂L_tgt \\ L_src``."""
        if self.pairs is not None:                          # approximate family
            return self.pairs(tgt, src)[1:]
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
            live = np.flatnonzero(keyc[:a] < INF)
            if need is not None:                            # sources no target here can use
                live = live[self._usable(live, keyc, smax, need, a, b)]
            if live.size == 0:
                continue
            step = max(1, self.cells // live.size)
            for lo in range(a, b, step):
                hi = min(b, lo + step)
                src = live
                if need is not None and hi - lo < b - a:
                    src = live[self._usable(live, keyc, smax, need, lo, hi)]
                    if src.size == 0:
                        continue
                ok = keyc[None, src] <= self.thr[lo:hi, None]
                if need is not None:
                    ok &= smax[None, src] >= need[lo:hi, None]
                r, c = self._subsets(lo, hi, src, ok)
                if r.size:
                    yield lo, lo + r, src[c]

    def _usable(self, live, keyc, smax, need, lo: int, hi: int) -> np.ndarray:
        """Mask of the sources that pass the peak and ``need`` tests of some target in
        ``[lo, hi)`` (the loosest of each): cuts the dense inclusion scan to them."""
        return (keyc[live] <= self.thr[lo:hi].max()) & (smax[live] >= need[lo:hi].min())

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
    def _store(fronts: Fronts, st, ns, nc, pred, keyc, smax, cmin, two_mL):
        """Append a chunk's fronts (sorted by state, saved) and their per-state summaries."""
        first, last = fronts.extend(st, ns, nc, pred)
        s0 = st[first]
        cmin[s0], smax[s0] = nc[first], ns[last]
        keyc[s0] = nc[first] - two_mL[s0]

    # --------------------------------------------------------------- time-centric
    def _bound_tables(self) -> KnapsackBound:
        """The knapsack of this budget (capacities up to ``cap0``), built on first use, and
        ``ks_bnd[j]``: the most any entry of ``L_j`` can still save, ``knapsack(j, cap0 −
        m(∂L_j))`` (−1: no entry of ``L_j`` fits). Every node of ``∂L_j`` is a checkpoint of
        the block that added it (its successor outside ``L_j`` is outside that block's set
        too), so every entry of ``L_j`` has ``c ≥ m(∂L_j)``."""
        if self.knapsack is None:
            self.knapsack = KnapsackBound(self.fam, self.g, max(self.cap0, 0))
            self.cmax = self._ckpt_ceiling()
            cap = self.cap0 - self.fam.m_bnd
            ks = self.knapsack(np.arange(self.L), np.maximum(cap, 0))
            self.ks_bnd = np.where(self.fam.m_bnd <= self.cmax, ks, -1)
        return self.knapsack

    def _ckpt_ceiling(self) -> np.ndarray:
        """``cmax[j]``: the most ckpt an entry of ``L_j`` may hold and still reach V
        (``span`` at V): ``min(cap0, B − max ρ(v))`` over the nodes ``v`` outside ``L_j``,
        with ``ρ(v) = 2·m(v) + m(succ(v))``.

        Why: ``v`` runs in a later block ``X`` (``L_a = L_{a−1} ∪ X``) whose peak test reads
        ``C_{a−1} + 2·m(X) + mAB(L_a) ≤ B``; ckpt only grows, so ``C_{a−1} ≥ c``;
        ``2·m(X) ≥ 2·m(v) + 2·m(succ(v) ∩ X)``, and the successors of ``v`` outside ``X``
        are outside ``L_a`` with a predecessor in it — in ``A(L_a)`` — so ``mAB(L_a) ≥
        m(succ(v) \\ X)``. (A sink outside ``L_j`` gives ``ρ = 2·m(sink)``: ``cap0``.)
        Entries above it are dead: they reach no plan, and they dominate no entry that does
        (that one has less ckpt), so dropping them keeps the plan."""
        g, fam = self.g, self.fam
        rho = 2 * g.m.astype(np.int64)
        edge = distinct(g.src.astype(np.int64) * g.n + g.dst)   # each successor once
        np.add.at(rho, edge // g.n, g.m[edge % g.n])
        order = np.argsort(-rho, kind="stable")
        inside = fam.members(g.n)[order]                     # [n, L]
        first = np.argmax(~inside, axis=0)                   # the largest ρ outside L_j
        rmax = np.where(inside.all(axis=0), 0, rho[order][first])
        cmax = np.minimum(self.cap0, self.B - rmax)
        cmax[self.end] = self.span
        return cmax

    def lower_bound_root(self) -> int:
        """Least recompute any plan can have: ``T − knapsack(∅, cap0)``."""
        if self.cap0 < 0:
            return self.T
        self._bound_tables()
        return self.T - int(self.ks_bnd[0])

    def pareto(self, bound: int) -> Fronts:
        """The DP's fronts, keeping only entries whose recompute lower bound is ≤ ``bound``.

        An entry ``(s, c)`` of ``L_j`` can finish with at most ``knapsack(j, cap0 − c)``
        more compute saved, so its plans recompute at least
        ``lb = T − s − knapsack(j, cap0 − c)`` (``T − s`` at V); ``lb`` falls as ``s`` grows
        and as ``c`` shrinks. Before expanding a source's front the same bound, taken at
        the source's best corner ``(s_max + dt, c_min + dm)`` with the knapsack's cheap
        upper bound, drops whole pairs and cuts the front to the suffix of large enough
        ``saved``; the feasible prefix (``c ≤ room``, and ``c + dm ≤ cap0``) is cut as in
        :func:`planner.dp.loop.run_dp`. Sources are first filtered per target by
        ``ks_bnd`` (:meth:`_bound_tables`). The exact bound is applied to the Pareto fronts
        only: an entry a dropped one dominates (``s`` no larger, ``c`` no smaller) has a
        bound no smaller, so it is dropped too, and cutting before or after the Pareto
        step leaves the same entries — at a fraction of the queries.
        """
        L, T, end = self.L, self.T, self.end
        fronts = Fronts.empty(L)
        fronts.span, fronts.span_s = self.span, T + 2
        fronts.append(0, np.zeros(1, np.int64), np.zeros(1, np.int64), np.full(1, -1, np.int64))
        keyc = np.full(L, INF, np.int64)                # c_min − 2·m(L): the peak test
        smax = np.full(L, -INF, np.int64)
        cmin = np.zeros(L, np.int64)
        keyc[0], smax[0] = -int(self.two_mL[0]), 0
        if self.cap0 >= 0:
            self._bound_tables()
            need = np.where(self.ks_bnd >= 0, T - bound - self.fam.t_bnd - self.ks_bnd, INF)
        else:
            need = np.full(L, INF, np.int64)            # no checkpoint fits: only ∅ → V
        need[end] = T - bound
        report = current_progress().position
        for lo, tgt, src in self.chunks(keyc, smax, need):
            report(lo, L)
            out = self._pareto_chunk(lo, tgt, src, bound, fronts, smax, cmin)
            if out is not None:
                self._store(fronts, *out, keyc, smax, cmin, self.two_mL)
        fronts.ptr = np.maximum.accumulate(fronts.ptr)  # empty fronts: ptr[j+1] = ptr[j]
        return fronts

    def _pareto_chunk(self, lo, tgt, src, bound, fronts, smax, cmin):
        """Bounded fronts of a chunk's targets from its pairs: (state, ns, nc, pred) or None."""
        T, cap0 = self.T, self.cap0
        dt, dm = self.deltas(tgt, src)
        at_end = tgt == self.end
        cap = cap0 - cmin[src] - dm                          # at the source's best corner
        ub = self._bound_tables().upper(tgt, np.maximum(cap, 0))
        alive = cmin[src] + dm <= self.cmax[tgt]
        s_lo = np.where(at_end, T - bound, np.where(alive, T - bound - ub, T + 1))
        keep = smax[src] + dt >= s_lo
        if not keep.any():
            return None
        tgt, src, dt, dm, s_lo = tgt[keep], src[keep], dt[keep], dm[keep], s_lo[keep]
        room = np.minimum(self.thr[tgt] + self.two_mL[src], self.cmax[tgt] - dm)
        far = ~(tgt == self.end)                         # the bound at the source's top corner
        if far.any():
            need = self._bound_tables().least_cap(tgt[far], T - bound - smax[src[far]] - dt[far])
            room[far] = np.minimum(room[far], cap0 - dm[far] - need)
        size = fronts.size
        starts = np.searchsorted(fronts.glob_s[:size], src * fronts.span_s
                                 + np.clip(s_lo - dt, 0, T + 1), side="left")
        stops = np.searchsorted(fronts.glob[:size], src * fronts.span
                                + np.clip(room, -1, self.span - 1), side="right")
        cnt = np.maximum(stops - starts, 0)
        total = int(cnt.sum())
        if total == 0:
            return None
        e = ranges(starts, cnt)
        width = T + 2                                   # (state, saved) as one key, its
        key = fronts.s[e]                               # pair part repeated (no per-candidate
        key += np.repeat((tgt - lo) * width + dt, cnt)  # pair index and gathers)
        nc = fronts.c[e]
        nc += np.repeat(dm, cnt)
        key, nc, e = _best_per_key(key, nc, e)
        st, ns = lo + key // width, key % width
        keep = segment_pareto(st, ns, nc)
        st, ns, nc, e = st[keep], ns[keep], nc[keep], e[keep]
        ok = np.where(st == self.end, ns >= T - bound,  # the exact bound, on the fronts only
                      (nc <= self.cmax[st])
                      & self._bound_tables().reaches(st, np.maximum(cap0 - nc, 0), T - bound - ns))
        if not ok.any():
            return None
        return st[ok], ns[ok], nc[ok], e[ok]

    def time_fronts(self, lexmin_after: int | None = 12, give_up_after: int | None = None):
        """Iterative deepening on the recompute bound from the root's lower bound.

        Each pass is exact once its bound is at least the optimum (it reaches V); the bound
        grows by 2, 4, 8, … while the passes are small, then by steps that multiply the
        entries by about :data:`DEEPENING_GROWTH` (:meth:`_next_step`), so the passes that
        fail cost less than the one that succeeds. One :meth:`lexmin` pass (one entry per state, over every pair) settles feasibility
        (no plan: its fronts, V empty, are returned) and gives an upper bound — its plan's
        recompute, at least the optimum, so no later pass goes beyond it (the pass at that
        bound reaches V). It runs after ``lexmin_after`` failed passes (None: never), or
        earlier once the fronts stop growing — a failed pass of at least one entry per state
        holds at most :data:`LEXMIN_STALL` times the previous one's entries: the budget, not
        the bound, keeps them small, so deepening may never reach V (an impossible budget),
        while on a feasible one the lexmin pass (as many pairs, one entry per state) is
        rarely worth its cost. ``give_up_after``:
        None after that many failed passes (the caller runs the unpruned DP instead: where
        the budget, not the bound, keeps the fronts small, that is cheaper than deepening).
        """
        bound, step, upper, failed = self.lower_bound_root(), 2, self.T, 0
        lex_done = lexmin_after is None
        last = None                                     # (bound, size) of the previous pass
        while True:
            bound = min(bound, upper)
            fronts = self.pareto(bound)
            if has_end(fronts) or bound >= upper:
                return fronts
            failed += 1
            stalled = (last is not None and fronts.size >= self.L
                       and fronts.size <= LEXMIN_STALL * last[1])
            step = self._next_step(step, last, bound, fronts.size)
            last = (bound, fronts.size)
            if give_up_after is not None and failed >= give_up_after:
                return None
            if not lex_done and (failed >= lexmin_after or stalled):
                lex_done = True
                lex = self.lexmin()
                if not has_end(lex):
                    return lex
                upper = self.T - int(lex.s[end_entry(lex, "memory")])
            bound += step

    def _next_step(self, step: int, last, bound: int, size: int) -> int:
        """How far the next pass's bound goes past a failed one's.

        Fronts grow about geometrically with the bound, so the pass that first reaches V
        (which overshoots the optimum by up to one step) dominates the cost. While passes
        are small (under one entry per state) the step doubles; past that it is sized so
        the next pass holds about :data:`DEEPENING_GROWTH` times the entries, at the growth
        per unit of bound the last two passes showed (cnn5 at 30 %: ×1.2–1.5 per unit,
        where doubling steps overshot 16k-entry passes to 66k) — never more than doubling.
        """
        if last is None or size < self.L or size <= last[1] or last[1] == 0:
            return 2 * step if last is not None else step
        rate = np.log(size / last[1]) / max(bound - last[0], 1)      # log growth per unit
        want = int(np.ceil(np.log(DEEPENING_GROWTH) / rate))
        return int(min(2 * step, max(1, want)))

    # --------------------------------------------------------------- memory-centric
    def lexmin(self, cbound: int = INF) -> Fronts:
        """Memory-centric fronts reduced to one entry per state: least ckpt, then most saved.

        Feasibility reads only ``c`` and both ``c`` and ``saved`` add along a chain, so the
        lexicographic minimum of ``(c, −saved)`` at a state extends to the lexicographic
        minimum at V — which is the front entry the memory-centric plan takes. Every
        candidate with that value comes from its source's own minimum, so breaking ties by the
        smallest source id gives the full DP's predecessor (first arrival) too. Entries above
        ``cbound`` (at least the optimum's ckpt) are dropped: ckpt only grows.
        """
        L = self.L
        fronts = Fronts.empty(L)
        fronts.span = self.span
        fronts.append(0, np.zeros(1, np.int64), np.zeros(1, np.int64), np.full(1, -1, np.int64))
        keyc = np.full(L, INF, np.int64)
        smax = np.full(L, -INF, np.int64)
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
        starts = run_starts(tgt)
        seg = np.repeat(np.arange(starts.size), np.diff(np.append(starts, tgt.size)))
        ok = (lo <= cbound) & (lo <= np.minimum.reduceat(hi, starts)[seg])
        return tgt[ok], src[ok]

    @staticmethod
    def _lexmin_pick(tgt, nc, ns):
        """Per run of equal ``tgt`` (ascending; sources ascending within): the index of the
        least ``nc``, then the largest ``ns``, then the first (least source id)."""
        starts = run_starts(tgt)
        seg = np.repeat(np.arange(starts.size), np.diff(np.append(starts, tgt.size)))
        best = nc == np.minimum.reduceat(nc, starts)[seg]
        s = np.where(best, ns, -INF)
        best &= s == np.maximum.reduceat(s, starts)[seg]
        idx = np.flatnonzero(best)
        return idx[run_starts(tgt[idx])]

    def memory_fronts(self, upper: int | None = None) -> Fronts:
        """:meth:`lexmin` pruned at ``upper`` (a feasible plan's ckpt), unpruned if that fails."""
        if upper is not None:
            fronts = self.lexmin(upper)
            if has_end(fronts):
                return fronts
        return self.lexmin()

