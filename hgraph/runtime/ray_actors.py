"""Ray runtime: one actor per task, message blocks as driver-owned object references.

Each superstep the driver makes one call per actor, ``step.options(num_returns=tasks + 1)``, whose
arguments are the refs of every block addressed to that task (Ray resolves them store to store,
the driver never touches the data) and whose returns are one block per destination task plus the
stats dict — "pattern A" of ``shared/notes/ray.md``: workers never wait on each other and the
driver is the barrier. Returned blocks are owned by the driver, so they outlive a dead actor.

A dead actor (``RayActorError``/``ActorDiedError``, ``ActorUnavailableError``) surfaces as
:class:`hgraph.runtime.WorkerLost`; the master then calls :meth:`RayRuntime.restore`, which
starts a replacement actor and restores every actor from the checkpoint. Every ``ray.get`` has a
timeout, so a hung cluster is an error, not a hang.
"""

from __future__ import annotations

import time

from hgraph.common.errors import HGraphError
from hgraph.runtime import WorkerLost
from hgraph.runtime.inputs import assemble, task_pieces
from hgraph.runtime.ray_connect import ensure_ray
from hgraph.worker import Worker


def _trim_heap() -> None:
    """Collect garbage and return the freed C heap to the system (glibc's ``malloc_trim``;
    elsewhere only the collection)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _actor_class():
    import ray

    @ray.remote(max_restarts=0, num_cpus=0)
    class WorkerActor:
        """A :class:`hgraph.worker.Worker` inside a Ray actor, loaded with one run at a time
        (a :class:`hgraph.session.Session` reuses the actor for the next run). ``stash``:
        the workers' cache (:class:`hgraph.worker.Worker`), kept across the runs it is
        loaded with; a replacement actor starts with an empty one, and it ends with the
        actor."""

        def __init__(self):
            self.worker = None
            self.stash = {}

        def load(self, program, part, spec, *arrays):
            self.worker = Worker(program, assemble(part, spec, arrays), stash=self.stash)
            return True

        def load_sharded(self, program, meta, count, spec, *arrays):
            """A run on a sharded graph: this task's slice built here from its ``count``
            pieces (the first ``arrays``), then the kept columns (the rest) added."""
            from hgraph.shards import assemble_slice, weigh

            part = assemble_slice(meta, arrays[:count])
            self.worker = Worker(program, weigh(assemble(part, spec, arrays[count:])),
                                 stash=self.stash)
            return True

        def read(self, source, k, task_bounds, block_bounds, reverse):
            """Shard ``k`` of ``source`` read here and cut by owner: one piece a task (and
            one of the reversed graph with ``reverse``), then the summary (what the driver
            gets)."""
            from hgraph.shards import read_split

            return read_split(source, k, task_bounds, block_bounds, reverse)

        def unload(self):
            """Drop the run's worker and hand its freed heap back to the system: the actor
            outlives the run, and what the run held should not stay resident in it."""
            self.worker = None
            _trim_heap()
            return True

        def step(self, superstep, mode, aggregates, final, *inbound):
            return self.worker.step(superstep, mode, aggregates, final, *inbound)

        def state(self):
            return self.worker.state()

        def restore(self, data):
            self.worker.restore(data)
            return True

        def result(self):
            return self.worker.result()

        def keep(self):
            values = self.worker.result()
            return values, len(values)

        def take(self, values, index):
            return values[:, index]

        def take_rows(self, values, rows, index=None):
            return values[rows] if index is None else values[rows][:, index]

        def pid(self):
            import os

            return os.getpid()

    return WorkerActor


class RayRuntime:
    """Workers as Ray actors (see the module docstring)."""

    name = "ray"

    @staticmethod
    def task_limit(address: str | None = None, **_options) -> tuple[int, str]:
        """One actor per CPU of the cluster (:func:`hgraph.runtime.task_limit`): joins the
        cluster (or starts the embedded Ray) to count them."""
        ensure_ray(address)
        import ray

        cpus = int(ray.cluster_resources().get("CPU", 0))
        return max(cpus, 1), f"at most one Ray actor per CPU of the cluster ({cpus} CPUs)"

    def __init__(self, program, partition, address: str | None = None,
                 timeout: float | None = 600.0, inputs=None):
        ensure_ray(address)
        import ray

        self.ray = ray
        self.timeout = timeout
        self._cls = _actor_class()
        self.actors = []
        self.program = self.partition = self._program_ref = None
        self.inputs = {}
        if program is not None:          # None: no run yet (a session reading a graph first)
            self.load(program, partition, inputs)

    #: Times a shard is read again on a fresh actor when its reader died.
    READ_RETRIES = 3

    def read(self, source, task_bounds, block_bounds, tasks: int, timeout=None,
             reverse: bool = False):
        """Every shard of ``source`` read by the actors (shard ``k`` by actor ``k % tasks``)
        and cut by owner: ``(pieces[k][t], summaries[k])`` (``reverse``: a task's pieces,
        then its reversed ones), the pieces driver-owned refs left
        in the object store (they outlive their reader), the summaries here. A shard whose
        reader died is read again on a replacement."""
        ray = self.ray
        if timeout is not None:
            self.timeout = timeout
        while len(self.actors) < tasks:
            self.actors.append(self._new_actor(len(self.actors)))
        shards = len(source.ranges)
        pieces, summaries = [None] * shards, [None] * shards
        todo = list(range(shards))
        for attempt in range(self.READ_RETRIES + 1):
            returns = tasks * (2 if reverse else 1) + 1
            calls = {k: self.actors[k % tasks].read.options(num_returns=returns).remote(
                source, k, task_bounds, block_bounds, reverse) for k in todo}
            failed = []
            for k, refs in calls.items():
                try:
                    summaries[k] = self._get(refs[-1], f"reading shard {k}")
                    pieces[k] = list(refs[:-1])
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                    failed.append(k)
            if not failed:
                return pieces, summaries
            self.tasks = tasks
            for t in self._dead():
                self.actors[t] = self._new_actor(t)
            todo = failed
        raise HGraphError(f"Ray workers died reading shards {todo} of {source.path} "
                          f"{self.READ_RETRIES + 1} times")

    def load(self, program, partition, inputs=None, **options):
        """Bind a run to the actors: ``program`` on ``partition`` with the kept columns
        ``inputs`` (name -> :class:`hgraph.runtime.inputs.Kept`, their handles resolved where
        each actor is); actors are started only for tasks the pool lacks, and one that died
        since the last run is replaced. ``options``: ``timeout`` for this run's waits."""
        if "timeout" in options:
            self.timeout = options["timeout"]
        ray = self.ray
        self.program, self.partition = program, partition
        self.inputs = dict(inputs or {})
        self.tasks = partition.tasks
        self._program_ref = ray.put(program)
        while len(self.actors) < self.tasks:
            self.actors.append(self._new_actor(len(self.actors)))
        try:
            self._get([self._load(t) for t in range(self.tasks)], "loading the run")
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            for t in self._dead():                  # gone between two runs of a session
                self.actors[t] = self._new_actor(t)
            self._get([self._load(t) for t in range(self.tasks)], "loading the run")

    def _load(self, task: int):
        """The ref of task ``task``'s load call (its slice, and its pieces of kept columns);
        on a sharded graph the actor builds its slice from the pieces it is handed."""
        p = self.partition
        if hasattr(p, "pieces_for"):
            lo, hi = int(p.task_bounds[task]), int(p.task_bounds[task + 1])
            spec, handles = task_pieces(self.inputs, lo, hi)
            own = p.pieces_for(task)
            return self.actors[task].load_sharded.remote(self._program_ref, p.meta(task),
                                                         len(own), spec, *own, *handles)
        part = p.task_slice(task)
        spec, handles = task_pieces(self.inputs, part.start, part.stop)
        return self.actors[task].load.remote(self._program_ref, part, spec, *handles)

    def unload(self):
        """The actors drop the run's worker (slice and values), not waited for, and the driver
        its references to the run (the program, the partition and its graph); kept handles
        are the caller's and stay in the object store."""
        for actor in self.actors[:self.tasks]:
            actor.unload.remote()
        self.program = self.partition = self._program_ref = None
        self.inputs = {}

    def _start(self, task: int):
        """A new actor for task ``task``, loaded with the current run."""
        self.actors[task] = self._new_actor(task)
        self._load(task)
        return self.actors[task]

    def _new_actor(self, task: int):
        """Start an empty actor for task ``task``, on the alive nodes round robin (softly).

        Ray's ``SPREAD`` is only a hint for actors that ask for no CPU: on a 3-node cluster
        all workers often landed on one node, so a job did not really span the cluster and a
        lost node took every worker. Soft node affinity places them one per node in turn and
        still lets a replacement go elsewhere when its node is gone.
        """
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = sorted(n["NodeID"] for n in self.ray.nodes() if n.get("Alive"))
        strategy = (NodeAffinitySchedulingStrategy(alive[task % len(alive)], soft=True)
                    if len(alive) > 1 else "SPREAD")
        return self._cls.options(scheduling_strategy=strategy).remote()

    def _get(self, refs, what: str):
        ray = self.ray
        try:
            return ray.get(refs, timeout=self.timeout)
        except ray.exceptions.GetTimeoutError:
            raise HGraphError(f"Ray workers did not answer {what} within {self.timeout} s") from None
        except ray.exceptions.RayTaskError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, HGraphError):
                raise cause from None
            raise

    #: Seconds the liveness check waits, once, for every actor together.
    LIVENESS_WAIT_S = 30.0

    def _dead(self) -> list[int]:
        """Tasks whose actor does not answer: every actor is asked at once and the answers are
        awaited together, within one bounded wait (:data:`LIVENESS_WAIT_S`, or the runtime's
        timeout when smaller) — not one actor after the other with a full wait each."""
        ray = self.ray
        refs = [actor.pid.remote() for actor in self.actors[:self.tasks]]
        wait_s = min(self.LIVENESS_WAIT_S, self.timeout or self.LIVENESS_WAIT_S)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=wait_s)
        answered = set(ready)
        dead = []
        for t, ref in enumerate(refs):
            if ref not in answered:
                dead.append(t)          # no answer within the wait: hung or gone
                continue
            try:
                ray.get(ref, timeout=0)  # ready: an answer, or the error of a dead actor
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                    ray.exceptions.GetTimeoutError):
                dead.append(t)
        return dead

    def step(self, superstep, mode, aggregates, final, inbound):
        ray = self.ray
        outs, stats_refs = [], []
        for t, actor in enumerate(self.actors[:self.tasks]):
            refs = actor.step.options(num_returns=self.tasks + 1).remote(
                superstep, mode, aggregates, final, *inbound[t])
            outs.append(refs[:-1])
            stats_refs.append(refs[-1])
        try:
            stats = self._get(stats_refs, f"superstep {superstep}")
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as err:
            dead = self._dead() or list(range(self.tasks))
            raise WorkerLost(dead, type(err).__name__) from None
        return outs, stats

    def fetch(self, handles):
        return [h if isinstance(h, bytes) else self._get(h, "a checkpoint fetch") for h in handles]

    def put(self, data):
        return data if not data else self.ray.put(data)

    def states(self):
        ray = self.ray
        try:
            return self._get([a.state.remote() for a in self.actors[:self.tasks]], "a checkpoint")
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as err:
            raise WorkerLost(self._dead() or list(range(self.tasks)), type(err).__name__) from None

    def restore(self, states):
        for t in self._dead():
            self._start(t)
        self._get([a.restore.remote(s) for a, s in zip(self.actors, states)], "a restore")

    def reset(self):
        for t in range(self.tasks):
            self.kill(t)
            self._start(t)

    def kill(self, task: int, wait_s: float = 30.0):
        """Kill task ``task``'s actor and wait until it is gone (at most ``wait_s`` seconds).

        ``ray.kill`` only sends the request: on a loaded machine the next calls could still
        run on the doomed actor, and a short job might finish before the loss shows — the
        injected failure would then test nothing.
        """
        actor = self.actors[task]
        self.ray.kill(actor, no_restart=True)
        self._await_gone(actor, wait_s)

    def _await_gone(self, actor, wait_s: float) -> None:
        """Return once ``actor`` no longer answers (at most ``wait_s`` seconds)."""
        ray = self.ray
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                ray.get(actor.pid.remote(), timeout=1.0)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                return
            except ray.exceptions.GetTimeoutError:
                pass
            time.sleep(0.05)

    def values(self):
        ray = self.ray
        try:
            return self._get([a.result.remote() for a in self.actors[:self.tasks]], "the results")
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as err:
            raise WorkerLost(self._dead() or list(range(self.tasks)), type(err).__name__) from None

    def handles(self):
        """Each task's final values left in the object store, one driver-owned reference a
        task (they outlive the actor that made them); only their lengths come here, which
        also says every actor answered."""
        ray = self.ray
        calls = [a.keep.options(num_returns=2).remote() for a in self.actors[:self.tasks]]
        try:
            self._get([rows for _, rows in calls], "the results")
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as err:
            raise WorkerLost(self._dead() or list(range(self.tasks)), type(err).__name__) from None
        return [values for values, _ in calls]

    def gather(self, handles, index=None):
        """The arrays behind kept ``handles``; with ``index``, each cut to ``values[:, index]``
        by an actor beside it first, so only the cut travels (the driver's own cut if that
        actor is gone)."""
        ray = self.ray
        if index is None:
            return self._get(list(handles), "a kept column")
        actors = self.actors[:len(handles)]
        try:
            return self._get([a.take.remote(h, index) for a, h in zip(actors, handles)],
                             "a kept column")
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            return [v[:, index] for v in self._get(list(handles), "a kept column")]

    def store(self, values):
        """A driver-owned object-store reference to a driver array (a kept column's piece)."""
        return self.ray.put(values)

    def gather_rows(self, handles, rows, index=None):
        """Rows ``rows[t]`` (local indices) of each kept array behind ``handles`` (``[:,
        index]`` of them when given), cut by an actor beside it (the driver's own cut if that
        actor is gone)."""
        ray = self.ray
        actors = self.actors[:len(handles)]
        try:
            return self._get([a.take_rows.remote(h, r, index)
                              for a, h, r in zip(actors, handles, rows)], "a kept column's rows")
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            got = self._get(list(handles), "a kept column")
            return [v[r] if index is None else v[r][:, index] for v, r in zip(got, rows)]

    def close(self):
        """End the actors this runtime started (by handle), none other, and wait until they
        are gone: ``ray.kill`` only sends the request, and a session closed on a loaded
        machine must not leave its workers holding CPUs the next one asks for."""
        ended = []
        for actor in self.actors:
            try:
                self.ray.kill(actor, no_restart=True)
                ended.append(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        for actor in ended:
            try:
                self._await_gone(actor, 10.0)
            except Exception:  # noqa: BLE001 - the cluster itself went first
                pass
        self.actors = []
