"""Engine results vs SciPy / networkx, identical for every tasks x blocks x mode (in-process)."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components, dijkstra

import hgraph
from hgraph.algorithms import SSSP, MinLabel, pagerank, symmetrize
from hgraph.common.errors import HGraphError
from hgraph.generators import random_graph

TASKS = (1, 2, 3, 4)
BLOCKS = (1, 3)
MODES = ("push", "pull", "hybrid")
MATRIX = list(itertools.product(TASKS, BLOCKS, MODES))


@pytest.fixture(scope="module")
def graph():
    return random_graph(120, 500, seed=7)


def _csr(g):
    return sp.csr_matrix((g.weights, (g.src, g.dst)), shape=(g.n, g.n))


def _all_runs(program, g):
    return {(t, b, m): hgraph.run(program, g, hgraph.EngineOptions(tasks=t, blocks=b, mode=m))
            for t, b, m in MATRIX}


def _assert_identical(results):
    first = next(iter(results.values())).values
    for key, r in results.items():
        assert r.values.dtype == first.dtype, key
        assert r.values.tobytes() == first.tobytes(), f"{key} differs from {next(iter(results))}"


def test_sssp_matches_dijkstra_everywhere(graph):
    expected = dijkstra(_csr(graph), indices=0)
    results = _all_runs(SSSP(0), graph)
    _assert_identical(results)
    np.testing.assert_array_equal(results[(1, 1, "push")].values, expected)
    for r in results.values():
        assert r.stats[-1]["active"] == 0 and r.stats[-1]["messages"] == 0
        assert [row["superstep"] for row in r.stats] == list(range(r.supersteps))


def test_cc_matches_scipy_everywhere(graph):
    sym = symmetrize(graph)
    _, labels = connected_components(_csr(graph), directed=True, connection="weak")
    smallest = np.full(labels.max() + 1, graph.n)
    np.minimum.at(smallest, labels, np.arange(graph.n))
    results = _all_runs(MinLabel(), sym)
    _assert_identical(results)
    np.testing.assert_array_equal(results[(2, 3, "pull")].values, smallest[labels])
    assert results[(4, 1, "push")].aggregates["largest"] == smallest[labels].max()


def test_pagerank_matches_networkx_everywhere():
    g = random_graph(60, 240, seed=3)
    program, g = pagerank(g, iterations=160)
    G = nx.DiGraph()
    G.add_nodes_from(range(g.n))
    G.add_weighted_edges_from(zip(g.src.tolist(), g.dst.tolist(), g.weights.tolist()))
    ranks = nx.pagerank(G, alpha=0.85, tol=1e-15, max_iter=10000)
    expected = np.array([ranks[v] for v in range(g.n)])
    results = _all_runs(program, g)
    _assert_identical(results)
    got = results[(3, 3, "hybrid")].values[:, 0]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)
    assert all(r.supersteps == 161 for r in results.values())


def test_aggregates_are_visible_next_superstep():
    class Count(hgraph.VertexProgram):
        value_dtype = message_dtype = np.int64
        combiner = np.add
        aggregators = {"seen": "sum", "vec": "max"}
        always_update = True
        max_supersteps = 3

        def init(self, block):
            return np.zeros(block.size, np.int64), np.ones(block.size, bool)

        def update(self, ctx, block, values, inbox, has_message):
            seen = ctx.aggregates.get("seen", -1)
            vec = np.array([block.stop, -block.start])
            return hgraph.Update(np.full(block.size, seen), respond=np.zeros(block.size, bool),
                                 halt=np.zeros(block.size, bool),
                                 aggregates={"seen": block.size, "vec": vec})

        def message(self, src_values, weights):
            return src_values

    g = hgraph.Graph.from_edges([0, 1], [1, 2], n=10)
    r = hgraph.run(Count(), g, hgraph.EngineOptions(tasks=3, blocks=2))
    assert r.values.tolist() == [10] * 10            # superstep 2 saw superstep 1's sum
    assert r.aggregates["seen"] == 10
    assert r.aggregates["vec"].tolist() == [10, 0]
    assert r.supersteps == 3


def test_vector_messages_bitwise_or():
    """Values with a trailing shape: reachability bitsets from 3 sources, combined with |."""
    class Reach(hgraph.VertexProgram):
        value_dtype = message_dtype = np.uint64
        value_shape = message_shape = (2,)
        combiner = np.bitwise_or

        def init(self, block):
            v = np.zeros((block.size, 2), np.uint64)
            for bit, s in enumerate((0, 5, 9)):
                v[block.ids == s, bit // 2] |= np.uint64(1 << bit)
            return v, v.any(axis=1)

        def update(self, ctx, block, values, inbox, has_message):
            new = values | np.where(has_message[:, None], inbox, 0)
            return hgraph.Update(new, respond=(new != values).any(axis=1))

        def message(self, src_values, weights):
            return src_values

    g = random_graph(40, 80, seed=1, weighted=False)
    dist = dijkstra(_csr(g), indices=[0, 5, 9])
    results = {(t, m): hgraph.run(Reach(), g, hgraph.EngineOptions(tasks=t, blocks=2, mode=m))
               for t in (1, 3) for m in MODES}
    _assert_identical(results)
    v = results[(1, "push")].values
    for bit in range(3):
        got = (v[:, bit // 2] >> np.uint64(bit)) & np.uint64(1)
        np.testing.assert_array_equal(got.astype(bool), np.isfinite(dist[bit]))


def test_max_supersteps_and_bad_arguments(graph):
    seen = []
    r = hgraph.run(SSSP(0), graph, hgraph.EngineOptions(mode="push"), max_supersteps=2,
                   progress=seen.append)
    assert r.supersteps == 2 and len(r.stats) == 2 and seen == r.stats
    for key in ("superstep", "mode", "active", "messages", "bytes", "seconds"):
        assert key in r.stats[0]
    assert r.stats[0]["bytes"] == 0                   # one task: nothing crosses workers
    with pytest.raises(HGraphError):
        hgraph.run(SSSP(0), graph, hgraph.EngineOptions(mode="sideways"))
    with pytest.raises(HGraphError):
        hgraph.run(SSSP(0), graph, hgraph.EngineOptions(tasks=0))


def test_pull_sends_only_along_the_route_table(graph):
    r = hgraph.run(SSSP(0), graph, hgraph.EngineOptions(tasks=4, blocks=3, mode="pull"))
    assert all("requests" in row for row in r.stats[:-1])
    assert r.stats[0]["requests"] <= 12               # one responding vertex: its block's row
    assert sum(row["bytes"] for row in r.stats) > 0
    # A frontier covering its blocks is answered by scanning EBlocks; results stay identical.
    program, g = pagerank(graph, iterations=3)
    dense = hgraph.run(program, g, hgraph.EngineOptions(tasks=2, blocks=2, mode="pull"))
    assert all(row["scanned_edges"] == g.num_edges for row in dense.stats[:-1])
    assert dense.values.tobytes() == hgraph.run(program, g, hgraph.EngineOptions(tasks=2,
                                                                                 blocks=2,
                                                                                 mode="push")).values.tobytes()


def test_exact_sum_is_grouping_independent():
    import math

    from hgraph.exactsum import exact_sum

    rng = np.random.default_rng(4)
    x = rng.standard_normal(5000) * 10.0 ** rng.integers(-200, 200, 5000)
    whole = float(exact_sum(x))
    assert whole == math.fsum(x.tolist())
    for cuts in ([1, 7, 4000], [2500], [10, 20, 30, 4999]):
        parts = [exact_sum(p) for p in np.split(x, cuts)]
        assert float(sum(parts[1:], parts[0])) == whole
    assert float(exact_sum([1e16, 1.0, -1e16])) == 1.0
