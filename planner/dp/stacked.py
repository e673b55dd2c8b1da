"""The capped approximate DP with all its passes in one walk over the states.

A capped time-centric solve (:func:`planner.dp.solve.solve_family`) runs several passes of
:func:`planner.dp.loop.run_dp` that differ only in how a front is thinned to ``K`` entries
(:func:`~planner.dp.scale.thin` for the first, :func:`~planner.dp.scale.thin_lagrange` with
one multiplier each for the others). Each pass costs one Python step per state, and on the
scale path (window ``W`` of 8, cap ``K`` of 32) that fixed cost is nearly all of the DP's
time. Here the ``P`` passes walk the states together, several states a step:

* what depends on the family only — which of the ``W`` states before ``j`` are subsets of
  ``L_j`` and the transitions' ``(dt, dm)`` — is an ``(L, W)`` table built before the loop
  (:func:`planner.dp.subsets.window_transitions`);
* the last ``W`` states' fronts live in a ring of dense ``(W, P·K)`` blocks (ckpt ``INF``
  in unused slots), so candidates are one comparison and one ``nonzero``;
* states are taken in *batches*: runs of consecutive states none of which has a transition
  from another of the run (:func:`_batches`; its sources' fronts are all final), a few
  states a step on the synthetic graphs. A batch member's pass is a
  *segment*, and saved carries its segment (``segment·span_s + saved``), so one stable
  sort of one int64 key (segment and saved ascending, ckpt descending, latest arrival
  first) and one strict suffix minimum over ``segment·span + ckpt`` give every segment's
  first arrival per saved and its Pareto cut at once; the thinning levels of all segments
  are one ``searchsorted``, the Lagrangian halves one ``np.partition`` of padded rows;
* every kept entry goes to one flat store of predecessors (4 bytes an entry), from which the
  best pass's chain is read back, its saved and ckpt re-added along its transitions;
* an entry that can no longer reach V (:mod:`planner.dp.reach`) is no candidate at all: the
  window's room test uses the smaller of the peak test's room and what the target can still
  finish with, one ``(L, W)`` table before the loop.

Without that pruning (``prune=False``) the plan is the per-pass loop's, entry for entry
(with it, a capped front keeps other entries, so plans differ; an uncapped one keeps V's
front): candidates are the same (a source's key
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

import dataclasses

import numpy as np

from hgraph.common.errors import HGraphError
from hgraph.common.progress import current as current_progress
from planner.dp.fronts import INF, Fronts, pareto_mask
from planner.dp.reach import reach_at, reach_limits
from planner.dp.scale import thin_lagrange
from planner.dp.subsets import window_transitions

__all__ = ["run_stacked", "walk", "walk_limits", "room_offsets", "WalkInput", "WalkTrace",
           "reusable", "STACKED_MAX_WINDOW"]

#: Widest window the stacked loop takes: its tables hold ``L·W`` transitions.
STACKED_MAX_WINDOW = 64


def run_stacked(fam, t: np.ndarray, m: np.ndarray, budget: int, window: int, front_cap: int,
                lams: list, strategy: str, prune: bool = True):
    """All passes of a capped solve (``lams``: ``None`` for a :func:`thin` pass, else the
    multiplier of a :func:`thin_lagrange` pass, in the per-pass order) in one loop.

    ``prune``: drop entries that can no longer reach V (:mod:`planner.dp.reach`) before a
    front is thinned; False gives the per-pass loop's plans entry for entry.

    Returns ``(fronts, entry)``: the best pass's chain as a :class:`Fronts` of its own entries
    (``s``, ``c``, ``pred``, ``state``; ``ptr`` not filled) and its last entry, V's — the
    strategy's end entry of the first pass, replaced by a later pass's only if it saves more,
    or as much with less ckpt (``entry`` None when no pass reaches V).
    """
    sub, dt, dm = window_transitions(fam, t, m, int(window))
    span = int(m.sum()) + 1                        # ckpt < span, saved < span_s: the pass
    span_s = int(t.sum()) + 1                      # goes into one sortable key with either
    store, last = walk(WalkInput(fam.mL, fam.mAB, sub, dt, dm, budget, front_cap, lams, span,
                                 span_s, prune))
    entry = _best_end(last, len(lams), strategy)
    if entry is None:
        return Fronts.empty(0), None
    return _chain_fronts(store, entry, int(window), dt, dm)


@dataclasses.dataclass(frozen=True)
class WalkInput:
    """What a walk of :func:`walk` reads: the states' ``(L, W)`` window tables ``sub``,
    ``dt``, ``dm`` (:func:`~planner.dp.subsets.window_transitions`), ``mL`` (``m(L)``) and
    ``mAB`` (``m(A) + m(B)``); the passes: ``budget``, ``front_cap``, ``lams`` (one a pass:
    None for a :func:`~planner.dp.scale.thin` pass, else a multiplier), ``span``/``span_s``
    (above any ckpt / saved: the whole graph's ``m(V) + 1`` / ``T(V) + 1``, so segments sort
    alike) and ``prune`` (drop entries that can no longer reach V); ``offsets``, when the
    caller holds them: the tables' budget-free reach (:func:`planner.dp.reach.reach_offsets`
    of :func:`room_offsets`, no ``ends``), so the limits at any budget need no reach pass.

    Why a record: a segment of the scale path (:class:`planner.dp.segmented.SegmentDP`) holds
    the same and walks it again and again."""

    mL: np.ndarray
    mAB: np.ndarray
    sub: np.ndarray
    dt: np.ndarray
    dm: np.ndarray
    budget: int
    front_cap: int
    lams: list
    span: int
    span_s: int
    prune: bool = True
    offsets: np.ndarray | None = None


@dataclasses.dataclass
class WalkTrace:
    """What a walk records, when asked, to tell whether its result holds at another budget
    (:func:`reusable`): its ``limit`` table (:func:`walk_limits`) and its ``slack``, the least
    ``limit − ckpt`` over every candidate that passed the limit test (``None``: none did).

    Why: the plan job's fit re-solves at budgets a few MB lower (:func:`planner.api._fit`),
    and a segment's free walk (:mod:`planner.dp.segmented`) rarely depends on so small a
    change; the trace says exactly when it does not."""

    limit: np.ndarray | None = None
    slack: int | None = None

    def note(self, gaps: np.ndarray) -> None:
        """Take a batch's passing candidates' ``limit − ckpt`` into the slack."""
        least = int(gaps.min())
        self.slack = least if self.slack is None else min(self.slack, least)


def walk_limits(w: WalkInput, ends=None) -> np.ndarray:
    """The ``(L, W)`` limit table :func:`walk` tests candidates against (:func:`_limits`): the
    only thing of the walk that depends on ``w.budget``."""
    if w.offsets is not None and ends is not None:
        raise HGraphError("reach offsets are a walk's without ends; pass one or the other")
    return _limits(w.mL, w.mAB, w.budget, w.sub, w.dm, w.prune, ends,
                   w.offsets if w.prune else None)


def room_offsets(mL: np.ndarray, mAB: np.ndarray, W: int) -> np.ndarray:
    """``(L, W)``: the peak test's room of each window transition at budget 0 — at budget
    ``b`` it is ``b +`` this (the target's ``2·m(L) + m(A) + m(B)`` against the source's
    ``2·m(L)``; a missing source, before state 0, reads state 0's). Apart so that a segment
    walked at several budgets computes its reach once (:mod:`planner.dp.reach`)."""
    L = int(mL.size)
    two_mL = 2 * mL
    src = np.arange(L)[:, None] - W + np.arange(W)[None, :]
    return (-two_mL - mAB)[:, None] + two_mL[np.maximum(src, 0)]


def reusable(trace: WalkTrace, limit: np.ndarray) -> bool:
    """Whether a walk traced in ``trace`` gives the same result, bit for bit, with the limit
    table ``limit`` (another budget's :func:`walk_limits`, the other inputs the same).

    Why it is exact. The budget enters :func:`walk` only through its limit table, and that in
    three places: the candidates (``ckpt ≤ limit``), the batches (:func:`_batches`: the pattern
    ``limit ≥ 0``) and the batches' sort radices (:func:`_batch_plan`). With ``d = limit_old −
    limit ≥ 0`` everywhere and ``max d ≤ slack``: a candidate that passed (``c ≤ limit_old``)
    still passes, since ``limit = limit_old − d ≥ limit_old − slack ≥ c``; one that failed
    (``c > limit_old ≥ limit``) still fails. So the first batch keeps the same candidates,
    hence the same fronts, and by induction over the batches every ring, store entry and end
    front is the same. The same pattern gives the same batches. A radix only orders the
    candidates by ``ps·r − nc``, which for any ``r`` above every candidate's ``nc`` (what
    :func:`_batch_plan` makes it: a candidate's ckpt passed its limit and ``nc`` adds the
    transition's ``dm``) is (``ps`` ascending, ``nc`` descending), ties kept in arrival
    order by the stable sort — as the two-key ``np.lexsort`` (radix 0, also stable) orders
    them: the same order for any valid radix, so a different one changes nothing. The
    criterion is sufficient, not necessary (a smaller ``d`` away from the tight candidate
    would do too)."""
    old = trace.limit
    if old is None or old.shape != limit.shape or not np.array_equal(old >= 0, limit >= 0):
        return False
    d = old - limit
    if d.size and d.min() < 0:
        return False
    return trace.slack is None or not d.size or int(d.max()) <= trace.slack


def walk(w: WalkInput, seed=None, ends=None, trace: WalkTrace | None = None):
    """The walk of :func:`run_stacked` over the states of ``w``.

    Why separate: a segment of the family between two strict separators is walked on its own
    (:mod:`planner.dp.segmented`), its first state the separator it starts at and its fronts
    ``seed`` — ``(saved, ckpt, pass)`` arrays, each pass's entries in saved order (at most
    ``front_cap`` a pass): the front that segment's walk handed over — instead of ∅'s
    ``(0, 0)``. ``ends``: states whose reach (:mod:`planner.dp.reach`) is unbounded, as the
    last state's is (a segment's end seen from inside it). ``trace``: a :class:`WalkTrace` to
    fill (the limit table and the slack), so that the walk can be reused at another budget
    (:func:`reusable`); None (the default) records nothing and costs nothing.

    Returns ``(store, last)``: every kept entry's predecessor (:class:`_Store`; a seed entry's
    is −1, its id its index in ``seed``) and the last state's front, ``(saved, ckpt, pass,
    store id)`` in (pass, saved) order (None when it has no entry).
    """
    dt, dm, span, span_s = w.dt, w.dm, w.span, w.span_s
    L, W, K, P = int(w.mL.size), int(w.sub.shape[1]), int(w.front_cap), len(w.lams)
    thinning = _thinning(w.lams, K, W)
    if span * (P + 1) >= INF or span_s * (P + 1) >= INF:
        raise HGraphError(f"the capped DP's sort keys overflow: {P} passes × m(V) = {span - 1} "
                          f"(DP units); plan with a coarser unit")
    store = _Store(L, P * K)
    PK, PS = P * K, P * span_s
    ring = _seeded_ring(store, seed, W, P, K, span_s)
    rs, rc, re = (ring[f].reshape(-1) for f in range(3))     # flat views
    limit = walk_limits(w, ends)
    if trace is not None:
        trace.limit, trace.slack = limit, None
        ceiling = limit + dm                       # a candidate passes iff nc ≤ it
    report, every = current_progress().position, max(1, L // 200)   # the DP position, ~0.5 %
    starts, stops, radices = _batch_plan(limit, dm, B_key=P * span_s)
    # windows[s0, b]: the ring slots of the window of batch member b when the batch starts
    # at a state ≡ s0 (mod W); its slot 0 is the member's own slot (state − W's)
    windows = (np.arange(W)[:, None, None] + np.arange(W)[:, None] + np.arange(W)) % W
    lifts = (np.arange(W) * PS)[:, None]           # saved lifted by the member's segments
    last, reported = None, 0
    for a, z, r in zip(starts, stops, radices):    # states a .. z − 1: none a source of another
        if a >= reported + every:
            report(a, L)
            reported = a
        B = z - a
        slots = windows[a % W, :B]                 # (B, W)
        own = slots[:, 0]
        ckpt = ring[1][slots]                      # (B, W, P·K): the windows' fronts
        at = np.flatnonzero(ckpt <= limit[a:z, :, None])[::-1]
        if at.size == 0:                           # (latest arrival first: see _select)
            ring[1, own] = INF
            store.ptr[a + 1:z + 1] = store.size
            continue
        ps = (ring[0][slots] + (dt[a:z] + lifts[:B])[:, :, None]).ravel()[at]
        nc = (ckpt + dm[a:z, :, None]).ravel()[at]
        if trace is not None:                      # the passing candidates' margins:
            trace.note(ceiling[a:z].ravel()[at // PK] - nc)   # = limit − ckpt
        ps, nc, seg, at, cnt = _select(ps, nc, at, r, B * P, K, span, span_s, thinning)
        per = cnt.reshape(B, P).sum(axis=1)        # entries per member
        bw = at // PK                              # at: (member, source, position)
        ids = store.add(re[(slots.ravel()[bw] - bw) * PK + at], a, per)
        to = np.arange(ps.size) + np.repeat(own * PK - (np.cumsum(per) - per), per)
        ring[1, own] = INF                         # (packed at the start of each slot)
        rs[to], rc[to], re[to] = ps % PS, nc, ids
        if z == L:
            end = seg // P == B - 1
            last = (ps[end] - seg[end] * span_s, nc[end], seg[end] % P, ids[end])
    return store, last


def _thinning(lams, K: int, W: int):
    """(levels, multipliers, is-λ, half) of :func:`_thin_all` by segment (``W`` members of
    ``len(lams)`` passes): each pass's thinning levels over its ckpt range (the spare ones at
    0: the first entry, kept anyway), its multiplier (NaN for a :func:`thin` pass), whether it
    keeps a Lagrangian half (as :func:`~planner.dp.loop.run_dp`: only from a cap of 4)."""
    P = len(lams)
    lam = np.array([np.nan if x is None else float(x) for x in lams])
    is_lagrange = ~np.isnan(lam) & (K >= 4)
    half = K // 2
    nlev = np.where(is_lagrange, K - half, K)
    x = np.zeros((P, K))
    for p in range(P):
        x[p, :nlev[p]] = np.linspace(0.0, 1.0, int(nlev[p])) ** 0.5
    return np.tile(x, (W, 1)), np.tile(lam, W), np.tile(is_lagrange, W), half


def _seeded_ring(store, seed, W: int, P: int, K: int, span_s: int) -> np.ndarray:
    """The ring of the last ``W`` states' fronts with ``seed`` (None: ∅'s ``(0, 0)`` in every
    pass) in state 0's slot, its entries added to ``store``.

    The ring: state i's front in slot i % W (so the window of i is the slots (i + w) % W,
    w = 0 .. W − 1, states i − W + w); fields (pass·span_s + saved, ckpt, store id), a state's
    entries packed at the start of its slot in (pass, saved) order (ckpt INF after them:
    unused). Along a window the store ids ascend (states in order, then pass, then saved):
    the reference's arrival order."""
    PK = P * K
    ring = np.zeros((3, W, PK), np.int64)
    ring[1] = INF
    if seed is None:
        seed = (np.zeros(P, np.int64), np.zeros(P, np.int64), np.arange(P))
    s0, c0, p0 = (np.asarray(a, np.int64) for a in seed)
    if s0.size > PK or (p0.size > 1 and np.any(np.diff(p0) < 0)) \
            or np.bincount(p0, minlength=P).max(initial=0) > K:
        raise HGraphError("a seed front has at most front_cap entries a pass, in pass order")
    ring[0, 0, :s0.size] = p0 * span_s + s0
    ring[1, 0, :s0.size] = c0
    ring[2, 0, :s0.size] = np.arange(s0.size)
    store.add(np.full(s0.size, -1), 0, [s0.size])
    return ring


def _select(ps, nc, at, r: int, segments: int, K: int, span: int, span_s: int, thinning):
    """A batch's candidates (``ps``: segment·span_s + saved, ``nc``: ckpt, ``at``: their ring
    positions, latest arrival first) cut to every segment's front: ``(ps, nc, segment, at,
    entries per segment)``.

    (segment, saved) ascending, ckpt descending, latest arrival first: the last of a
    (segment, saved) run is its first arrival with the least ckpt, and one strict suffix
    minimum over segment·span + ckpt keeps exactly those that every larger-saved candidate
    of the segment costs more than (the first arrival per saved, then the Pareto cut); a
    segment over ``K`` entries is thinned (:func:`_thin_all`). ``r``: the batch's sort radix
    (0: sort by two keys)."""
    order = np.argsort(ps * r - nc, kind="stable") if r else np.lexsort((-nc, ps))
    ps, nc = ps[order], nc[order]
    seg = ps // span_s
    v = nc + seg * span                            # (segment, ckpt): ascending where Pareto
    keep = np.flatnonzero(pareto_mask(v))
    ps, nc, seg, v, at = ps[keep], nc[keep], seg[keep], v[keep], at[order[keep]]
    cnt = np.bincount(seg, minlength=segments)
    if cnt.max() > K:
        x, lam, is_lagrange, half = thinning
        keep = _thin_all(ps, nc, v, seg, cnt, K, half, x, lam, is_lagrange, span, span_s)
        ps, nc, seg, at = ps[keep], nc[keep], seg[keep], at[keep]
        cnt = np.bincount(seg, minlength=segments)
    return ps, nc, seg, at, cnt


def _limits(mL, mAB, budget: int, sub, dm, prune: bool, ends=None,
            offsets=None) -> np.ndarray:
    """``(L, W)``: the largest source ckpt each window transition takes (``-1``: none) — the
    peak test's room and, with ``prune``, what still reaches V (or a state of ``ends``)
    after it: from the budget-free ``offsets`` when given (no ``ends`` then), else one
    :func:`~planner.dp.reach.reach_limits` pass at this budget (the same array)."""
    room = int(budget) + room_offsets(mL, mAB, sub.shape[1])
    if prune:
        reach = reach_at(offsets, budget) if offsets is not None else \
            reach_limits(sub, room, dm, ends=ends)
        room = np.minimum(room, reach[:, None] - dm)
    return np.where(sub, room, -1)


def _batches(limit: np.ndarray) -> list:
    """Bounds of the runs of consecutive states the loop takes in one step: a run ends before
    a state that has a transition from a state of the run (``limit ≥ 0``: the fronts it
    reads must be final), and holds at most ``W`` states (each writes its own ring slot).
    (Runs' lengths on the synthetic graphs: bench/NOTES_scale.md.)"""
    L, W = limit.shape
    if L <= 1:
        return []
    has = limit >= 0
    near = np.where(has.any(axis=1), np.arange(L) - 1 - np.argmax(has[:, ::-1], axis=1), -1)
    bounds, start = [1], 1                         # near: the latest source with a transition
    for k, i in enumerate(near[2:].tolist(), 2):
        if i >= start or k - start >= W:
            bounds.append(k)
            start = k
    bounds.append(L)
    return bounds


def _batch_plan(limit: np.ndarray, dm: np.ndarray, B_key: int):
    """The batches (:func:`_batches`) as lists of first states, ends and sort radices: a
    batch's candidates have ckpt below its radix (a source's ckpt passes ``limit``, its
    transition adds ``dm``), so ``key·radix − ckpt`` orders (key ascending, ckpt
    descending) for keys below ``B·B_key``; radix 0 where that could overflow int64 (the
    loop sorts by two keys there)."""
    bounds = np.array(_batches(limit), np.int64)
    if bounds.size < 2:
        return [], [], []
    top = np.max(np.where(limit >= 0, limit + dm, -1), axis=1) + 1
    r = np.maximum(np.maximum.reduceat(top, bounds[:-1]), 1)
    fits = r.astype(np.float64) * np.diff(bounds) * float(B_key) < 2.0 ** 62
    return bounds[:-1].tolist(), bounds[1:].tolist(), np.where(fits, r, 0).tolist()


def _thin_all(ps, nc, v, p, cnt, K: int, half: int, x, lam, is_lagrange, span: int,
              span_s: int) -> np.ndarray:
    """Indices of the entries kept (sorted by segment ``p`` — a batch member's pass — then
    saved; ``v`` = segment·span + ckpt, ascending; ``x``, ``lam``, ``is_lagrange``: the
    passes' levels and multipliers by segment): every segment with more than ``K`` entries
    thinned as its per-pass loop does — for each level over its ckpt range the largest
    entry at or below it (one ``searchsorted`` over ``v`` for all segments; the first and
    last levels, 0 and 1, give its first and last entry) and for λ passes the best half by
    saved − λ·ckpt."""
    big = cnt > K
    keep = ~big[p]
    starts = np.cumsum(cnt) - cnt
    bi = np.flatnonzero(big)
    lo = starts[bi]
    n0 = nc[lo]
    levels = n0[:, None] + x[bi] * (nc[lo + cnt[bi] - 1] - n0).astype(np.float64)[:, None]
    at = np.searchsorted(v, (bi * span)[:, None] + levels.astype(np.int64),
                         side="right") - 1         # nc ≤ level ⟺ nc ≤ ⌊level⌋ (≥ 0)
    keep[at.ravel()] = True
    rows = bi[is_lagrange[bi]]
    if rows.size:                                  # the best half by saved − λ·ckpt
        _lagrange_halves(keep, ps, nc, rows, starts, cnt, K, half, lam[rows], span_s)
    return np.flatnonzero(keep)


def _lagrange_halves(keep, ps, nc, rows, starts, cnt, K: int, half: int, lam,
                     span_s: int) -> None:
    """Mark, for each λ segment in ``rows`` (``lam``: its multiplier), its ``half`` entries
    of the largest score ``saved − λ·ckpt``: the scores at least the segment's ``half``-th
    largest (one ``np.partition`` of the segments' padded score rows, no sort). Where that
    score ties with the next one, which entries :func:`~planner.dp.scale.thin_lagrange`
    keeps depends on ``np.argpartition``, so that segment's entries are its own call's."""
    n = cnt[rows]
    M = int(n.max())
    col = np.arange(M)
    valid = col < n[:, None]
    at = np.where(valid, starts[rows][:, None] + col, 0)
    score = np.where(valid, (ps[at] - (rows * span_s)[:, None])
                     - lam[:, None] * nc[at].astype(np.float64), -np.inf)
    edge = np.partition(score, (M - half - 1, M - half), axis=1)
    tau = edge[:, M - half]                        # the half-th largest score of each pass
    keep[at[valid & (score >= tau[:, None])]] = True
    for q in np.flatnonzero(edge[:, M - half - 1] == tau):   # a tie at the edge: the
        r0, m = starts[rows[q]], n[q]                           # pass's own rule decides
        keep[r0:r0 + m] = False
        keep[r0 + thin_lagrange(ps[r0:r0 + m] - rows[q] * span_s, nc[r0:r0 + m], K,
                                lam[q])] = True


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

    def add(self, pred, state: int, per) -> np.ndarray:
        """Store the entries (predecessor ids) of ``len(per)`` states from ``state`` on,
        ``per[b]`` of state ``state + b``; returns their ids."""
        k = np.size(pred)
        if self.size + k > self.pred.size:
            new = np.zeros(max(2 * self.pred.size, self.size + k), self.dtype)
            new[:self.size] = self.pred[:self.size]
            self.pred = new
        self.pred[self.size:self.size + k] = pred
        self.ptr[state + 1:state + 1 + len(per)] = self.size + np.cumsum(per)
        self.size += k
        return np.arange(self.size - k, self.size)
