"""The DP loop: every state's Pareto front from its sources' fronts, one vectorized step each.

States are visited in family order; for state ``j`` every source ``i`` (a subset of ``L_j``
earlier in the order) whose cheapest entry passes the peak test contributes the feasible prefix
of its front (``c + peak ≤ B`` with ``peak = 2·(m(L_j) − m(L_i)) + m(A(L_j)) + m(B(L_j))``),
shifted by the transition's ``(dt, dm)``; the candidates are reduced to the first arrival per
``saved`` and cut to a Pareto front (:mod:`planner.dp.fronts`). How subsets are held (dense or
segment-local) is :mod:`planner.dp.subsets`' business; the optional arguments are the scale
approximations (:mod:`planner.dp.scale`) and the objective bounds of :mod:`planner.dp.solve`.

Speed: sources are filtered first by a per-source key (``min ckpt − 2·m(L)``, the reference's
``break`` on the cheapest entry) and, on the approximate family (ids ascend with ``m(L)``), by
a window of ids found with one ``searchsorted``; only the feasible prefix of each source front
is expanded. One Python step per state, NumPy over arrays within it. The position (state j of
L) goes to the current stage progress (:func:`hgraph.progress.current`) every ~0.5 %.

Example::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph, approx_family
    >>> g = DPGraph(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]),
    ...             src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]))   # a diamond
    >>> f = run_dp(approx_family(g), g.t, g.m, budget=20)
    >>> f.s[f.ptr[4]:f.ptr[5]].tolist(), f.c[f.ptr[4]:f.ptr[5]].tolist()   # V's front
    ([0, 10, 11], [0, 4, 6])
"""

from __future__ import annotations

import numpy as np

from hgraph.progress import current as current_progress
from planner.dp.fronts import INF, Fronts, best_per_saved, expand_fronts, pareto_mask
from planner.dp.scale import thin, thin_lagrange
from planner.dp.subsets import transitions

__all__ = ["run_dp"]


def run_dp(fam, t: np.ndarray, m: np.ndarray, budget: int, *, window: int | None = None,
           front_cap: int | None = None, lam: float | None = None,
           max_recompute: int | None = None, max_ckpt: int | None = None) -> Fronts:
    """Pareto fronts of every state of ``fam`` under ``budget`` (all quantities in DP units).

    ``window``/``front_cap``: the scale approximations (None: off, exact); a capped front keeps
    its cheapest and largest-saved entries and either entries spread over its ckpt range
    (:func:`~planner.dp.scale.thin`) or, with ``lam``, the best ``saved − lam·ckpt``
    (:func:`~planner.dp.scale.thin_lagrange`). ``max_recompute``/``max_ckpt`` drop entries
    whose recompute so far (``t(L) − saved``) or checkpoint memory exceeds the bound; both only
    grow along a chain, so a bound at least the optimum's keeps the plan.
    """
    L = fam.num_sets
    fronts = Fronts.empty(L)
    span = int(m.sum()) + 1
    use_offset = span * L < (1 << 62)
    fronts.span = span if use_offset else 0
    fronts.append(0, np.zeros(1, np.int64), np.zeros(1, np.int64), np.full(1, -1, np.int64))
    key = np.full(L, INF, dtype=np.int64)          # min ckpt − 2·m(L), for the break test
    key[0] = -2 * int(fam.mL[0])
    two_mL = 2 * fam.mL
    if fam.kind == "exact":                        # sources: strictly smaller sets
        end_of = np.searchsorted(fam.size, fam.size, side="left")
    else:
        end_of = np.arange(L)
    ordered = fam.node is not None                 # approx: ids ascend with m(L)
    subsets = transitions(fam, t, m)
    report, every = current_progress().position, max(1, L // 200)   # the DP position, ~0.5 %
    for j in range(1, L):
        if j % every == 0:
            report(j, L)
        thr = budget - int(two_mL[j]) - int(fam.mAB[j])
        lo = int(np.searchsorted(two_mL, -thr, side="left")) if ordered else 0
        if window is not None:
            lo = max(lo, j - window)
        src = lo + np.flatnonzero(key[lo:int(end_of[j])] <= thr)
        if src.size:
            src, dt, dm = subsets(j, src)
        cand = _candidates(fronts, src, dt, dm, thr + two_mL[src], use_offset) \
            if src.size else None
        if cand is not None and (max_recompute is not None or max_ckpt is not None):
            cand = _bounded(cand, int(fam.tL[j]), max_recompute, max_ckpt)
        if cand is None:
            fronts.ptr[j + 1] = fronts.size
            continue
        ns, nc, e = best_per_saved(*cand)
        keep = pareto_mask(nc)
        ns, nc, e = ns[keep], nc[keep], e[keep]
        if front_cap is not None and ns.size > front_cap:
            k = (thin(nc, front_cap) if lam is None or front_cap < 4
                 else thin_lagrange(ns, nc, front_cap, lam))
            ns, nc, e = ns[k], nc[k], e[k]
        fronts.append(j, ns, nc, e)
        key[j] = int(nc[0]) - int(two_mL[j])
    return fronts


def _candidates(fronts: Fronts, src, dt, dm, room, use_offset: bool):
    """(saved, ckpt, entry) of every feasible front entry of the sources (``c ≤ room``),
    shifted by the transitions; None when there is none."""
    starts = fronts.ptr[src]
    stops = fronts.ptr[src + 1]
    if use_offset:
        stops = np.minimum(stops, np.searchsorted(fronts.glob[:fronts.size],
                                                  src * fronts.span + room, side="right"))
    cnt = stops - starts
    keep = cnt > 0
    if not keep.all():
        starts, cnt, dt, dm, room = starts[keep], cnt[keep], dt[keep], dm[keep], room[keep]
    if int(cnt.sum()) == 0:
        return None
    e, ns, nc = expand_fronts(fronts, starts, cnt, dt, dm)
    if not use_offset:                            # no global key: cut each prefix here
        ok = nc - np.repeat(dm, cnt) <= np.repeat(room, cnt)
        e, ns, nc = e[ok], ns[ok], nc[ok]
        if e.size == 0:
            return None
    return ns, nc, e


def _bounded(cand, tL: int, max_recompute, max_ckpt):
    """Candidates within the objective bounds (None when none is)."""
    ns, nc, e = cand
    ok = np.ones(ns.size, bool)
    if max_recompute is not None:
        ok &= ns >= tL - max_recompute
    if max_ckpt is not None:
        ok &= nc <= max_ckpt
    if not ok.all():
        ns, nc, e = ns[ok], nc[ok], e[ok]
        if ns.size == 0:
            return None
    return ns, nc, e
