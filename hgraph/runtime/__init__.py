"""Runtimes: where a job's workers live. One protocol, a registry of implementations by name.

The master (:mod:`hgraph.master`) drives any object with the :class:`Runtime` methods; it never
asks which one it has. :func:`hgraph.run` looks the ``runtime=`` name up in :data:`RUNTIMES`
(``"local"``: workers in this process; ``"ray"``: one Ray actor per task), so a new runtime is
one :func:`register` call, not an edit of the driver. A runtime reports a dead worker by raising
:class:`WorkerLost` from any method; the master then recovers.

Factories are imported lazily, so choosing ``"local"`` never imports Ray.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Protocol, Sequence

from hgraph.common.errors import HGraphError


class WorkerLost(Exception):
    """A worker (task) died mid-job. Raised by a runtime; the master recovers from the last
    checkpoint (not a user error: it is caught, never shown, unless recovery gives up)."""

    def __init__(self, tasks, cause: str = ""):
        self.tasks = sorted(set(tasks))
        super().__init__(f"worker(s) {self.tasks} lost{': ' + cause if cause else ''}")


class Runtime(Protocol):
    """What the master needs from a runtime (``handles`` are opaque message-block references)."""

    name: str
    tasks: int

    def step(self, superstep: int, mode: str, aggregates: dict, final: bool,
             inbound: Sequence[Sequence[Any]]) -> tuple[list[list[Any]], list[dict]]:
        """One superstep on every worker: (outbound handles ``[src][dst]``, stats per task)."""

    def fetch(self, handles: Sequence[Any]) -> list[bytes]:
        """The bytes behind message-block handles (for a checkpoint)."""

    def put(self, data: bytes) -> Any:
        """A handle for message-block bytes (restoring a checkpoint's in-flight blocks)."""

    def states(self) -> list[Any]:
        """Every worker's state, in task order (for a checkpoint)."""

    def restore(self, states: Sequence[Any]) -> None:
        """Replace lost workers and restore every worker to ``states``."""

    def reset(self) -> None:
        """Fresh workers for every task (recovery when there is no checkpoint)."""

    def kill(self, task: int) -> None:
        """Lose task ``task``'s worker (fault injection)."""

    def values(self) -> list[Any]:
        """Each task's final vertex values, in task order."""

    def close(self) -> None:
        """Release the workers."""


#: name -> "module:factory"; a factory is called as ``factory(program, partition, **options)``.
RUNTIMES: dict[str, str | Callable[..., Runtime]] = {
    "local": "hgraph.runtime.local:LocalRuntime",
    "ray": "hgraph.runtime.ray_actors:RayRuntime",
}


def register(name: str, factory: str | Callable[..., Runtime]) -> None:
    """Make ``runtime=name`` available to :func:`hgraph.run` (a callable or ``"module:attr"``)."""
    RUNTIMES[name] = factory


def _factory(name: str):
    try:
        factory = RUNTIMES[name]
    except KeyError:
        raise HGraphError(f"runtime must be one of {', '.join(RUNTIMES)}, got {name!r}") from None
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(module), attr)
    return factory


def create(name: str, program, partition, **options) -> Runtime:
    """The runtime registered as ``name``, built for ``program`` on ``partition``."""
    return _factory(name)(program, partition, **options)


def task_limit(name: str, **options) -> tuple[int, str] | None:
    """The most tasks runtime ``name`` can put to use, with the reason in words, or None for no
    limit of its own (beyond one task per vertex, which :class:`hgraph.partition.Partition`
    applies to every runtime). A factory declares one as ``task_limit(**options)`` — the Ray
    runtime's is one actor per CPU of the cluster: every actor is a process of its own
    (~80 MB), so more actors than CPUs only queue, and thousands of them never finish starting."""
    limit = getattr(_factory(name), "task_limit", None)
    return None if limit is None else limit(**options)
