"""The ``pool`` allocator's free list, modelled without memory (:class:`BestFit`).

Why it lives in the planner: the executor's pool allocator
(:class:`planner.execute.allocator.TrackedAllocator`) keeps its blocks in it, and the whole-step
prediction (:mod:`planner.whole_step`) replays a plan's requests through the same free list
while planning, so both see the same reuse and the same reserved bytes, and planning never
imports the executor.
"""

from __future__ import annotations

import bisect

__all__ = ["BestFit"]


def _round(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


class BestFit:
    """The ``pool`` strategy's free list, apart from any memory: freed blocks by size; a request
    takes the smallest free block at least as large, whole, or needs a new block of
    :meth:`block_size` bytes. The allocator keeps its blocks here (``payload``); the whole-step
    prediction (:mod:`planner.whole_step`) replays a step's requests through it with
    no payload, so both see the same reuse and the same reserved bytes.

    >>> p = BestFit(64)
    >>> p.take(100) is None, p.block_size(100)
    (True, 128)
    >>> p.give(128); p.take(100), p.take(100)
    (128, None)
    """

    def __init__(self, alignment: int):
        self.alignment = int(alignment)
        self.sizes, self.payloads = [], []

    def block_size(self, nbytes: int) -> int:
        return _round(max(int(nbytes), 1), self.alignment)

    def take(self, nbytes: int):
        """The payload of the free block that serves ``nbytes`` (its size when the payload is
        None), removed from the free list; None when no free block is large enough."""
        k = bisect.bisect_left(self.sizes, int(nbytes))
        if k == len(self.sizes):
            return None
        size = self.sizes.pop(k)
        payload = self.payloads.pop(k)
        return size if payload is None else payload

    def give(self, size: int, payload=None) -> None:
        k = bisect.bisect_left(self.sizes, int(size))
        self.sizes.insert(k, int(size))
        self.payloads.insert(k, payload)
