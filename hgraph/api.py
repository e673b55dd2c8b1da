"""The driver API: :func:`run` a vertex program on a graph and get a :class:`Result`."""

from __future__ import annotations

import shutil
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hgraph.common.errors import HGraphError, Notice
from hgraph.master import MODES, Master
from hgraph.options import EngineOptions
from hgraph.partition import Partition
from hgraph.runtime import RUNTIMES, create, task_limit


@dataclass
class Result:
    """What :func:`run` returns.

    ``values``: ndarray ``(n, *value_shape)`` in vertex-id order; ``stats``: one dict per
    superstep (``superstep``, ``mode``, ``active``, ``messages``, ``bytes`` across workers,
    ``seconds``, plus the counters the cost model uses); ``aggregates``: the aggregators' final
    values; ``supersteps``: how many ran; ``failures``: one dict per lost worker (``superstep``,
    ``worker``, ``recovery_seconds``); ``switches``: mode changes made by hybrid mode.
    """

    values: np.ndarray
    stats: list[dict]
    aggregates: dict[str, Any] = field(default_factory=dict)
    supersteps: int = 0
    failures: list[dict] = field(default_factory=list)
    switches: int = 0
    checkpoint_dir: str | None = None

    @property
    def total_bytes(self) -> int:
        """Bytes that crossed workers over the whole run."""
        return int(sum(row["bytes"] for row in self.stats))


def run(program, graph, engine: EngineOptions | None = None, *,
        max_supersteps: int | None = None, progress: Callable[[dict], Any] | None = None
        ) -> Result:
    """Run ``program`` (a :class:`hgraph.VertexProgram`) on ``graph`` (a :class:`hgraph.Graph`).

    ``engine`` (:class:`hgraph.EngineOptions`; None: its defaults) says where and how: the graph
    is range-partitioned over ``tasks`` workers of ``blocks`` VBlocks each; ``mode`` is how
    messages travel: ``"push"`` (senders push sparse (id, value) lists), ``"pull"`` (block-pull:
    each destination VBlock gets one reply per source task that has a responding vertex with an
    edge into it) or ``"hybrid"`` (the master picks the cheaper of the two every superstep from
    measured counters). ``runtime="local"`` runs the workers in this process; ``"ray"`` runs one
    Ray actor per task (:mod:`hgraph.runtime` holds the registry of names) — on the cluster at
    ``address`` (GCS ``HOST:PORT``) or ``RAY_ADDRESS``, else on an embedded local Ray. The
    result is the same, bit for bit, for any ``tasks``, ``blocks``, ``mode`` and ``runtime`` —
    so ``tasks`` beyond what can be used (more than the graph's vertices, more Ray actors than
    the cluster's CPUs: :func:`hgraph.runtime.task_limit`) are cut to that, with a
    :class:`~hgraph.common.errors.Notice` warning saying so, not run (``tasks=100000`` on Ray
    used to start actors for minutes). ``checkpoint_every=K`` checkpoints every K supersteps
    into ``checkpoint_dir`` (default: a new temporary directory); when a worker dies the job
    resumes from the last checkpoint. ``inject_failure=S`` kills one worker at superstep S
    (once) to exercise that. ``max_recoveries`` bounds the recoveries of one job: a worker that
    dies every time (out of memory, say) fails the job with one
    :class:`~hgraph.common.errors.HGraphError` line naming the worker and the superstep instead
    of replaying forever. ``timeout`` bounds every wait on a Ray worker (seconds).

    ``max_supersteps`` bounds the supersteps (numbered from 0; the program's own
    ``max_supersteps`` also applies). ``progress`` is called with each superstep's stats row.
    Both belong to the run, not to where it runs, so they are keywords of their own.

    Example — single-source shortest paths with :class:`hgraph.algorithms.SSSP` (the protocol
    it implements: :mod:`hgraph.program`):

    >>> import hgraph
    >>> from hgraph.algorithms import SSSP
    >>> g = hgraph.Graph.from_edges([0, 0, 1], [1, 2, 2], weights=[4.0, 1.0, 2.0])
    >>> result = hgraph.run(SSSP(0), g, hgraph.EngineOptions(tasks=2, blocks=2, mode="hybrid"))
    >>> result.values
    array([0., 4., 1.])
    >>> result.stats[0]["mode"]          # hybrid starts pulling, then follows the costs
    'pull'
    >>> [row["bytes"] for row in result.stats]   # bytes that crossed workers per superstep
    [116, 0, 0]
    """
    e = engine if engine is not None else EngineOptions()
    _check(e)
    checkpoint_dir = e.checkpoint_dir
    partition = _partition(graph, int(e.tasks), int(e.blocks), e.runtime, e.address)
    rt = create(e.runtime, program, partition, address=e.address, timeout=e.timeout)
    master = None
    try:
        master = Master(program, partition, rt, mode=e.mode, max_supersteps=max_supersteps,
                        checkpoint_every=e.checkpoint_every, checkpoint_dir=checkpoint_dir,
                        inject_failure=e.inject_failure, progress=progress,
                        max_recoveries=int(e.max_recoveries))
        values, stats, aggregates, supersteps, switcher = master.run()
    finally:
        rt.close()
        if checkpoint_dir is None and master is not None and master.checkpoint_dir is not None:
            # A temporary run directory is the job's own business: gone once the job has ended,
            # failed or not.
            shutil.rmtree(master.checkpoint_dir, ignore_errors=True)
    return Result(values=values, stats=stats, aggregates=aggregates, supersteps=supersteps,
                  failures=master.failures, switches=switcher.switches if switcher else 0,
                  checkpoint_dir=None if checkpoint_dir is None else master.checkpoint_dir)


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
