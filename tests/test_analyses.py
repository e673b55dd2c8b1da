"""Engine analyses (planner.analyses) equal their NumPy references, for any tasks/blocks/mode."""

from __future__ import annotations

import numpy as np
import pytest

from planner import cg
from planner.activation_graph import ActivationGraph
from planner.analyses.levels import levels
from planner.analyses.local_stats import local_stats
from planner.dp_families import DPGraph, approx_family
from tests.conftest import data_path
from tests.family_oracle import family_arrays, stats_arrays, topological_levels

MATRIX = [dict(tasks=1, blocks=1, mode="push"), dict(tasks=2, blocks=2, mode="pull"),
          dict(tasks=4, blocks=1, mode="hybrid")]


def _dpgraph(name):
    ag = ActivationGraph.from_cg(cg.read(data_path("graphs", f"cg_{name}.txt")))
    return DPGraph(m=ag.bytes, t=ag.t, src=ag.src, dst=ag.dst)


def _random_dag(n, p, seed):
    rng = np.random.default_rng(seed)
    src, dst = np.nonzero(np.triu(rng.random((n, n - 1)) < p, k=1))
    sinks = np.setdiff1d(np.arange(n - 1), src)          # one loss: every other sink feeds n-1
    src, dst = np.r_[src, sinks], np.r_[dst, np.full(sinks.size, n - 1)]
    return DPGraph(m=rng.integers(0, 1000, n), t=rng.integers(1, 11, n), src=src, dst=dst)


def _assert_family_equal(fam, want: dict, fields):
    for name in fields:
        assert np.array_equal(getattr(fam, name), want[name]), name


@pytest.mark.parametrize("engine", MATRIX)
def test_levels_match_numpy(engine):
    g = _dpgraph("resnet50")
    assert np.array_equal(levels(g, **engine), topological_levels(g))


@pytest.mark.parametrize("engine", MATRIX)
def test_approx_family_from_engine_equals_numpy(engine):
    """Both set representations of the one family construction equal the NumPy reference."""
    for g in (_dpgraph("resnet50"), _random_dag(150, 0.03, seed=engine["tasks"])):
        want = family_arrays(g)
        _assert_family_equal(approx_family(g, **engine), want, want)
        local = approx_family(g, dense=False, **engine)
        _assert_family_equal(local, want, [k for k in want if k not in ("sets", "bnd")])
        assert local.sets is None and local.local is not None


def test_more_blocks_than_vertices():
    """tasks × blocks above the number of nodes leaves blocks empty: the same statistics."""
    g = _random_dag(9, 0.3, seed=5)
    want = stats_arrays(g)
    for tasks, blocks in ((1, 1), (4, 4), (8, 3)):
        ls = local_stats(g, tasks=tasks, blocks=blocks)
        for k in ("size", "mL", "tL", "t_bnd", "m_bnd", "mAB"):
            assert np.array_equal(getattr(ls, k), want[k]), (tasks, blocks, k)
        assert np.array_equal(levels(g, tasks=tasks, blocks=blocks), topological_levels(g))


def test_levels_by_cuts_equal_kahn_waves():
    """The segment-cut relaxation (ids in topological order) gives what plain Kahn waves give,
    start values from other blocks included: short edges (many cuts) and long ones (few)."""
    from planner.analyses.levels import _by_cuts, _waves

    rng = np.random.default_rng(7)
    for trial in range(600):
        n = int(rng.integers(2, 60))
        s = rng.integers(0, n - 1, int(rng.integers(1, 3 * n)))
        d = s + rng.integers(1, 4 if trial % 2 else n, s.size)
        s, d = s[d < n], d[d < n]
        if not s.size:
            continue
        vals = rng.integers(0, 6, n) * (rng.random(n) < 0.3)
        assert np.array_equal(_by_cuts(s, d, vals), _waves(s, d, vals)), trial


@pytest.mark.parametrize("work", [0, 40, 1 << 21])
def test_levels_relaxation_rounds_then_waves(work, monkeypatch):
    """:func:`_waves` relaxes all edges at once for up to ``RELAX_WORK`` edge visits and lets
    Kahn waves finish: any split gives the waves' values, ids in any order, 2-D values too."""
    from planner.analyses import levels as lv

    rng = np.random.default_rng(11)
    cases = []
    for trial in range(200):
        n = int(rng.integers(2, 50))
        s = rng.integers(0, n - 1, int(rng.integers(1, 3 * n)))
        d = s + rng.integers(1, n, s.size)
        s, d = s[d < n], d[d < n]
        perm = rng.permutation(n)                      # ids no longer topological
        vals = rng.integers(0, 6, (n, 2)) if trial % 3 == 0 else rng.integers(0, 6, n)
        cases.append((perm[s], perm[d], vals))
    want = []
    monkeypatch.setattr(lv, "RELAX_WORK", 0)              # one round, then waves
    for s, d, vals in cases:
        want.append(lv._waves(s, d, vals))
    monkeypatch.setattr(lv, "RELAX_WORK", work)
    for (s, d, vals), w in zip(cases, want):
        assert np.array_equal(lv._waves(s, d, vals), w)


def test_local_sets_transposed_in_chunks(monkeypatch):
    """The segment-local sets come out the same however many rows are transposed at a time
    (the driver's transient is bounded by the chunk, not by n)."""
    import planner.analyses.local_stats as ls_mod

    g = _dpgraph("resnet50")
    whole = local_stats(g)
    monkeypatch.setattr(ls_mod, "TRANSPOSE_ROWS", 7)
    chunked = local_stats(g)
    assert np.array_equal(whole.lloc, chunked.lloc)
    assert np.array_equal(whole.bndloc, chunked.bndloc)
