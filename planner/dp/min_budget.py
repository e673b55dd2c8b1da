"""The smallest budget at which the DP on a family has a plan, computed directly (no bisection).

Why: an infeasible budget's error names the smallest feasible one. Found by bisection it
costs dozens of full DP solves, most of a small plan's command (bench/NOTES_scale.md);
computed directly it is one DP over the family's transitions (run under a growing bound:
a few walks, the last one exact).

What it computes: the DP at budget ``B`` reaches V iff some chain ``∅ = L_0 ⊊ … ⊊ L_k = V``
of the family passes every step's peak test, ``c_i + 2·(m(L_j) − m(L_i)) + mAB(L_j) ≤ B``,
where ``c_i`` is the ckpt held at ``L_i`` (the sum of the steps' ``dm``,
``m(∂L_j \\ L_i)``). Every strategy and search of :func:`planner.dp.solve.solve_family`
without a window or front cap keeps the least-ckpt entry of each reachable state, so they all
reach V exactly then. The smallest feasible budget is therefore the least, over chains, of the
largest step peak: a bottleneck path whose step weights grow with a quantity accumulated along
the path. Both ``c`` and the peak so far only grow along a chain, and a step's outcome is
monotone in both, so each state keeps the Pareto front of ``(c, P)``, both minimised.

``P`` is sharpened to ``P̂ = max(P, c + R_j)`` with ``R_j`` the largest
``2·m(v) + m(succ(v))`` outside ``L_j`` (:func:`~planner.dp.exact_search.outside_rho`):
every later step adding such a ``v`` peaks at least that high, so ``P̂`` changes no chain's
final value (``R = 0`` at V) and lets more entries be dominated. Within a state the front is
held ckpt descending, ``P̂`` ascending, so the headroom ``P̂ − c`` ascends; a step ``i → j``
of reach ``d = max(2·(m(L_j) − m(L_i)) + mAB(L_j), dm + R_j)`` turns an entry into
``(c + dm, max(P̂, c + d))``, and of the entries with headroom ``≤ d`` only the one of least
ckpt can be on the new front — one ``searchsorted`` finds each pair's useful entries.

Pairs and their ``dm`` come from :class:`~planner.dp.exact_search.ExactSearch` (a size level
of targets at a time, every step one NumPy operation over the level's pairs; the approximate
family's inclusion by its one-bit test, its ``dm`` from the DP loop's ``L × L`` table where
the family is small enough to have one), run at an upper bound ``U``: its peak test on each
source's least ckpt drops the pairs no chain at most ``U`` uses, and candidates above ``U``
are dropped. ``U`` starts at a lower bound (``R`` at ∅) and grows (×:data:`GROWTH`) until V is
reached; the pass that reaches it is exact. The per-(target, ckpt) minimum and per-target
Pareto cut are :func:`~planner.dp.fronts.best_per_saved` and
:func:`~planner.dp.fronts.segment_pareto` with ``−ckpt`` in the role of ``saved``.

Example::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph, approx_family, exact_family
    >>> from planner.dp.solve import solve_family
    >>> g = DPGraph(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]),
    ...             src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]))   # a diamond
    >>> fam = approx_family(g)
    >>> b = min_budget(fam, g); b
    13
    >>> solve_family(fam, g, b).status, solve_family(fam, g, b - 1).status
    ('OK', 'IMPOSSIBLE')
    >>> min_budget(exact_family(g), g)
    13
"""

from __future__ import annotations

import numpy as np

from planner.arrays import ranges
from planner.dp.exact_search import ExactSearch, outside_rho
from planner.dp.fronts import INF, Fronts, best_per_saved, segment_pareto
from planner.dp.loop import transition_table

__all__ = ["min_budget", "GROWTH"]

#: How much the pruning bound ``U`` grows after a pass that does not reach V. Passes below
#: the answer stop early, the one that reaches V costs more the further it overshoots; ×2 was
#: as fast as any growth tried on the shared graphs under 1,000 nodes and two synthetic
#: transformers, and faster than one pass at ``2·m(V)`` (figures: bench/NOTES_scale.md).
GROWTH = 2.0


def min_budget(fam, g, upper: int | None = None) -> int:
    """The least budget (DP units) at which the DP on ``fam`` (of ``g``, in the same units)
    has a plan: the least, over the family's chains, of the largest step peak.

    ``upper``: a budget known to have a plan (default ``2·m(V)``: the one-block chain
    ``∅ → V``), the bound the search never goes past."""
    rho = outside_rho(fam, g)
    top = 2 * int(fam.mL[-1]) + int(fam.mAB[-1])          # ∅ → V: always a chain
    top = top if upper is None else min(top, int(upper))
    bound = max(1, int(rho[0]))
    while True:
        bound = min(bound, top)
        found = _pass(fam, g, rho, bound)
        if found is not None:
            return found
        if bound >= top:                                   # cannot happen: ∅ → V fits top
            raise AssertionError(f"no chain within {top}")
        bound = int(bound * GROWTH) + 1


def _pass(fam, g, rho: np.ndarray, bound: int) -> int | None:
    """The smallest feasible budget if it is at most ``bound``, else None.

    Fronts live in a :class:`~planner.dp.fronts.Fronts` with ``s`` the ckpt and ``c`` the
    headroom ``P̂ − ckpt`` (ascending within a state, so ``glob`` finds the useful entries)."""
    if rho[0] > bound:
        return None
    search = ExactSearch(fam, g, bound)
    table = transition_table(fam, g.t, g.m)              # small approx families: dm by gather
    L, two_mL, mAB = fam.num_sets, search.two_mL, fam.mAB
    span = bound + 2                                       # > any headroom kept
    cspan = int(fam.mL[-1]) + 1                            # > any ckpt
    fronts = Fronts.empty(L)
    fronts.span = span
    fronts.append(0, np.zeros(1, np.int64), np.full(1, int(rho[0]), np.int64),
                  np.full(1, -1, np.int64))
    keyc = np.full(L, INF, np.int64)                       # least ckpt − 2·m(L): peak test
    keyc[0] = -int(two_mL[0])
    for lo, tgt, src in search.chunks(keyc):
        dm = table[2][tgt, src] if table is not None else search.delta_m(tgt, src)
        reach = np.maximum(two_mL[tgt] - two_mL[src] + mAB[tgt], dm + rho[tgt])
        size = fronts.size
        stops = fronts.ptr[src + 1]
        starts = np.maximum(fronts.ptr[src], np.searchsorted(
            fronts.glob[:size], src * span + np.minimum(reach, span - 1), side="right") - 1)
        cnt = stops - starts
        e = ranges(starts, cnt)
        c = fronts.s[e]
        peak = np.maximum(c + fronts.c[e], c + np.repeat(reach, cnt))
        nc = c + np.repeat(dm, cnt)
        ok = peak <= bound
        if not ok.any():
            continue
        st, nc, peak, e = np.repeat(tgt, cnt)[ok], nc[ok], peak[ok], e[ok]
        key = (st - lo) * cspan + (cspan - 1 - nc)         # (target, −ckpt) as one "saved"
        key, peak, e = best_per_saved(key, peak, e)
        st, nc = lo + key // cspan, cspan - 1 - key % cspan
        keep = segment_pareto(st, -nc, peak)
        st, nc, peak, e = st[keep], nc[keep], peak[keep], e[keep]
        first, last = fronts.extend(st, nc, peak - nc, e)
        np.maximum.accumulate(fronts.ptr, out=fronts.ptr)   # empty states: ptr[j+1] = ptr[j]
        keyc[st[last]] = nc[last] - two_mL[st[last]]
    end = L - 1
    if fronts.ptr[end + 1] == fronts.ptr[end]:
        return None
    first = int(fronts.ptr[end])
    return int(fronts.s[first] + fronts.c[first])
