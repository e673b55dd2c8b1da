"""The workers' stash (hgraph.worker.Worker, ``block.stash``): a cache each worker slot keeps
across the runs of a session — what a run put there the next run of the same session finds,
a new session or a replacement worker (after a failure) starts with an empty one."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import hgraph
from hgraph.generators import random_graph
from tests.conftest import RAY_TIMEOUT


@pytest.fixture(scope="module")
def graph():
    return random_graph(120, 480, seed=38)


class Seen(hgraph.VertexProgram):
    """Each vertex's value: how many earlier runs its block's worker saw (the stash's count
    for the block, raised by one each run); three supersteps, so a failure can hit one."""

    value_dtype = message_dtype = np.int64
    combiner = np.maximum

    def init(self, block):
        key = ("seen", block.index)
        seen = block.stash.get(key, 0)
        block.stash[key] = seen + 1
        return np.full(block.size, seen, np.int64), np.ones(block.size, bool)

    def update(self, ctx, block, values, inbox, has_message):
        return hgraph.Update(values, respond=np.full(block.size, ctx.superstep < 3))

    def message(self, src_values, weights):
        return src_values


def _by_task(values, tasks: int) -> list:
    """The distinct values of each task's share of the vertices (even cuts)."""
    cuts = np.linspace(0, values.size, tasks + 1).astype(int)
    return [sorted(set(values[a:b].tolist())) for a, b in zip(cuts[:-1], cuts[1:])]


def test_a_stashed_value_is_seen_by_the_next_run_of_the_session_in_process(graph):
    opts = hgraph.EngineOptions(tasks=2, blocks=2)
    with hgraph.Session(opts) as s:
        assert [sorted(set(s.run(Seen(), graph).values.tolist())) for _ in range(3)] == \
            [[0], [1], [2]]
    with hgraph.Session(opts) as s:                  # a new session: empty stashes
        assert s.run(Seen(), graph).values.tolist() == [0] * graph.n
    assert hgraph.run(Seen(), graph, opts).values.tolist() == [0] * graph.n


def test_a_replacement_worker_starts_with_an_empty_stash_in_process(graph):
    """Every run of the session loses task 0's worker at superstep 2 (2 % 2): its
    replacement is restored from the checkpoint with an empty stash, so the next run's init
    sees nothing there, while task 1's worker still counts."""
    hurt = hgraph.EngineOptions(tasks=2, blocks=1, checkpoint_every=1, inject_failure=2)
    with hgraph.Session(hurt) as s:
        first = s.run(Seen(), graph)
        second = s.run(Seen(), graph)
    assert [f["superstep"] for f in second.failures] == [2]
    assert _by_task(first.values, 2) == [[0], [0]]
    assert _by_task(second.values, 2) == [[0], [1]]


@pytest.mark.ray
def test_on_ray_the_stash_lives_with_the_actor(ray_session, graph):
    opts = hgraph.EngineOptions(tasks=2, blocks=2, runtime="ray", timeout=RAY_TIMEOUT)
    # Seen is this module's: the actors get it by value (they cannot import the tests)
    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with hgraph.Session(opts) as s:
        assert _by_task(s.run(Seen(), graph).values, 2) == [[0], [0]]
        assert _by_task(s.run(Seen(), graph).values, 2) == [[1], [1]]
        s.runtime.kill(1)                       # its replacement: a new actor, empty stash
        assert _by_task(s.run(Seen(), graph).values, 2) == [[2], [0]]
    with hgraph.Session(opts) as s:
        assert _by_task(s.run(Seen(), graph).values, 2) == [[0], [0]]
