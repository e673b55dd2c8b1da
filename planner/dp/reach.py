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

The recurrence runs backwards once over the ``(L, W)`` transition tables of
:func:`planner.dp.subsets.window_transitions`, before the DP: ``W`` scalar steps per state
(a small fraction of the DP's own time), in chunks of rows so
only a chunk is ever held as Python ints.

Example::

    >>> import numpy as np
    >>> sub = np.array([[False, False], [False, True], [True, True]])   # ∅→1→2 (V), ∅→2
    >>> room = np.array([[0, 0], [0, 5], [3, 9]])
    >>> dm = np.array([[0, 0], [0, 4], [6, 1]])
    >>> reach_limits(sub, room, dm).tolist()     # ∅ → 1 lets c ≤ 5 through, and 1 takes 9
    [5, 9, 2305843009213693951]
"""

from __future__ import annotations

import numpy as np

from planner.dp.fronts import INF

__all__ = ["reach_limits"]


def reach_limits(sub: np.ndarray, room: np.ndarray, dm: np.ndarray,
                 chunk: int = 1 << 14, ends=None) -> np.ndarray:
    """``reach[i]`` for every state (``-1``: V cannot be reached from ``i`` at all).

    ``sub``/``room``/``dm``: ``(L, W)`` tables by target ``k`` and column ``w`` (source
    ``k − W + w``): whether the transition exists, the largest source ckpt its peak test
    lets through, and its checkpoint growth. The last state is V. ``ends``: states whose
    reach is ``INF`` too (the separators a segmented DP cuts at, :mod:`planner.dp.segmented`:
    each segment prunes towards its own end, as it does walked alone)."""
    L, W = sub.shape
    reach = np.full(L, -1, np.int64)
    reach[L - 1] = INF
    end = set() if ends is None else set(np.asarray(ends, np.int64).tolist())
    lim = np.where(sub, room, -1)
    done = [INF]                                   # reach of the states after the chunk
    hi = L - 1                                     # states [lo, hi) are computed per chunk
    while hi > 0:
        lo = max(0, hi - chunk)
        top = min(L, hi + W)                       # targets of the chunk's states
        lim_rows = lim[lo + 1:top].tolist()
        dm_rows = dm[lo + 1:top].tolist()
        r = [-1] * (hi - lo) + done                # r[x] = reach[lo + x]
        for i in range(hi - 1, lo - 1, -1):
            best = -1
            x = i - lo
            for d in range(1, min(W, L - 1 - i) + 1):   # target k = i + d, column W − d
                row = x + d - 1
                room_ik = lim_rows[row][W - d]
                if room_ik < 0:
                    continue
                v = r[x + d] - dm_rows[row][W - d]
                if room_ik < v:
                    v = room_ik
                if v > best:
                    best = v
            r[x] = INF if i in end else best
        reach[lo:hi] = r[:hi - lo]
        done = r[:min(W, len(r))]
        hi = lo
    return reach
