"""Checkpoints a plan cannot avoid once its ckpt is high: a sharper bound for the exact search.

A node ``v`` that a block ``X`` does not checkpoint has all its successors in ``X`` (else it
is in ``∂L`` of the block's set), and blocks are convex (``X = L_a \\ L_{a−1}``), so ``X``
holds the hull ``H(v)`` of ``v`` and its successors: every node on a path from ``v`` to one
of them. The block's peak test reads ``c_{a−1} + 2·m(X) + mAB(L_a) ≤ B``; each successor of
the hull outside it is either in ``X`` (counted twice in ``2·m(X)``) or in ``A(L_a)``, so

    c_{a−1} + ρ(v) ≤ B,   ρ(v) = 2·m(H(v)) + m(succ(H(v)) \\ H(v)).

ckpt only grows along a chain, so an entry of ``L_j`` with ckpt ``c > τ(v) = B − ρ(v)``
must checkpoint every such ``v`` outside ``L_j`` later: the forced set ``F_j(c)``. Those
checkpoints all coexist at the end of the forward, so the entry can still save at most

    t(F) + knapsack_j(cap0 − c − m(F))        (nothing when m(F) > cap0 − c)

— the knapsack over all outside items with the room ``F`` leaves (an upper bound of the
knapsack over the items not in ``F``), beside the plain ``knapsack_j(cap0 − c)``; the search
takes the smaller. On cnn29 at 20 % the knapsack alone leaves the root 6 % below the optimum
(703 vs 749) because the optimal plan must checkpoint low-``t/m`` branch outputs that a
knapsack never picks; this bound sees them as soon as the ckpt is high enough.

:class:`ForcedCheckpoints` keeps, per state, ``m(F)`` and ``t(F)`` at a grid of ckpt values
(the sorted thresholds ``τ``, one per grid point); a query reads the grid point at or below
its ``c`` — a subset of the forced set, so still a valid bound.

Example::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph, exact_family
    >>> g = DPGraph(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]),
    ...             src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]))   # a diamond
    >>> hull_rho(g).tolist()      # H(0) = {0, 1, 2}: 2·8 + m(3); H(1) = {1, 3}: 2·3
    [17, 6, 6, 0]
    >>> fc = ForcedCheckpoints(exact_family(g), g, budget=20)     # τ = 20 − ρ = 3, 14, 14
    >>> m_f, t_f = fc(np.zeros(3, np.int64), np.array([0, 7, 15]))   # from ∅, at ckpt c
    >>> m_f.tolist(), t_f.tolist()
    ([0, 4, 8], [0, 10, 12])
"""

from __future__ import annotations

import numpy as np

from planner.arrays import run_starts
from planner.bitsets import unpack, words_for

__all__ = ["ForcedCheckpoints", "hull_rho", "FORCED_GRID"]

#: ckpt values per state at which :class:`ForcedCheckpoints` keeps the forced set's sums.
FORCED_GRID = 64

_ONE = np.uint64(1)


def _closures(g):
    """(desc, anc): packed uint64 rows [n, W], each node's descendants / ancestors, itself
    included — by topological heights (a node's successors lie at smaller heights), one
    OR-reduction over the out-edges of a height at a time."""
    n, W = g.n, words_for(g.n)
    src, dst = np.asarray(g.src, np.int64), np.asarray(g.dst, np.int64)
    out = []
    for a, b in ((src, dst), (dst, src)):          # descendants, then ancestors
        rows = np.zeros((n, W), np.uint64)
        ids = np.arange(n)
        rows[ids, ids // 64] = _ONE << (ids % 64).astype(np.uint64)
        order = np.argsort(a, kind="stable")
        ea, eb = a[order], b[order]
        height = _heights(n, ea, eb)
        by_h = np.argsort(height[ea], kind="stable")
        ea, eb = ea[by_h], eb[by_h]
        hs = height[ea]
        cuts = np.flatnonzero(np.r_[True, hs[1:] != hs[:-1], True]) if ea.size else [0]
        for lo, hi in zip(cuts[:-1], cuts[1:]):    # one height per step
            sa, sb = ea[lo:hi], eb[lo:hi]
            o = np.argsort(sa, kind="stable")
            sa, sb = sa[o], sb[o]
            starts = run_starts(sa)
            rows[sa[starts]] |= np.bitwise_or.reduceat(rows[sb], starts, axis=0)
        out.append(rows)
    return out[0], out[1]


def _heights(n: int, ea: np.ndarray, eb: np.ndarray) -> np.ndarray:
    """Longest path (edges ``ea → eb``) from each node to a node without out-edges, by
    rounds over the edges (Kahn from the far end, vectorized per round)."""
    h = np.zeros(n, np.int64)
    outdeg = np.bincount(ea, minlength=n)
    done = outdeg == 0
    by_b = np.argsort(eb, kind="stable")
    bb, ba = eb[by_b], ea[by_b]
    starts = np.searchsorted(bb, np.arange(n + 1))
    frontier = np.flatnonzero(done)
    left = outdeg.copy()
    level = 0
    while frontier.size:
        level += 1
        cnt = starts[frontier + 1] - starts[frontier]
        e = np.repeat(starts[frontier], cnt) + (np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        preds = ba[e]
        np.subtract.at(left, preds, 1)
        h[preds] = level
        frontier = np.unique(preds[left[preds] == 0])
    return h


def hull_rho(g) -> np.ndarray:
    """``ρ(v) = 2·m(H(v)) + m(succ(H(v)) \\ H(v))`` per node (module docstring); 0 for a node
    without successors (it is never a checkpoint)."""
    n = g.n
    m = np.asarray(g.m, np.int64)
    rho = np.zeros(n, np.int64)
    if g.src.size == 0:
        return rho
    desc, anc = _closures(g)
    src, dst = np.asarray(g.src, np.int64), np.asarray(g.dst, np.int64)
    order = np.argsort(src, kind="stable")
    s, d = src[order], dst[order]
    starts = run_starts(s)
    v = s[starts]
    up = np.bitwise_or.reduceat(anc[d], starts, axis=0)          # ancestors of succ(v)
    hull = desc[v] & up                                          # [k, W]
    # successors of the hull outside it: OR of the hull nodes' successor rows
    succ = np.zeros((n, desc.shape[1]), np.uint64)
    succ[v] = np.bitwise_or.reduceat(_single(d, desc.shape[1]), starts, axis=0)
    hb = unpack(hull, n)                                         # [k, n]
    nb = np.zeros_like(hull)
    for lo in range(0, v.size, 1024):                            # OR of succ rows over the hull
        blk = hb[lo:lo + 1024]
        r, c = np.nonzero(blk)
        if r.size:
            st = run_starts(r)
            nb[lo + r[st]] = np.bitwise_or.reduceat(succ[c], st, axis=0)
    ring = nb & ~hull
    rho[v] = 2 * (hb @ m) + unpack(ring, n) @ m
    return rho


def _single(nodes: np.ndarray, W: int) -> np.ndarray:
    """One packed row per node with only its bit set."""
    rows = np.zeros((nodes.size, W), np.uint64)
    rows[np.arange(nodes.size), nodes // 64] = _ONE << (nodes % 64).astype(np.uint64)
    return rows


class ForcedCheckpoints:
    """Per state and grid ckpt value: ``m`` and ``t`` of the checkpoints an entry there must
    still add (module docstring). Only items (nodes with a successor) count."""

    def __init__(self, fam, g, budget: int, split=None, grid: int = FORCED_GRID,
                 chunk: int = 4096):
        key = (g.m.tobytes(), g.t.tobytes(), int(budget), grid, split)
        cached = fam.cache.get("forced")
        if cached is not None and cached[0] == key:
            self.__dict__.update(cached[1])
            return
        n, L = g.n, fam.num_sets
        m, t = np.asarray(g.m, np.int64), np.asarray(g.t, np.int64)
        item = np.zeros(n, bool)
        item[g.src] = True
        hkey = ("hull_rho", g.m.tobytes())
        if fam.cache.get("hull_rho", (None,))[0] != hkey:   # budget-free: once per family
            fam.cache["hull_rho"] = (hkey, hull_rho(g))
        tau = int(budget) - fam.cache["hull_rho"][1]    # forced once c > τ
        if split is not None:                           # only items the knapsack passes over
            item &= t * int(split[1]) <= int(split[0]) * m
        elig = np.flatnonzero(item)
        elig = elig[np.argsort(tau[elig], kind="stable")]            # by τ ascending
        taus = np.unique(tau[elig][tau[elig] >= 0])     # c ≥ 0: τ < 0 forces from the start
        pick = taus[np.unique(np.linspace(0, taus.size - 1, grid).astype(np.int64))] \
            if taus.size else np.zeros(0, np.int64)
        gamma = np.r_[0, pick + 1]          # grid c values (c ≥ 0): forced τ < γ
        G1 = gamma.size
        # forced at γ_g: elig[:pos_g]; weights of the grid's forced prefixes [k, 2·G1], so
        # one float matmul per chunk of states sums them over each state's inside (exact:
        # the sums stay far below 2^53)
        pos = np.searchsorted(tau[elig], gamma, side="left")
        pre = np.arange(elig.size)[:, None] < pos[None, :]             # [k, G1]
        wts = np.hstack([pre * m[elig][:, None], pre * t[elig][:, None]]).astype(np.float64)
        tot = wts.sum(axis=0).astype(np.int64)
        both = np.empty((L, 2 * G1), np.int64)
        inside = fam.members(n)[elig]                                  # [k, L]
        for lo in range(0, L, chunk):
            blk = inside[:, lo:lo + chunk].T.astype(np.float64)        # [rows, k]
            both[lo:lo + chunk] = tot - np.rint(blk @ wts).astype(np.int64)
        mf, tf = both[:, :G1], both[:, G1:]
        self.gamma, self.mf, self.tf = gamma, np.ascontiguousarray(mf).ravel(), np.ascontiguousarray(tf).ravel()
        self.G1 = G1
        fam.cache["forced"] = (key, dict(gamma=self.gamma, mf=self.mf, tf=self.tf, G1=G1))

    def __call__(self, states: np.ndarray, c: np.ndarray):
        """``(m(F), t(F))`` per pair: the forced set at the grid value at or below ``c``."""
        gi = np.searchsorted(self.gamma, c, side="right") - 1
        idx = np.asarray(states, np.int64) * self.G1 + gi
        return self.mf.take(idx), self.tf.take(idx)
