"""An admissible bound for the exact search: the fractional checkpoint knapsack.

The last block of a plan holds a sink, so all checkpoints together fit in
``cap0 = B − 2·m(sink)``. An entry ``(s, c)`` of ``L_j`` can therefore still save at most the
fractional knapsack of the checkpointable nodes outside ``L_j`` (value ``t``, weight ``m``,
capacity ``cap0 − c``): its plans recompute at least ``T − s − knapsack_j(cap0 − c)``.
:class:`KnapsackBound` answers that for many (state, capacity) pairs at once, exactly;
:meth:`KnapsackBound.upper` gives a cheaper upper bound of it (for filters over many pairs)
and :meth:`KnapsackBound.reaches` compares it with a threshold, exactly, reading the exact
tables only where the per-state grid of capacities cannot tell.

Tables: per state, the nodes outside it in exact ``t/m`` order with their running ``m`` and
``t`` sums — only the nodes outside (those inside add nothing) and only up to the first one
whose running ``m`` passes ``cap_max`` (the largest capacity a budget asks for; nothing past
it is read). They are built in blocks of states (:data:`KNAPSACK_BLOCK_CELLS` dense cells at a
time) into flat ragged arrays, so every family size gets per-state tables: dense, states ×
nodes of int64 sums would not fit on big families; ragged and truncated they are int32
running ``m``, int16 running ``t`` and int16 item ids, a fraction of that (sizes and build
times: bench/NOTES_scale.md, "Figures formerly quoted in docstrings"). The blocks are built
side by side on every core (:mod:`planner.threads`), each straight into its region of the
arrays (room for every item outside its states; row ``j`` is ``[start[j], stop[j])``, what
a block does not keep is never written): no second copy to concatenate, which lowers the
solve's peak resident memory and its page faults (figures: bench/NOTES_scale.md).

Example::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph, exact_family
    >>> g = DPGraph(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]),
    ...             src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]))   # a diamond
    >>> fam = exact_family(g)
    >>> kb = KnapsackBound(fam, g)
    >>> kb(np.zeros(3, np.int64), np.array([0, 4, 5])).tolist()   # from ∅: 0 → 10 → 10 + 1/2
    [0, 10, 10]
    >>> bool(np.all(kb.upper(np.zeros(3, np.int64), np.array([0, 4, 5])) >= [0, 10, 10]))
    True
"""

from __future__ import annotations

from functools import cmp_to_key

import numpy as np

from planner.arrays import run_starts
from planner.threads import map_ordered

__all__ = ["KnapsackBound", "KNAPSACK_BLOCK_CELLS", "UPPER_GRID", "checkpoint_room",
           "root_split_ratio", "root_knapsack"]


def checkpoint_room(g, budget: int) -> int:
    """``cap0 = B − 2·m(sink)``: all checkpoints together fit in it (the last block holds a
    sink, the lightest one at best; ``B`` without sinks). Negative: no plan holds one."""
    has_succ = np.zeros(g.n, bool)
    has_succ[g.src] = True
    sinks = np.flatnonzero(~has_succ)
    return int(budget) - (2 * int(g.m[sinks].min()) if sinks.size else 0)


def _ratio_order(m: np.ndarray, t: np.ndarray, items: np.ndarray) -> np.ndarray:
    """``items`` by ``t/m`` descending, exactly (``m = 0`` first): the fractional-knapsack order.

    Exact, not floats (a misordered pair would make the bound inadmissible): ``t_a/m_a`` is
    compared with ``t_b/m_b`` as ``t_a·m_b`` against ``t_b·m_a`` in Python integers; equal
    ratios keep their order (a stable sort).
    """
    def before(a, b):
        ma, mb = int(m[a]), int(m[b])
        if ma == 0 or mb == 0:
            return (mb == 0) - (ma == 0)        # m = 0 first
        return int(t[b]) * ma - int(t[a]) * mb   # < 0: a's ratio is larger

    # A stable sort by the float ratio orders every pair whose floats differ as the exact
    # comparison does (rounding is monotone); only runs of equal floats are re-sorted exactly.
    items = np.asarray(items, dtype=np.int64)
    mm, tt = m[items], t[items]
    key = np.where(mm == 0, -np.inf, -(tt / np.maximum(mm, 1)))
    by_key = np.argsort(key, kind="stable")
    order, key = items[by_key], key[by_key]
    starts = run_starts(key)
    stops = np.r_[starts[1:], key.size]
    tied = (stops - starts > 1) & (key[starts] > -np.inf)
    for a, b in zip(starts[tied].tolist(), stops[tied].tolist()):
        order[a:b] = sorted(order[a:b].tolist(), key=cmp_to_key(before))
    return order


def _item_order(g) -> np.ndarray:
    """The knapsack's items — the nodes with a successor (a sink is never a checkpoint) — in
    ratio order (:func:`_ratio_order`)."""
    has_succ = np.zeros(g.n, bool)
    has_succ[g.src] = True
    return _ratio_order(g.m, g.t, np.flatnonzero(has_succ))


def _root_split(g, cap: int):
    """``(order, at, m, t)``: the items in ratio order, the position of the item the root's
    fractional knapsack (from ∅) splits at ``cap`` (``order.size``: every item fits) and the
    ``m`` and ``t`` of the whole items before it."""
    order = _item_order(g)
    cm = np.cumsum(g.m[order])
    at = int(np.searchsorted(cm, cap, side="right"))
    before = (int(cm[at - 1]), int(g.t[order[:at]].sum())) if at else (0, 0)
    return order, at, *before


def root_split_ratio(g, cap: int) -> float:
    """The ``t/m`` of the item the fractional knapsack over every checkpointable node
    (the root's, from ∅) splits at capacity ``cap`` (0.0 where every item fits): its own
    optimal price on memory, around which :mod:`planner.dp.chain_bound` prices its
    relaxation. Reads no per-state tables."""
    order, at, _, _ = _root_split(g, cap)
    if at >= order.size:
        return 0.0
    v = order[at]
    return int(g.t[v]) / max(int(g.m[v]), 1)


def root_knapsack(g, cap: int) -> int:
    """The fractional knapsack from ∅ at ``cap`` (floored): what :class:`KnapsackBound`
    answers for state ∅, in one cumulative sum over the items instead of every state's
    tables (the approximate DP's first bound needs only this one value)."""
    cap = max(0, min(int(cap), int(g.m.sum())))
    order, at, cm, ct = _root_split(g, cap)
    if at >= order.size:
        return ct
    v = order[at]
    return ct + (cap - cm) * int(g.t[v]) // max(int(g.m[v]), 1)


#: Dense cells (states × items) per block while the tables are built: bounds the transient
#: memory (a few int64 arrays of this many cells); 0 builds one state at a time.
KNAPSACK_BLOCK_CELLS = 1 << 20
#: Capacities per state at which :meth:`KnapsackBound.upper` keeps a tangent of the knapsack.
UPPER_GRID = 64


def _int_dtype(top: int):
    """The narrowest of int16/32/64 that holds 0..top."""
    return np.int16 if top < (1 << 15) else np.int32 if top < (1 << 31) else np.int64


class KnapsackBound:
    """Most ``t`` that checkpoints of total ``m ≤ cap`` outside a state can hold (per pair).

    ``cap_max``: the largest capacity asked (None: any). The tables are kept on the family for
    the next budget and rebuilt only when one asks for more (a larger ``cap_max``).
    """

    def __init__(self, fam, g, cap_max: int | None = None):
        self.fam, self.L = fam, fam.num_sets
        self.T = int(g.t.sum())
        self.span = int(g.m.sum()) + 1                      # > any ckpt
        cap_max = self.span - 1 if cap_max is None else max(0, min(int(cap_max), self.span - 1))
        key = (g.m.tobytes(), g.t.tobytes())
        cached = fam.cache.get("knapsack")
        if cached is None or cached["key"] != key or cached["cap_max"] < cap_max:
            cached = self._tables(fam, g, cap_max)
            cached["key"] = key
            fam.cache["knapsack"] = cached
        self.__dict__.update({k: v for k, v in cached.items() if k != "key"})

    # ------------------------------------------------------------------------- tables
    def _tables(self, fam, g, cap_max: int) -> dict:
        """Ragged per-state tables (module docstring) and the tangents of :meth:`upper`.

        Row ``j`` holds, for the nodes outside ``L_j`` in ratio order up to the first whose
        running ``m`` passes ``cap_max``: the running ``m`` and ``t`` after it and its index
        in the order. ``upper`` keeps, at the capacities ``x_g = g·cap_max // G``, what the
        exact query reads (sums of the whole items taken and the split item's ratio)."""
        order = _item_order(g)
        N, L, G = order.size, self.L, UPPER_GRID
        k_m, k_t = g.m[order].astype(np.int64), g.t[order].astype(np.int64)
        mdt, tdt = _int_dtype(self.span), _int_dtype(self.T + 1)
        self.mdt, self.tdt = mdt, tdt                       # sums kept, and accumulated in:
        self.k_m_acc = g.m[order].astype(np.dtype(mdt).str.replace("i", "u"))
        self.k_t_acc = g.t[order].astype(np.dtype(tdt).str.replace("i", "u"))
        k_div = np.maximum(k_m, 1)
        out = dict(cap_max=cap_max, N=N, k_m=k_m, k_t=k_t, k_div=k_div, G=G)
        grid = (np.arange(G + 1, dtype=np.int64) * cap_max) // G
        idt = np.int16 if N < (1 << 15) else np.int32
        if N == 0:
            z = np.zeros(0, np.int64)
            zg = np.zeros(L * (G + 1), np.int64)
            out.update(start=np.zeros(L, np.int64), stop=np.zeros(L, np.int64), cm=z.astype(mdt),
                       ct=z.astype(tdt), item=z.astype(idt), g_ct=zg, g_cm=zg, g_val=zg,
                       g_r=zg.astype(float), g_pos=zg.astype(np.int32))
            return out
        members = fam.members(g.n)[order]                   # [N, L]: item inside L_j
        step = max(1, min(KNAPSACK_BLOCK_CELLS // N, (1 << 62) // self.span))
        blocks = [(a, min(L, a + step)) for a in range(0, L, step)]
        # Each block writes its rows into a region with room for every item outside them;
        # what it keeps fills the region's start and the rest is never written, so never
        # resident: the tables are built in place, without a second copy to concatenate.
        lo = np.array([a for a, _ in blocks])
        room = N * np.diff(np.r_[lo, L]) - np.add.reduceat(members.sum(axis=0), lo)
        region = np.r_[0, np.cumsum(room)]
        out.update(start=np.zeros(L, np.int64), stop=np.zeros(L, np.int64),
                   cm=np.empty(region[-1], mdt), ct=np.empty(region[-1], tdt),
                   item=np.empty(region[-1], idt))
        out.update({k: np.empty(L * (G + 1), dt) for k, dt in (
            ("g_ct", np.int64), ("g_cm", np.int64), ("g_val", np.int64), ("g_r", float),
            ("g_pos", np.int32))})

        def fill(i: int) -> None:
            a, b = blocks[i]
            cnt, *rows = self._block(~members[:, a:b].T, k_m, k_t, k_div, grid, cap_max)
            at = int(region[i])
            out["start"][a:b] = at + np.cumsum(cnt) - cnt
            out["stop"][a:b] = out["start"][a:b] + cnt
            for key, val in zip(("cm", "ct", "item"), rows[:3]):
                out[key][at:at + val.size] = val
            for key, val in zip(("g_ct", "g_cm", "g_val", "g_r", "g_pos"), rows[3:]):
                out[key][a * (G + 1):b * (G + 1)] = val

        map_ordered(fill, range(len(blocks)))
        return out

    def _block(self, outside, k_m, k_t, k_div, grid, cap_max: int):
        """One block of states' rows (``outside``: [rows, N], item outside the state), as
        flat arrays by state then ratio order: per row the count kept, the running ``m`` and
        ``t`` and the item of each entry kept; and per row and grid capacity ``x_g``: the
        ``t`` and ``m`` of the whole items taken, the knapsack's value there and the split
        item's ratio (0: all fit) — :meth:`upper`'s and :meth:`reaches`'s tables.

        Running sums: one 1-D cumsum over the block's outside entries, restarted per row
        by subtracting each row's start; the entries kept are a prefix of each row (up to
        the first whose running ``m`` before it passes ``cap_max``); the grid positions are
        one ``searchsorted`` over ``row·span + running m`` (sorted)."""
        outside = np.ascontiguousarray(outside)
        R, span = outside.shape[0], self.span
        rows, cols = np.nonzero(outside)                    # by state, then ratio order
        cnt = outside.sum(axis=1)
        starts = np.cumsum(cnt) - cnt
        cm = self._row_sums(self.k_m_acc[cols], starts, cnt).view(self.mdt)
        ct = self._row_sums(self.k_t_acc[cols], starts, cnt).view(self.tdt)
        keep = cm <= cap_max + k_m[cols]                    # running m before ≤ cap_max
        if not keep.all():                                  # a prefix of every row
            ck = np.cumsum(keep)
            cnt = np.where(cnt > 0, ck[np.maximum(starts + cnt - 1, 0)]
                           - np.where(starts > 0, ck[np.maximum(starts - 1, 0)], 0), 0)
            starts = np.cumsum(cnt) - cnt
            rows, cols, cm, ct = rows[keep], cols[keep], cm[keep], ct[keep]
        G1 = grid.size
        q = (np.arange(R, dtype=np.int64)[:, None] * span + grid[None, :]).ravel()
        pos = np.searchsorted(rows * span + cm, q, side="right")   # first entry with cm > x_g
        first, end = np.repeat(starts, G1), np.repeat(starts + cnt, G1)
        taken = pos > first
        prev = np.maximum(pos - 1, 0)
        g_ct = np.where(taken, ct[np.minimum(prev, max(ct.size - 1, 0))] if ct.size else 0, 0)
        g_cm = np.where(taken, cm[np.minimum(prev, max(cm.size - 1, 0))] if cm.size else 0, 0)
        split = pos < end
        it = cols[np.minimum(pos, max(cols.size - 1, 0))] if cols.size else np.zeros_like(pos)
        xg = np.tile(grid, R)
        g_val = g_ct + np.where(split, (xg - g_cm) * k_t[it] // k_div[it], 0)
        g_r = np.where(split, k_t[it] / k_div[it], 0.0)
        return cnt, cm, ct, cols, g_ct, g_cm, g_val, g_r, pos - first

    @staticmethod
    def _row_sums(v: np.ndarray, starts: np.ndarray, cnt: np.ndarray) -> np.ndarray:
        """Running sums of ``v`` restarted at every row start, in ``v``'s unsigned dtype:
        one flat cumsum minus each row's start. Unsigned sums wrap modulo 2^bits, so the
        difference is exact wherever the row's own sum fits (the tables' dtype is picked
        so it does), and no int64 copy of the block is made."""
        acc = np.cumsum(v, dtype=v.dtype)
        if acc.size == 0:
            return acc
        base = np.where(starts > 0, acc[np.maximum(starts - 1, 0)], 0).astype(v.dtype)
        acc -= np.repeat(base, cnt)
        return acc

    # ------------------------------------------------------------------------- queries
    def _caps(self, cap) -> np.ndarray:
        """``cap`` as int64, checked against the tables' reach (past ``m(V)`` all fits)."""
        cap = np.minimum(np.asarray(cap, np.int64), self.span - 1)
        if cap.size and int(cap.max()) > self.cap_max:      # the tables stop there
            raise ValueError(f"knapsack capacity {int(cap.max())} > cap_max {self.cap_max}")
        return cap

    def _grid_at(self, states: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """Per pair, its entry in the grid tables: the grid capacity ``x_g ≤ cap`` of its state."""
        return states * (self.G + 1) + cap * self.G // max(self.cap_max, 1)

    def _tangent(self, idx: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """The knapsack's tangent at grid entry ``idx``, read at ``cap``: the whole items taken
        at ``x_g`` plus the split item's ratio stretched to ``cap`` (a float product, its
        rounding covered by 1/1000) — at least the knapsack at ``cap`` (it is concave)."""
        lift = (cap - self.g_cm.take(idx)) * self.g_r.take(idx) + 1e-3
        return self.g_ct.take(idx) + lift.astype(np.int64)

    def _locate(self, states: np.ndarray, cap: np.ndarray):
        """Per pair: ``t`` and ``m`` of the whole items taken at ``cap`` and the split item
        (−1: every item fits). One binary search per pair over its state's row between the
        grid positions around ``cap`` (all pairs at once): the split item is the first whose
        running ``m`` passes ``cap``."""
        first = self.start[states]
        end = self.stop[states]
        gi = self._grid_at(states, cap)                     # x_g ≤ cap
        lo = first + self.g_pos.take(gi)                    # the answer lies between the
        hi = first + self.g_pos.take(np.minimum(gi + 1, (states + 1) * (self.G + 1) - 1))
        top = max(self.cm.size - 1, 0)                      # grid positions around cap
        width = int((hi - lo).max(initial=0))
        for _ in range(width.bit_length()):                 # first index with cm > cap
            mid = (lo + hi) >> 1
            go = (self.cm[np.minimum(mid, top)] <= cap) & (mid < hi)
            lo = np.where(go, mid + 1, lo)
            hi = np.where(go, hi, mid)
        taken = lo > first
        prev = np.maximum(lo - 1, 0)
        ct = np.where(taken, self.ct[prev], 0).astype(np.int64)
        cm = np.where(taken, self.cm[prev], 0).astype(np.int64)
        it = np.where(lo < end, self.item[np.minimum(lo, top)], -1).astype(np.int64)
        return ct, cm, it

    def __call__(self, states: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """Most ``t`` that checkpoints of total ``m ≤ cap`` (0 ≤ cap ≤ cap_max) outside
        ``L_state`` can hold: the fractional knapsack (greedy by ``t/m``), floored."""
        states = np.asarray(states, np.int64)
        cap = self._caps(cap)
        if self.N == 0 or states.size == 0:
            return np.zeros(states.size, np.int64)
        ct, cm, it = self._locate(states, cap)
        itc = np.maximum(it, 0)
        return ct + np.where(it >= 0, (cap - cm) * self.k_t[itc] // self.k_div[itc], 0)

    def upper(self, states: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """An upper bound of :meth:`__call__` by three gathers: the knapsack is concave in
        ``cap``, so it lies below its tangent at any capacity — here at the grid capacity
        ``x_g ≤ cap`` next to it (:meth:`_tangent`)."""
        states = np.asarray(states, np.int64)
        cap = self._caps(cap)
        if self.N == 0 or states.size == 0:
            return np.zeros(states.size, np.int64)
        return self._tangent(self._grid_at(states, cap), cap)

    def _first_grid_reaching(self, states: np.ndarray, req: np.ndarray):
        """The start the inverse queries share: ``(out, pos, st, r, gi)``.

        ``out``: per pair, 0 (the answer where ``req ≤ 0``, and ``cap_max + 1`` everywhere
        ``req > 0`` when there are no items); ``pos``: the pairs still to answer (None: none);
        per such pair its state ``st``, request ``r`` and ``gi``, the first grid index whose
        value reaches ``r`` (``G + 1``: none does) — one ``searchsorted`` over every state's
        grid values, ascending per state."""
        states = np.asarray(states, np.int64)
        req = np.asarray(req, np.int64)
        out = np.zeros(states.size, np.int64)
        pos = np.flatnonzero(req > 0)
        if pos.size == 0 or self.N == 0:
            out[pos] = self.cap_max + 1
            return out, None, None, None, None
        st, r = states[pos], req[pos]
        G1, w = self.G + 1, self.T + 2
        if getattr(self, "_gkey", None) is None:            # per state: grid values, sorted
            self._gkey = (np.arange(self.L, dtype=np.int64)[:, None] * w
                          + self.g_val.reshape(self.L, G1)).ravel()
        gi = np.searchsorted(self._gkey, st * w + np.minimum(r, w - 1)) - st * G1
        return out, pos, st, r, gi

    def least_cap(self, states: np.ndarray, req: np.ndarray) -> np.ndarray:
        """The least capacity ``x`` with ``self(states, x) ≥ req`` (0 where ``req ≤ 0``,
        ``cap_max + 1`` where no ``x ≤ cap_max`` reaches it): the knapsack's inverse.

        The floored knapsack at ``x`` is ``ct_k + ⌊(x − cm_k)·t/m⌋`` with ``(cm_k, ct_k)``
        the running sums before the split item (``t``, ``m``), so it reaches ``req`` from
        the first item whose running ``t`` after it reaches ``req`` on, at
        ``x = cm_k + ⌈(req − ct_k)·m/t⌉`` (that item has ``t > 0``: the running ``t`` grew
        past ``req``). Rows hold every item up to ``cap_max``, so a row whose last running
        ``t`` stays below ``req`` has no such ``x ≤ cap_max``. One binary search per pair
        over its row's running ``t`` (all pairs at once), between the grid positions around
        the answer: the first grid capacity whose value reaches ``req`` (one ``searchsorted``
        over every state's grid values, ascending per state) and the one before it (whose
        whole items all stay below ``req``)."""
        out, pos, st, r, gi = self._first_grid_reaching(states, req)
        if pos is None:
            return out
        G1 = self.G + 1
        found = gi < G1                                     # the first grid value ≥ req
        base = st * G1
        first, end = self.start[st], self.stop[st]
        lo = first + np.where(gi > 0, self.g_pos.take(base + np.maximum(gi - 1, 0)), 0)
        hi = np.minimum(first + self.g_pos.take(base + np.minimum(gi, G1 - 1)), end - 1) + 1
        lo = np.minimum(lo, hi)                             # (rows not found: read nothing)
        top = max(self.ct.size - 1, 0)
        width = int((hi - lo).max(initial=0))
        for _ in range(width.bit_length() + 1):            # first index with ct ≥ req
            mid = (lo + hi) >> 1
            go = (self.ct[np.minimum(mid, top)] < r) & (mid < hi)
            lo = np.where(go, mid + 1, lo)
            hi = np.where(go, hi, mid)
        found &= lo < end
        k = np.minimum(lo, top)
        taken = lo > first
        prev = np.maximum(lo - 1, 0)
        ct = np.where(taken, self.ct[prev], 0).astype(np.int64)
        cm = np.where(taken, self.cm[prev], 0).astype(np.int64)
        it = np.where(found, self.item[k], 0).astype(np.int64)    # (past a row: unwritten)
        t_it = np.maximum(self.k_t[it], 1)
        x = cm + -((-(r - ct) * self.k_m[it]) // t_it)     # ceil((r − ct)·m / t)
        out[pos] = np.where(found, np.minimum(x, self.cap_max + 1), self.cap_max + 1)
        return out

    def least_cap_lower(self, states: np.ndarray, req: np.ndarray) -> np.ndarray:
        """A lower bound of :meth:`least_cap` from the grid alone (no search in the rows).

        The first grid capacity ``x_g`` whose value reaches ``req`` is found as in
        :meth:`least_cap`; the one before, ``x_{g−1}``, falls short, and the knapsack lies
        below its tangent there (concave): the whole items taken at ``x_{g−1}`` plus the
        split item's ratio ``r`` stretched on. So no capacity under ``cm + (req − ct) / r``
        (nor ``x_{g−1} + 1``) reaches ``req``. The two agree until the answer passes the
        split item; a cut by this bound is a little weaker, at a fraction of the work
        (the exact inverse had been the search's largest per-pair cost)."""
        out, pos, st, r, gi = self._first_grid_reaching(states, req)
        if pos is None:
            return out
        G1 = self.G + 1
        found = gi < G1                                     # the first grid value ≥ req
        prev = st * G1 + np.clip(gi - 1, 0, G1 - 1)
        x_prev = np.maximum(gi - 1, 0) * self.cap_max // self.G
        ratio = self.g_r.take(prev)
        with np.errstate(divide="ignore", invalid="ignore"):
            reach = self.g_cm.take(prev) + (r - self.g_ct.take(prev)) / ratio
        tangent = np.where(ratio > 0, np.floor(np.minimum(reach, 2.0 ** 62)) - 1, 0)
        low = np.maximum(x_prev + 1, tangent.astype(np.int64))
        out[pos] = np.where(found, np.where(gi > 0, low, 0), self.cap_max + 1)
        return out

    def reaches(self, states: np.ndarray, cap: np.ndarray, req: np.ndarray) -> np.ndarray:
        """Whether ``self(states, cap) ≥ req``, reading the exact knapsack only where the
        grid cannot tell: the value at the grid capacity ``x_g ≤ cap`` is a lower bound
        (the knapsack grows with ``cap``), the tangent there an upper bound (:meth:`upper`)."""
        states = np.asarray(states, np.int64)
        cap = self._caps(cap)
        if self.N == 0 or states.size == 0:
            return np.zeros(states.size, np.int64) >= req
        idx = self._grid_at(states, cap)
        out = self.g_val.take(idx) >= req
        unsure = np.flatnonzero(~out & (self._tangent(idx, cap) >= req))
        if unsure.size:
            out[unsure] = self(states[unsure], cap[unsure]) >= req[unsure]
        return out
