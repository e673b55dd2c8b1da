"""How the executor runs one step: :class:`RunOptions`, one frozen record for
:func:`planner.execute.executor.run`.

Why a record: ``run`` took twelve keywords (allocator, recycling, kernels, seed, page touching,
alignment, meter, workspace cap, ...) and every bench and test spelled a few of them; the record
states the defaults once, and ``run(g, schedule, options, *, backend, leaf_values)`` keeps what
names the device and the inputs apart from how the step is run.

    >>> RunOptions().allocator, RunOptions(recycle=False).recycle
    ('pool', False)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RunOptions"]


@dataclass(frozen=True)
class RunOptions:
    """How one step runs and is measured; the defaults are the fields' own.

    ``allocator`` ("pool"): the tracked allocator's policy, or "static" (the timeline's arena
    offsets); ``recycle`` (True): free each buffer after its last use; ``kernels`` ("auto"):
    "real" where the graph carries op arguments, else "stand-in"; ``seed`` (0): parameter and
    input initialisation; ``touch`` (None: "full" on a GPU, "page" on the CPU): how stand-in
    kernels touch their buffers; ``alignment`` (None: 256 bytes on a GPU, 64 on the CPU);
    ``meter`` (True): measure the peak independently (tracemalloc / the CuPy pool), off for
    timings; ``workspace`` (None: uncapped): the convolution workspace cap (a plan's
    ``workspace_bytes``).
    """

    allocator: str = "pool"
    recycle: bool = True
    kernels: str = "auto"
    seed: int = 0
    touch: str | None = None
    alignment: int | None = None
    meter: bool = True
    workspace: int | None = None
