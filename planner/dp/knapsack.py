"""An admissible bound for the exact search: the fractional checkpoint knapsack.

The last block of a plan holds a sink, so all checkpoints together fit in
``cap0 = B − 2·m(sink)``. An entry ``(s, c)`` of ``L_j`` can therefore still save at most the
fractional knapsack of the checkpointable nodes outside ``L_j`` (value ``t``, weight ``m``,
capacity ``cap0 − c``): its plans recompute at least ``T − s − knapsack_j(cap0 − c)``.
:class:`KnapsackBound` answers that for many (state, capacity) pairs at once, exactly, and
:meth:`KnapsackBound.upper` a cheaper upper bound of it (for filters over many pairs).

Tables: per state, the nodes outside it in exact ``t/m`` order with their running ``m`` and
``t`` sums — only the nodes outside (those inside add nothing) and only up to the first one
whose running ``m`` passes ``cap_max`` (the largest capacity a budget asks for; nothing past
it is read). They are built in blocks of states (:data:`KNAPSACK_BLOCK_CELLS` dense cells at a
time) into flat ragged arrays, so every family size gets per-state tables: cnn29's 29,252
states × 1,410 nodes would be 41M cells dense (~1 GB as int64 sums), ragged and truncated a
fraction of that in int32.

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

__all__ = ["KnapsackBound", "KNAPSACK_BLOCK_CELLS", "UPPER_GRID"]


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

    return np.array(sorted(items.tolist(), key=cmp_to_key(before)), dtype=np.int64)


#: Dense cells (states × items) per block while the tables are built: bounds the transient
#: memory (a few int64 arrays of this many cells); 0 builds one state at a time.
KNAPSACK_BLOCK_CELLS = 1 << 20
#: Capacities per state at which :meth:`KnapsackBound.upper` keeps a tangent of the knapsack.
UPPER_GRID = 32


def _int_dtype(top: int):
    return np.int32 if top < (1 << 31) else np.int64


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
        has_succ = np.zeros(g.n, bool)
        has_succ[g.src] = True
        key = (g.m.tobytes(), g.t.tobytes())
        cached = fam.cache.get("knapsack")
        if cached is None or cached["key"] != key or cached["cap_max"] < cap_max:
            cached = self._tables(fam, g, has_succ, cap_max)
            cached["key"] = key
            fam.cache["knapsack"] = cached
        self.__dict__.update({k: v for k, v in cached.items() if k != "key"})

    # ------------------------------------------------------------------------- tables
    def _tables(self, fam, g, has_succ, cap_max: int) -> dict:
        """Ragged per-state tables (module docstring) and the tangents of :meth:`upper`.

        Row ``j`` holds, for the nodes outside ``L_j`` in ratio order up to the first whose
        running ``m`` passes ``cap_max``: the running ``m`` and ``t`` after it and its index
        in the order. ``upper`` keeps, at the capacities ``x_g = g·cap_max // G``, what the
        exact query reads (sums of the whole items taken and the split item's ratio)."""
        order = _ratio_order(g.m, g.t, np.flatnonzero(has_succ))
        N, L, G = order.size, self.L, UPPER_GRID
        k_m, k_t = g.m[order].astype(np.int64), g.t[order].astype(np.int64)
        mdt, tdt = _int_dtype(self.span), _int_dtype(self.T + 1)
        k_div = np.maximum(k_m, 1)
        out = dict(cap_max=cap_max, N=N, k_m=k_m, k_t=k_t, k_div=k_div)
        off = np.zeros(L + 1, np.int64)
        grid = (np.arange(G + 1, dtype=np.int64) * cap_max) // G
        if N == 0:
            z = np.zeros(0, np.int64)
            zg = np.zeros(L * (G + 1), np.int64)
            out.update(off=off, cm=z.astype(mdt), ct=z.astype(tdt), item=z.astype(np.int32),
                       g_ct=zg, g_cm=zg, g_val=zg, g_r=zg.astype(float), G=G, width=0)
            return out
        members = fam.members(g.n)[order]                   # [N, L]: item inside L_j
        step = max(1, KNAPSACK_BLOCK_CELLS // N)
        cms, cts, items = [], [], []
        for a in range(0, L, step):
            b = min(L, a + step)
            outside = np.ascontiguousarray(~members[:, a:b].T)      # [rows, N]
            rows, cols = np.nonzero(outside)                # by state, then ratio order
            cnt = np.bincount(rows, minlength=b - a)
            vm, vt = k_m[cols], k_t[cols]
            cm, ct = np.cumsum(vm), np.cumsum(vt)           # running sums, restarted per row
            first = np.repeat(np.cumsum(cnt) - cnt, cnt)
            cm -= (cm - vm)[first]
            ct -= (ct - vt)[first]
            keep = np.flatnonzero(cm - vm <= cap_max)       # up to the first past cap_max
            off[a + 1:b + 1] = np.bincount(rows[keep], minlength=b - a)
            cms.append(cm[keep].astype(mdt))
            cts.append(ct[keep].astype(tdt))
            items.append(cols[keep].astype(np.int32))
        np.cumsum(off, out=off)
        out.update(off=off, cm=np.concatenate(cms), ct=np.concatenate(cts),
                   item=np.concatenate(items), width=int(np.diff(off).max(initial=0)))
        self.__dict__.update(out)
        # tangents of upper(): what the exact query reads at every state's grid capacities
        st = np.repeat(np.arange(L, dtype=np.int64), G + 1)
        ct_full, cm_full, it = self._locate(st, np.tile(grid, L))
        itc = np.maximum(it, 0)
        split = np.where(it >= 0, (np.tile(grid, L) - cm_full) * k_t[itc] // k_div[itc], 0)
        out.update(g_ct=ct_full, g_cm=cm_full, G=G, g_val=ct_full + split,
                   g_r=np.where(it >= 0, k_t[itc] / k_div[itc], 0.0))
        return out

    # ------------------------------------------------------------------------- queries
    def _caps(self, cap) -> np.ndarray:
        """``cap`` as int64, checked against the tables' reach (past ``m(V)`` all fits)."""
        cap = np.minimum(np.asarray(cap, np.int64), self.span - 1)
        if cap.size and int(cap.max()) > self.cap_max:      # the tables stop there
            raise ValueError(f"knapsack capacity {int(cap.max())} > cap_max {self.cap_max}")
        return cap

    def _locate(self, states: np.ndarray, cap: np.ndarray):
        """Per pair: ``t`` and ``m`` of the whole items taken at ``cap`` and the split item
        (−1: every item fits). One binary search per pair over its state's row (all pairs at
        once, ⌈log2 width⌉ steps): the split item is the first whose running ``m`` passes."""
        first = self.off[states]
        end = self.off[states + 1]
        lo, hi = first.copy(), end.copy()
        top = max(self.cm.size - 1, 0)
        for _ in range(int(self.width).bit_length()):        # first index with cm > cap
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
        ``cap``, so it lies below its tangent at any capacity — here the grid capacity
        ``x_g ≤ cap`` next to it: the whole items taken at ``x_g`` plus the split item's
        ratio stretched to ``cap`` (a float product, its rounding covered by 1/1000)."""
        states = np.asarray(states, np.int64)
        cap = self._caps(cap)
        if self.N == 0 or states.size == 0:
            return np.zeros(states.size, np.int64)
        idx = states * (self.G + 1) + cap * self.G // max(self.cap_max, 1)   # x_g ≤ cap
        lift = (cap - self.g_cm.take(idx)) * self.g_r.take(idx) + 1e-3
        return self.g_ct.take(idx) + lift.astype(np.int64)

    def reaches(self, states: np.ndarray, cap: np.ndarray, req: np.ndarray) -> np.ndarray:
        """Whether ``self(states, cap) ≥ req``, reading the exact knapsack only where the
        grid cannot tell: the value at the grid capacity ``x_g ≤ cap`` is a lower bound
        (the knapsack grows with ``cap``), the tangent there an upper bound (:meth:`upper`)."""
        states = np.asarray(states, np.int64)
        cap = self._caps(cap)
        if self.N == 0 or states.size == 0:
            return np.zeros(states.size, np.int64) >= req
        idx = states * (self.G + 1) + cap * self.G // max(self.cap_max, 1)
        out = self.g_val.take(idx) >= req
        lift = (cap - self.g_cm.take(idx)) * self.g_r.take(idx) + 1e-3
        unsure = np.flatnonzero(~out & (self.g_ct.take(idx) + lift.astype(np.int64) >= req))
        if unsure.size:
            out[unsure] = self(states[unsure], cap[unsure]) >= req[unsure]
        return out
