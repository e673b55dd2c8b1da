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
from planner.bitsets import unpack
from planner.dp.fronts import (INF, Fronts, best_per_saved, expand_fronts, pareto_mask,
                                 run_starts)
from planner.dp.scale import thin, thin_lagrange
from planner.dp.subsets import transitions

__all__ = ["run_dp", "transition_table"]


#: Dense approximate families up to this many states read their transitions from two ``L × L``
#: tables built once per family (:func:`transition_table`, ~17 bytes a cell) instead of
#: testing and summing bitsets state by state.
TABLE_MAX_STATES = 1448


def run_dp(fam, t: np.ndarray, m: np.ndarray, budget: int, *, window: int | None = None,
           front_cap: int | None = None, lam: float | None = None,
           max_recompute: int | None = None, max_ckpt: int | None = None) -> Fronts:
    """Pareto fronts of every state of ``fam`` under ``budget`` (all quantities in DP units).

    ``window``/``front_cap``: the scale approximations (None: off, exact); a capped front keeps
    its cheapest and largest-saved entries and either entries spread over its ckpt range
    (:func:`~planner.dp.scale.thin`) or, with ``lam``, the best ``saved − lam·ckpt``
    (:func:`~planner.dp.scale.thin_lagrange`). ``max_recompute``/``max_ckpt`` drop entries
    whose recompute so far (``t(L) − saved``) or checkpoint memory exceeds the bound; both only
    grow along a chain, so a bound at least the optimum's keeps the plan. Under
    ``max_recompute`` a source's front is cut before it is expanded to the entries that can
    stay within the bound (a ``saved`` suffix, found with ``glob_s``).
    """
    L = fam.num_sets
    fronts = Fronts.empty(L)
    span = int(m.sum()) + 1
    use_offset = span * L < (1 << 62)
    fronts.span = span if use_offset else 0
    span_s = int(t.sum()) + 2                      # > any saved, and room for the clip below
    floor = None
    if max_recompute is not None and use_offset and span_s * L < (1 << 62):
        fronts.span_s = span_s
        floor = fam.tL - int(max_recompute)        # least saved an entry of L_j may have
    fronts.append(0, np.zeros(1, np.int64), np.zeros(1, np.int64), np.full(1, -1, np.int64))
    key = np.full(L, INF, dtype=np.int64)          # min ckpt − 2·m(L), for the break test
    key[0] = -2 * int(fam.mL[0])
    two_mL = 2 * fam.mL
    thr_all = (budget - two_mL - fam.mAB).tolist()   # c_i − 2·m(L_i) ≤ thr_j: feasible
    if fam.kind == "exact":                        # sources: strictly smaller sets
        end_of = np.searchsorted(fam.size, fam.size, side="left")
    else:
        end_of = np.arange(L)
    ordered = fam.node is not None                 # approx: ids ascend with m(L)
    table = transition_table(fam, t, m)
    subsets = transitions(fam, t, m) if table is None else None
    report, every = current_progress().position, max(1, L // 200)   # the DP position, ~0.5 %
    for j in range(1, L):
        if j % every == 0:
            report(j, L)
        thr = thr_all[j]
        if table is not None:                      # one row of each table
            lo = 0 if window is None else max(0, j - window)
            sub, tdt, tdm = table
            src = lo + np.flatnonzero(sub[j, lo:j] & (key[lo:j] <= thr))
            dt, dm = tdt[j, src], tdm[j, src]
        else:
            lo = int(np.searchsorted(two_mL, -thr, side="left")) if ordered else 0
            if window is not None:
                lo = max(lo, j - window)
            src = lo + np.flatnonzero(key[lo:int(end_of[j])] <= thr)
            if src.size:
                src, dt, dm = subsets(j, src)
        cand = _candidates(fronts, src, dt, dm, thr + two_mL[src], use_offset,
                           None if floor is None else int(floor[j])) if src.size else None
        if cand is not None and ((max_recompute is not None and floor is None)
                                 or max_ckpt is not None):
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


def transition_table(fam, t: np.ndarray, m: np.ndarray):
    """``(sub, dt, dm)``, each ``[L, L]`` (row: target, column: source), for a dense
    approximate family of at most :data:`TABLE_MAX_STATES` states, else None; kept on the
    family.

    ``sub[j, i]``: ``L_i ⊆ L_j`` (``v_i ∈ L_j``; ∅ in every set). ``dt``/``dm`` are the
    transition terms of :func:`~planner.dp.subsets.transitions` — ``t``/``m`` of
    ``∂L_j \\ L_i`` — for every pair at once: ``∂L_j`` holds a few nodes, so what ``L_i``
    already holds of it is a sum over those nodes' membership rows.
    """
    L = fam.num_sets
    if fam.sets is None or fam.node is None or L > TABLE_MAX_STATES:
        return None
    key = (t.tobytes(), m.tobytes())
    cached = fam.cache.get("transition_table")
    if cached is None or cached[0] != key:
        n = t.size
        member = fam.members(n)                        # [n, L]: v ∈ L_i
        node = fam.node
        sub = np.ascontiguousarray(member[np.maximum(node, 0)].T)   # [j, i]: v_i ∈ L_j
        sub[:, node < 0] = True
        rows, cols = np.nonzero(unpack(fam.bnd, n))    # v = cols ∈ ∂L_rows
        held_t = np.zeros((L, L), np.int64)
        held_m = np.zeros((L, L), np.int64)
        if rows.size:                                  # per target: a sum over its ∂ rows
            last = np.r_[run_starts(rows)[1:], rows.size] - 1
            inside = member[cols]                      # [nnz, L]: v ∈ L_i
            for w, held in ((t, held_t), (m, held_m)):
                acc = np.cumsum(inside * w[cols, None], axis=0)[last]
                acc[1:] -= acc[:-1].copy()
                held[rows[last]] = acc
        cached = fam.cache["transition_table"] = (
            key, (sub, fam.t_bnd[:, None] - held_t, fam.m_bnd[:, None] - held_m))
    return cached[1]


def _candidates(fronts: Fronts, src, dt, dm, room, use_offset: bool, floor: int | None = None):
    """(saved, ckpt, entry) of every feasible front entry of the sources (``c ≤ room``),
    shifted by the transitions; None when there is none. ``floor``: only entries whose
    shifted ``saved`` reaches it (a suffix of each front, ``fronts.span_s`` set)."""
    starts = fronts.ptr[src]
    stops = fronts.ptr[src + 1]
    if use_offset:
        stops = np.minimum(stops, np.searchsorted(fronts.glob[:fronts.size],
                                                  src * fronts.span + room, side="right"))
    if floor is not None:
        starts = np.maximum(starts, np.searchsorted(
            fronts.glob_s[:fronts.size], src * fronts.span_s + np.maximum(floor - dt, 0),
            side="left"))
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
