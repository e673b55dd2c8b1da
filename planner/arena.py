"""Static memory plans: one arena, every buffer at an offset fixed before the run.

Buffers have half-open lifetimes ``[start, end)`` (in schedule steps) and sizes; two buffers live
at the same step must not overlap. Placement is greedy by size with best fit (TFLite's offset
calculator, XLA's GlobalDecreasingSizeBestFit): largest buffer first, each into the smallest gap
among the already placed buffers whose lifetimes intersect its own, else on top. Several greedy
orders are tried and the smallest arena kept. The lower bound is the most bytes live at one step;
``gap_pct`` says how far the arena is above it (on training steps greedy-by-size lands within a
few percent of it: ``python3 bench/alloc_bench.py``, at most 2.67 % on the zoo and reference
graphs, bench/NOTES_step.md).

>>> p = plan([100, 60, 40], [0, 0, 1], [1, 2, 3], alignment=1)
>>> p.arena_bytes, p.lower_bound, p.offsets.tolist()
(160, 160, [0, 100, 0])
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class ArenaPlan:
    offsets: np.ndarray        # int64 [n], byte offset of each buffer in the arena
    sizes: np.ndarray          # int64 [n], requested bytes
    arena_bytes: int           # the arena's size
    lower_bound: int           # max over steps of the bytes live at that step
    alignment: int
    order: str                 # which greedy order produced it

    @property
    def gap_pct(self) -> float:
        return 100.0 * (self.arena_bytes - self.lower_bound) / self.lower_bound if self.lower_bound else 0.0

    def summary(self) -> dict:
        return {"arena_bytes": int(self.arena_bytes), "lower_bound_bytes": int(self.lower_bound),
                "gap_pct": round(self.gap_pct, 4), "buffers": int(len(self.sizes)),
                "alignment": self.alignment, "order": self.order}


def lower_bound(sizes, starts, ends) -> int:
    """Max over steps of the bytes of buffers live at that step (a sweep over start/end events)."""
    sizes, starts, ends = (np.asarray(a, dtype=np.int64) for a in (sizes, starts, ends))
    if sizes.size == 0:
        return 0
    horizon = int(max(starts.max(), ends.max())) + 1
    delta = np.zeros(horizon + 1, dtype=np.int64)
    np.add.at(delta, starts, sizes)
    np.add.at(delta, ends, -sizes)
    return int(np.cumsum(delta).max())


def _place(order, sizes, starts, ends, alignment):
    n = sizes.size
    need = (sizes + alignment - 1) // alignment * alignment
    offsets = np.full(n, -1, dtype=np.int64)
    placed = np.zeros(0, dtype=np.int64)          # placed buffer ids, in placement order
    for b in order:
        if placed.size:
            hit = placed[(starts[placed] < ends[b]) & (ends[placed] > starts[b])]
        else:
            hit = placed
        if hit.size == 0:
            offsets[b] = 0
        else:
            lo = offsets[hit]
            srt = np.argsort(lo, kind="stable")
            lo = lo[srt]
            hi = np.maximum.accumulate(lo + need[hit][srt])
            gap_start = np.concatenate(([0], hi[:-1]))
            gaps = lo - gap_start
            fits = np.flatnonzero(gaps >= need[b])
            if fits.size:
                best = fits[np.argmin(gaps[fits])]     # best fit: the tightest gap
                offsets[b] = gap_start[best]
            else:
                offsets[b] = hi[-1]
        placed = np.append(placed, b)
    arena = int((offsets + sizes).max()) if n else 0
    return offsets, arena


def conflicts(starts, ends) -> np.ndarray:
    """For each buffer, how many buffers (itself included) are live at some common step."""
    starts, ends = np.asarray(starts), np.asarray(ends)
    later = starts.size - np.searchsorted(np.sort(starts), ends, side="left")    # start >= my end
    earlier = np.searchsorted(np.sort(ends), starts, side="right")               # end <= my start
    return starts.size - later - earlier


def plan(sizes, starts, ends, alignment: int = 64, tries: int = 32, seed: int = 0) -> ArenaPlan:
    """Offsets for buffers with the given sizes and half-open lifetimes ``[starts, ends)``.

    Deterministic greedy orders first; if the best is more than 1% above the lower bound,
    ``tries`` more greedy passes with sizes jittered by up to ±30% (a seeded generator, so the
    plan is reproducible) -- on small graphs with many similar sizes this closes most of the gap.
    """
    sizes, starts, ends = (np.asarray(a, dtype=np.int64) for a in (sizes, starts, ends))
    if not (sizes.shape == starts.shape == ends.shape):
        raise ValueError("sizes, starts and ends must have the same length")
    if np.any(ends < starts):
        raise ValueError("a buffer ends before it starts")
    live = ends > starts
    orders = {
        "size": np.lexsort((starts, -sizes)),
        "size_late_end": np.lexsort((-ends, -sizes)),
        "start": np.lexsort((-sizes, starts)),
        "size_x_lifetime": np.lexsort((starts, -sizes, -(ends - starts) * sizes)),
        "lifetime": np.lexsort((starts, -sizes, -(ends - starts))),
        "size_conflicts": np.lexsort((-conflicts(starts, ends), -sizes)),
    }
    used = np.where(live, sizes, 0)
    bound = lower_bound(used, starts, ends)
    best = None

    def attempt(name, order):
        nonlocal best
        order = order[live[order]]
        offsets, arena = _place(order, used, starts, ends, alignment)
        if best is None or arena < best[2]:
            best = (name, offsets, arena)

    for name, order in orders.items():
        attempt(name, order)
    rng = np.random.default_rng(seed)
    for k in range(tries):
        if best[2] <= bound * 1.01:
            break
        attempt(f"jitter{k}", np.lexsort((starts, -sizes * rng.uniform(0.7, 1.3, sizes.size))))
    name, offsets, arena = best
    offsets[~live] = 0
    return ArenaPlan(offsets, sizes, arena, bound, alignment, name)


def check(p: ArenaPlan, starts, ends) -> None:
    """Raise if two buffers live at the same step overlap in the arena (a test oracle)."""
    starts, ends = np.asarray(starts), np.asarray(ends)
    idx = np.flatnonzero((ends > starts) & (p.sizes > 0))
    for k, b in enumerate(idx):
        o = idx[k + 1:]
        t = (starts[o] < ends[b]) & (ends[o] > starts[b])
        s = (p.offsets[o] < p.offsets[b] + p.sizes[b]) & (p.offsets[o] + p.sizes[o] > p.offsets[b])
        bad = o[t & s]
        if bad.size:
            raise AssertionError(f"buffers {b} and {bad[0]} overlap in time and space")
        if p.offsets[b] + p.sizes[b] > p.arena_bytes:
            raise AssertionError(f"buffer {b} ends past the arena")
