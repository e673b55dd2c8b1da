"""Replay mode: measure the real peak of any schedule on any cg.txt, without operator arguments.

The reference graphs carry sizes but no operator arguments, so the real ops cannot be rebuilt.
Replay runs the same buffer timeline as the executor (:func:`planner.execute.executor.timeline`:
lazy allocation, the schedule's forgets and recomputations) through the same tracked allocator,
and runs a stand-in kernel per step: it reads one byte of every input buffer and writes the
output buffer (``touch="full"``: every byte, the default on a GPU; ``touch="page"``: the first
4 KiB, the default on NumPy so that multi-GB graphs replay on a small host -- untouched pages of a
fresh allocation are never committed).

By default replay frees memory exactly where the schedule says (``recycle=False``), so the
tracked peak of live bytes (``tracked_peak_bytes``, the plan's own count) equals the planner's
predicted peak (``planner.simulate`` in reference mode) byte for byte; allocator alignment shows
in ``reserved_bytes`` and, with what the pool keeps, in ``measured_peak_bytes`` (tracemalloc on
NumPy, the CuPy pool on a GPU).

>>> from planner import simulate
>>> from planner.execute import zoo, export, executor
>>> g = export.to_cg(zoo.build("mlp", depth=1))
>>> s = executor.checkpoint_schedule(g, keep=[])
>>> r = replay(g, s)
>>> r.kernels, r.tracked_peak_bytes == simulate.replay(g, s).peak_bytes
('stand-in', True)
"""

from __future__ import annotations

from planner.execute import executor



def replay(g, schedule, *, allocator: str = "pool", backend=None, recycle: bool = False,
           touch: str | None = None) -> "executor.RunResult":
    """Run ``schedule`` on ``g`` with stand-in kernels and return the measurements."""
    return executor.run(g, schedule, executor.RunOptions(allocator=allocator, recycle=recycle,
                                                         kernels="stand-in", touch=touch),
                        backend=backend)
