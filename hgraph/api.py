"""The driver API: :func:`run` a vertex program on a graph and get a :class:`Result`.

One run is a one-run :class:`hgraph.session.Session`: the workers start, run the program and
end. A caller with several programs in a row opens the session itself and keeps the workers
(and, if it likes, their values) across the runs.
"""

from __future__ import annotations

from typing import Any, Callable

from hgraph.options import EngineOptions
from hgraph.result import Result
from hgraph.session import Session

__all__ = ["Result", "run"]


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
    with Session(engine) as session:
        return session.run(program, graph, max_supersteps=max_supersteps, progress=progress)
