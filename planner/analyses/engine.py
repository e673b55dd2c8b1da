"""How the planner's analyses run on the engine: the engine's own options record,
:class:`hgraph.EngineOptions`, passed to the engine as it is (one record from the command
line to every engine run; ``planner.EngineOptions`` is the same class).

The plan is the same for any ``tasks``/``blocks``/``mode``/``runtime`` (the analyses combine with
bitwise OR, max and integer sums, which do not depend on grouping); these options only say
where and how the supersteps run. Each superstep is reported to the current stage progress
(:func:`hgraph.common.progress.current`; silent unless a job tracks one).

Runs share workers inside :func:`session`: a plan opens one (:func:`planner.plan`), so its
engine stages (levels, separators, lower-set statistics, the segmented DP) start the workers
once, not once a stage, and a stage's result that only a later run reads can stay on them
(``keep=``/``inputs=`` of :func:`run_program`). Outside one, each run is a
:func:`hgraph.run` of its own, as before.

Example::

    >>> options(None, {"tasks": 2}).tasks
    2
    >>> with session(EngineOptions(tasks=2)) as s:
    ...     with session(EngineOptions(tasks=2)) as inner:     # the open one, reused
    ...         inner is s
    True
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses

import numpy as np

import hgraph
from hgraph.common.progress import current as current_progress

__all__ = ["EngineOptions", "options", "run_program", "session", "current_session",
           "bind_var_graph", "var_graph", "put_by_var"]

#: The engine's options record (the planner takes only the engine's public API).
EngineOptions = hgraph.EngineOptions

_OPEN: contextvars.ContextVar = contextvars.ContextVar("planner_engine_session", default=None)


def _place(opts: EngineOptions) -> EngineOptions:
    """``opts`` without what may differ run by run on one session's workers (the wait)."""
    return dataclasses.replace(opts, timeout=None)


@contextlib.contextmanager
def session(opts: EngineOptions):
    """An :class:`hgraph.Session` for ``opts`` that :func:`run_program` uses while it is open:
    the one already open for the same placement (only the timeout may differ), else a new one,
    closed (its workers ended) on leaving. Its workers start on its first run."""
    open_one = _OPEN.get()
    if open_one is not None and _place(open_one.engine) == _place(opts):
        yield open_one
        return
    with hgraph.Session(opts) as s:
        token = _OPEN.set(s)
        try:
            yield s
        finally:
            _OPEN.reset(token)


def current_session(opts: EngineOptions):
    """The open :func:`session` with ``opts``' placement, or None."""
    open_one = _OPEN.get()
    return open_one if open_one is not None and _place(open_one.engine) == _place(opts) \
        else None


#: Where an open session holds the variable graph of the cg.txt being planned, read in shards
#: (:mod:`planner.cg_shards`), with the activations' variable ids it was bound for.
_VAR_GRAPH = "planner.cg_vars"


def bind_var_graph(opts: EngineOptions, sharded, var) -> None:
    """Leave ``sharded`` (the variable graph on the workers) with the open session for the
    analyses of the activation graph whose nodes are the variables ``var`` (the array object
    itself names that graph: its views share it)."""
    s = current_session(opts)
    if s is not None:
        s.graphs[_VAR_GRAPH] = (sharded, var)


def var_graph(opts: EngineOptions, g, release: bool = False):
    """The variable graph bound for the activation graph ``g`` in the open session, or None;
    ``release``: unbound as well (its pieces leave the workers once no one holds them)."""
    s = current_session(opts)
    entry = None if s is None else s.graphs.get(_VAR_GRAPH)
    if entry is None or entry[1] is not getattr(g, "var", None):
        return None
    if release:
        s.graphs.pop(_VAR_GRAPH)
    return entry[0]


def put_by_var(s, name: str, values, sharded, var, fill=0) -> None:
    """Keep ``values`` (a row an activation) on the workers holding ``sharded`` (a cg.txt's
    variable graph) as the column ``name`` by variable id: row ``var[i]`` is ``values[i]``,
    ``fill`` for the parameters and inputs, which no analysis reads."""
    values = np.asarray(values)
    by_var = np.full((sharded.n, *values.shape[1:]), fill, values.dtype)
    by_var[var] = values
    s.put(name, by_var, sharded.task_bounds)


def run_program(opts: EngineOptions, program, graph, *, keep: str | None = None,
                inputs=(), gather: bool = True):
    """``program`` on ``graph`` as ``opts`` says, each superstep reported to the current stage
    progress: on the open :func:`session`'s workers when it has this placement (``keep``,
    ``inputs``, ``gather``: :meth:`hgraph.Session.run`'s), else a :func:`hgraph.run`."""
    progress = current_progress().superstep
    with session(opts) as s:
        return s.run(program, graph, progress=progress, keep=keep, inputs=inputs,
                     gather=gather, timeout=opts.timeout)


def options(opts: EngineOptions | None, engine: dict) -> EngineOptions:
    """``opts`` if given, else :class:`EngineOptions` from keyword arguments (``tasks=2`` …)."""
    return opts if opts is not None else EngineOptions(**engine)
