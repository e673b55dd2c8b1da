"""The exact family's DP at one budget, computing only what the strategy's plan can depend on.

Speed, exact family (every lower set: on GoogLeNet tens of thousands of sets, and an unpruned
DP would expand orders of magnitude more entries than the search keeps; the measured figures of
this module's docstrings are in bench/NOTES_scale.md, "Figures formerly quoted in docstrings").
:class:`ExactSearch` computes only what the strategy's plan can depend on, and keeps the
reference's plan and tie-breaks exactly:

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
  the per-saved minimum it would spare). ``g`` starts at the root's
  bound and grows until V is reached — doubling steps while the passes are small, then
  steps sized to multiply the entries by about 4, since the pass that reaches V overshoots
  the optimum by up to one step and dominates the cost. Beside the knapsack, the
  Lagrangian chain bound (:mod:`planner.dp.chain_bound`: a longest path over chains of
  lower sets, so it sees that a cut through parallel branches saves them all) is built
  with it, before the first pass, and every bound is the least of the two (on the generated
  CNNs its root lies much nearer the optimum than the knapsack's).
* Memory-centric: the plan is V's least-ckpt entry (most saved among those). Feasibility
  reads only ``c`` and both quantities add along a chain, so one entry per state — the
  lexicographic minimum of ``(c, −saved)``, ties to the least source id — reproduces it
  with its predecessors. ``dm ≥ 0``, so these are shortest paths: states are settled in
  Dijkstra order, a band of ``c`` per pass, and the search stops when V is settled; a pair
  ``i → j`` is formed only while ``j`` is open and ``c_i`` is at most ``j``'s running best,
  and dropped before ``dm`` by ``m(∂L_j) − m(∂L_i) ≤ dm ≤ m(∂L_j)``; ``dt`` is computed only
  for the pairs that reach the least ``c``, from the same table index. The approximate DP's
  ckpt (its chain is a chain of the exact family, so an upper bound) caps what is settled.
  A relaxation's targets are independent (each reads settled sources only), so big ones are
  cut into parts that run side by side on every core (:mod:`planner.threads`).
* Why pruning keeps the plan: a dropped entry's bound exceeds ``g`` ≥ the optimum, so it
  neither reaches the optimum nor weakly dominates an entry that does; every entry on the
  optimal chain, and every candidate with the same value (the first-arrival tie-break),
  survives with the same predecessor. ``tests/test_dp_conformance.py`` checks this against
  the unpruned DP on random DAGs.
* Work per pass: the inclusion matrix (``L_i ⊆ L_j`` as packed bits, built once per family
  from the cover relation and reused by every budget) gives a state's sources as one row; a
  whole size level of targets (sources lie in smaller levels) is handled at once, in
  chunks: pairs by ``nonzero``, ``dt``/``dm`` by one membership lookup per node of
  ``∂L_j`` (a few nodes) into per-state tables, knapsack bounds by one vectorized binary
  search over the states' ragged tables (or three gathers, for the tangent bound), the
  per-(state, saved) minimum and per-state Pareto cut by segmented array operations.

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

from hgraph.common.progress import current as current_progress
from planner.arrays import distinct, ranges
from planner.bitsets import unpack
from planner.dp.fronts import (INF, Fronts, best_per_saved, end_entry, has_end, run_starts,
                               segment_pareto)
from planner.dp.chain_bound import chain_bound
from planner.dp.knapsack import KnapsackBound, checkpoint_room
from planner.dp.subsets import pair_transitions
from planner.threads import map_ordered, workers

__all__ = ["ExactSearch", "DEEPENING_GROWTH", "outside_rho"]

#: Time-centric deepening: once passes are big, each failed pass's successor aims at this
#: many times its entries (:meth:`ExactSearch._next_step`). The growth per unit of bound
#: slows as the bound rises, so a pass lands short of the aim; an aim of 2 took more passes,
#: and more time, than 4 (figures: bench/NOTES_scale.md, "Figures formerly quoted in docstrings").
DEEPENING_GROWTH = 4.0
#: Time-centric deepening: a failed pass whose fronts grew less than this runs the lexmin pass.
LEXMIN_STALL = 1.25


#: Least cells (targets × sources) of a :meth:`ExactSearch.lexmin` relaxation worth a part
#: of its own on a thread (:func:`_parts`): below it a part's Python steps cost more than
#: it spares. (The time-centric passes' chunks, cut the same way, ran no faster: their many
#: small steps hold the GIL.)
PART_CELLS = 1 << 15


def _parts(cells: int, size: int) -> list:
    """Slices cutting ``size`` targets into up to :func:`~planner.threads.workers` parts
    of at least :data:`PART_CELLS` cells each (one part when there is no more)."""
    k = max(1, int(min(workers(), cells // PART_CELLS, size)))
    edges = (np.arange(k + 1) * size) // k
    return [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def _nonzero2(mask: np.ndarray):
    """``np.nonzero`` of a 2-D mask, by one flat scan (faster than the 2-D form, which scans
    per axis)."""
    flat = np.flatnonzero(mask)
    return np.divmod(flat, mask.shape[1])


#: Largest boundary (``max |∂L|``) whose per-state subset-sum tables (``2^K`` entries a state)
#: :func:`_boundary_nodes` builds; past it :meth:`ExactSearch._bnd_deltas` goes slot by slot.
BOUNDARY_TABLE_MAX = 8


def _boundary_nodes(fam, g):
    """Each set's boundary nodes, padded to the largest ``|∂L|`` (budget-free, on the family).

    Returns ``(node, member, tables)``. ``node [L, K]``: row ``j`` holds ``∂L_j``'s nodes,
    padded with node 0 (at weight 0); ``member [L·n]``: the sets' bits, set-major
    (``member[i·n + v]``: ``v ∈ L_i``), so one pair's ``K`` lookups read one short row.
    ``tables [2, L·2^K]`` (``K ≤`` :data:`BOUNDARY_TABLE_MAX`, else ``None``): entry
    ``j·2^K + mask`` is the ``t`` (row 0) and ``m`` (row 1) of the nodes of ``∂L_j`` whose
    slots are *not* set in ``mask`` — a pair's ``(dt, dm)`` is one lookup each once the
    source's ``K`` membership bits are packed. ``wts [2, L, K]``: the slots' ``t``, ``m``.
    """
    key = (g.m.tobytes(), g.t.tobytes())
    cached = fam.cache.get("boundary_nodes")
    if cached is None or cached[0] != key:
        L = fam.num_sets
        rows, v = np.nonzero(unpack(fam.bnd, g.n))         # row-major: rows ascending
        cnt = np.bincount(rows, minlength=L).astype(np.int64)
        K = max(1, int(cnt.max(initial=0)))
        slot = ranges(np.zeros_like(cnt), cnt)                # position within the row
        node = np.zeros((L, K), np.int64)
        wts = np.zeros((2, L, K), np.int64)
        node[rows, slot] = v
        wts[0, rows, slot] = g.t[v]
        wts[1, rows, slot] = g.m[v]
        member = np.ascontiguousarray(unpack(fam.sets, g.n)).ravel()
        tables = None
        if K <= BOUNDARY_TABLE_MAX:
            masks = (np.arange(1 << K)[:, None] >> np.arange(K)) & 1     # [2^K, K]
            full = np.stack([fam.t_bnd, fam.m_bnd])[:, :, None]
            tables = (full - wts @ masks.T).reshape(2, -1)                # [2, L·2^K]
        cached = fam.cache["boundary_nodes"] = (key, (node, member, tables, wts))
        fam.cache["boundary_slots"] = np.ascontiguousarray(node.T)    # [K, L]: slot k's node
    return cached[1]


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


def outside_rho(fam, g) -> np.ndarray:
    """``R[j]``: the largest ``ρ(v) = 2·m(v) + m(succ(v))`` over the nodes ``v`` outside
    ``L_j`` (0 at V), kept on the family per ``m``.

    Why: every chain through ``L_j`` adds each such ``v`` in a later block ``X``, and that
    step's peak is at least the ckpt held at ``L_j`` plus ``ρ(v)`` (the argument of
    :meth:`ExactSearch._ckpt_ceiling`): a lower bound on the rest of any chain's peak, for
    the ckpt ceilings here and the smallest-budget search (:mod:`planner.dp.min_budget`)."""
    key = g.m.tobytes()
    cached = fam.cache.get("outside_rho")
    if cached is None or cached[0] != key:
        rho = 2 * g.m.astype(np.int64)
        edge = distinct(g.src.astype(np.int64) * g.n + g.dst)   # each successor once
        np.add.at(rho, edge // g.n, g.m[edge % g.n])
        order = np.argsort(-rho, kind="stable")
        inside = fam.members(g.n)[order]                     # [n, L]
        first = np.argmax(~inside, axis=0)                   # the largest ρ outside L_j
        rmax = np.where(inside.all(axis=0), 0, rho[order][first])
        cached = fam.cache["outside_rho"] = (key, rmax)
    return cached[1]


class ExactSearch:
    """The exact family's DP at one budget, searched with admissible bounds (module docstring).

    States are processed a size level at a time (sources of a set are smaller sets, so a
    level's fronts depend only on earlier levels), in chunks of targets, every step one NumPy
    operation over all (source, target) pairs or candidate entries of the chunk. It holds
    what every pass reads: the family's inclusion matrix, each set's boundary nodes and
    per-state ``dt``/``dm`` tables (:func:`_boundary_nodes`) and, time-centric, the
    cumulative tables of the checkpoint knapsack.
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
            self.bnodes = _boundary_nodes(fam, g)
            self.pairs = None
        else:                                               # dense approximate family
            self.sub, self.levels = _approx_inclusion(fam, g.n)
            self.pairs = pair_transitions(fam, g.t, g.m)
        self.span = int(g.m.sum()) + 1                      # > any ckpt
        self.cap0 = checkpoint_room(g, self.B)              # c_final + 2·m(last block) ≤ B
        self.g = g
        self.knapsack = None                                # time-centric only: _bound_tables
        self.ks_bnd = self.cmax = None
        self.chain = None                                   # time-centric: _bound_tables

    # --------------------------------------------------------------- per-state quantities
    def deltas(self, tgt: np.ndarray, src: np.ndarray):
        """``(dt, dm)`` of each pair ``L_src → L_tgt``: ``t``, ``m`` of ``∂L_tgt \\ L_src``
        (:meth:`_bnd_deltas`, faster than the weighted-popcount tables it replaced; figures
        in bench/NOTES_scale.md)."""
        if self.pairs is not None:                          # approximate family
            return self.pairs(tgt, src)[1:]
        dt, dm = self._bnd_deltas(tgt, src)
        return dt, dm

    def delta_m(self, tgt: np.ndarray, src: np.ndarray) -> np.ndarray:
        """``dm`` of each pair ``L_src → L_tgt``: ``m(∂L_tgt \\ L_src)`` (:meth:`_bnd_deltas`)."""
        if self.pairs is not None:
            return self.pairs(tgt, src)[2]
        return self._bnd_deltas(tgt, src, (1,))[0]

    def delta_t(self, tgt: np.ndarray, src: np.ndarray) -> np.ndarray:
        """``dt`` of each pair ``L_src → L_tgt``: ``t(∂L_tgt \\ L_src)`` (:meth:`_bnd_deltas`)."""
        if self.pairs is not None:
            return self.pairs(tgt, src)[1]
        return self._bnd_deltas(tgt, src, (0,))[0]

    def _bnd_deltas(self, tgt: np.ndarray, src: np.ndarray, which=(0, 1)) -> list:
        """Per weight of ``which`` (0: ``t``, 1: ``m``): its sum over ``∂L_tgt \\ L_src``.

        ``∂L_tgt`` holds a few nodes (:func:`_boundary_nodes`: GoogLeNet at most 6, the
        generated CNNs 5), so this is one membership lookup per boundary slot and pair —
        O(pairs · max|∂L|) whatever the word count — packed into a mask that indexes the
        target's table (:meth:`_bnd_index`). Without tables (a big boundary) the slots'
        weights are subtracted one by one."""
        node, member, tables, wts = self.bnodes
        if tables is not None:
            idx = self._bnd_index(tgt, src)
            return [tables[w][idx] for w in which]
        n, full = self.g.n, (self.fam.t_bnd, self.fam.m_bnd)
        out = [np.empty(tgt.size, np.int64) for _ in which]
        step = 1 << 16                                             # temporaries stay cached
        for lo in range(0, tgt.size, step):
            t, s = tgt[lo:lo + step], src[lo:lo + step]
            bits = member[s[:, None] * n + node[t]]                # [pairs, K]: v ∈ L_src
            for o, w in zip(out, which):
                o[lo:lo + step] = full[w][t] - np.where(bits, wts[w][t], 0).sum(axis=1)
        return out

    def _bnd_index(self, tgt: np.ndarray, src: np.ndarray) -> np.ndarray:
        """Per pair, its entry in the boundary tables (``K ≤`` :data:`BOUNDARY_TABLE_MAX`):
        ``tgt·2^K`` plus the mask of ``∂L_tgt``'s slots that ``L_src`` holds. One index
        serves ``dt`` and ``dm`` alike. Slot by slot (one gather of the slot's node, one
        membership byte, OR-ed into a ``uint8`` mask): cheaper than one ``[pairs, K]``
        lookup on big families, whose temporaries do not stay cached."""
        node, member, _tables, _wts = self.bnodes
        K, n = node.shape[1], self.g.n
        slots = self.fam.cache["boundary_slots"]
        base = src * n
        mask = member[base + slots[0][tgt]].view(np.uint8).copy()
        for k in range(1, K):
            mask |= member[base + slots[k][tgt]].view(np.uint8) << np.uint8(k)
        return (tgt << K) + mask

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
        return self._inclusion(slice(lo, hi), live, ok)

    def _inclusion(self, rows, live: np.ndarray, ok: np.ndarray):
        """(row, column) of ``ok`` [targets, live] where ``L_live[column] ⊆ L_target``; the
        targets are ``rows``, a slice or an ascending id array.

        With the inclusion matrix: where ``ok`` holds few cells (the peak test often keeps a
        small fraction), its cells are listed first and each one's bit read (cheaper than a
        whole-grid read there); otherwise the grid is read — whole prefix rows
        unpacked where ``live`` is dense in them, else one byte per cell. Without the matrix
        the ``ok`` pairs' bitsets are tested."""
        if self.sub is not None and 4 * np.count_nonzero(ok) > ok.size:
            if live.size * 4 >= live[-1] + 1:              # dense: unpack the whole prefix
                n = int(live[-1]) + 1
                bits = np.unpackbits(self.sub[rows, :(n + 7) // 8], axis=1, count=n,
                                     bitorder="little").view(bool)
                if live.size < n:
                    bits = bits[:, live]
            else:
                sub = self.sub[rows] if isinstance(rows, slice) else self.sub[rows[:, None],
                                                                               live >> 3]
                if isinstance(rows, slice):
                    sub = sub[:, live >> 3]
                bits = ((sub >> (live & 7).astype(np.uint8)) & 1).view(bool)
            return _nonzero2(bits & ok)
        r, c = _nonzero2(ok)
        tgt = np.arange(self.L)[rows][r]
        src = live[c]
        if self.sub is not None:
            width = self.sub.shape[1]
            byte = self.sub.ravel()[tgt * width + (src >> 3)]
            sub = ((byte >> (src & 7).astype(np.uint8)) & 1).view(bool)
        else:
            sets = self.fam.sets
            sub = np.all((sets[src] & ~sets[tgt]) == 0, axis=1)
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
        """The bounds of this budget, built on first use: the knapsack (capacities up to
        ``cap0``), the Lagrangian chain bound (:mod:`planner.dp.chain_bound`), and
        ``ks_bnd[j]``: the most any entry of ``L_j`` can still save, the least of
        ``knapsack(j, cap0 − m(∂L_j))`` and the chain bound there (−1: no entry of ``L_j``
        fits). Every node of ``∂L_j`` is a checkpoint of the block that added it (its
        successor outside ``L_j`` is outside that block's set too), so every entry of
        ``L_j`` has ``c ≥ m(∂L_j)``.

        Every bound the passes read is the least of the two where the chain bound exists
        (exact families with an inclusion matrix). Built before the first pass, not once
        passes grow: its walk costs less than the passes it spares — the deepening starts at
        its root, which on the generated CNNs lies much nearer the optimum than the
        knapsack's (figures: bench/NOTES_scale.md). Filters over pairs read one price per state (the
        least at its largest room, :meth:`ChainBound.one_price`); the exact test of the
        fronts' entries reads them all."""
        if self.knapsack is None:
            self.knapsack = KnapsackBound(self.fam, self.g, max(self.cap0, 0))
            self.cmax = self._ckpt_ceiling()
            cap = np.maximum(self.cap0 - self.fam.m_bnd, 0)
            ks = self.knapsack(np.arange(self.L), cap)
            self.ks_bnd = np.where(self.fam.m_bnd <= self.cmax, ks, -1)
            if self.chain is None:
                self.chain = chain_bound(self) or False
            if self.chain:
                cb = self.chain.saved_upper(np.arange(self.L), cap)
                self.chain.one_price(cap)
                self.ks_bnd = np.where(cb < 0, -1, np.minimum(self.ks_bnd, cb))
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
        cmax = np.minimum(self.cap0, self.B - outside_rho(self.fam, self.g))
        cmax[self.end] = self.span
        return cmax

    def _saved_upper(self, states: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """A cheap upper bound of what an entry of ``states`` with ``cap0 − c = cap`` can
        still save: the knapsack's tangent, and the chain bound where there is one."""
        ub = self._bound_tables().upper(states, cap)
        return np.minimum(ub, self.chain.saved_upper_one(states, cap)) if self.chain else ub

    def _least_cap(self, states: np.ndarray, req: np.ndarray) -> np.ndarray:
        """A capacity below which no entry of ``states`` still saves ``req``: the chain
        bound's where there is one — alone, as the knapsack's inverse beside it cut few more
        candidates for much more of the pass's time (figures: bench/NOTES_scale.md) — else
        the knapsack's."""
        if self.chain:
            return self.chain.least_cap_one(states, req)
        return self._bound_tables().least_cap_lower(states, req)

    def _reaches(self, states: np.ndarray, cap: np.ndarray, req: np.ndarray) -> np.ndarray:
        """Whether both bounds let an entry with ``cap0 − c = cap`` still save ``req``: the
        chain bound first, as it is the cheaper and, on the generated CNNs, cuts more
        (figures: bench/NOTES_scale.md)."""
        if not self.chain:
            return self._bound_tables().reaches(states, cap, req)
        ok = self.chain.reaches(states, cap, req)
        if ok.any():
            at = np.flatnonzero(ok)
            ok[at] = self._bound_tables().reaches(states[at], cap[at], req[at])
        return ok

    def lower_bound_root(self) -> int:
        """Least recompute any plan can have: ``T − ks_bnd[∅]`` — the least of the knapsack
        and the chain bound at ``cap0``."""
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
        ``saved``; at the source's top corner (every entry has ``s ≤ s_max``) the bound cuts
        it to ``c ≤ cap0 − dm − least_cap(T − bound − s_max − dt)``, the least capacity
        bounded from below by :meth:`KnapsackBound.least_cap_lower` (the knapsack's inverse
        read off the grid and its tangents; the exact inverse searched the rows, a sizeable
        share of the pass, for only slightly fewer candidates; figures: bench/NOTES_scale.md); the
        feasible prefix (``c ≤ room``, and ``c + dm ≤ cap0``) is cut as in
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
        ub = self._saved_upper(tgt, np.maximum(cap, 0))
        alive = cmin[src] + dm <= self.cmax[tgt]
        s_lo = np.where(at_end, T - bound, np.where(alive, T - bound - ub, T + 1))
        keep = smax[src] + dt >= s_lo
        if not keep.any():
            return None
        tgt, src, dt, dm, s_lo = tgt[keep], src[keep], dt[keep], dm[keep], s_lo[keep]
        room = np.minimum(self.thr[tgt] + self.two_mL[src], self.cmax[tgt] - dm)
        far = ~(tgt == self.end)                         # the bound at the source's top corner
        if far.any():
            need = self._least_cap(tgt[far], T - bound - smax[src[far]] - dt[far])
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
        # (state, saved) as one key, its pair part repeated (no per-candidate pair index
        # and gathers); keys run over the saved values each target can get — its pairs'
        # [cut, s_max + dt], packed back to back — so best_per_saved's buckets stay dense
        # where a chunk's targets are many and their candidates few (such chunks took the
        # sort before; bench/NOTES_scale.md)
        live = cnt > 0
        pt, cnt_l, dt_l = tgt[live], cnt[live], dt[live]
        p_lo = np.clip(s_lo[live] - dt_l, 0, T + 1) + dt_l
        first = run_starts(pt)
        t_lo = np.minimum.reduceat(p_lo, first)
        span = np.maximum.reduceat(smax[src[live]] + dt_l, first) - t_lo + 1
        t_off = np.cumsum(span) - span
        which = np.repeat(np.arange(first.size), np.diff(np.r_[first, pt.size]))
        key = fronts.s[e]
        key += np.repeat(t_off[which] - t_lo[which] + dt_l, cnt_l)
        nc = fronts.c[e]
        nc += np.repeat(dm[live], cnt_l)
        key, nc, e = best_per_saved(key, nc, e)
        at = np.searchsorted(t_off, key, side="right") - 1
        st, ns = pt[first][at], key - t_off[at] + t_lo[at]
        keep = segment_pareto(st, ns, nc)
        st, ns, nc, e = st[keep], ns[keep], nc[keep], e[keep]
        ok = np.where(st == self.end, ns >= T - bound,  # the exact bound, on the fronts only
                      (nc <= self.cmax[st])
                      & self._reaches(st, np.maximum(cap0 - nc, 0), T - bound - ns))
        if not ok.any():
            return None
        return st[ok], ns[ok], nc[ok], e[ok]

    def time_fronts(self, lexmin_after: int | None = 12, give_up_after: int | None = None,
                    start: int | None = None, ceiling: int | None = None):
        """Iterative deepening on the recompute bound from the root's lower bound.

        Each pass is exact once its bound is at least the optimum (it reaches V); the bound
        grows by 2, 4, 8, … while the passes are small, then by steps that multiply the
        entries by about :data:`DEEPENING_GROWTH` (:meth:`_next_step`), so the passes that
        fail cost less than the one that succeeds. The root's bound is the least of the
        knapsack's and the chain bound's (:meth:`_bound_tables`). One :meth:`lexmin` pass
        (one entry per state, over every pair) settles feasibility
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

        ``start``: a bound to start from, above the root's (a front's next budget, or a
        fit's re-solve a little below, starts near an optimum found before:
        :mod:`planner.dp.solve`); ``ceiling``: an upper bound on the optimum known from
        elsewhere (an optimum at a smaller budget), past which no pass goes (the pass there
        reaches V). Neither changes the plan: a pass whose bound is at least the optimum
        returns the same plan (module docstring), a lower one fails and the deepening goes on.
        """
        bound, step, upper, failed = self.lower_bound_root(), 2, self.T, 0
        if start is not None:
            bound = max(bound, start)
        if ceiling is not None:
            upper = min(upper, max(ceiling, 0))
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
        per unit of bound the last two passes showed (doubling steps overshot big passes
        several-fold) — never more than doubling.
        The first pass, from the root's bound, moves it by ``step`` when small (under half
        an entry per state); a bigger one says the bound is tight, and moves it by 1, so
        the last pass does not overshoot the optimum (figures of both cases:
        bench/NOTES_scale.md, "Figures formerly quoted in docstrings").
        """
        if last is None:
            return step if 2 * size < self.L else 1
        if size < self.L or size <= last[1] or last[1] == 0:
            return 2 * step
        rate = np.log(size / last[1]) / max(bound - last[0], 1)      # log growth per unit
        want = int(np.ceil(np.log(DEEPENING_GROWTH) / rate))
        return int(min(2 * step, max(1, want)))

    # --------------------------------------------------------------- memory-centric
    def lexmin(self, cbound: int = INF, band: int | None = None) -> Fronts:
        """Memory-centric fronts reduced to one entry per state: least ckpt, then most saved.

        Feasibility reads only ``c`` and both ``c`` and ``saved`` add along a chain, so the
        lexicographic minimum of ``(c, −saved)`` at a state extends to the lexicographic
        minimum at V — which is the front entry the memory-centric plan takes. Every
        candidate with that value comes from its source's own minimum, so breaking ties by the
        smallest source id gives the full DP's predecessor (first arrival) too. Entries above
        ``cbound`` (at least the optimum's ckpt) are dropped: ckpt only grows.

        ``dm ≥ 0``, so the values are shortest-path distances and are settled in Dijkstra
        order, a band of ``c`` at a time (:meth:`_lexmin_pass`): a state whose value is at
        least the band's end is never a source of a state settled before, so the pairs
        ``i → j`` with ``c_i`` above ``j``'s value are mostly never formed, and the search
        stops once V is settled (states above V's value never are, nor paired from).

        A state's value is at least ``m(∂L)``: each node of ``∂L`` has a successor outside
        every set of the chain, so it is a checkpoint of the block that adds it. States with
        ``m(∂L) > cbound`` are never targets; the others become targets once the band's end
        passes ``m(∂L)`` (paired then with every state settled so far).

        The band's end: the ``k``-th least estimate (running best of a target, ``m(∂L)``
        of a state that is none yet), ``k = min(band, known / 8)``, and — once a pass has
        run — at most the last pass's span scaled to settle about ``band`` states (doubled
        while passes settle fewer than ``band / 2``). Values can crowd near V's (GoogLeNet
        at min_DP) while few are known, so the ``k``-th estimate alone would jump past V in
        one pass that settles (and pairs from) much of the family, several times slower than
        with the cap (figures: bench/NOTES_scale.md). ``band``: default :attr:`band`.
        """
        L, end = self.L, self.end
        band = self.band if band is None else band
        best = np.full((3, L), INF, np.int64)    # running (c, −s, source) per state; final once
        best[:, 0] = 0, 0, -1                    # settled (the lexicographic minimum)
        lb = self.fam.m_bnd                      # every chain to L checkpoints all of ∂L
        open_ = lb <= cbound                     # not settled (nor above cbound)
        alive = open_.copy()
        todo = np.zeros(L, bool)                 # open, and paired with every settled source
        keyc = np.full(L, INF, np.int64)         # settled: c − 2·m(L), the peak test
        report = current_progress().position
        low, step = 0, None                      # every value below low is settled
        while open_[end]:
            est = np.where(todo, best[0], lb)[open_]
            est = est[(est < INF) & (est <= cbound)]
            if est.size == 0:
                break
            k = min(band, max(1, est.size // 8)) - 1
            beta = int(np.partition(est, k)[k]) + 1  # ≥ k + 1 states settle or join
            if step is not None:                     # … unless the last passes say fewer
                beta = max(int(est.min()) + 1, min(beta, low + step))
            join = np.flatnonzero(open_ & ~todo & (lb < beta))
            if join.size:
                self._lexmin_catch_up(join, np.flatnonzero(alive & ~open_), best, keyc)
                todo[join] = True
            before = int(open_.sum())
            self._lexmin_pass(beta, cbound, best, open_, todo, keyc)
            settled = before - int(open_.sum())
            span, low = beta - low, beta
            step = 2 * span if settled * 2 <= band else max(1, span * band // settled)
            report(int(alive.sum() - open_.sum()), L)
        ids = np.flatnonzero(alive & ~open_)
        fronts = Fronts.empty(L, capacity=max(ids.size, 1))
        fronts.span = self.span
        entry = np.full(L + 1, -1, np.int64)     # entry[-1] = -1: ∅'s predecessor
        entry[ids] = np.arange(ids.size)
        fronts.extend(ids, -best[1, ids], best[0, ids], entry[best[2, ids]])
        fronts.ptr = np.maximum.accumulate(fronts.ptr)
        return fronts

    #: States a :meth:`lexmin` pass aims to settle: fewer passes cost Python steps per size
    #: level, bigger ones let more pairs from above a target's value in.
    band = 1024

    def _lexmin_catch_up(self, tgt, settled, best, keyc):
        """Pair states that become targets (``m(∂L)`` below the band's end) with every
        state settled before (sources below them only), in chunks of ``cells`` cells."""
        if settled.size == 0:
            return
        step = max(1, self.cells // settled.size)
        for lo in range(0, tgt.size, step):
            t = tgt[lo:lo + step]
            src = settled[:int(np.searchsorted(settled, t[-1]))]
            if src.size:
                self._lexmin_relax_parts(t, src, best, keyc)

    def _lexmin_pass(self, beta, cbound, best, open_, todo, keyc):
        """Settle every target (``todo``) whose value is below ``beta`` (and ≤ ``cbound``).

        Level by level (sources lie in smaller levels): the level's targets are paired
        with the states this pass has settled below them (:meth:`_lexmin_relax`), then those
        whose running best is below ``beta`` are settled — final, as every state settled
        later has a value ≥ ``beta`` and ``dm ≥ 0``; a later state cannot tie either. A
        state that is no target has ``m(∂L) ≥ beta``, so no value below it.

        Folding sources into a running best is order-free (a lexicographic minimum), so a
        run of levels paired with the same prefix of this pass's settled states takes what
        was settled since in one call (up to ``cells`` cells): a level costs a call of its
        own only where something was settled just below it.
        """
        lv = self.levels
        nlev = lv.size - 1
        ready = np.flatnonzero(todo & (best[0] < beta))
        if ready.size == 0:
            return
        counts = np.add.reduceat(todo, lv[:-1])               # targets per level
        upto = np.zeros(nlev + 1, np.int64)                   # settled prefix paired in
        upto[nlev] = -1                                       # (a sentinel run end)
        bounds = lv.tolist()
        level_of = self._level_of()
        maybe = np.zeros(nlev, bool)                          # a target below beta there
        maybe[level_of[ready]] = True
        new = np.zeros(0, np.int64)                           # settled this pass, ascending
        for lvl in range(int(level_of[ready[0]]), nlev):
            if upto[lvl] < new.size:
                src = new[upto[lvl]:]
                run = lvl + int(np.argmax(upto[lvl:] != upto[lvl]))   # same prefix paired in
                fit = np.cumsum(counts[lvl:run]) * src.size <= self.cells
                e = lvl + max(1, int(np.argmin(fit)) if not fit.all() else fit.size)
                tgt = bounds[lvl] + np.flatnonzero(todo[bounds[lvl]:bounds[e]])
                step = max(1, self.cells // src.size)
                for lo in range(0, tgt.size, step):
                    self._lexmin_relax_parts(tgt[lo:lo + step], src, best, keyc)
                maybe[level_of[tgt[best[0, tgt] < beta]]] = True
                upto[lvl:e] = new.size
            if counts[lvl] and maybe[lvl]:
                a, b = bounds[lvl], bounds[lvl + 1]
                tgt = a + np.flatnonzero(todo[a:b])
                c = best[0, tgt]
                done = tgt[(c < beta) & (c <= cbound)]
                if done.size:
                    open_[done] = todo[done] = False
                    keyc[done] = best[0, done] - self.two_mL[done]
                    new = np.concatenate([new, done])
                    counts[lvl] -= done.size

    def _level_of(self) -> np.ndarray:
        """Each state's size level (index into :attr:`levels`)."""
        if not hasattr(self, "_levels_of"):
            self._levels_of = np.repeat(np.arange(self.levels.size - 1), np.diff(self.levels))
        return self._levels_of

    def _lexmin_relax_parts(self, tgt, src, best, keyc):
        """:meth:`_lexmin_relax`, the targets cut into parts side by side on every core
        (:mod:`planner.threads`): a target's running best reads only settled sources and is
        written only by its own part, so the parts are independent."""
        parts = _parts(tgt.size * src.size, tgt.size)
        if len(parts) == 1:
            self._lexmin_relax(tgt, src, best, keyc)
        else:
            map_ordered(lambda part: self._lexmin_relax(tgt[part], src, best, keyc), parts)

    def _lexmin_relax(self, tgt, src, best, keyc):
        """Fold the pairs ``src → tgt`` (settled sources, open targets) into the targets'
        running bests ``best`` = (c, −saved, source), lexicographically least wins.

        Cells are cut before the inclusion test by the peak test and by ``c_i`` above the
        target's running best (``dm ≥ 0``: such a pair can neither win nor tie); ``dt`` is
        computed only for the pairs that reach the least ``c``. (A bound on ``dm`` before
        computing it — ``c_i + m(∂L_j) − min(m(∂L_i), m(∂L_j))`` — cut too few pairs on
        GoogLeNet and the generated CNNs to pay for itself; bench/NOTES_scale.md.)
        """
        bc = best[0]
        ok = keyc[None, src] <= self.thr[tgt, None]          # the peak test
        ok &= bc[None, src] <= bc[tgt, None]                 # c only grows
        r, col = self._inclusion(tgt, src, ok)
        if r.size == 0:
            return
        s_id = src[col]
        tables = self.bnodes[2] if self.pairs is None else None
        if tables is not None:                               # one table index: dm, then dt
            idx = self._bnd_index(tgt[r], s_id)
            nc = bc[s_id] + tables[1][idx]
        else:
            nc = bc[s_id] + self.delta_m(tgt[r], s_id)
        starts = run_starts(r)
        rows = r[starts]
        ub = bc[tgt]
        ub[rows] = np.minimum(ub[rows], np.minimum.reduceat(nc, starts))
        tie = np.flatnonzero(nc == ub[r])                    # reach the least c: may win
        r, s_id = r[tie], s_id[tie]
        dt = tables[0][idx[tie]] if tables is not None else self.delta_t(tgt[r], s_id)
        ns = dt - best[1, s_id]                              # saved of the candidates
        pick = self._lexmin_pick(r, ns, tgt.size)
        r, ns, s_id = r[pick], -ns[pick], s_id[pick]
        j, nc = tgt[r], ub[r]
        cur = best[:, j]
        win = (nc < cur[0]) | ((nc == cur[0]) & ((ns < cur[1]) | ((ns == cur[1])
                                                                  & (s_id < cur[2]))))
        best[:, j[win]] = nc[win], ns[win], s_id[win]

    @staticmethod
    def _lexmin_pick(rows, ns, width: int):
        """Per run of equal ``rows`` (ascending, each < ``width``; sources ascending
        within): the index of the largest ``ns``, the first (least source id) among equals."""
        starts = run_starts(rows)
        top = np.full(width, -INF, np.int64)
        top[rows[starts]] = np.maximum.reduceat(ns, starts)
        idx = np.flatnonzero(ns == top[rows])
        return idx[run_starts(rows[idx])]

    def memory_fronts(self, upper: int | None = None) -> Fronts:
        """:meth:`lexmin` pruned at ``upper`` (a feasible plan's ckpt), unpruned if that fails."""
        if upper is not None:
            fronts = self.lexmin(upper)
            if has_end(fronts):
                return fronts
        return self.lexmin()
