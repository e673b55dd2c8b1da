"""In-process runtime: the workers are plain objects and message blocks are ``bytes``.

It runs exactly the code a Ray actor runs (:class:`hgraph.worker.Worker`), one task after the
other, so the in-process run is the reference every other runtime must reproduce bit for bit.
A worker "failure" (``inject_failure``) discards the worker object and its state; the master
then recovers it from the last checkpoint as it would a dead actor.
"""

from __future__ import annotations

from hgraph.runtime import WorkerLost
from hgraph.worker import Worker


class LocalRuntime:
    """Workers in this process; handles of message blocks are the bytes themselves."""

    name = "local"

    def __init__(self, program, partition, **_options):
        """``_options`` (a Ray address, a timeout) mean nothing in-process and are ignored."""
        self.program = program
        self.partition = partition
        self.tasks = partition.tasks
        self.workers: list[Worker | None] = [Worker(program, partition.task_slice(t))
                                             for t in range(self.tasks)]

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
                self.workers[t] = Worker(self.program, self.partition.task_slice(t))
            self.workers[t].restore(states[t])

    def reset(self):
        """Fresh workers (recovery with no checkpoint: replay from superstep 0)."""
        self.workers = [Worker(self.program, self.partition.task_slice(t)) for t in range(self.tasks)]

    def kill(self, task: int):
        self.workers[task] = None

    def values(self):
        lost = [t for t, w in enumerate(self.workers) if w is None]
        if lost:
            raise WorkerLost(lost, "discarded")
        return [w.result() for w in self.workers]

    def close(self):
        pass
