"""How the planner's analyses run on the engine: one options object passed to :func:`hgraph.run`.

The plan is the same for any ``tasks``/``blocks``/``mode``/``runtime`` (the analyses combine with
bitwise OR, max and integer sums, which do not depend on grouping); these options only say
where and how the supersteps run. Each superstep is reported to the current stage progress
(:func:`hgraph.common.progress.current`; silent unless a job tracks one).

Example::

    >>> options(None, {"tasks": 2}).tasks
    2
"""

from __future__ import annotations

from dataclasses import dataclass

import hgraph
from hgraph.common.progress import current as current_progress

__all__ = ["EngineOptions", "options"]


@dataclass(frozen=True)
class EngineOptions:
    """How analyses run on the engine (passed through to :func:`hgraph.run`)."""

    tasks: int = 1
    blocks: int = 1
    mode: str = "hybrid"
    runtime: str = "local"
    address: str | None = None
    checkpoint_every: int | None = None
    inject_failure: int | None = None

    def run(self, program, graph):
        return hgraph.run(program, graph, tasks=self.tasks, blocks=self.blocks, mode=self.mode,
                          runtime=self.runtime, address=self.address,
                          checkpoint_every=self.checkpoint_every,
                          inject_failure=self.inject_failure,
                          progress=current_progress().superstep)



def options(opts: EngineOptions | None, engine: dict) -> EngineOptions:
    """``opts`` if given, else :class:`EngineOptions` from keyword arguments (``tasks=2`` …)."""
    return opts if opts is not None else EngineOptions(**engine)
