"""How the planner's analyses run on the engine: the engine's own options record,
:class:`hgraph.EngineOptions`, passed to :func:`hgraph.run` as it is (one record from the
command line to every engine run; ``planner.EngineOptions`` is the same class).

The plan is the same for any ``tasks``/``blocks``/``mode``/``runtime`` (the analyses combine with
bitwise OR, max and integer sums, which do not depend on grouping); these options only say
where and how the supersteps run. Each superstep is reported to the current stage progress
(:func:`hgraph.common.progress.current`; silent unless a job tracks one).

Example::

    >>> options(None, {"tasks": 2}).tasks
    2
"""

from __future__ import annotations

import hgraph
from hgraph.common.progress import current as current_progress

__all__ = ["EngineOptions", "options", "run_program"]

#: The engine's options record (the planner takes only the engine's public API).
EngineOptions = hgraph.EngineOptions


def run_program(opts: EngineOptions, program, graph):
    """:func:`hgraph.run` of ``program`` on ``graph`` as ``opts`` says, each superstep reported to
    the current stage progress."""
    return hgraph.run(program, graph, opts, progress=current_progress().superstep)


def options(opts: EngineOptions | None, engine: dict) -> EngineOptions:
    """``opts`` if given, else :class:`EngineOptions` from keyword arguments (``tasks=2`` …)."""
    return opts if opts is not None else EngineOptions(**engine)
