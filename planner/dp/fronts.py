"""The DP's Pareto fronts: one structure for every family, set representation and search.

For every state (lower set) the DP keeps the Pareto front of ``(saved, ckpt)`` pairs —
compute saved (to maximise) against checkpoint memory (to minimise). All fronts live in one set
of flat arrays, appended state by state, each entry with its predecessor entry (the chain is
read back by following ``pred``). The helpers here are the front operations every DP pass
shares: expanding sources' fronts into candidates, the first-arrival minimum per ``saved`` and
the Pareto cut.

Example::

    >>> import numpy as np
    >>> f = Fronts.empty(2)
    >>> f.append(0, np.zeros(1, np.int64), np.zeros(1, np.int64), np.full(1, -1))
    >>> f.append(1, np.array([3]), np.array([5]), np.array([0]))
    >>> path(f, 1), has_end(f)
    ([0, 1], True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.arrays import ranges, run_starts

__all__ = ["Fronts", "INF", "run_starts", "best_per_saved", "expand_fronts", "pareto_mask", "segment_pareto",
           "has_end", "end_entry", "path"]

INF = np.iinfo(np.int64).max // 4


def _suffix_min_after(v: np.ndarray) -> np.ndarray:
    """``out[k] = min(v[k+1:])`` (INF past the end)."""
    out = np.empty_like(v)
    if v.size:
        out[:-1] = np.minimum.accumulate(v[:0:-1])[::-1]
        out[-1] = INF
    return out


@dataclass
class Fronts:
    """All Pareto fronts, appended state by state; entry order = (state id, saved) order.

    Within a state both ``saved`` and ``ckpt`` ascend, so ``glob`` (state · span + ckpt) and
    ``glob_s`` (state · span_s + saved) are globally sorted: one ``searchsorted`` finds, for
    many sources at once, where their feasible prefix ends or their useful suffix starts.
    """

    s: np.ndarray
    c: np.ndarray
    pred: np.ndarray
    state: np.ndarray
    ptr: np.ndarray
    glob: np.ndarray          # state · span + c: globally sorted, for a ragged searchsorted
    glob_s: np.ndarray        # state · span_s + s: likewise (only when span_s is set)
    span: int = 1
    span_s: int = 0
    size: int = 0

    @classmethod
    def empty(cls, n_states: int, capacity: int = 1 << 16):
        z = lambda: np.zeros(capacity, np.int64)  # noqa: E731
        return cls(z(), z(), z(), z(), np.zeros(n_states + 1, np.int64), z(), z())

    def _reserve(self, k: int) -> None:
        """Room for ``k`` more entries (capacity doubles, so appends are amortised O(1))."""
        if self.size + k > self.s.size:
            cap = max(2 * self.s.size, self.size + k)
            for name in ("s", "c", "pred", "state", "glob", "glob_s"):
                arr = getattr(self, name)
                new = np.zeros(cap, np.int64)
                new[:self.size] = arr[:self.size]
                setattr(self, name, new)

    def _write(self, states, s, c, pred) -> int:
        """Store ``k`` entries after the last one (``states``: one state or one per entry)."""
        k = np.size(s)
        self._reserve(k)
        sl = slice(self.size, self.size + k)
        self.s[sl], self.c[sl], self.pred[sl], self.state[sl] = s, c, pred, states
        self.glob[sl] = states * self.span + c
        if self.span_s:
            self.glob_s[sl] = states * self.span_s + s
        self.size += k
        return k

    def append(self, j: int, s, c, pred):
        """Append state ``j``'s front (``saved`` ascending)."""
        self._write(j, s, c, pred)
        self.ptr[j + 1] = self.size

    def extend(self, states, s, c, pred):
        """Append entries of several states at once (sorted by state, then saved).

        Returns the first and last index (within the call) of each state's run.
        """
        start = self.size
        k = self._write(states, s, c, pred)
        first = run_starts(states)
        last = np.append(first[1:], k) - 1
        self.ptr[states[first] + 1] = start + last + 1
        return first, last


def best_per_saved(ns, nc, e):
    """For each distinct ``ns``: the least ``nc``, ties to the least entry ``e`` (first arrival).

    Returns the winners sorted by ``ns``. Dense buckets over the ``ns`` range when it is
    narrow (saved values are bounded by T(V)) and the input not tiny, a sort otherwise; both
    give the same winners. The sort is a lexsort of three keys, or where ``(nc, e)`` packs into
    one int64 a sort of that and a stable sort by ``ns`` (1.5x faster on the wide ``ns`` of
    FLOP-costed PyTorch graphs; ``e`` is distinct, so the packed order is total); where
    ``(ns, nc)`` packs and ``e`` ascends (the DP loop's candidates: each source's front in
    order, sources in id order; checked, else a lexsort) one stable sort of the packed pair,
    whose ties keep ``e``'s order (3-4x less than the two sorts on the 12-layer GPT's fronts). Buckets are faster from a few hundred candidates on, tiny inputs
    cost the same either way (figures: bench/NOTES_scale.md). Where ``nc`` and
    ``e`` pack into one int64 (``(nc − min)·E + (e − min)`` orders as ``(nc, e)``) the buckets
    take one ``minimum.at`` of the packed values, which spares a second scatter and the gather
    that finds each bucket's winners (the exact search's biggest inputs on big families).
    """
    lo, hi = int(ns.min()), int(ns.max())
    width = hi - lo + 1
    clo, elo = int(nc.min()), int(e.min())
    E = int(e.max()) - elo + 1
    packs = (int(nc.max()) - clo + 1) * E < INF
    if ns.size <= 256 or width > 4 * ns.size + 1024:
        if ns.size > 256 and width * (int(nc.max()) - clo + 1) < INF:
            # (ns, nc) packed: one stable sort of it, its ties in input order, which is e's
            # order where the candidates come source by source (checked; else by e too)
            v = ns - lo
            v *= int(nc.max()) - clo + 1
            v += nc
            v -= clo
            order = np.argsort(v, kind="stable")
            if not _ties_ascend(v[order], e[order]):
                order = np.lexsort((e, v))
        elif not packs or ns.size <= 256:
            order = np.lexsort((e, nc, ns))
        else:                # (nc, e) packed: one sort of it, then a stable one by ns
            v = nc - clo
            v *= E
            v += e
            v -= elo
            order = np.argsort(v)
            order = order[np.argsort(ns[order], kind="stable")]
        ns, nc, e = ns[order], nc[order], e[order]
        first = run_starts(ns)
        return ns[first], nc[first], e[first]
    k = ns - lo
    if packs:                                           # packed: one scatter
        v = nc - clo
        v *= E
        v += e
        v -= elo
        best = np.full(width, INF, np.int64)
        np.minimum.at(best, k, v)
        present = np.flatnonzero(best < INF)
        b = best[present]
        return present + lo, b // E + clo, b % E + elo
    BIG = np.iinfo(np.int64).max
    best = np.full(width, BIG, np.int64)
    np.minimum.at(best, k, nc)
    win = nc == best[k]
    beste = np.full(width, BIG, np.int64)
    np.minimum.at(beste, k[win], e[win])
    present = np.flatnonzero(best < BIG)
    return present + lo, best[present], beste[present]


def _ties_ascend(v: np.ndarray, e: np.ndarray) -> bool:
    """Whether, along ``v`` sorted, ``e`` ascends within every run of equal ``v`` (then the
    first of a run is its least ``e``)."""
    tie = v[1:] == v[:-1]
    return not bool((tie & (e[1:] < e[:-1])).any())


def expand_fronts(fronts: Fronts, starts, cnt, dt, dm):
    """Every candidate of one target: ``cnt[k]`` front entries of source k from ``starts[k]``,
    each shifted by that transition's ``(dt[k], dm[k])``; returns (entry ids, saved, ckpt)."""
    e = ranges(starts, cnt)
    return e, fronts.s[e] + np.repeat(dt, cnt), fronts.c[e] + np.repeat(dm, cnt)


def pareto_mask(nc: np.ndarray) -> np.ndarray:
    """Over candidates sorted by ``saved``: keep one only if every larger-saved one costs
    strictly more (``nc`` of the winners of :func:`best_per_saved`)."""
    return nc < _suffix_min_after(nc)


def segment_pareto(seg: np.ndarray, ns: np.ndarray, nc: np.ndarray) -> np.ndarray:
    """Pareto mask over entries sorted by (seg, ns): keep if every later entry of the segment
    costs strictly more. One suffix minimum over all segments: each segment's costs are
    lifted above every later segment's (ranks of ``nc`` plus ``seg``·(#ranks + 1))."""
    if seg[0] == seg[-1]:                                    # one segment
        return pareto_mask(nc)
    lo, width = int(nc.min()), int(nc.max()) - int(nc.min()) + 2
    if width * (int(seg[-1]) - int(seg[0]) + 1) < INF:       # the costs themselves as ranks
        v = (nc - lo) + (seg - seg[0]) * width
    else:
        _, rank = np.unique(nc, return_inverse=True)
        v = rank.astype(np.int64) + (seg - seg[0]) * (int(rank.max()) + 2)
    return v < _suffix_min_after(v)


def has_end(fronts: Fronts) -> bool:
    """Whether the last state (V) has a front entry: a plan exists."""
    end = fronts.ptr.size - 2
    return bool(fronts.ptr[end + 1] > fronts.ptr[end])


def end_entry(fronts: Fronts, strategy: str) -> int | None:
    """V's entry the strategy's plan takes: most saved (time) or least ckpt (memory)."""
    end = fronts.ptr.size - 2
    lo, hi = fronts.ptr[end], fronts.ptr[end + 1]
    if hi <= lo:
        return None
    return int(hi - 1) if strategy == "time" else int(lo)


def path(fronts: Fronts, entry: int) -> list:
    """Entries from ∅'s to ``entry`` along the predecessors."""
    entries = []
    while entry >= 0:
        entries.append(entry)
        entry = int(fronts.pred[entry])
    return entries[::-1]
