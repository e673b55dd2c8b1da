"""Sessions: workers that outlive a run, and values left on them for the next run.

Why: a job that runs several vertex programs in a row (an analysis, then one that reads it)
paid, with one :func:`hgraph.run` each, for starting its workers every time (on Ray a Python
process per task, numpy imported) and for gathering every value to the driver, even those
only the next program reads. A :class:`Session` starts its workers on its first run and loads
each later run into them (program and partition slice), and a run can leave its per-vertex
values where they were made (``keep="name"``: one handle per task; on Ray an object in the
store of the worker's node, owned by the driver, so it outlives the worker that made it) and
hand the driver only what it asks for (``gather=False``: the aggregates and stats alone). A
later run reads a kept column as a vertex column of its own (``inputs=("name",)``): each task
is handed the pieces of it that overlap its range, resolved where the task runs.

A session's workers can also read a graph themselves (:meth:`Session.load` of a
:class:`hgraph.shards.ShardedSource`: a byte range of a file each, the driver holding only
the cuts and each piece's summary) and keep it for later runs, which take the
:class:`hgraph.shards.ShardedGraph` (or a view of it: reversed, both directions, edges
weighed by a column) as their graph; :meth:`Session.put` hands the workers a driver array as
a kept column and :meth:`Session.gather_rows` brings back only the rows asked for.

The result of a session run is :func:`hgraph.run`'s, bit for bit, for any tasks, blocks, mode
and runtime; recovery is unchanged (a replacement worker is loaded with the run's slice and its
pieces of the kept columns, then restored from the checkpoint). ``checkpoint_dir``, when
given, holds the first run's checkpoints, and ``run-NNN`` under it each later run's, so a run
never resumes from another's.

Each worker slot also keeps a *stash* across the session's runs (``block.stash`` in a program,
:class:`hgraph.worker.Worker`): a program run again on the same graph — a solve re-run at a
slightly different parameter — can find there what it computed per vertex in an earlier run
and skip the work. A cache only: a replacement worker after a failure starts with an empty
one, and it is dropped when the session closes (its workers end).

    >>> import numpy as np, hgraph
    >>> from hgraph.algorithms import SSSP
    >>> g = hgraph.Graph.from_edges([0, 0, 1], [1, 2, 2], weights=[4.0, 1.0, 2.0])
    >>> with hgraph.Session(hgraph.EngineOptions(tasks=2)) as s:
    ...     first = s.run(SSSP(0), g, keep="dist", gather=False)
    ...     again = s.run(SSSP(0), g)                    # the same workers
    ...     dist = s.gather("dist")
    >>> first.values is None, again.values.tolist(), dist.tolist()
    (True, [0.0, 4.0, 1.0], [0.0, 4.0, 1.0])
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hgraph.common.errors import HGraphError, Notice
from hgraph.master import MODES, Master
from hgraph.options import EngineOptions
from hgraph.partition import Partition, even_bounds, fit_to_vertices
from hgraph.result import Result
from hgraph.runtime import RUNTIMES, create, task_limit
from hgraph.runtime.inputs import Kept
from hgraph.shards import ShardedGraph, ShardedSource

__all__ = ["Session"]

_SESSION = object()     # "the session's own" (a run's timeout may be None: no limit)


class Session:
    """Workers kept across runs, as ``engine`` (:class:`hgraph.EngineOptions`; None: its
    defaults) says; see the module docstring. A context manager: leaving it, or
    :meth:`close`, ends the workers it started (and only those) and drops the kept columns."""

    def __init__(self, engine: EngineOptions | None = None):
        self.engine = engine if engine is not None else EngineOptions()
        _check(self.engine)
        self.runtime = None          # started by the first run
        self.kept: dict[str, Kept] = {}
        #: what callers bind to this session's workers by name (sharded graphs, say): dropped
        #: at :meth:`close`, with the kept columns
        self.graphs: dict = {}
        self.runs = 0

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, program, graph, *, max_supersteps: int | None = None,
            progress: Callable[[dict], Any] | None = None, keep: str | None = None,
            inputs: Sequence[str] | Mapping[str, str] = (), gather: bool = True,
            timeout=_SESSION) -> Result:
        """:func:`hgraph.run` of ``program`` on ``graph`` on this session's workers.

        ``keep``: leave the per-vertex values on the workers under this name (replacing a
        column kept under it before); ``gather=False``: do not bring the values to the driver
        (``Result.values`` is None); ``inputs``: kept columns (of ``graph.n`` rows) this run's
        vertices read as columns of the same names (or, a mapping, column name -> kept name); ``timeout``: this run's longest wait on a
        worker (default: the session's)."""
        e = self.engine
        wait = e.timeout if timeout is _SESSION else timeout
        if isinstance(graph, ShardedSource):
            graph = self.load(graph, timeout=timeout)
        feeds = self._inputs(graph, inputs)
        partition = (graph if isinstance(graph, ShardedGraph) else
                     _partition(graph, int(e.tasks), int(e.blocks), e.runtime, e.address))
        self._load(program, partition, feeds, wait)
        directory = self._checkpoint_dir()
        self.runs += 1
        collect = keep is not None or not gather
        master = None
        try:
            master = Master(program, partition, self.runtime, mode=e.mode,
                            max_supersteps=max_supersteps, checkpoint_every=e.checkpoint_every,
                            checkpoint_dir=directory, inject_failure=e.inject_failure,
                            progress=progress, max_recoveries=int(e.max_recoveries), keep=collect)
            out, stats, aggregates, supersteps, switcher = master.run()
        finally:
            unload = getattr(self.runtime, "unload", None)
            if unload is not None:
                unload()
            if directory is None and master is not None and master.checkpoint_dir is not None:
                # A temporary run directory is the run's own business: gone once it has ended,
                # failed or not.
                shutil.rmtree(master.checkpoint_dir, ignore_errors=True)
        values = None if collect else out
        if keep is not None:
            self.kept[keep] = Kept(list(out), partition.task_bounds.copy(),
                                   tuple(program.value_shape), np.dtype(program.value_dtype))
            if gather:
                values = self.gather(keep)
        return Result(values=values, stats=stats, aggregates=aggregates, supersteps=supersteps,
                      failures=master.failures, switches=switcher.switches if switcher else 0,
                      checkpoint_dir=None if directory is None else master.checkpoint_dir)

    def load(self, source: ShardedSource, *, reverse: bool = False,
             timeout=_SESSION) -> ShardedGraph:
        """``source`` read by this session's workers, each a shard (:mod:`hgraph.shards`): the
        :class:`hgraph.shards.ShardedGraph` later runs take as their graph. The driver gets
        the pieces' handles and summaries only (no text, no array as long as the graph); the
        pieces stay in the workers' object store while the returned object lives. Its tasks
        and blocks are the session's (cut to what the runtime and the graph can use);
        ``reverse``: also cut every edge by its other end, for
        :meth:`hgraph.shards.ShardedGraph.reversed` (the pieces' edges twice)."""
        e = self.engine
        wait = e.timeout if timeout is _SESSION else timeout
        limit = task_limit(e.runtime, address=e.address)
        tasks, blocks = fit_to_vertices(int(source.n), int(e.tasks), int(e.blocks))
        if limit and tasks > limit[0]:
            tasks = limit[0]
        bounds = even_bounds(int(source.n), tasks * blocks)
        self._started(wait)
        if not hasattr(self.runtime, "read"):
            raise HGraphError(f"runtime {e.runtime!r} cannot read a sharded graph")
        pieces, summaries = self.runtime.read(source, bounds[::blocks].copy(), bounds,
                                              tasks=tasks, timeout=wait, reverse=reverse)
        back = [row[tasks:] for row in pieces] if reverse else None
        return ShardedGraph(source, tasks, blocks, [row[:tasks] for row in pieces], summaries,
                            back)

    def gather(self, name: str, index=None) -> np.ndarray:
        """The kept column ``name`` on the driver, in vertex order; with ``index``, only
        ``values[:, index]`` (a slice of the trailing axis, say), cut beside each worker first."""
        kept = self._kept(name)
        parts = self.runtime.gather(kept.handles, index)
        return np.concatenate(parts, axis=0)

    def gather_rows(self, name: str, rows, index=None) -> np.ndarray:
        """Rows ``rows`` (ascending vertex ids) of the kept column ``name`` on the driver (with
        ``index``: ``[:, index]`` of them), each worker's share cut beside it first: only
        those rows travel."""
        kept = self._kept(name)
        rows = np.asarray(rows, np.int64)
        cuts = np.searchsorted(rows, kept.bounds)
        local = [rows[a:b] - int(lo) for a, b, lo in zip(cuts[:-1], cuts[1:], kept.bounds)]
        parts = self.runtime.gather_rows(kept.handles, local, index)
        return np.concatenate(parts, axis=0)

    def put(self, name: str, values, bounds) -> None:
        """Keep the driver's array ``values`` on the workers as the column ``name``, cut at
        ``bounds`` (a task's rows each; a later run reads it as ``inputs=``, as a column a
        run kept)."""
        values = np.asarray(values)
        bounds = np.asarray(bounds, np.int64)
        if int(bounds[-1]) != len(values):
            raise HGraphError(f"column {name!r} has {len(values):,} rows, its bounds "
                              f"{int(bounds[-1]):,}")
        self._started(self.engine.timeout)
        handles = [self.runtime.store(values[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        self.kept[name] = Kept(handles, bounds.copy(), values.shape[1:], values.dtype)

    def drop(self, name: str) -> None:
        """Forget the kept column ``name`` (its handles go; Ray frees what no one holds)."""
        self.kept.pop(name, None)

    def close(self) -> None:
        """End the workers this session started and drop every kept column."""
        self.kept.clear()
        self.graphs.clear()
        if self.runtime is not None:
            runtime, self.runtime = self.runtime, None
            runtime.close()

    # ------------------------------------------------------------------ helpers

    def _kept(self, name: str) -> Kept:
        if name not in self.kept:
            raise HGraphError(f"no column kept as {name!r} in this session "
                              f"(kept: {', '.join(sorted(self.kept)) or 'none'})")
        return self.kept[name]

    def _inputs(self, graph, inputs) -> dict[str, Kept]:
        """The kept columns a run reads, by the column name its vertices see, checked against
        its graph before any worker loads."""
        feeds = {}
        pairs = inputs.items() if isinstance(inputs, Mapping) else ((n, n) for n in inputs)
        for name, kept_name in pairs:
            kept = self._kept(kept_name)
            if kept.n != graph.n:
                raise HGraphError(f"kept column {kept_name!r} has {kept.n:,} rows; the graph has "
                                  f"{graph.n:,} vertices")
            if name in graph.columns:
                raise HGraphError(f"kept column {kept_name!r} would shadow the graph's "
                                  f"column {name!r}")
            feeds[name] = kept
        return feeds

    def _load(self, program, partition, feeds, wait) -> None:
        """The session's workers with this run loaded (started by the first run; a runtime
        that cannot be reloaded is started anew, and then cannot read kept columns)."""
        e = self.engine
        if self.runtime is not None and hasattr(self.runtime, "load"):
            self.runtime.load(program, partition, feeds, timeout=wait)
            return
        if self.runtime is not None:
            self._close_runtime()
        if feeds:
            raise HGraphError(f"runtime {e.runtime!r} cannot keep workers across runs, so it "
                              f"cannot read kept columns")
        self.runtime = create(e.runtime, program, partition, address=e.address, timeout=wait)

    def _started(self, wait) -> None:
        """The session's workers started with no run bound yet (a graph read or a column put
        before the first run), unless they are already."""
        if self.runtime is None:
            e = self.engine
            self.runtime = create(e.runtime, None, None, address=e.address, timeout=wait)

    def _close_runtime(self) -> None:
        """End the workers but keep the kept columns' handles (a runtime that cannot reload)."""
        runtime, self.runtime = self.runtime, None
        runtime.close()

    def _checkpoint_dir(self) -> str | None:
        """This run's checkpoint directory: the option's for the first run, ``run-NNN`` under
        it for each later one (None: a temporary one per run)."""
        base = self.engine.checkpoint_dir
        if base is None or self.runs == 0:
            return base
        return str(Path(base) / f"run-{self.runs:03d}")


def _check(e: EngineOptions) -> None:
    """One line for an option no run can take, before any worker starts."""
    if e.mode not in MODES:
        raise HGraphError(f"mode must be one of {', '.join(MODES)}, got {e.mode!r}")
    if e.runtime not in RUNTIMES:
        raise HGraphError(f"runtime must be one of {', '.join(RUNTIMES)}, got {e.runtime!r}")
    if int(e.max_recoveries) < 0:
        raise HGraphError(f"max_recoveries must be >= 0, got {e.max_recoveries}")
    if int(e.tasks) < 1 or int(e.blocks) < 1:
        raise HGraphError(f"tasks and blocks must be >= 1, got tasks={e.tasks}, "
                          f"blocks={e.blocks}")


def _partition(graph, tasks: int, blocks: int, runtime: str, address: str | None) -> Partition:
    """The partition for ``tasks`` cut to what ``runtime`` and the graph can use (a Notice
    names the cut and why: the result does not depend on it)."""
    limit = task_limit(runtime, address=address)
    partition = Partition(graph, tasks=min(tasks, limit[0]) if limit else tasks, blocks=blocks)
    if partition.tasks < tasks:
        why = (limit[1] if limit and partition.tasks == limit[0] else
               f"at most one task per vertex (the graph has {graph.n:,})")
        warnings.warn(Notice(f"running {partition.tasks:,} tasks, not the {tasks:,} asked for: "
                             f"{why}; the results are the same for any number"), stacklevel=3)
    return partition
