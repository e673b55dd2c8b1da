"""Stand-in kernels: run a buffer timeline without operator arguments, touching the memory.

The reference graphs carry sizes but no operator arguments, so their real ops cannot be
rebuilt; a stand-in step reads one byte of every input buffer and writes its output buffers
(``touch="full"``: every byte; ``touch="page"``: the first :data:`PAGE` bytes, so that
multi-GB graphs run on a small host — untouched pages of a fresh allocation are never
committed). :func:`planner.execute.executor.run` calls it for ``kernels="stand-in"``;
:mod:`planner.execute.replay` is the user-facing mode.
"""

from __future__ import annotations

from planner.walk import Walker

__all__ = ["PAGE", "run_standin"]

PAGE = 4096


def run_standin(g, tl, alloc, be, touch: str) -> None:
    """Execute a timeline with stand-in kernels (called by :func:`planner.execute.executor.run`)."""
    if touch not in ("full", "page"):
        raise ValueError(f"touch must be 'full' or 'page', got {touch!r}")
    _StandIn(tl, alloc, touch).walk(tl.steps)


class _StandIn(Walker):
    """The stand-in's visitor of a timeline's walk (:mod:`planner.walk`): one byte from every
    buffer read, mixed into every buffer written."""

    def __init__(self, tl, alloc, touch: str):
        self.tl, self.allocator, self.touch = tl, alloc, touch
        self.arrays = {}

    def free(self, b) -> None:
        self.allocator.free(b)
        del self.arrays[b]

    def visit(self, s: int, step) -> None:
        if step.op.kind != "compute":
            return
        arrays, nbytes = self.arrays, self.tl.nbytes
        mark = (s + sum(int(arrays[b][:1].sum()) if nbytes[b] else 0 for b in step.reads[:1])) % 251
        for _, b, accumulate in step.writes:
            if accumulate:
                out = arrays[b]
            else:
                out = arrays[b] = self.allocator.alloc(b, int(nbytes[b]))
            if out.size:
                (out if self.touch == "full" else out[:PAGE]).fill(mark)
        for b in step.reads[1:]:
            if nbytes[b]:
                arrays[b][:1].sum()
