"""An admissible bound for the exact search: the fractional checkpoint knapsack.

The last block of a plan holds a sink, so all checkpoints together fit in
``cap0 = B − 2·m(sink)``. An entry ``(s, c)`` of ``L_j`` can therefore still save at most the
fractional knapsack of the checkpointable nodes outside ``L_j`` (value ``t``, weight ``m``,
capacity ``cap0 − c``): its plans recompute at least ``T − s − knapsack_j(cap0 − c)``.
:class:`KnapsackBound` answers that for many (state, capacity) pairs at once — one
``searchsorted`` over every state's prefix sums in exact ``t/m`` order.

Example::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph, exact_family
    >>> g = DPGraph(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]),
    ...             src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]))   # a diamond
    >>> fam = exact_family(g)
    >>> kb = KnapsackBound(fam, g)
    >>> kb(np.zeros(3, np.int64), np.array([0, 4, 5])).tolist()   # from ∅: 0 → 10 → 10 + 1/2
    [0, 10, 10]
"""

from __future__ import annotations

from functools import cmp_to_key

import numpy as np

__all__ = ["KnapsackBound", "KNAPSACK_TABLE_MAX_CELLS"]


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


#: Per-state knapsack tables (two int64 [L, items] arrays) up to this many cells; past it
#: the bound uses one table over all nodes, capped by the compute outside the set.
KNAPSACK_TABLE_MAX_CELLS = 1 << 23


class KnapsackBound:
    """Most ``t`` that checkpoints of total ``m ≤ cap`` outside a state can hold (per pair).

    Budget-free: the tables (per state, the prefix sums of ``m`` and ``t`` over the
    checkpointable nodes outside it in exact ``t/m`` order, plus one flat sorted copy of the
    ``m`` sums) are kept on the family for the next budget.
    """

    def __init__(self, fam, g):
        self.fam, self.L = fam, fam.num_sets
        self.T = int(g.t.sum())
        self.span = int(g.m.sum()) + 1                      # > any ckpt
        has_succ = np.zeros(g.n, bool)
        has_succ[g.src] = True
        key = (g.m.tobytes(), g.t.tobytes())
        cached = fam.cache.get("knapsack")
        if cached is None or cached["key"] != key:
            cached = self._tables(fam, g, has_succ)
            cached["key"] = key
            fam.cache["knapsack"] = cached
        self.k_m, self.k_t, self.k_div = cached["k_m"], cached["k_t"], cached["k_div"]
        self.cm, self.ct, self.flat_cm = cached["cm"], cached["ct"], cached["flat_cm"]

    def _tables(self, fam, g, has_succ) -> dict:
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
        return dict(k_m=k_m, k_t=k_t, k_div=np.maximum(k_m, 1), cm=cm, ct=ct, flat_cm=flat_cm)

    def __call__(self, states: np.ndarray, cap: np.ndarray) -> np.ndarray:
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

