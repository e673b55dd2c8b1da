"""Stand-in kernels: run a buffer timeline without operator arguments, touching the memory.

The reference graphs carry sizes but no operator arguments, so their real ops cannot be
rebuilt; a stand-in step reads one byte of every input buffer and writes its output buffers
(``touch="full"``: every byte; ``touch="page"``: the first :data:`PAGE` bytes, so that
multi-GB graphs run on a small host — untouched pages of a fresh allocation are never
committed). :func:`planner.execute.executor.run` calls it for ``kernels="stand-in"``;
:mod:`planner.execute.replay` is the user-facing mode.
"""

from __future__ import annotations

__all__ = ["PAGE", "run_standin"]

PAGE = 4096


def run_standin(g, tl, alloc, be, touch: str) -> None:
    """Execute a timeline with stand-in kernels (called by :func:`planner.execute.executor.run`)."""
    if touch not in ("full", "page"):
        raise ValueError(f"touch must be 'full' or 'page', got {touch!r}")
    xp = be.xp
    arrays = {}
    for s, step in enumerate(tl.steps):
        for b in step.frees_before:
            alloc.free(b)
            del arrays[b]
        if step.op.kind == "compute":
            # the stand-in: one byte from every buffer read, mixed into every buffer written
            mark = (s + sum(int(arrays[b][:1].sum()) if tl.nbytes[b] else 0 for b in step.reads[:1])) % 251
            for _, b, accumulate in step.writes:
                if accumulate:
                    out = arrays[b]
                else:
                    out = arrays[b] = alloc.alloc(b, int(tl.nbytes[b]))
                if out.size:
                    (out if touch == "full" else out[:PAGE]).fill(mark)
            for b in step.reads[1:]:
                if tl.nbytes[b]:
                    arrays[b][:1].sum()
        for b in step.frees_after:
            alloc.free(b)
            del arrays[b]
