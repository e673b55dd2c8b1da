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
L) goes to the current stage progress (:func:`hgraph.common.progress.current`) every ~0.5 %.

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

from hgraph.common.progress import current as current_progress
from planner.arrays import csr, distinct
from planner.bitsets import unpack
from planner.dp.fronts import (INF, Fronts, best_per_saved, expand_fronts, pareto_mask,
                                 run_starts)
from planner.dp.scale import thin, thin_lagrange
from planner.dp.subsets import transitions

__all__ = ["run_dp", "transition_table", "subset_table"]


#: Dense approximate families up to this many states read their sources from an ``L × L``
#: subset table built once per family (:func:`subset_table`) and take the loop of
#: :func:`_table_loop`, instead of testing and summing bitsets state by state.
TABLE_MAX_STATES = 1448


def run_dp(fam, t: np.ndarray, m: np.ndarray, budget: int, *, window: int | None = None,
           front_cap: int | None = None, lam: float | None = None,
           max_recompute: int | None = None, max_ckpt: int | None = None,
           resume: tuple | None = None) -> Fronts:
    """Pareto fronts of every state of ``fam`` under ``budget`` (all quantities in DP units).

    ``window``/``front_cap``: the scale approximations (None: off, exact); a capped front keeps
    its cheapest and largest-saved entries and either entries spread over its ckpt range
    (:func:`~planner.dp.scale.thin`) or, with ``lam``, the best ``saved − lam·ckpt``
    (:func:`~planner.dp.scale.thin_lagrange`). ``max_recompute``/``max_ckpt`` drop entries
    whose recompute so far (``t(L) − saved``) or checkpoint memory exceeds the bound; both only
    grow along a chain, so a bound at least the optimum's keeps the plan. Under
    ``max_recompute`` a source's front is cut before it is expanded to the entries that can
    stay within the bound (a ``saved`` suffix, found with ``glob_s``).

    ``resume=(fronts, bound)``: the fronts of a pass at the same budget under
    ``max_recompute=bound`` (and no other option), to be reused and overwritten: a deeper
    pass of the same family starts after the states they hold exactly (:func:`_table_loop`;
    other loops ignore it).
    """
    if subset_table(fam, t.size) is not None:
        fronts = _table_loop(fam, t, m, budget, window, front_cap, lam, max_recompute,
                             max_ckpt, resume)
        if fronts is not None:
            return fronts
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
    subsets = transitions(fam, t, m)
    report, every = current_progress().position, max(1, L // 200)   # the DP position, ~0.5 %
    for j in range(1, L):
        if j % every == 0:
            report(j, L)
        thr = thr_all[j]
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
        _close_state(fronts, key, j, *best_per_saved(*cand), int(two_mL[j]), front_cap, lam)
    return fronts


def _close_state(fronts, key, j: int, ns, nc, e, two_mL_j: int, front_cap, lam) -> None:
    """State ``j``'s front from its best entry per saved (``ns`` ascending): the Pareto cut,
    thinned to ``front_cap`` where one is set, appended; ``key[j]`` its least ckpt − 2·m(L)."""
    keep = pareto_mask(nc)
    if not keep.all():
        ns, nc, e = ns[keep], nc[keep], e[keep]
    if front_cap is not None and ns.size > front_cap:
        k = (thin(nc, front_cap) if lam is None or front_cap < 4
             else thin_lagrange(ns, nc, front_cap, lam))
        ns, nc, e = ns[k], nc[k], e[k]
    fronts.append(j, ns, nc, e)
    key[j] = int(nc[0]) - two_mL_j


#: The table loop's bucket row (one cell per ``saved`` value, 0..T) is used up to this width;
#: up to the second, the filled buckets are found by scanning the row, above by sorting.
TABLE_LOOP_MAX_T = 1 << 22
TABLE_LOOP_SCAN_T = 1 << 13


# Why the table loop's shortcuts keep the result:
#
# * every ckpt is at most ``m(V)`` and every saved at most ``T`` (a chain checkpoints and
#   saves disjoint node sets), so a budget above ``5·m(V)`` admits every transition, as
#   ``5·m(V)`` does: the budget is capped there, which bounds each source's room to
#   ``[0, 5·m(V)]`` once the break test (``key ≤ thr``) has passed;
# * with ``glob = state·span + ckpt`` and ``span > 5·m(V)``, one ``searchsorted`` of
#   ``i·span + room`` ends source ``i``'s feasible prefix inside its own front; likewise
#   ``i·span_s + (floor − dt)`` with ``span_s > 3T`` starts its in-bound suffix there, for
#   any ``floor − dt`` in ``[−2T, T]``;
# * the least ckpt per saved, ties to the first entry, is one ``minimum.at`` of
#   ``ckpt·E + entry`` into a row of ``T + 1`` buckets (``E`` above any entry id);
# * ``resume``: an entry of ``L_j`` recomputes at most ``t(L_j)``, and a source's ``t(L)``
#   is at most its target's, so a pass bounded by ``g`` leaves the states before the first
#   with ``t(L_j) > g`` exactly as an unbounded pass would — entries, positions and
#   predecessors — and any deeper pass keeps them and starts there.
def _table_loop(fam, t, m, budget: int, window, front_cap, lam, max_recompute,
                max_ckpt, resume=None) -> Fronts | None:
    """:func:`run_dp` on a dense approximate family with its subset table, in as few NumPy
    calls per state as the step allows (small plans run up to three passes of ~570 states:
    the per-call overhead, not the arithmetic, is their cost). None when a bound below would
    not hold (a forward cost T above :data:`TABLE_LOOP_MAX_T`, or sums too large to pack);
    then the general loop runs. The fronts are the general loop's, entry for entry (why: the
    comment above).

    A state's transition terms are computed for its sources only, from its few boundary
    nodes (:func:`_boundary_terms`): cheaper, for a pass or three, than the full ``L × L``
    tables of :func:`transition_table` (bench/NOTES_scale.md has densenet's figures)."""
    L = fam.num_sets
    msum, T = int(m.sum()), int(t.sum())
    span, span_s = 6 * (msum + 1), 4 * (T + 1)
    E = INF // (msum + 2)
    if T >= TABLE_LOOP_MAX_T or span * L >= (1 << 62) or span_s * L >= (1 << 62) \
            or L * (T + 1) >= E:
        return None
    if resume is not None and (window is not None or front_cap is not None
                               or max_ckpt is not None):
        resume = None
    sub = subset_table(fam, t.size)
    terms = _boundary_terms(fam, t, m)
    two_mL = 2 * fam.mL
    fronts, key, first = _table_start(fam, two_mL, resume)
    fronts.span = span
    floor = None
    if max_recompute is not None:
        fronts.span_s = span_s
        floor = (fam.tL - int(max_recompute)).tolist()
    base = np.arange(L, dtype=np.int64) * span + two_mL      # i·span + 2·m(L_i)
    base_s = np.arange(L, dtype=np.int64) * span_s
    thr_all = (min(int(budget), 5 * msum) - two_mL - fam.mAB).tolist()
    ptr = fronts.ptr
    best = np.full(T + 1, INF, np.int64)           # buckets by saved, INF between states
    scan = T < TABLE_LOOP_SCAN_T                   # find the filled buckets by a scan, or sort
    report, every = current_progress().position, max(1, L // 200)
    for j in range(first, L):
        if j % every == 0:
            report(j, L)
        thr = thr_all[j]
        lo = 0 if window is None else max(0, j - window)
        src = (sub[j, lo:j] & (key[lo:j] <= thr)).nonzero()[0]
        if src.size:
            if lo:
                src += lo
            dt, dm = terms(j, src)
            got = _table_entries(fronts, src, dt, dm, base[src] + thr,
                                 None if floor is None else base_s[src] + (floor[j] - dt),
                                 max_ckpt)
        if src.size == 0 or got is None:
            ptr[j + 1] = fronts.size
            continue
        ns, nc, e = got
        del got                                    # (the candidates go as soon as replaced)
        packed = nc * E
        packed += e
        np.minimum.at(best, ns, packed)
        ns = (best != INF).nonzero()[0] if scan else distinct(ns)
        packed = best[ns]
        best[ns] = INF
        _close_state(fronts, key, j, ns, *np.divmod(packed, E), int(two_mL[j]), front_cap, lam)
    return fronts


def _table_start(fam, two_mL, resume):
    """(fronts, key, first state to compute) of :func:`_table_loop`: ∅'s front alone, or with
    ``resume`` the states before the first ``t(L) > g`` kept; ``key`` the least ckpt − 2·m(L)
    of every state so far (the break test)."""
    L = fam.num_sets
    key = np.full(L, INF, dtype=np.int64)
    first = 1
    if resume is None:
        fronts = Fronts.empty(L)
        fronts.append(0, np.zeros(1, np.int64), np.zeros(1, np.int64), np.full(1, -1, np.int64))
    else:
        fronts, done_bound = resume
        first = max(1, int(np.argmax(np.r_[fam.tL, np.iinfo(np.int64).max] > done_bound)))
        fronts.size = int(fronts.ptr[first])
        full = np.flatnonzero(fronts.ptr[1:first + 1] > fronts.ptr[:first])
        key[full] = fronts.c[fronts.ptr[full]] - two_mL[full]
    key[0] = -2 * int(fam.mL[0])
    return fronts, key, first


def _boundary_terms(fam, t, m):
    """``terms(j, src) -> (dt, dm)``: the transition terms from sources ``src`` to state
    ``j``, ``t``/``m`` of ``∂L_j`` less what each source already holds of it, from ``∂L_j``'s
    few nodes (:func:`_boundary_rows`) and the family's membership rows (a closure: it runs
    once a state)."""
    member = fam.members(t.size)
    bp, bv, tw, mw = _boundary_rows(fam, t, m)
    bp, bvl, twl, mwl = bp.tolist(), bv.tolist(), tw.tolist(), mw.tolist()
    t_bnd, m_bnd = fam.t_bnd.tolist(), fam.m_bnd.tolist()

    def terms(j: int, src):
        a, b = bp[j], bp[j + 1]
        if b - a == 1:                             # one boundary node v: held by L_i or not
            inside = member[bvl[a]][src]
            return (np.where(inside, t_bnd[j] - twl[a], t_bnd[j]),
                    np.where(inside, m_bnd[j] - mwl[a], m_bnd[j]))
        if a == b:                                 # no boundary: nothing held by any source
            return np.full(src.size, t_bnd[j], np.int64), np.full(src.size, m_bnd[j], np.int64)
        inside = member[bv[a:b, None], src]        # t/m of ∂L_j minus what L_i holds of it
        return t_bnd[j] - tw[a:b] @ inside, m_bnd[j] - mw[a:b] @ inside

    return terms


def _table_entries(fronts, src, dt, dm, room_keys, floor_keys, max_ckpt):
    """(saved, ckpt, entry) of every candidate of :func:`_table_loop`'s state from sources
    ``src``: each source's entries up to ``room_keys`` (``i·span + room``) and, with
    ``floor_keys`` (``i·span_s + floor − dt``), from there, shifted by ``(dt, dm)`` and within
    ``max_ckpt``; None when there is none."""
    n = fronts.size
    stops = fronts.glob[:n].searchsorted(room_keys, "right")
    starts = fronts.ptr[src] if floor_keys is None else \
        fronts.glob_s[:n].searchsorted(floor_keys, "left")
    cnt = stops - starts
    np.maximum(cnt, 0, out=cnt)
    cum = cnt.cumsum()
    total = int(cum[-1])
    if total == 0:
        return None
    e = (starts - cum + cnt).repeat(cnt)
    e += np.arange(total)
    ns = fronts.s[e]
    ns += dt.repeat(cnt)
    nc = fronts.c[e]
    nc += dm.repeat(cnt)
    if max_ckpt is not None:
        ok = nc <= max_ckpt
        if not ok.all():
            ns, nc, e = ns[ok], nc[ok], e[ok]
            if ns.size == 0:
                return None
    return ns, nc, e


def subset_table(fam, n: int) -> np.ndarray | None:
    """bool ``[L, L]`` (row: target, column: source): ``sub[j, i]`` iff ``L_i ⊆ L_j``
    (``v_i ∈ L_j``; ∅ in every set), for a dense approximate family (of a graph of ``n``
    nodes) of at most
    :data:`TABLE_MAX_STATES` states, else None; kept on the family."""
    L = fam.num_sets
    if fam.sets is None or fam.node is None or L > TABLE_MAX_STATES:
        return None
    if "subset_table" not in fam.cache:
        member = fam.members(n)
        node = fam.node
        sub = np.ascontiguousarray(member[np.maximum(node, 0)].T)   # [j, i]: v_i ∈ L_j
        sub[:, node < 0] = True
        fam.cache["subset_table"] = sub
    return fam.cache["subset_table"]


def _boundary_rows(fam, t: np.ndarray, m: np.ndarray):
    """``(ptr, nodes, t, m)``: the boundary ``∂L_j`` of every state as CSR rows
    (``nodes[ptr[j]:ptr[j + 1]]``), with each node's ``t`` and ``m``."""
    rows, cols = np.nonzero(unpack(fam.bnd, t.size))     # v = cols ∈ ∂L_rows
    ptr, cols = csr(rows, cols, fam.num_sets)
    return ptr, cols, t[cols], m[cols]


def transition_table(fam, t: np.ndarray, m: np.ndarray):
    """``(sub, dt, dm)``, each ``[L, L]`` (row: target, column: source), for a dense
    approximate family of at most :data:`TABLE_MAX_STATES` states, else None; kept on the
    family (the smallest-budget pass reads them; the DP loop computes its rows as it goes).

    ``sub`` is :func:`subset_table`. ``dt``/``dm`` are the transition terms of
    :func:`~planner.dp.subsets.transitions` — ``t``/``m`` of ``∂L_j \\ L_i`` — for every
    pair at once: ``∂L_j`` holds a few nodes, so what ``L_i`` already holds of it is a sum
    over those nodes' membership rows, taken as the k-th boundary node of every state at once.
    """
    sub = subset_table(fam, t.size)
    if sub is None:
        return None
    key = (t.tobytes(), m.tobytes())
    cached = fam.cache.get("transition_table")
    if cached is None or cached[0] != key:
        L = fam.num_sets
        member = fam.members(t.size)                   # [n, L]: v ∈ L_i
        ptr, cols, tw, mw = _boundary_rows(fam, t, m)
        tdt = np.empty((L, L), np.int64)
        tdm = np.empty((L, L), np.int64)
        tdt[:] = fam.t_bnd[:, None]
        tdm[:] = fam.m_bnd[:, None]
        rows = np.repeat(np.arange(L), np.diff(ptr))
        rank = np.arange(cols.size) - ptr[rows]        # position within its state's row
        for k in range(int(rank.max(initial=-1)) + 1):  # the k-th ∂ node of every target
            sel = rank == k
            inside = member[cols[sel]]                 # [targets, L]: v ∈ L_i
            tdt[rows[sel]] -= inside * tw[sel, None]
            tdm[rows[sel]] -= inside * mw[sel, None]
        cached = fam.cache["transition_table"] = (key, (sub, tdt, tdm))
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
