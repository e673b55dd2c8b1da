"""Checkpoints and recovery: a worker lost mid-job, the result identical to a failure-free run."""

from __future__ import annotations

import numpy as np
import pytest

import hgraph
from hgraph.checkpoint import CheckpointStore
from hgraph.algorithms import SSSP, pagerank
from hgraph.generators import random_graph
from hgraph.worker import Worker
from hgraph.partition import Partition
from tests.conftest import RAY_TIMEOUT


@pytest.fixture(scope="module")
def graph():
    return random_graph(200, 900, seed=5)


def test_store_keeps_only_the_latest_complete_checkpoint(tmp_path):
    store = CheckpointStore(tmp_path)
    assert store.load() is None
    store.save(1, {"a": 1}, [b"s0", b"s1"], [[b"", b"x"], [b"y", b""]])
    store.save(3, {"a": 3}, [b"t0", b"t1"], [[b"", b""], [b"z", b""]])
    ck = store.load()
    assert (ck.superstep, ck.master, ck.states, ck.outbound) == (3, {"a": 3}, [b"t0", b"t1"],
                                                                 [[b"", b""], [b"z", b""]])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LATEST", "step-000003.ckpt"]


def test_worker_state_round_trip(graph):
    part = Partition(graph, tasks=2, blocks=2).task_slice(1)
    a, b = Worker(SSSP(150), part), Worker(SSSP(150), part)
    a.step(0, "push", {}, False)
    b.restore(a.state())
    assert b.values.tobytes() == a.values.tobytes() and np.array_equal(b.respond, a.respond)


@pytest.mark.parametrize("mode, every", [("push", 2), ("hybrid", 1), ("pull", 5)])
def test_local_failure_recovers_identically(graph, tmp_path, mode, every):
    clean = hgraph.run(SSSP(0), graph, hgraph.EngineOptions(tasks=3, blocks=2, mode=mode))
    hurt = hgraph.run(SSSP(0), graph, hgraph.EngineOptions(tasks=3, blocks=2, mode=mode,
                                                           checkpoint_every=every,
                                                           checkpoint_dir=tmp_path / mode,
                                                           inject_failure=3))
    assert hurt.values.tobytes() == clean.values.tobytes()
    assert len(hurt.failures) == 1 and hurt.failures[0]["superstep"] == 3
    assert hurt.failures[0]["resumed_at"] == (3 // every) * every
    assert [r["superstep"] for r in hurt.stats] == [r["superstep"] for r in clean.stats]
    assert sum("failure" in r for r in hurt.stats) == 1
    assert (tmp_path / mode / "LATEST").exists()


def test_failure_without_checkpoint_replays_from_the_start(graph):
    program, g = pagerank(graph, iterations=8)
    clean = hgraph.run(program, g, hgraph.EngineOptions(tasks=2, mode="push"))
    hurt = hgraph.run(program, g, hgraph.EngineOptions(tasks=2, mode="push", inject_failure=4))
    assert hurt.values.tobytes() == clean.values.tobytes()
    assert hurt.failures[0]["resumed_at"] == 0


def test_ray_actor_killed_at_superstep_3_recovers_identically(ray_session, graph, tmp_path):
    program, g = pagerank(graph, iterations=10)
    clean = hgraph.run(program, g, hgraph.EngineOptions(tasks=3, blocks=2, mode="hybrid"))
    hurt = hgraph.run(program, g, hgraph.EngineOptions(tasks=3, blocks=2, mode="hybrid",
                                                       runtime="ray", checkpoint_every=2,
                                                       checkpoint_dir=tmp_path, inject_failure=3,
                                                       timeout=RAY_TIMEOUT))
    assert hurt.values.tobytes() == clean.values.tobytes()
    assert len(hurt.failures) == 1
    failure = hurt.failures[0]
    assert failure["superstep"] == 3 and failure["resumed_at"] == 2
    assert "Actor" in failure["cause"] and failure["recovery_seconds"] > 0
    row = next(r for r in hurt.stats if "failure" in r)
    assert row["recovery_seconds"] == failure["recovery_seconds"]
    sssp_clean = hgraph.run(SSSP(0), graph, hgraph.EngineOptions(tasks=2, mode="pull"))
    sssp_hurt = hgraph.run(SSSP(0), graph, hgraph.EngineOptions(tasks=2, mode="pull",
                                                                runtime="ray", checkpoint_every=1,
                                                                inject_failure=3,
                                                                timeout=RAY_TIMEOUT))
    assert sssp_hurt.values.tobytes() == sssp_clean.values.tobytes()


def _lose_a_worker_at_the_results(monkeypatch, runtime_cls):
    """Kill worker 1 just before the master collects the results, once."""
    original = runtime_cls.values
    fired = []

    def values(rt):
        if not fired:
            fired.append(True)
            rt.kill(1)
        return original(rt)

    monkeypatch.setattr(runtime_cls, "values", values)
    return fired


def test_worker_lost_while_results_are_collected_replays(graph, tmp_path, monkeypatch):
    from hgraph.runtime.local import LocalRuntime

    clean = hgraph.run(SSSP(0), graph, hgraph.EngineOptions(tasks=3, blocks=2, mode="hybrid"))
    fired = _lose_a_worker_at_the_results(monkeypatch, LocalRuntime)
    hurt = hgraph.run(SSSP(0), graph, hgraph.EngineOptions(tasks=3, blocks=2, mode="hybrid",
                                                           checkpoint_every=2,
                                                           checkpoint_dir=tmp_path))
    assert fired and hurt.values.tobytes() == clean.values.tobytes()
    assert len(hurt.failures) == 1 and hurt.failures[0]["worker"] == 1
    assert hurt.failures[0]["resumed_at"] > 0                       # from a checkpoint, not from 0
    assert [r["superstep"] for r in hurt.stats] == [r["superstep"] for r in clean.stats]


@pytest.mark.ray
def test_ray_actor_lost_while_results_are_collected_replays(graph, tmp_path, monkeypatch,
                                                            ray_session):
    from hgraph.runtime.ray_actors import RayRuntime

    clean = hgraph.run(SSSP(0), graph, hgraph.EngineOptions(tasks=2, mode="push"))
    fired = _lose_a_worker_at_the_results(monkeypatch, RayRuntime)
    hurt = hgraph.run(SSSP(0), graph, hgraph.EngineOptions(tasks=2, mode="push", runtime="ray",
                                                           checkpoint_every=2,
                                                           checkpoint_dir=tmp_path,
                                                           timeout=RAY_TIMEOUT))
    assert fired and hurt.values.tobytes() == clean.values.tobytes()
    assert len(hurt.failures) == 1 and hurt.failures[0]["worker"] == 1


class _AlwaysLosesWorker1:
    """A runtime whose worker 1 dies at superstep 2 every time (out of memory, say)."""

    def __new__(cls, program, partition, **options):
        from hgraph.runtime import WorkerLost
        from hgraph.runtime.local import LocalRuntime

        class Flaky(LocalRuntime):
            def step(self, superstep, mode, aggregates, final, inbound):
                if superstep == 2:
                    raise WorkerLost([1], "out of memory")
                return super().step(superstep, mode, aggregates, final, inbound)

        return Flaky(program, partition, **options)


@pytest.mark.parametrize("every", [None, 1])
def test_a_worker_that_dies_every_time_fails_after_max_recoveries(graph, monkeypatch, every):
    from hgraph.common.errors import HGraphError
    import hgraph.runtime

    monkeypatch.setitem(hgraph.runtime.RUNTIMES, "flaky", _AlwaysLosesWorker1)
    seen = []
    with pytest.raises(HGraphError) as info:
        hgraph.run(SSSP(0), graph, hgraph.EngineOptions(tasks=2, runtime="flaky",
                                                        max_recoveries=2, checkpoint_every=every),
                   progress=seen.append)
    message = str(info.value)
    assert "\n" not in message and info.value.exit_code == 1
    assert message.startswith("worker 1 lost at superstep 2 after 2 recoveries")
    assert [row["superstep"] for row in seen].count(1) == (3 if every is None else 1)
    with pytest.raises(HGraphError, match="max_recoveries must be >= 0"):
        hgraph.run(SSSP(0), graph, hgraph.EngineOptions(runtime="flaky", max_recoveries=-1))


def test_default_allows_three_recoveries(graph, monkeypatch):
    from hgraph.common.errors import HGraphError
    import hgraph.runtime

    monkeypatch.setitem(hgraph.runtime.RUNTIMES, "flaky", _AlwaysLosesWorker1)
    with pytest.raises(HGraphError, match="after 3 recoveries"):
        hgraph.run(SSSP(0), graph, hgraph.EngineOptions(tasks=2, runtime="flaky"))


def test_unknown_runtime_is_one_line(graph):
    from hgraph.common.errors import HGraphError

    with pytest.raises(HGraphError, match="runtime must be one of local, ray"):
        hgraph.run(SSSP(0), graph, hgraph.EngineOptions(runtime="nope"))
