"""Engine analyses (planner.programs) equal their NumPy references, for any tasks/blocks/mode."""

from __future__ import annotations

import numpy as np
import pytest

from planner import cg, chen, emit, programs, simulate
from planner.dp import _activation_arrays
from planner.dp_families import DPGraph, approx_family
from tests.conftest import shared_path

MATRIX = [dict(tasks=1, blocks=1, mode="push"), dict(tasks=2, blocks=2, mode="pull"),
          dict(tasks=4, blocks=1, mode="hybrid")]


def _dpgraph(name):
    g = cg.read(shared_path("graphs", f"cg_{name}.txt"))
    m, t, src, dst = _activation_arrays(g)
    return g, DPGraph(m=m, t=t, src=src, dst=dst)


def _random_dag(n, p, seed):
    rng = np.random.default_rng(seed)
    src, dst = np.nonzero(np.triu(rng.random((n, n - 1)) < p, k=1))
    sinks = np.setdiff1d(np.arange(n - 1), src)          # one loss: every other sink feeds n-1
    src, dst = np.r_[src, sinks], np.r_[dst, np.full(sinks.size, n - 1)]
    return DPGraph(m=rng.integers(0, 1000, n), t=rng.integers(1, 11, n), src=src, dst=dst)


@pytest.mark.parametrize("engine", MATRIX)
def test_levels_match_numpy(engine):
    _, g = _dpgraph("resnet50")
    assert np.array_equal(programs.levels(g, **engine), g.topological_levels())


def _assert_family_equal(a, b):
    names = [f for f in type(b).__dataclass_fields__ if f not in ("kind", "fell_back")]
    assert names
    for name in names:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize("engine", MATRIX)
def test_approx_family_from_engine_equals_numpy(engine):
    _, g = _dpgraph("resnet50")
    _assert_family_equal(programs.approx_family(g, **engine), approx_family(g))


@pytest.mark.parametrize("chunk_words", [1, 2])
def test_chunked_columns_give_the_same_statistics(chunk_words):
    g = _random_dag(150, 0.03, seed=chunk_words)
    fam = programs.approx_family(g, stats=programs.lower_set_stats(
        g, tasks=2, blocks=2, chunk_words=chunk_words))
    _assert_family_equal(fam, approx_family(g))
    stats = programs.lower_set_stats(g, chunk_words=chunk_words)
    x = np.unpackbits(stats.sets.astype("<u8").view(np.uint8).reshape(g.n, -1), axis=1,
                      bitorder="little")[:, :g.n].astype(np.int64)
    assert np.array_equal(stats.tL, x @ g.t)


@pytest.mark.parametrize("engine", MATRIX)
def test_liveness_timeline_equals_simulator(engine):
    g = cg.read(shared_path("graphs", "cg_vgg19.txt"))
    sched = emit.emit(g, chen.solve(g, budget=10**11).chain)
    sim = simulate.replay(g, sched)
    tl = programs.timeline(g, sched, **engine)
    assert np.array_equal(tl, sim.timeline)
    live = programs.liveness(g, sched, **engine)
    assert np.all(live.birth <= live.last_use) and np.all(live.last_use <= live.death)
    # every forward function's output is born once per compute line (Chen recomputes)
    fwd = live.which == 0
    assert fwd.sum() == int(sim.computes.sum())


def test_liveness_last_use_by_hand():
    g = cg.read(shared_path("graphs", "cg_vgg19.txt"))
    sched = emit.emit(g, chen.solve(g, budget=10**11).chain)
    live = programs.liveness(g, sched, tasks=2)
    ops = sched.ops
    # reference: the last op that reads var v's forward value while that lifetime is live
    for k in range(0, live.var.size, 7):
        v, w, b, d = int(live.var[k]), int(live.which[k]), int(live.birth[k]), int(live.death[k])
        last = b
        for s in range(b + 1, min(d, len(ops))):
            op = ops[s]
            if op.kind != "compute":
                continue
            fn = g.functions[op.index]
            for a, tag in fn.inputs:
                if a == v and ((tag == "gradient") == (w == 1)) and (w == 1 or g.is_activation[a]):
                    last = s
        assert int(live.last_use[k]) == last, k
