"""The same jobs on Ray actors (one per task) give bit-identical results to the in-process runs."""

from __future__ import annotations

import numpy as np
import pytest

import hgraph
from hgraph.algorithms import SSSP, MinLabel, pagerank, symmetrize
from hgraph.generators import random_graph
from tests.conftest import RAY_TIMEOUT


@pytest.fixture(scope="module")
def graph():
    return random_graph(150, 700, seed=11)


@pytest.mark.parametrize("tasks, mode", [(1, "push"), (3, "pull"), (4, "hybrid")])
def test_sssp_and_cc_on_ray_equal_in_process(ray_session, graph, tasks, mode):
    local = hgraph.run(SSSP(3), graph, hgraph.EngineOptions(tasks=1, mode="push"))
    remote = hgraph.run(SSSP(3), graph, hgraph.EngineOptions(tasks=tasks, blocks=2, mode=mode,
                                                             runtime="ray", timeout=RAY_TIMEOUT))
    assert remote.values.tobytes() == local.values.tobytes()
    assert [r["superstep"] for r in remote.stats] == list(range(remote.supersteps))
    if tasks > 1:
        assert sum(r["bytes"] for r in remote.stats) > 0
    sym = symmetrize(graph)
    cc_local = hgraph.run(MinLabel(), sym, hgraph.EngineOptions(tasks=2, blocks=3, mode="pull"))
    cc_remote = hgraph.run(MinLabel(), sym, hgraph.EngineOptions(tasks=tasks, blocks=1, mode=mode,
                                                                 runtime="ray",
                                                                 timeout=RAY_TIMEOUT))
    assert np.array_equal(cc_remote.values, cc_local.values)


def test_pagerank_on_ray_equals_in_process(ray_session, graph):
    program, g = pagerank(graph, iterations=15)
    local = hgraph.run(program, g, hgraph.EngineOptions(tasks=2, blocks=3, mode="push"))
    remote = hgraph.run(program, g, hgraph.EngineOptions(tasks=3, blocks=1, mode="hybrid",
                                                         runtime="ray", timeout=RAY_TIMEOUT))
    assert remote.values.tobytes() == local.values.tobytes()
    assert remote.aggregates["dangling"] == local.aggregates["dangling"]
    # Stats are the same counters as in-process (bytes depend on the partitioning only).
    same = hgraph.run(program, g, hgraph.EngineOptions(tasks=3, blocks=1, mode="hybrid"))
    assert [r["bytes"] for r in remote.stats] == [r["bytes"] for r in same.stats]


class _FakeRay:
    """Just enough of ``ray`` for :meth:`RayRuntime._dead`; waiting costs simulated seconds."""

    class exceptions:  # noqa: N801 - mirrors ray.exceptions
        class RayActorError(Exception):
            pass

        class ActorUnavailableError(Exception):
            pass

        class GetTimeoutError(Exception):
            pass

    def __init__(self, fates):
        self.fates, self.waited, self.waits = fates, 0.0, 0

    def wait(self, refs, num_returns, timeout):
        self.waits += 1
        ready = [r for r in refs if self.fates[r] != "hung"]
        if len(ready) < num_returns:
            self.waited += timeout
        return ready, [r for r in refs if r not in ready]

    def get(self, ref, timeout=None):
        fate = self.fates[ref]
        if fate == "hung":
            self.waited += timeout or 0
            raise self.exceptions.GetTimeoutError()
        if fate == "dead":
            raise self.exceptions.RayActorError()
        return 1234


def test_dead_actors_are_found_with_one_bounded_wait():
    from types import SimpleNamespace

    from hgraph.runtime.ray_actors import RayRuntime

    fates = ["ok", "dead", "ok", "hung", "hung", "hung"]
    rt = RayRuntime.__new__(RayRuntime)
    rt.ray, rt.timeout, rt.tasks = _FakeRay(fates), 600.0, len(fates)
    rt.actors = [SimpleNamespace(pid=SimpleNamespace(remote=lambda t=t: t)) for t in range(len(fates))]
    assert rt._dead() == [1, 3, 4, 5]
    assert rt.ray.waits == 1                       # all actors at once
    assert rt.ray.waited <= RayRuntime.LIVENESS_WAIT_S   # one bounded wait, not 30 s per hung actor
