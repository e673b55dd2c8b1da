"""What a backend adds to a step beside its arrays' data: the allocator's rounding and the
interpreter's own objects, one :class:`BackendCosts` per backend.

Why here, not in :mod:`planner.execute.backend`: the whole-step prediction
(:mod:`planner.whole_step`, :mod:`planner.rows.step`) prices these while planning, and the
planner never imports the executor (``tests/test_layering.py``); the executor's
:class:`~planner.execute.backend.Backend` points at its description (``Backend.costs``) and
rounds its blocks by it. Each figure is a property of one backend and one meter, measured or
documented there, not a constant of the planner: change a backend, change its description.

>>> NUMPY.interpreter_bytes(blocks=2, buffers=1, computes=10)
35392
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class BackendCosts:
    """A backend's overheads as its meter sees them."""

    name: str
    alignment: int        # the pool allocator rounds every block up to this many bytes
    python_bytes: int     # Python objects a kernel call and the executor's loop hold at once
    object_bytes: int     # Python objects per pool block and per live buffer
    step_bytes: int       # interpreter free lists' growth per compute step

    def interpreter_bytes(self, blocks: int, buffers: int, computes: int) -> int:
        """The interpreter's bytes with ``blocks`` pool blocks made, ``buffers`` live and
        ``computes`` compute steps run so far (the whole step's ``interpreter`` part)."""
        return self.python_bytes + self.object_bytes * (blocks + buffers) + self.step_bytes * computes


#: NumPy on the host, metered by tracemalloc (which counts Python's objects beside the arrays'
#: data): blocks aligned to 64 B; a kernel call and the loop hold at most ~5 KiB of objects
#: (arrays' headers, views, lists, a generator's frame; bounded from above by 32 KiB); each pool
#: block and live buffer ~350-420 B of objects (its array, the view the allocator hands out, the
#: typed array the executor keeps, their table entries: 448 B); the free lists grow ~90 B a
#: compute step over a 288-step recomputing resnet50 schedule (128 B). Measured on the zoo
#: (bench/NOTES_step.md).
NUMPY = BackendCosts("numpy", alignment=64, python_bytes=32 << 10, object_bytes=448,
                     step_bytes=128)

#: CuPy on a CUDA device, metered by its memory pool: the executor rounds blocks to 256 B; the
#: device meter sees no Python objects. Not calibrated against a measured whole step (the
#: whole-step prediction is NumPy's: :data:`NUMPY`).
CUPY = BackendCosts("cupy", alignment=256, python_bytes=0, object_bytes=0, step_bytes=0)

#: Each backend's description by its name (:attr:`planner.execute.backend.Backend.name`).
BY_NAME = {c.name: c for c in (NUMPY, CUPY)}
