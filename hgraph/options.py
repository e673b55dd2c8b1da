"""Where and how a run executes: one frozen record, :class:`EngineOptions`, for :func:`hgraph.run`.

Why a record: the same handful of settings (workers, messaging mode, runtime, checkpoints,
recovery) travel from the command line through the planner's analyses to every engine run; one
typed value with its defaults here is what they all pass and what ``help()`` shows, where
fourteen keywords copied into each signature drifted apart. The result of a run never depends
on these options (hgraph.api: the same bit for bit for any tasks, blocks, mode and runtime).

    >>> EngineOptions().tasks, EngineOptions().mode, EngineOptions().max_recoveries
    (1, 'hybrid', 3)
    >>> EngineOptions(tasks=4).replace(mode="push")
    EngineOptions(tasks=4, blocks=1, mode='push', runtime='local', address=None, checkpoint_every=None, checkpoint_dir=None, inject_failure=None, max_recoveries=3, timeout=600.0)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["EngineOptions"]


@dataclass(frozen=True)
class EngineOptions:
    """How :func:`hgraph.run` runs a program; the defaults are the fields' own.

    ``tasks`` (1) workers of ``blocks`` (1) VBlocks each; ``mode`` ("hybrid"): how messages
    travel, "push", "pull" (block-pull) or "hybrid" (the cheaper of the two every superstep);
    ``runtime`` ("local"): workers in this process, or "ray" (one actor per task) on the
    cluster at ``address`` (None: ``RAY_ADDRESS``, else an embedded local Ray);
    ``checkpoint_every`` (None: never) supersteps a checkpoint into ``checkpoint_dir`` (None: a
    temporary directory, removed when the run ends); ``inject_failure`` (None): the superstep at
    which one worker is killed, once (testing recovery); ``max_recoveries`` (3): recoveries
    before a worker that keeps dying fails the job; ``timeout`` (600 s): the longest wait on a
    Ray worker.
    """

    tasks: int = 1
    blocks: int = 1
    mode: str = "hybrid"
    runtime: str = "local"
    address: str | None = None
    checkpoint_every: int | None = None
    checkpoint_dir: str | None = None
    inject_failure: int | None = None
    max_recoveries: int = 3
    timeout: float | None = 600.0

    def replace(self, **changes) -> EngineOptions:
        """A copy with ``changes`` (:func:`dataclasses.replace`)."""
        return dataclasses.replace(self, **changes)
