"""Engine sessions (hgraph.session, issue 37): workers kept across runs give hgraph.run's
results bit for bit, kept columns read as the next run's vertex columns equal the same column
given in the graph, and recovery with kept columns completes identical."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import hgraph
from hgraph.algorithms import SSSP, MinLabel, pagerank, symmetrize
from hgraph.common.errors import HGraphError
from hgraph.generators import random_graph
from hgraph.runtime.inputs import Kept
from tests.conftest import RAY_TIMEOUT


@pytest.fixture(scope="module")
def graph():
    return random_graph(160, 720, seed=37)


class Relax(hgraph.VertexProgram):
    """Shortest paths from every vertex whose column ``seed`` is finite, starting at it."""

    value_dtype = message_dtype = np.float64
    combiner = np.minimum
    aggregators = {"relaxed": "sum"}

    def init(self, block):
        seed = np.asarray(block.columns["seed"], np.float64)
        return seed * 0.5 + block.ids, np.isfinite(seed)

    def update(self, ctx, block, values, inbox, has_message):
        better = has_message & (inbox < values)
        return hgraph.Update(np.where(better, inbox, values), respond=better,
                             aggregates={"relaxed": int(better.sum())})

    def message(self, src_values, weights):
        return src_values + weights


class Pair(hgraph.VertexProgram):
    """Two values a vertex from its column ``seed``: (seed, 2·seed); no messages."""

    value_dtype = message_dtype = np.float64
    value_shape = (2,)
    message_shape = (2,)
    max_supersteps = 1

    def init(self, block):
        seed = np.asarray(block.columns["seed"], np.float64)
        return np.stack([seed, 2 * seed], axis=1), np.zeros(block.size, bool)


def _with_seed(graph, seed):
    return hgraph.Graph.from_edges(graph.src, graph.dst, weights=graph.weights, n=graph.n,
                                   columns={"seed": seed})


def _same(a, b):
    assert a.values.tobytes() == b.values.tobytes()
    assert a.supersteps == b.supersteps
    assert [(r["mode"], r["messages"], r["bytes"]) for r in a.stats] == \
        [(r["mode"], r["messages"], r["bytes"]) for r in b.stats]
    assert {k: np.asarray(v).tolist() for k, v in a.aggregates.items()} == \
        {k: np.asarray(v).tolist() for k, v in b.aggregates.items()}


def _programs(graph):
    pr, pg = pagerank(graph, iterations=8)
    return [(SSSP(3), graph), (MinLabel(), symmetrize(graph)), (pr, pg), (SSSP(40), graph)]


@pytest.mark.parametrize("tasks, blocks, mode", [(1, 1, "push"), (3, 2, "pull"),
                                                 (4, 3, "hybrid")])
def test_session_runs_equal_hgraph_run_in_process(graph, tasks, blocks, mode):
    opts = hgraph.EngineOptions(tasks=tasks, blocks=blocks, mode=mode)
    with hgraph.Session(opts) as s:
        for program, g in _programs(graph):
            _same(s.run(program, g), hgraph.run(program, g, opts))


def test_a_kept_column_reads_as_the_graph_column_would(graph):
    opts = hgraph.EngineOptions(tasks=3, blocks=2)
    dist = hgraph.run(SSSP(3), graph, opts).values
    want = hgraph.run(Relax(), _with_seed(graph, dist), opts)
    with hgraph.Session(opts) as s:
        kept = s.run(SSSP(3), graph, keep="dist", gather=False)
        assert kept.values is None and kept.aggregates["improved"] == 0
        got = s.run(Relax(), graph, inputs={"seed": "dist"})
        _same(got, want)
        assert s.gather("dist").tobytes() == dist.tobytes()
        s.run(Pair(), graph, inputs={"seed": "dist"}, keep="pair", gather=False)
        assert s.gather("pair", 1).tobytes() == (2 * dist).tobytes()   # cut on the workers
        both = s.run(Pair(), graph, inputs={"seed": "dist"}, keep="pair")
        assert both.values.tobytes() == s.gather("pair").tobytes()
        s.drop("dist")
        with pytest.raises(HGraphError, match="no column kept as 'dist'"):
            s.run(Relax(), graph, inputs={"seed": "dist"})


def test_a_kept_column_cut_elsewhere_is_joined_from_its_pieces(graph):
    """A later run's tasks may cover other ranges than the run that kept the column: each
    task joins the overlapping pieces (here bounds unlike the 4-task partition's)."""
    opts = hgraph.EngineOptions(tasks=4, blocks=2)
    dist = hgraph.run(SSSP(3), graph, opts).values
    want = hgraph.run(Relax(), _with_seed(graph, dist), opts)
    cuts = np.array([0, 7, 100, 101, graph.n])
    with hgraph.Session(opts) as s:
        s.run(SSSP(3), graph)                                 # workers started
        s.kept["odd"] = Kept([dist[a:b] for a, b in zip(cuts[:-1], cuts[1:])], cuts)
        _same(s.run(Relax(), graph, inputs={"seed": "odd"}), want)
        with pytest.raises(HGraphError, match="has 160 rows; the graph has 5 vertices"):
            s.run(Relax(), hgraph.Graph.from_edges([0], [1], n=5), inputs={"seed": "odd"})
        with pytest.raises(HGraphError, match="would shadow"):
            s.run(Relax(), _with_seed(graph, dist), inputs={"seed": "odd"})


def test_recovery_with_kept_columns_in_process(graph, tmp_path):
    opts = hgraph.EngineOptions(tasks=3, blocks=2)
    dist = hgraph.run(SSSP(3), graph, opts).values
    want = hgraph.run(Relax(), _with_seed(graph, dist), opts)
    hurt = opts.replace(checkpoint_every=2, inject_failure=3, checkpoint_dir=str(tmp_path))
    with hgraph.Session(hurt) as s:
        first = s.run(SSSP(3), graph, keep="dist", gather=False)
        second = s.run(Relax(), graph, inputs={"seed": "dist"})
    assert [f["superstep"] for f in first.failures] == [3]
    assert [f["superstep"] for f in second.failures] == [3]
    assert second.values.tobytes() == want.values.tobytes()
    assert second.checkpoint_dir == str(tmp_path / "run-001")      # never the first run's


@pytest.mark.ray
def test_on_ray_the_same_workers_serve_every_run(ray_session, graph):
    opts = hgraph.EngineOptions(tasks=3, blocks=2, mode="hybrid", runtime="ray",
                                timeout=RAY_TIMEOUT)
    local = hgraph.EngineOptions(tasks=2, blocks=1, mode="push")
    with hgraph.Session(opts) as s:
        pids = []
        for program, g in _programs(graph):
            got = s.run(program, g)
            _same(got, hgraph.run(program, g, opts))                     # its own actors
            assert got.values.tobytes() == hgraph.run(program, g, local).values.tobytes()
            pids.append(ray_session.get([a.pid.remote() for a in s.runtime.actors],
                                        timeout=RAY_TIMEOUT))
        actors = list(s.runtime.actors)
    assert all(p == pids[0] for p in pids) and len(pids[0]) == 3
    for actor in actors:                               # close ended them
        with pytest.raises(ray_session.exceptions.RayActorError):
            ray_session.get(actor.pid.remote(), timeout=RAY_TIMEOUT)


@pytest.mark.ray
def test_on_ray_kept_columns_outlive_their_worker_and_recovery_is_identical(ray_session,
                                                                           graph, tmp_path):
    opts = hgraph.EngineOptions(tasks=3, blocks=2, mode="hybrid")
    dist = hgraph.run(SSSP(3), graph, opts).values
    want = hgraph.run(Relax(), _with_seed(graph, dist), opts)
    ray_opts = opts.replace(runtime="ray", timeout=RAY_TIMEOUT)
    # Relax is this module's: the actors get it by value (they cannot import the tests)
    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with hgraph.Session(ray_opts) as s:
        s.run(SSSP(3), graph, keep="dist", gather=False)
        s.runtime.kill(1)                        # the worker that made rows of "dist" is gone
        _same(s.run(Relax(), graph, inputs={"seed": "dist"}), want)
        assert s.gather("dist").tobytes() == dist.tobytes()
    hurt = ray_opts.replace(checkpoint_every=1, inject_failure=2, checkpoint_dir=str(tmp_path))
    with hgraph.Session(hurt) as s:
        first = s.run(SSSP(3), graph, keep="dist", gather=False)
        second = s.run(Relax(), graph, inputs={"seed": "dist"}, keep="relaxed")
        assert s.gather("relaxed").tobytes() == want.values.tobytes()
    assert [f["superstep"] for f in first.failures] == [2]
    assert [f["superstep"] for f in second.failures] == [2]
    assert second.values.tobytes() == want.values.tobytes()
