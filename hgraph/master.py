"""The master: superstep loop, barrier, halting, aggregators, hybrid switching, checkpoints, recovery.

Each superstep is one call per worker (:meth:`runtime.step`) carrying every block addressed to it;
the driver waits for all of them (the barrier), sums their counters into the superstep's stats
row, reduces the aggregators (visible to ``update`` in the next superstep), decides the next
superstep's message mode (:mod:`hgraph.cost_model` in hybrid mode) and hands each worker's
outbound blocks to their destinations — as object references in Ray, so the data goes from store
to store and only handles pass through the driver.

The job halts when no vertex is active and no message is in flight, or after ``max_supersteps``
supersteps (numbered from 0; superstep 0 runs ``init``).

Fault tolerance: every ``checkpoint_every`` supersteps the driver asks each worker for its state
and stores it, with the in-flight message blocks and its own state, in a checkpoint
(:mod:`hgraph.checkpoint`). When a worker is lost the runtime replaces it, every worker is
restored to the last checkpoint (or to superstep 0 when there is none) and the supersteps after it
are replayed; the computation is deterministic, so the result equals a failure-free run.
A job recovers at most ``max_recoveries`` times: the next loss fails it with one line naming
the worker and the superstep (a worker that dies every time would otherwise replay forever).
"""

from __future__ import annotations

import tempfile
import time
from typing import Any, Callable

import numpy as np

from hgraph.common.errors import HGraphError
from hgraph.cost_model import HybridSwitcher
from hgraph.runtime import WorkerLost
from hgraph.worker import finish_aggregates, reduce_aggregates

MODES = ("push", "pull", "hybrid")
COUNTERS = ("active", "responding", "resp_edges", "cross_edges", "messages", "bytes", "updated",
            "scanned_edges",
            "push_fixed", "push_var", "pull_fixed", "pull_var")


def _pack_value(value):
    arr = np.asarray(value)
    return {"dtype": arr.dtype.str, "shape": list(arr.shape), "data": arr.tobytes()}


def _unpack_value(obj):
    arr = np.frombuffer(obj["data"], dtype=obj["dtype"]).reshape(obj["shape"]).copy()
    return arr[()] if arr.ndim == 0 else arr


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    return value


class Master:
    """Runs ``program`` on a partitioned graph through ``runtime`` (see the module docstring)."""

    def __init__(self, program, partition, runtime, *, mode: str = "hybrid",
                 max_supersteps: int | None = None, checkpoint_every: int | None = None,
                 checkpoint_dir=None, inject_failure: int | None = None,
                 progress: Callable[[dict], Any] | None = None, max_recoveries: int = 3,
                 keep: bool = False):
        """``keep``: the run's values stay on the workers and :meth:`run` returns one handle
        a task (:meth:`runtime.handles`) in their place."""
        if mode not in MODES:
            raise HGraphError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        limits = [m for m in (max_supersteps, getattr(program, "max_supersteps", None)) if m is not None]
        self.max_supersteps = min(limits) if limits else None
        if self.max_supersteps is not None and self.max_supersteps < 1:
            raise HGraphError(f"max_supersteps must be >= 1, got {self.max_supersteps}")
        if checkpoint_every is not None and checkpoint_every < 1:
            raise HGraphError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
        self.program, self.partition, self.runtime = program, partition, runtime
        self.mode = mode
        self.kinds = dict(program.aggregators)
        self.checkpoint_every = checkpoint_every
        self.inject_failure = inject_failure
        self.progress = progress
        self.store = None
        if checkpoint_every is not None or inject_failure is not None:
            from hgraph.checkpoint import CheckpointStore   # only runs that checkpoint load it

            directory = checkpoint_dir or tempfile.mkdtemp(prefix="hgraph-ckpt-")
            self.store = CheckpointStore(directory)
        self.checkpoint_dir = None if self.store is None else str(self.store.directory)
        self.max_recoveries = max_recoveries
        self.keep = keep
        self.failures: list[dict] = []

    # ------------------------------------------------------------------ the loop

    def run(self):
        tasks = self.partition.tasks
        switcher = HybridSwitcher() if self.mode == "hybrid" else None
        aggregates: dict[str, Any] = {}
        stats: list[dict] = []
        inbound = [[b""] * tasks for _ in range(tasks)]
        superstep = 0
        injected = False
        pending_failure = None
        while True:   # until the results are in (a worker lost at the end replays too)
            while self.max_supersteps is None or superstep < self.max_supersteps:
                mode = switcher.mode if switcher else self.mode
                final = self.max_supersteps is not None and superstep == self.max_supersteps - 1
                t0 = time.perf_counter()
                try:
                    if (self.inject_failure is not None and not injected
                            and superstep == self.inject_failure):
                        injected = True
                        self.runtime.kill(superstep % tasks)
                    outs, worker_stats = self.runtime.step(superstep, mode, aggregates, final, inbound)
                except WorkerLost as lost:
                    superstep, aggregates, inbound, stats = self._recover(lost, superstep, switcher, t0)
                    pending_failure = self.failures[-1]
                    continue
                row = {"superstep": superstep, "mode": mode}
                if switcher is not None and switcher.prediction:
                    row["predicted"] = dict(switcher.prediction)   # what chose this row's mode
                for key in COUNTERS:
                    row[key] = int(sum(s.get(key, 0) for s in worker_stats))
                row["seconds"] = time.perf_counter() - t0
                row["worker_seconds"] = max(s["seconds"] for s in worker_stats)
                blocks = np.array([b for s in worker_stats for b in s["responding_blocks"]], bool)
                if mode == "pull" and not final:
                    row["requests"] = int(self.partition.route_table(blocks).sum())
                aggregates = self._reduce(worker_stats)
                if switcher is not None:
                    switcher.observe(row)
                inbound = [[outs[src][dst] for src in range(tasks)] for dst in range(tasks)]
                if pending_failure is not None:
                    row["failure"] = {k: pending_failure[k] for k in ("superstep", "worker", "resumed_at")}
                    row["recovery_seconds"] = pending_failure["recovery_seconds"]
                    pending_failure = None
                stats.append(row)
                if self.progress is not None:
                    self.progress(row)
                done = row["active"] == 0 and row["messages"] == 0
                superstep += 1
                if (self.store is not None and self.checkpoint_every is not None and not done
                        and superstep % self.checkpoint_every == 0):
                    try:
                        self._checkpoint(superstep - 1, aggregates, switcher, stats, outs)
                    except WorkerLost as lost:
                        # Lost while checkpointing: back to the previous checkpoint, as mid-superstep.
                        superstep, aggregates, inbound, stats = self._recover(lost, superstep, switcher,
                                                                              time.perf_counter())
                        pending_failure = self.failures[-1]
                        continue
                if done:
                    break
            try:
                parts = self.runtime.handles() if self.keep else self.runtime.values()
            except WorkerLost as lost:
                # Lost while handing over the results: replay from the last checkpoint.
                superstep, aggregates, inbound, stats = self._recover(lost, superstep, switcher,
                                                                      time.perf_counter())
                pending_failure = self.failures[-1]
                continue
            if self.keep:
                return parts, stats, aggregates, superstep, switcher
            values = np.concatenate(parts, axis=0) if tasks else np.empty(0)
            return values, stats, aggregates, superstep, switcher

    def _reduce(self, worker_stats) -> dict:
        partials = reduce_aggregates(self.kinds, [s["aggregates"] for s in worker_stats])
        return finish_aggregates(partials)

    # ------------------------------------------------------------------ checkpoints

    def _checkpoint(self, superstep, aggregates, switcher, stats, outs):
        t0 = time.perf_counter()
        states = self.runtime.states()
        outbound = [self.runtime.fetch(row) for row in outs]
        master = {
            "aggregates": {k: _pack_value(v) for k, v in aggregates.items()},
            "switcher": switcher.state() if switcher else None,
            "stats": [{k: _plain(v) for k, v in row.items()} for row in stats],
        }
        self.store.save(superstep, master, states, outbound)
        stats[-1]["checkpoint_seconds"] = time.perf_counter() - t0

    def _recover(self, lost: WorkerLost, superstep, switcher, t0):
        """Replace lost workers, restore all to the last checkpoint; returns the loop state.

        Past ``max_recoveries`` recoveries the job fails instead (one line, exit status 1)."""
        if len(self.failures) >= self.max_recoveries:
            worker = ", ".join(map(str, lost.tasks)) or "?"
            raise HGraphError(f"worker {worker} lost at superstep {superstep} after "
                              f"{len(self.failures)} recoveries (the limit, max_recoveries="
                              f"{self.max_recoveries}); giving up", exit_code=1)
        tasks = self.partition.tasks
        checkpoint = self.store.load() if self.store is not None else None
        if checkpoint is None:
            self.runtime.reset()
            resume, aggregates, stats = 0, {}, []
            inbound = [[b""] * tasks for _ in range(tasks)]
            if switcher is not None:
                switcher.__init__()
        else:
            self.runtime.restore(checkpoint.states)
            resume = checkpoint.superstep + 1
            master = checkpoint.master
            aggregates = {k: _unpack_value(v) for k, v in master["aggregates"].items()}
            stats = [dict(row) for row in master["stats"]]
            if switcher is not None:
                switcher.restore(master["switcher"])
            handles = [[self.runtime.put(data) for data in row] for row in checkpoint.outbound]
            inbound = [[handles[src][dst] for src in range(tasks)] for dst in range(tasks)]
        seconds = time.perf_counter() - t0
        self.failures.append({"superstep": superstep, "workers": lost.tasks,
                              "worker": lost.tasks[0] if lost.tasks else None,
                              "resumed_at": resume, "recovery_seconds": seconds,
                              "cause": str(lost)})
        return resume, aggregates, inbound, stats
