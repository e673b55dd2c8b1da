"""In-process runtime: the workers are plain objects and message blocks are ``bytes``.

It runs exactly the code a Ray actor runs (:class:`hgraph.worker.Worker`), one task after the
other, so the in-process run is the reference every other runtime must reproduce bit for bit.
A worker "failure" (``inject_failure``) discards the worker object and its state; the master
then recovers it from the last checkpoint as it would a dead actor. Kept columns
(:class:`hgraph.session.Session`) are the arrays themselves: they live in this process, as the
workers do, so a discarded worker loses nothing of them.

Each task slot keeps one stash (:class:`hgraph.worker.Worker`'s ``stash``, a program's cache)
across the runs loaded into this runtime, as a Ray actor keeps its own; a discarded worker's
goes with it (its replacement starts with an empty one, as a replacement actor does), and
:meth:`LocalRuntime.close` drops them all.
"""

from __future__ import annotations

from hgraph.runtime import WorkerLost
from hgraph.runtime.inputs import assemble, task_pieces
from hgraph.worker import Worker


class LocalRuntime:
    """Workers in this process; handles of message blocks (and of kept values) are the data."""

    name = "local"

    def __init__(self, program, partition, inputs=None, **_options):
        """``_options`` (a Ray address, a timeout) mean nothing in-process and are ignored;
        ``program`` None: no run bound yet (a session that reads a sharded graph first)."""
        self.workers: list[Worker | None] = []
        self.stashes: list[dict] = []    # one a task slot, kept across loads (a cache)
        self.program = self.partition = None
        self.inputs = {}
        if program is not None:
            self.load(program, partition, inputs)

    def read(self, source, task_bounds, block_bounds, reverse: bool = False, **_options):
        """Every shard of ``source`` (:class:`hgraph.shards.ShardedSource`) read and cut by
        owner here: ``(pieces[k][t], summaries[k])`` (``reverse``: a task's pieces, then its
        reversed ones)."""
        from hgraph.shards import read_split

        pieces, summaries = [], []
        for k in range(len(source.ranges)):
            *parts, summary = read_split(source, k, task_bounds, block_bounds, reverse)
            pieces.append(parts)
            summaries.append(summary)
        return pieces, summaries

    def load(self, program, partition, inputs=None, **_options):
        """Bind a run: ``program`` on ``partition``, the kept columns ``inputs`` (name ->
        :class:`hgraph.runtime.inputs.Kept`) added to each task's vertex columns."""
        self.program, self.partition = program, partition
        self.inputs = dict(inputs or {})
        self.tasks = partition.tasks
        self.workers = [self._worker(t) for t in range(self.tasks)]

    def _worker(self, t: int) -> Worker:
        part = self.partition.task_slice(t)
        spec, handles = task_pieces(self.inputs, part.start, part.stop)
        part = assemble(part, spec, handles)
        if part.weight_rules:                  # a sharded view's weights, columns all in
            from hgraph.shards import weigh

            part = weigh(part)
        return Worker(self.program, part, stash=self._stash(t))

    def _stash(self, t: int) -> dict:
        """Task slot ``t``'s stash, the one its earlier workers had (a new one the first
        time)."""
        while len(self.stashes) <= t:
            self.stashes.append({})
        return self.stashes[t]

    def unload(self):
        """Drop the run's workers (their slices and values) and the run (program, partition
        and its graph); kept handles stay with the caller."""
        self.workers = []
        self.program = self.partition = None
        self.inputs = {}

    def step(self, superstep, mode, aggregates, final, inbound):
        """Run one superstep on every worker; ``inbound[t]`` lists task ``t``'s blocks by sender.
        Returns (outbound handles ``[src][dst]``, stats per task)."""
        lost = [t for t, w in enumerate(self.workers) if w is None]
        if lost:
            raise WorkerLost(lost, "discarded")
        outs, stats = [], []
        for t, worker in enumerate(self.workers):
            result = worker.step(superstep, mode, aggregates, final, *inbound[t])
            outs.append(result[:-1])
            stats.append(result[-1])
        return outs, stats

    def fetch(self, handles):
        return list(handles)

    def put(self, data):
        return data

    def states(self):
        return [w.state() for w in self.workers]

    def restore(self, states):
        for t in range(self.tasks):
            if self.workers[t] is None:
                self.workers[t] = self._worker(t)
            self.workers[t].restore(states[t])

    def reset(self):
        """Fresh workers (recovery with no checkpoint: replay from superstep 0), with empty
        stashes, as Ray's replacement actors have."""
        self.stashes = []
        self.workers = [self._worker(t) for t in range(self.tasks)]

    def kill(self, task: int):
        self.workers[task] = None
        if task < len(self.stashes):
            self.stashes[task] = {}      # the replacement starts with an empty stash

    def values(self):
        lost = [t for t, w in enumerate(self.workers) if w is None]
        if lost:
            raise WorkerLost(lost, "discarded")
        return [w.result() for w in self.workers]

    def handles(self):
        """Each task's final values left where they are (here: the arrays themselves)."""
        return self.values()

    def gather(self, handles, index=None):
        """The arrays behind ``handles``, each cut to ``values[:, index]`` when given."""
        return [h if index is None else h[:, index] for h in handles]

    def store(self, values):
        """A handle for a driver array kept for later runs (here: the array itself)."""
        return values

    def gather_rows(self, handles, rows, index=None):
        """The rows ``rows[t]`` (local indices) of each array behind ``handles`` (``[:, index]``
        of them when given)."""
        return [h[r] if index is None else h[r][:, index] for h, r in zip(handles, rows)]

    def close(self):
        self.workers = []
        self.stashes = []
