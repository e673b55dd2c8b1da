"""Segment-local sets give the dense DP's results: engine statistics, fronts, emission, plan.

The DP has one loop and one front structure; these tests check that the two set
representations it reads (dense bitsets, segment-local bits) give identical fronts and plans,
and that the scale approximations (window, front cap) are valid and reported.
"""

from __future__ import annotations

import numpy as np
import pytest

import planner
from planner import cg, emit, synth
from planner.activation_graph import ActivationGraph
from planner.analyses.levels import levels
from planner.analyses.local_stats import local_stats
from planner.dp import scale
from planner.dp.loop import run_dp
from planner.dp.solve import solve_family
from planner.dp_families import DPGraph, approx_family
from planner.solver import make_solver
from tests.conftest import data_path
from tests.family_oracle import family_arrays, stats_arrays, topological_levels

MATRIX = [dict(tasks=1, blocks=1, mode="push"), dict(tasks=2, blocks=2, mode="pull"),
          dict(tasks=4, blocks=1, mode="hybrid")]
REFERENCE = ["vgg19", "resnet50", "googlenet", "unet", "densenet"]


def _dg(name):
    if name.startswith("synth"):
        g = synth.build(layers=int(name[5:]), heads=3)
    else:
        g = cg.read(data_path("graphs", f"cg_{name}.txt"))
    ag = ActivationGraph.from_cg(g)
    return g, DPGraph(m=ag.bytes, t=ag.t, src=ag.src, dst=ag.dst)


def _random_dag(n, p, seed):
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n - 1)                         # ids not in topological order
    src, dst = np.nonzero(np.triu(rng.random((n - 1, n - 1)) < p, k=1))
    src, dst = perm[src], perm[dst]
    sinks = np.setdiff1d(np.arange(n - 1), src)
    src, dst = np.r_[src, sinks], np.r_[dst, np.full(sinks.size, n - 1)]
    return DPGraph(m=rng.integers(0, 1000, n), t=rng.integers(1, 11, n), src=src, dst=dst)


def _stats_equal(ls, g):
    want = stats_arrays(g)
    for k in ("size", "mL", "tL", "t_bnd", "m_bnd", "mAB"):
        assert np.array_equal(getattr(ls, k), want[k]), k
    dsets, dbnd = ls.dense_sets()
    assert np.array_equal(dsets, want["sets"]) and np.array_equal(dbnd, want["bnd"])


@pytest.mark.parametrize("engine", MATRIX)
def test_local_stats_equal_dense_for_any_engine(engine):
    for name in ("resnet50", "synth3"):
        _, g = _dg(name)
        _stats_equal(local_stats(g, **engine), g)
    g = _random_dag(90, 0.05, seed=engine["tasks"])
    ls = local_stats(g, **engine)
    _stats_equal(ls, g)
    assert np.array_equal(levels(g, **engine), topological_levels(g))


def test_local_stats_equal_dense_on_reference_graphs():
    for name in REFERENCE:
        _, g = _dg(name)
        ls = local_stats(g, tasks=2)
        _stats_equal(ls, g)
        fam = approx_family(g, stats=ls)
        ref = family_arrays(g)
        for f in ("sets", "bnd", "size", "mL", "tL", "t_bnd", "m_bnd", "mAB", "node"):
            assert np.array_equal(getattr(fam, f), ref[f]), (name, f)


def test_few_supersteps_on_deep_graphs():
    _, g = _dg("synth40")                                  # depth ~ 450
    ls = local_stats(g, tasks=4)
    assert ls.seg.width <= 20 and ls.supersteps < 40


@pytest.mark.parametrize("name", ["vgg19", "resnet50", "googlenet", "unet", "synth4"])
def test_scale_dp_equals_dense_dp(name):
    _, g = _dg(name)
    fam, sfam = approx_family(g), approx_family(g, dense=False, tasks=2)
    for name_ in ("node", "size", "mL", "tL", "t_bnd", "m_bnd", "mAB"):
        assert np.array_equal(getattr(fam, name_), getattr(sfam, name_)), name_
    S = int(g.m.sum())
    for frac in (0.3, 0.6, 1.0):
        dense, local = run_dp(fam, g.t, g.m, int(frac * S)), run_dp(sfam, g.t, g.m, int(frac * S))
        for f in ("s", "c", "pred", "state"):                # the same fronts, entry for entry
            assert np.array_equal(getattr(dense, f)[:dense.size], getattr(local, f)[:local.size])
        assert np.array_equal(dense.ptr, local.ptr)
        for strategy in ("time", "memory"):
            r = solve_family(fam, g, int(frac * S), strategy=strategy)
            s = solve_family(sfam, g, int(frac * S), strategy=strategy)
            assert r.status == s.status
            if r.status != "OK":
                continue
            assert r.chain_ids == s.chain_ids
            assert (r.model_recompute_cost, r.model_peak_bytes, r.ckpt_bytes, r.blocks) == \
                   (s.model_recompute_cost, s.model_peak_bytes, s.ckpt_bytes, s.blocks)
            assert np.array_equal(r.groups, s.groups)


@pytest.mark.parametrize("name", REFERENCE + ["synth6"])
def test_emitted_dp_plans_round_trip_and_replay_cleanly(name):
    """Block numbers and lower sets are one chain; the emitted schedule is valid and recomputes
    at least what the DP's model counts. (tests/test_emit checks the emitter against the reference's files.)"""
    from planner import simulate

    g, _ = _dg(name)
    solver = make_solver(g)
    ag = solver.ag
    for frac in (0.5, 1.0):
        r = solver.dp(int(frac * solver.act_sum))
        if r.status != "OK":
            continue
        groups = emit.groups_of_chain(ag, r.chain)
        assert np.array_equal(groups, r.groups)
        sched = emit.emit_groups(g, groups, ag)
        assert sched.dumps() == emit.emit(g, r.chain, ag).dumps()
        sim = simulate.replay(g, sched)
        assert sim.violations == []
        assert sim.recompute_cost >= r.model_recompute_cost


def _without(report, *keys):
    drop = {"seconds", "engine", "dp_window", "dp_front_cap", "dp_exact", *keys}
    return {k: v for k, v in report.items() if k not in drop}


@pytest.mark.parametrize("name", ["resnet50", "unet", "synth5"])
def test_plan_on_the_scale_path_equals_the_dense_plan(name, monkeypatch):
    g, _ = _dg(name)
    dense = planner.plan(g, budget="50%", engine=planner.EngineOptions(tasks=2))
    monkeypatch.setattr(scale, "EXACT_LIMIT", 0)           # every graph on the scale path
    scaled = planner.plan(g, budget="50%", engine=planner.EngineOptions(tasks=2),
                          limits=planner.SolverLimits(dp_window=0, dp_front_cap=0))
    assert scaled.report["dp_exact"] is True and "dp_exact" not in dense.report
    assert _without(scaled.report) == _without(dense.report)
    assert scaled.schedule.dumps() == dense.schedule.dumps()


def test_capped_plan_is_valid_reported_and_engine_independent():
    g = synth.build(layers=12, heads=2)
    reports = []
    for engine in MATRIX:
        p = planner.plan(g, budget="50%", engine=planner.EngineOptions(**engine),
                         limits=planner.SolverLimits(dp_window=8, dp_front_cap=16))
        assert p.report["within_budget"] and p.peak_bytes <= p.budget_bytes
        assert (p.report["dp_window"], p.report["dp_front_cap"], p.report["dp_exact"]) == \
               (8, 16, False)
        reports.append(_without(p.report))
    assert reports[0] == reports[1] == reports[2]


def test_plan_options():
    small, big = scale.EXACT_LIMIT, scale.EXACT_LIMIT + 1
    assert scale.plan_options(small) == (None, None)
    assert scale.plan_options(big) == (scale.DEFAULT_WINDOW, scale.DEFAULT_FRONT_CAP)
    assert scale.plan_options(big, 0, 0) == (None, None)
    assert scale.plan_options(small, 5, None) == (5, None)
    assert scale.plan_options(big, strategy="memory") == (scale.MEMORY_WINDOW,
                                                          scale.MEMORY_FRONT_CAP)
