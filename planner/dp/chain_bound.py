"""A sharper admissible bound for the time-centric exact search: the Lagrangian chain bound.

Why: the checkpoint knapsack (:mod:`planner.dp.knapsack`) lets a plan save any set of nodes
that fits, but a plan's checkpoints are the boundaries of a chain of lower sets, and a cut
through parallel branches saves every branch it crosses — low ``t/m`` nodes included. On the
generated CNNs this bound puts the root much nearer the optimum than the knapsack does, and
the pass that reaches V holds a fraction of the entries the knapsack alone lets through
(figures: bench/NOTES_scale.md, "Figures formerly quoted in docstrings").

The bound is a longest path in a relaxation of the DP. States are the lower sets; a pair
``k → l`` (``L_k ⊊ L_l``) is allowed when its peak test passes at the least ckpt any entry of
``L_k`` holds, ``m(∂L_k)`` (ckpt only grows, so every pair a real chain takes is allowed);
its weight, for a price ``λ = p/Q`` on memory, is ``Q·dt − p·dm``. ``P_λ(k)`` is the longest
path from ``k`` to V. A completion of an entry ``(s, c)`` of ``L_k`` saving ``σ`` more and
adding ``δ`` ckpt has ``δ ≤ cap0 − c`` (all checkpoints fit in ``cap0``) and is such a path,
so ``Q·σ − p·δ ≤ P_λ(k)`` and ``σ ≤ (P_λ(k) + p·(cap0 − c)) / Q`` — for every ``λ ≥ 0``; the
bound is the least over a few prices. Integers throughout, so the rounding never helps a bound.

Speed: the relaxation has every feasible pair (on big families, far too many); most are
dominated. For a
pair ``k → l`` and a node ``v ∈ L_l`` that ``L_k`` can add alone (its predecessors are in
``L_k``) with ``w(v) = Q·t(v) − p·m(v) ≥ 0``, the path ``k → k∪{v} → l`` is worth at least as
much: it saves what ``k → l`` saves plus ``v`` when ``l`` closes ``v`` (the weights differ by
``w(v)`` or 0), and ``k∪{v} → l`` passes the relaxed peak test whenever ``k → l`` does
(``m(∂) − 2·m`` falls by at least ``m(v)``). So with ``Pos(k)`` those nodes (at the largest
price, where fewest are nonnegative, so one pair set serves every price) and ``U(k)`` the
largest lower set without them (every node not a descendant of ``Pos(k)``), the longest path
only needs the covers ``k → k∪{v}``, ``v ∈ Pos(k)``, and the pairs with ``L_l ⊆ U(k)``: one
bit of the inclusion matrix's row ``U(k)`` per cell (a small fraction of the pairs, every
longest path the same — ``tests/test_dp_chain_bound.py`` checks that against all pairs).

Example (a chain: each block's cut saves one node, which the knapsack cannot see)::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph, exact_family
    >>> from planner.dp.exact_search import ExactSearch
    >>> from planner.dp.solve import solve_family
    >>> g = DPGraph(m=np.array([4, 2, 2, 3, 5]), t=np.array([10, 1, 10, 10, 10]),
    ...             src=np.array([0, 1, 2, 3]), dst=np.array([1, 2, 3, 4]))
    >>> from planner.dp.knapsack import KnapsackBound
    >>> es = ExactSearch(exact_family(g), g, 17)
    >>> root, room = np.array([0]), np.array([es.cap0])
    >>> knapsack = KnapsackBound(es.fam, g)(root, room)
    >>> chain = chain_bound(es).saved_upper(root, room)
    >>> es.T - int(knapsack[0]), es.T - int(chain[0]), es.lower_bound_root()   # the search's: both
    (16, 18, 18)
    >>> r = solve_family(es.fam, g, 17, strategy="time"); es.T - r.saved   # the optimum
    20
"""

from __future__ import annotations

import numpy as np

from planner.bitsets import pack
from planner.dp.knapsack import root_split_ratio

__all__ = ["ChainBound", "chain_bound", "PRICES", "PRICE_SPAN"]

#: Prices (``λ``) the bound is computed at, geometric over ``[λ0, PRICE_SPAN·λ0]`` with ``λ0``
#: the root knapsack's split ratio (its own optimal price; the boundaries it ignores make
#: memory dearer, so the chain's best price lies at or above it). The pair set is pruned at
#: the largest price (a wider span kept several times the pairs for a root no better); more
#: prices over the span bettered no pass (figures: bench/NOTES_scale.md).
PRICES = 6
PRICE_SPAN = 1.3
#: A path value below this is "no path to V".
NEG = -(1 << 60)


def _state_ids(fam, rows: np.ndarray) -> np.ndarray:
    """The state id of each bitset row (−1: none), by a 64-bit hash of the words checked
    against the rows themselves (sorting the rows' bytes as keys costs far more)."""
    if "row_hash" not in fam.cache:
        mult = np.random.default_rng(0).integers(1, 1 << 63, fam.sets.shape[1], dtype=np.uint64) | 1
        h = (fam.sets * mult).sum(axis=1, dtype=np.uint64)
        order = np.argsort(h)
        fam.cache["row_hash"] = (mult, h[order], order)
    mult, hs, order = fam.cache["row_hash"]
    h = (rows * mult).sum(axis=1, dtype=np.uint64)
    at = np.minimum(np.searchsorted(hs, h), hs.size - 1)
    ids = order[at]
    same = (hs[at] == h) & np.all(fam.sets[ids] == rows, axis=1)
    return np.where(same, ids, -1)


def _descendants(g) -> np.ndarray:
    """bool [n, n]: row ``v`` marks ``v`` and every node reachable from it."""
    n = g.n
    succ = [[] for _ in range(n)]
    indeg = np.bincount(g.dst, minlength=n).tolist()
    for s, d in zip(g.src.tolist(), g.dst.tolist()):
        succ[s].append(d)
    order, stack = [], [v for v in range(n) if indeg[v] == 0]
    while stack:                                                # Kahn, once per graph
        v = stack.pop()
        order.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(w)
    desc = np.eye(n, dtype=bool)
    for v in reversed(order):
        if succ[v]:
            desc[v] |= desc[succ[v]].any(axis=0)
    return desc


class ChainBound:
    """``P[q, k]``: the relaxation's longest path from ``L_k`` to V at price ``p[q]/Q``
    (:data:`NEG`: none). Queries take the least over the prices."""

    def __init__(self, P: np.ndarray, p: np.ndarray, Q: int, pairs: int):
        self.P, self.p, self.Q, self.pairs = P, p, Q, pairs

    def one_price(self, cap: np.ndarray) -> None:
        """Pick, per state, the price that is least at capacity ``cap`` (one per state) for
        :meth:`saved_upper_one` / :meth:`least_cap_one`: any single price gives a bound, and
        one gather per pair is what filters over many pairs can afford."""
        val = self.P + self.p[:, None] * np.asarray(cap, np.int64)[None, :]
        q = np.argmin(val, axis=0)
        self.P1 = self.P[q, np.arange(self.P.shape[1])]
        self.p1 = self.p[q]

    def saved_upper_one(self, states: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """:meth:`saved_upper` at each state's one price (:meth:`one_price`): no smaller."""
        return (self.P1[states] + self.p1[states] * cap) // self.Q

    def least_cap_one(self, states: np.ndarray, req: np.ndarray) -> np.ndarray:
        """:meth:`least_cap` at each state's one price: no larger."""
        return -((self.P1[states] - self.Q * req) // self.p1[states])

    def saved_upper(self, states: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """Most ``saved`` a completion of an entry of ``L_state`` with ``cap0 − c = cap ≥ 0``
        can add (negative: none reaches V)."""
        val = self.P[:, states] + self.p[:, None] * np.asarray(cap, np.int64)[None, :]
        return np.floor_divide(val.min(axis=0), self.Q)

    def least_cap(self, states: np.ndarray, req: np.ndarray) -> np.ndarray:
        """A capacity below which no entry of ``L_state`` reaches ``req`` more saved:
        ``max_q ⌈(Q·req − P_q) / p_q⌉`` (every price must allow it)."""
        need = self.Q * np.asarray(req, np.int64)[None, :] - self.P[:, states]
        return (-np.floor_divide(-need, self.p[:, None])).max(axis=0)

    def reaches(self, states: np.ndarray, cap: np.ndarray, req: np.ndarray) -> np.ndarray:
        """Whether ``saved_upper(states, cap) ≥ req``, exactly."""
        val = self.P[:, states] + self.p[:, None] * np.asarray(cap, np.int64)[None, :]
        return (val >= self.Q * np.asarray(req, np.int64)[None, :]).all(axis=0)


def _prices(es):
    """``(p, Q)``: integer prices around the root knapsack's split ratio (:data:`PRICES`), or
    None where no checkpoint fits or every one does (the knapsack is then exact enough)."""
    g = es.g
    if es.cap0 <= 0:
        return None
    lam = root_split_ratio(g, es.cap0) * PRICE_SPAN ** (np.arange(PRICES) / max(PRICES - 1, 1))
    if lam[0] <= 0:
        return None
    big = int(g.t.sum()) + 1, int(g.m.sum()) + 1
    shift = int(np.ceil(np.log2((1 << 20) / lam[0])))         # least price ~2^20
    while shift > 0 and ((1 << shift) * big[0] + int(lam[-1] * (1 << shift) + 1) * big[1]
                         >= 1 << 58):
        shift -= 1
    Q = 1 << max(shift, 0)
    p = np.maximum(np.round(lam * Q).astype(np.int64), 1)
    return np.unique(p), Q


def chain_bound(es) -> ChainBound | None:
    """The chain bound of an :class:`~planner.dp.exact_search.ExactSearch` (exact family with
    its inclusion matrix; None otherwise, or where :func:`_prices` finds nothing to price).

    One walk over the states from V down, a size level of targets at a time as the search's
    passes do (sources lie in smaller levels), over the pairs the module docstring keeps."""
    fam, g = es.fam, es.g
    if fam.kind != "exact" or es.sub is None:
        return None
    priced = _prices(es)
    if priced is None:
        return None
    p, Q = priced
    L, thr, sub = es.L, es.thr, es.sub
    key0 = fam.m_bnd - es.two_mL                 # the peak test at the least ckpt of L_k
    ck, cv, cn = fam.covers                      # (k, v, k ∪ {v}): exact_family's
    top = int(p[-1])
    pos = (Q * g.t[cv] >= top * g.m[cv]) & (key0[ck] <= thr[cn])
    ck, cv, cn = ck[pos], cv[pos], cn[pos]
    # U(k): every node that is no descendant of Pos(k); its state id, by row hash
    if "descendants" not in fam.cache:
        fam.cache["descendants"] = _descendants(g)
    desc = fam.cache["descendants"]
    by_src = np.argsort(ck, kind="stable")
    first = np.flatnonzero(np.r_[True, ck[by_src][1:] != ck[by_src][:-1]]) if ck.size else ck
    has = ck[by_src][first]
    u = np.full(L, es.end, np.int64)
    if has.size:
        words = pack(desc, fam.sets.shape[1])                 # [n, words]
        everything = pack(np.ones((1, g.n), bool), fam.sets.shape[1])
        banned = np.bitwise_or.reduceat(words[cv[by_src]], first, axis=0)
        found = _state_ids(fam, everything & ~banned)
        u[has] = np.where(found >= 0, found, es.end)           # a lower set: always found
    by_tgt = np.argsort(cn, kind="stable")
    ck, cn = ck[by_tgt], cn[by_tgt]
    P = np.full((p.size, L), NEG, np.int64)
    P[:, es.end] = 0
    flat = P.ravel()
    qoff = (np.arange(p.size) * L)[:, None]
    lv = es.levels
    pairs = 0
    for a, b in reversed(list(zip(lv[1:-1].tolist(), lv[2:].tolist()))):
        live = np.flatnonzero((key0[:a] <= thr[a:b].max()) & (u[:a] >= a))
        step = max(1, es.cells // max(live.size, 1))
        for lo in range(a, b, step):
            hi = min(b, lo + step)
            src = live[u[live] >= lo]             # L_l ⊆ U(k) needs l ≤ u(k) (ids grow with size)
            l = k = np.zeros(0, np.int64)
            if src.size:
                ok = key0[None, src] <= thr[lo:hi, None]
                bits = np.unpackbits(sub[u[src], lo >> 3:((hi - 1) >> 3) + 1], axis=1,
                                     bitorder="little")[:, (lo & 7):(lo & 7) + hi - lo]
                ok &= bits.T.view(bool)
                r, c = es._subsets(lo, hi, src, ok)
                l, k = lo + r, src[c]
            i0, i1 = np.searchsorted(cn, [lo, hi])
            if i1 > i0:                           # the covers k → k ∪ {v}, v ∈ Pos(k)
                l, k = np.r_[l, cn[i0:i1]], np.r_[k, ck[i0:i1]]
            if l.size == 0:
                continue
            pairs += l.size
            dt, dm = es.deltas(l, k)
            val = Q * dt[None, :] - p[:, None] * dm[None, :] + P[:, l]
            np.maximum.at(flat, (qoff + k[None, :]).ravel(), val.ravel())
    P[P < NEG // 2] = NEG
    return ChainBound(P, p, Q, pairs)
