"""The capped approximate DP with all its passes in one walk over the states.

A capped time-centric solve (:func:`planner.dp.solve.solve_family`) runs several passes of
:func:`planner.dp.loop.run_dp` that differ only in how a front is thinned to ``K`` entries
(:func:`~planner.dp.scale.thin` for the first, :func:`~planner.dp.scale.thin_lagrange` with
one multiplier each for the others). Each pass costs one Python step per state, and on the
scale path (window ``W`` of 8, cap ``K`` of 32) that fixed cost is nearly all of the DP's
time. Here the ``P`` passes walk the states together:

* what depends on the family only — which of the ``W`` states before ``j`` are subsets of
  ``L_j`` and the transitions' ``(dt, dm)`` — is an ``(L, W)`` table built before the loop
  (:func:`planner.dp.subsets.window_transitions`);
* the last ``W`` states' fronts are dense ``(P, W, K)`` blocks (ckpt ``INF`` in unused
  slots), so a state's candidates are one broadcast and one ``nonzero``; the first arrival
  per ``saved``, the Pareto cut and the thinning run for all passes at once (per-pass
  segments of one sorted array, and padded ``(P, ·)`` rows for the thinning);
* every kept entry goes to one flat store of predecessors (4 bytes an entry), from which the
  best pass's chain is read back, its saved and ckpt re-added along its transitions.

The plan is the per-pass loop's, entry for entry: candidates are the same (a source's key
test and the window's lower bound in :func:`~planner.dp.loop.run_dp` only skip sources with
no entry under ``room``), ties go to the least entry (state, then position), the thinning
levels are the same float expressions, and where the Lagrangian half has a tie at its edge
(``np.argpartition`` picks an unspecified one) that pass calls
:func:`~planner.dp.scale.thin_lagrange` itself.

Example::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph, approx_family
    >>> g = DPGraph(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]),
    ...             src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]))   # a diamond
    >>> fronts, entry = run_stacked(approx_family(g), g.t, g.m, 20, 2, 4, [None, 0.5], "time")
    >>> int(fronts.s[entry]), int(fronts.c[entry])
    (11, 6)
"""

from __future__ import annotations

import numpy as np

from planner.dp.fronts import INF, Fronts
from planner.dp.scale import thin_lagrange
from planner.dp.subsets import window_transitions

__all__ = ["run_stacked", "STACKED_MAX_WINDOW"]

#: Widest window the stacked loop takes: its tables hold ``L·W`` transitions.
STACKED_MAX_WINDOW = 64


def run_stacked(fam, t: np.ndarray, m: np.ndarray, budget: int, window: int, front_cap: int,
                lams: list, strategy: str):
    """All passes of a capped solve (``lams``: ``None`` for a :func:`thin` pass, else the
    multiplier of a :func:`thin_lagrange` pass, in the per-pass order) in one loop.

    Returns ``(fronts, entry)``: the best pass's chain as a :class:`Fronts` of its own entries
    (``s``, ``c``, ``pred``, ``state``; ``ptr`` not filled) and its last entry, V's — the
    strategy's end entry of the first pass, replaced by a later pass's only if it saves more,
    or as much with less ckpt (``entry`` None when no pass reaches V).
    """
    L, W, K, P = fam.num_sets, int(window), int(front_cap), len(lams)
    two_mL = 2 * fam.mL
    sub, dt, dm = window_transitions(fam, t, m, W)
    lam = np.array([np.nan if x is None else float(x) for x in lams])
    is_lagrange = ~np.isnan(lam) & (K >= 4)        # as run_dp: thin only below a cap of 4
    half = K // 2
    nlev = np.where(is_lagrange, K - half, K)
    x = np.full((P, K), np.nan)                    # thinning levels per pass (NaN: none)
    for p in range(P):
        x[p, :nlev[p]] = np.linspace(0.0, 1.0, int(nlev[p])) ** 0.5
    span = int(m.sum()) + 1                       # ckpt < span: per-pass offsets in one sort
    offsets_fit = span * (P + 1) < INF
    store = _Store(L, P * K)
    PK = P * K
    # ring of the last W states' fronts, each state twice (slots i % W and i % W + W) so the
    # window j − W .. j − 1 is the contiguous slice from j % W; per slot the fields
    # (saved, ckpt, store id) over P·K entries (ckpt INF: unused)
    empty = np.empty((3, PK), np.int64)
    empty[0], empty[1], empty[2] = -1, INF, -1
    ring = np.tile(empty, (2 * W, 1, 1))
    first = empty.copy()
    first[:, np.arange(P) * K] = 0
    first[2, np.arange(P) * K] = store.add(np.full(P, -1), 0)
    ring[0] = ring[W] = first
    ring_flat = ring.reshape(-1)
    ar_w = np.arange(W)
    two_mL_pad = np.concatenate([np.zeros(W, np.int64), two_mL])
    budget_j = budget - two_mL - fam.mAB
    last = None
    for j in range(1, L):
        s0 = j % W                                 # the window's first slot; j's own slot
        room = budget_j[j] + two_mL_pad[j + ar_w]  # c ≤ room: the transition fits the budget
        ok = (ring[s0:s0 + W, 1] <= room[:, None]) & sub[j][:, None]
        flat = np.flatnonzero(ok)                  # (source, pass·K + position)
        if flat.size == 0:
            ring[s0] = ring[s0 + W] = empty
            store.ptr[j + 1] = store.size
            continue
        w = flat // PK
        at = s0 * 3 * PK + flat + w * (2 * PK)
        p = (flat - w * PK) // K
        ns = ring_flat[at] + dt[j, w]
        nc = ring_flat[at + PK] + dm[j, w]
        e = ring_flat[at + 2 * PK]
        order = np.lexsort((e, nc, ns, p))        # first arrival per (pass, saved)
        ns, nc, e, p = ns[order], nc[order], e[order], p[order]
        head = np.empty(ns.size, bool)
        head[0] = True
        np.not_equal(ns[1:], ns[:-1], out=head[1:])
        head[1:] |= p[1:] != p[:-1]
        ns, nc, e, p = ns[head], nc[head], e[head], p[head]
        keep = _pareto(p, nc, span, offsets_fit)
        ns, nc, e, p = ns[keep], nc[keep], e[keep], p[keep]
        cnt = np.bincount(p, minlength=P)
        if cnt.max() > K:
            keep = _thin_all(ns, nc, cnt, K, half, x, lam, is_lagrange)
            ns, nc, e, p = ns[keep], nc[keep], e[keep], p[keep]
            cnt = np.bincount(p, minlength=P)
        slot = empty.copy()
        pos = p * K + np.arange(p.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        ids = store.add(e, j)
        slot[0, pos], slot[1, pos], slot[2, pos] = ns, nc, ids
        ring[s0] = ring[s0 + W] = slot
        if j == L - 1:
            last = (ns, nc, p, ids)
    entry = _best_end(last, P, strategy)
    if entry is None:
        return Fronts.empty(0), None
    return _chain_fronts(store, entry, W, dt, dm)


def _pareto(p, nc, span: int, offsets_fit: bool) -> np.ndarray:
    """Per pass, over entries sorted by (pass, saved): keep one only if every larger-saved one
    of its pass costs strictly more (one suffix minimum, later passes lifted above)."""
    if offsets_fit:
        v = nc + p * span
    else:                                          # ranks instead of values: no overflow
        _, rank = np.unique(nc, return_inverse=True)
        v = rank.astype(np.int64) + p * (int(rank.max()) + 2)
    later = np.empty_like(v)
    later[-1] = INF
    later[:-1] = np.minimum.accumulate(v[::-1])[::-1][1:]
    return v < later


def _thin_all(ns, nc, cnt, K: int, half: int, x, lam, is_lagrange) -> np.ndarray:
    """Mask over the (pass-sorted) entries: every pass with more than ``K`` entries thinned
    as its per-pass loop does (levels over its ckpt range; Lagrangian half for λ passes)."""
    big = np.flatnonzero(cnt > K)
    cb = cnt[big]
    starts = (np.cumsum(cnt) - cnt)[big]
    col = np.arange(int(cb.max()))
    real = col < cb[:, None]
    idx = starts[:, None] + np.minimum(col, cb[:, None] - 1)
    nc2 = np.where(real, nc[idx], INF)
    n0 = nc2[:, 0]
    levels = n0.astype(np.float64)[:, None] + \
        x[big] * (nc[starts + cb - 1] - n0).astype(np.float64)[:, None]
    below = np.maximum((nc2[:, None, :] <= levels[:, :, None]).sum(axis=2) - 1, 0)
    rows = np.arange(big.size)
    mark = np.zeros(real.shape, bool)              # searchsorted(right) − 1, clipped
    mark[rows[:, None], below] = True
    mark[:, 0] = True
    mark[rows, cb - 1] = True
    lg = np.flatnonzero(is_lagrange[big])
    if lg.size:                                    # the best half by saved − λ·ckpt
        score = np.where(real[lg], ns[idx[lg]] - lam[big[lg]][:, None] *
                         nc2[lg].astype(np.float64), -np.inf)
        order = np.argsort(-score, axis=1, kind="stable")
        edge = score[np.arange(lg.size)[:, None], order[:, half - 1:half + 1]]
        mark[lg[:, None], order[:, :half]] = True
        for q in np.flatnonzero(edge[:, 0] == edge[:, 1]):    # a tie at the edge: the
            r, s0, n = lg[q], starts[lg[q]], cb[lg[q]]         # pass's own rule decides
            mark[r] = False
            mark[r, thin_lagrange(ns[s0:s0 + n], nc[s0:s0 + n], K, lam[big[r]])] = True
    keep = np.ones(ns.size, bool)
    keep[idx[real]] = mark[real]
    return keep


def _best_end(last, P: int, strategy: str):
    """V's entry of the best pass (as :func:`planner.dp.solve.solve_family` compares them)."""
    if last is None:
        return None
    ns, nc, p, ids = last
    best = None
    for q in range(P):
        at = np.flatnonzero(p == q)
        if at.size == 0:
            continue
        k = at[-1] if strategy == "time" else at[0]
        if best is None or (ns[k], -nc[k]) > (ns[best], -nc[best]):
            best = k
    return None if best is None else int(ids[best])


def _chain_fronts(store, entry: int, W: int, dt, dm) -> tuple:
    """The chosen chain as a :class:`Fronts` of its own entries (∅'s first, ``pred`` within),
    and the index of its last: saved and ckpt re-added along the chain's transitions (the
    store keeps only predecessors, 4 bytes an entry at 10^6 states)."""
    entries = []
    while entry >= 0:
        entries.append(entry)
        entry = int(store.pred[entry])
    entries = np.array(entries[::-1], np.int64)
    state = np.searchsorted(store.ptr, entries, side="right") - 1
    w = state[:-1] - (state[1:] - W)
    s = np.concatenate([[0], np.cumsum(dt[state[1:], w])])
    c = np.concatenate([[0], np.cumsum(dm[state[1:], w])])
    pred = np.arange(-1, entries.size - 1)
    none = np.zeros(0, np.int64)
    return Fronts(s, c, pred, state, none, none, none, size=entries.size), entries.size - 1


class _Store:
    """Every pass's kept entries as predecessors only, appended state by state
    (``ptr[j]``: the first of state ``j``; amortised O(1) growth)."""

    def __init__(self, n_states: int, per_state: int, capacity: int = 1 << 16):
        self.size = 0
        self.ptr = np.zeros(n_states + 1, np.int64)
        self.dtype = np.int32 if (n_states + 1) * per_state < 2**31 else np.int64
        self.pred = np.zeros(capacity, self.dtype)

    def add(self, pred, state: int) -> np.ndarray:
        """Store state ``state``'s entries (predecessor ids); returns their ids."""
        k = np.size(pred)
        if self.size + k > self.pred.size:
            new = np.zeros(max(2 * self.pred.size, self.size + k), self.dtype)
            new[:self.size] = self.pred[:self.size]
            self.pred = new
        self.pred[self.size:self.size + k] = pred
        self.size += k
        self.ptr[state + 1] = self.size
        return np.arange(self.size - k, self.size)
