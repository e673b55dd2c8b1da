"""Which front entries can still reach V: the largest checkpoint memory each state may carry.

In the windowed DP a state ``i`` reaches ``V`` only through transitions ``i → k`` to the
``W`` states after it, each with the peak test ``c ≤ room(i, k)`` and the checkpoint
growth ``c → c + dm(i, k)``. So there is a largest ``c`` with which ``i`` can still finish,

    reach[V] = ∞,   reach[i] = max over k of  min(room(i, k), reach[k] − dm(i, k)),

and an entry of ``i``'s front with ``c > reach[i]`` is dead: no chain through it ends in V.
Dropping dead entries leaves V's front as it is (the uncapped windowed DP gives the same
plan), but a *capped* front then spends its ``K`` entries on the ckpt range that can still
finish. On a synthetic transformer the largest ckpt of a quarter-way front was the
immediate room, while a chain that still has three quarters of the graph to checkpoint can
finish only with much less; thinning over that whole range is what lost recompute against the
uncapped DP (see ``bench/quality_bench.py``; figures in bench/NOTES_scale.md).

How it runs. The recurrence is sequential along the states (``reach[i]`` needs the ``W``
after it), so it cannot be vectorised over the states of one table; it is vectorised over
*tables* instead (:func:`reach_limits_many`): the tables of several segments
(:mod:`planner.dp.segmented`: a worker holds a few dozen) are stacked as columns, aligned at
their last state, and one backward loop over the positions takes one NumPy step each — the
``W`` targets of every table's state at that position at once (a skewed ``(W, tables)``
block gathered beforehand, in chunks of positions). One table alone still takes a step per
state, a few µs: the pass is then a small fraction of its walk.

The budget only shifts it. ``room(i, k)`` is ``budget + off(i, k)``, and with ``dm ≥ 0`` every
finite reach is a room less a sum of ``dm``, so ``reach_b = max(−1, b + R)`` exactly, ``R``
the reach of the offsets ``off`` with no floor at −1 (:func:`reach_offsets`,
:func:`reach_at`). A segment walked again at another budget (the fit's re-solves) keeps
``R`` and needs no pass at all (:meth:`planner.dp.segmented.SegmentDP.limits`).

Example::

    >>> import numpy as np
    >>> sub = np.array([[False, False], [False, True], [True, True]])   # ∅→1→2 (V), ∅→2
    >>> room = np.array([[0, 0], [0, 5], [3, 9]])
    >>> dm = np.array([[0, 0], [0, 4], [6, 1]])
    >>> reach_limits(sub, room, dm).tolist()     # ∅ → 1 lets c ≤ 5 through, and 1 takes 9
    [5, 9, 2305843009213693951]
    >>> R = reach_offsets([(sub, room - 7, dm, None)])[0]          # the rooms at budget 7 + b
    >>> reach_at(R, 7).tolist(), reach_at(R, 3).tolist()
    ([5, 9, 2305843009213693951], [1, 5, 2305843009213693951])
"""

from __future__ import annotations

import numpy as np

from hgraph.common.errors import HGraphError
from planner.dp.fronts import INF

__all__ = ["reach_limits", "reach_limits_many", "reach_offsets", "reach_at", "NO_REACH"]

#: The floor of :func:`reach_offsets`: below any finite offset reach (rooms and ``dm`` sums
#: stay far inside ±``INF``), so ``b + NO_REACH < −1`` for every budget below ``INF``.
NO_REACH = -INF


def reach_limits(sub: np.ndarray, room: np.ndarray, dm: np.ndarray,
                 chunk: int = 1 << 14, ends=None) -> np.ndarray:
    """``reach[i]`` for every state (``-1``: V cannot be reached from ``i`` at all).

    ``sub``/``room``/``dm``: ``(L, W)`` tables by target ``k`` and column ``w`` (source
    ``k − W + w``): whether the transition exists, the largest source ckpt its peak test
    lets through, and its checkpoint growth. The last state is V. ``ends``: states whose
    reach is ``INF`` too (the separators a segmented DP cuts at, :mod:`planner.dp.segmented`:
    each segment prunes towards its own end, as it does walked alone). ``chunk``: states
    whose skewed tables are held at once (:func:`reach_limits_many`)."""
    return reach_limits_many([(sub, room, dm, ends)], chunk=chunk)[0]


def reach_offsets(tables, chunk: int = 1 << 14) -> list:
    """:func:`reach_limits_many` of rooms given as offsets from a budget (``room = budget +
    off``), unfloored: :data:`NO_REACH` where V cannot be reached at any budget. Needs
    ``dm ≥ 0`` (the window tables' checkpoint growth is a sum of sizes); :func:`reach_at`
    turns it into one budget's reach."""
    for _, _, dm, _ in tables:
        if dm.size and int(dm.min()) < 0:
            raise HGraphError("reach offsets need dm >= 0 (a negative checkpoint growth)")
    return reach_limits_many(tables, chunk=chunk, floor=NO_REACH)


def reach_at(offsets: np.ndarray, budget: int) -> np.ndarray:
    """The reach at ``budget`` from :func:`reach_offsets` (its rooms ``room − budget``): the
    same array :func:`reach_limits` gives for those rooms, bit for bit (module docstring)."""
    return np.where(offsets >= INF, INF, np.maximum(offsets + int(budget), -1))


def reach_limits_many(tables, chunk: int = 1 << 14, floor: int = -1) -> list:
    """:func:`reach_limits` of several tables at once: ``tables`` a sequence of ``(sub, room,
    dm, ends)`` (one ``W`` for all), the reaches returned in its order.

    Stacked as columns of one ``(positions, tables)`` array aligned at their last state
    (V), a table's state ``i`` at position ``i + pad``; the loop runs over the positions
    backwards, each step ``max(F, max over d of min(A, R[p + 1 … p + W] − D))`` on ``(W,
    tables)`` blocks, where ``A``/``D`` are the room (``floor`` where no transition: it cannot
    win) and ``dm`` of the transition to ``p + d``, gathered for ``chunk`` states at a time,
    and ``F`` is ``INF`` at V and the ``ends``, ``floor`` elsewhere (so the one maximum both
    floors the reach and pins the ends). ``floor``: the reach of a state that cannot reach V
    (−1; :data:`NO_REACH` for :func:`reach_offsets`)."""
    tables = list(tables)
    out = [np.zeros(0, np.int64) for _ in tables]
    live = [s for s, t in enumerate(tables) if t[0].shape[0]]
    if not live:
        return out
    Ws = {int(tables[s][0].shape[1]) for s in live}
    if len(Ws) > 1:
        raise HGraphError(f"reach tables of different windows: {sorted(Ws)}")
    W, S = Ws.pop(), len(live)
    lens = np.array([tables[s][0].shape[0] for s in live], np.int64)
    P = int(lens.max())
    pad = P - lens
    start = np.r_[0, np.cumsum(lens)[:-1]]
    lim = np.concatenate([np.where(tables[s][0], tables[s][1], floor).astype(np.int64)
                          for s in live])
    dmf = np.concatenate([np.asarray(tables[s][2], np.int64) for s in live])
    F = np.full((P, S), floor, np.int64)
    F[P - 1] = INF
    for col, s in enumerate(live):
        ends = tables[s][3]
        if ends is not None:
            e = np.asarray(ends, np.int64).reshape(-1)
            e = e[(e >= 0) & (e < lens[col])]
            F[e + pad[col], col] = INF
    R = np.full((P + W, S), floor, np.int64)      # past V: no state (its A is the floor)
    d = np.arange(1, W + 1)[None, :, None]
    cols = np.arange(S)[None, None, :]
    step = max(1, int(chunk) // S)
    hi = P
    while hi > 0:
        lo = max(0, hi - step)
        i = np.arange(lo, hi)[:, None, None] - pad[cols]         # (positions, 1, S)
        k = i + d                                                 # targets, (n, W, S)
        ok = (i >= 0) & (k < lens[cols])
        at = np.where(ok, start[cols] + k, 0)
        A = np.where(ok, lim[at, W - d], floor)
        D = np.where(ok, dmf[at, W - d], 0)
        for q in range(hi - lo - 1, -1, -1):
            p = lo + q
            t = R[p + 1:p + 1 + W] - D[q]
            np.minimum(t, A[q], out=t)
            np.maximum(t.max(axis=0), F[p], out=R[p])
        hi = lo
    for col, s in enumerate(live):
        out[s] = R[pad[col]:P, col].copy()
    return out
