"""What the replay holds beyond the DP's ``m(A) + m(B)`` at a block ending at ``L_v``
(planner/analyses/local_stats.py, ``LocalStats.grads_out`` / ``outputs_A``; issue 37, seventh
session): the engine's segment-local sums against a brute-force sum per state, on graphs with
many segments, for any engine layout, on the variable graph the shards leave on the workers,
with gradients several functions write counted once, and on transformer and CNN cg graphs."""

from __future__ import annotations

import numpy as np
import pytest

import hgraph
from planner import cg, cg_shards, synth
from planner.activation_graph import ActivationGraph
from planner.analyses import engine
from planner.analyses.levels import levels, var_levels
from planner.analyses.local_stats import local_stats
from planner.dp_families import DPGraph
from tests.family_oracle import ancestor_sets

MATRIX = [dict(tasks=1, blocks=1, mode="push"), dict(tasks=2, blocks=2, mode="pull"),
          dict(tasks=4, blocks=1, mode="hybrid")]


def brute(g) -> tuple[np.ndarray, np.ndarray]:
    """``(grads_out, outputs_A)`` one state at a time from dense ``L_v``: a gradient is live
    unless every node writing it lies in ``L_v`` (each gradient once); ``m`` of ``A(L_v)``'s
    nodes whose backward reads their own output."""
    x = np.unpackbits(ancestor_sets(g).view(np.uint8), axis=1, bitorder="little")[:, :g.n]
    node, var, nbytes = g.grad_writes
    w = nbytes // g.ratio
    grads, outs = np.zeros(g.n, np.int64), np.zeros(g.n, np.int64)
    for v in range(g.n):
        L = x[v].astype(bool)
        inside = {}
        for u, p, b in zip(node.tolist(), var.tolist(), w.tolist()):
            inside[p] = (inside.get(p, (True, b))[0] and bool(L[u]), b)
        grads[v] = sum(b for ok, b in inside.values() if not ok)
        outs[v] = int(g.m[g.to_mask(g.above(L)) & g.reads_output].sum())
    return grads, outs


def _random_dag(n, p, seed, shared):
    """A random DAG with one sink, random reads of own outputs, and gradient writes: one
    variable per node for most, and ``shared`` variables written by 2-4 random nodes."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n - 1)
    src, dst = np.nonzero(np.triu(rng.random((n - 1, n - 1)) < p, k=1))
    src, dst = perm[src], perm[dst]
    sinks = np.setdiff1d(np.arange(n - 1), src)
    g = DPGraph(m=rng.integers(0, 1000, n), t=rng.integers(1, 11, n),
                src=np.r_[src, sinks], dst=np.r_[dst, np.full(sinks.size, n - 1)])
    g.reads_output = rng.random(n) < 0.4
    own = np.flatnonzero(rng.random(n) < 0.6)
    writers = [rng.choice(n, size=rng.integers(2, 5), replace=False) for _ in range(shared)]
    node = np.r_[own, np.concatenate(writers)] if shared else own
    var = np.r_[np.arange(own.size), np.repeat(own.size + np.arange(shared),
                                               [w.size for w in writers])]
    size = rng.integers(1, 5000, own.size + shared)
    g.grad_writes = (node.astype(np.int64), var.astype(np.int64), size[var].astype(np.int64))
    return g


def _check(ls, g):
    grads, outs = brute(g)
    assert np.array_equal(ls.grads_out, grads)
    assert np.array_equal(ls.outputs_A, outs)
    assert np.array_equal(ls.left_out, grads + outs)


@pytest.mark.parametrize("opts", MATRIX)
def test_left_out_terms_equal_a_per_state_sum(opts):
    """A transformer (separators between its layers: many segments) in bytes and at another
    ratio, and random DAGs whose gradients several nodes write — in one segment and across
    segments — all equal the brute-force sum, for every engine layout."""
    ag = ActivationGraph.from_cg(synth.build(layers=3, heads=2))
    assert ag.reads_output.any() and ag.grad_writes[0].size
    tied = ag.with_ratio(1)                   # and 5 gradients each written by 3 random nodes
    rng = np.random.default_rng(opts["tasks"])
    node, var, nbytes = ag.grad_writes
    extra = np.repeat(var.max() + 1 + np.arange(5), 3)
    tied.grad_writes = (np.r_[node, rng.choice(ag.n, extra.size)], np.r_[var, extra],
                        np.r_[nbytes, 1000 * extra])
    for g in (ag, ag.with_ratio(1000), tied):
        ls = local_stats(g, **opts)
        assert np.unique(ls.seg.sstart).size > 3
        _check(ls, g)
    for seed in range(3):
        g = _random_dag(70, 0.06, seed + 10 * opts["tasks"], shared=6)
        _check(local_stats(g, **opts), g)


def test_a_gradient_several_nodes_write_is_counted_once_on_their_common_descendants():
    """A diamond 0 → {1, 2} → 3 → 4 with a separator at 3: a gradient written by 1 and 2 is
    live until both lie in ``L_v`` (only ``L_3``, ``L_4``); one written by 0 and 4 (two
    segments) until ``L_4``; none counted twice."""
    g = DPGraph(m=np.ones(5), t=np.ones(5), src=np.array([0, 0, 1, 2, 3]),
                dst=np.array([1, 2, 3, 3, 4]))
    g.grad_writes = (np.array([1, 2, 0, 4]), np.array([7, 7, 8, 8]),
                     np.array([100, 100, 10, 10]))
    ls = local_stats(g, tasks=2)
    assert ls.grads_out.tolist() == [110, 110, 110, 10, 0]
    _check(ls, g)


def test_the_terms_of_transformer_and_cnn_cg_graphs():
    """Read off a cg's backward columns (:class:`ActivationGraph`'s ``reads_output`` and
    ``grad_writes``), a transformer's and a CNN's terms in bytes are the brute-force sums,
    and both terms occur."""
    for cgraph in (synth.build(layers=6, heads=2), synth.build_cnn(blocks=2)):
        ag = ActivationGraph.from_cg(cgraph)
        ls = local_stats(ag, tasks=2, level=levels(ag, tasks=1))
        _check(ls, ag)
        assert ls.grads_out.max() > 0 and ls.outputs_A.max() > 0


def test_the_terms_on_the_variable_graph_the_shards_leave(tmp_path):
    """Read in shards, the statistics run on the workers' variable graph: the same terms."""
    path = tmp_path / "cg_t.txt"
    cg.write(synth.build(layers=8, heads=2), path)
    ir = ActivationGraph.from_cg(cg.read(path))
    whole = local_stats(ir, tasks=1)
    opts = hgraph.EngineOptions(tasks=2, blocks=2)
    with engine.session(opts) as s:
        got, sharded = cg_shards.read(s, path)
        level, _ = var_levels(sharded, ir.var, opts)
        engine.bind_var_graph(opts, sharded, ir.var)
        stats = local_stats(ir, opts=opts, level=level)
    for key in ("grads_out", "outputs_A", "mAB"):
        assert np.array_equal(getattr(stats, key), getattr(whole, key)), key
    _check(stats, ir)
