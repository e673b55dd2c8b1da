"""The scale path of the approximate DP equals the dense one: engine statistics, DP, emission, plan."""

from __future__ import annotations

import numpy as np
import pytest

import planner
from planner import approx_scale, cg, dp, emit, emit_scale, programs, synth
from planner.activation_graph import ActivationGraph
from planner.dp import _activation_arrays
from planner.dp_families import DPGraph, _set_stats, ancestor_sets, approx_family
from tests.conftest import shared_path

MATRIX = [dict(tasks=1, blocks=1, mode="push"), dict(tasks=2, blocks=2, mode="pull"),
          dict(tasks=4, blocks=1, mode="hybrid")]
REFERENCE = ["vgg19", "resnet50", "googlenet", "unet", "densenet"]


def _dg(name):
    if name.startswith("synth"):
        g = synth.build(layers=int(name[5:]), heads=3)
        ag = ActivationGraph.from_cg(g)
        return g, DPGraph(m=ag.bytes, t=ag.t, src=ag.src, dst=ag.dst)
    g = cg.read(shared_path("graphs", f"cg_{name}.txt"))
    m, t, src, dst = _activation_arrays(g)
    return g, DPGraph(m=m, t=t, src=src, dst=dst)


def _random_dag(n, p, seed):
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n - 1)                         # ids not in topological order
    src, dst = np.nonzero(np.triu(rng.random((n - 1, n - 1)) < p, k=1))
    src, dst = perm[src], perm[dst]
    sinks = np.setdiff1d(np.arange(n - 1), src)
    src, dst = np.r_[src, sinks], np.r_[dst, np.full(sinks.size, n - 1)]
    return DPGraph(m=rng.integers(0, 1000, n), t=rng.integers(1, 11, n), src=src, dst=dst)


def _stats_equal(ls, g):
    sets = ancestor_sets(g)
    size, mL, tL, bnd, t_bnd, m_bnd, mAB = _set_stats(g, sets)
    for a, b in ((ls.size, size), (ls.mL, mL), (ls.tL, tL), (ls.t_bnd, t_bnd),
                 (ls.m_bnd, m_bnd), (ls.mAB, mAB)):
        assert np.array_equal(a, b)
    dsets, dbnd = approx_scale.dense_sets(ls, g.n)
    assert np.array_equal(dsets, sets) and np.array_equal(dbnd, bnd)


@pytest.mark.parametrize("engine", MATRIX)
def test_local_stats_equal_dense_for_any_engine(engine):
    for name in ("resnet50", "synth3"):
        _, g = _dg(name)
        _stats_equal(programs.local_stats(g, **engine), g)
    g = _random_dag(90, 0.05, seed=engine["tasks"])
    ls = programs.local_stats(g, **engine)
    _stats_equal(ls, g)
    assert np.array_equal(programs.levels(g, **engine), g.topological_levels())


def test_local_stats_equal_dense_on_reference_graphs():
    for name in REFERENCE:
        _, g = _dg(name)
        ls = programs.local_stats(g, tasks=2)
        _stats_equal(ls, g)
        fam = programs.approx_family(g, stats=programs.dense_lower_set_stats(ls, g.n))
        ref = approx_family(g)
        for f in ("sets", "bnd", "size", "mL", "tL", "t_bnd", "m_bnd", "mAB", "node"):
            assert np.array_equal(getattr(fam, f), getattr(ref, f)), (name, f)


def test_few_supersteps_on_deep_graphs():
    _, g = _dg("synth40")                                  # depth ~ 450
    ls = programs.local_stats(g, tasks=4)
    assert ls.seg.width <= 20 and ls.supersteps < 40


@pytest.mark.parametrize("name", ["vgg19", "resnet50", "googlenet", "unet", "synth4"])
def test_scale_dp_equals_dense_dp(name):
    _, g = _dg(name)
    fam, sfam = approx_family(g), approx_scale.family(g, tasks=2)
    for name_ in ("node", "size", "mL", "tL", "t_bnd", "m_bnd", "mAB"):
        assert np.array_equal(getattr(fam, name_), getattr(sfam, name_)), name_
    S = int(g.m.sum())
    for frac in (0.3, 0.6, 1.0):
        for strategy in ("time", "memory"):
            r = dp.solve_family(fam, g, int(frac * S), strategy=strategy)
            s = approx_scale.solve(sfam, g, int(frac * S), strategy=strategy)
            assert r.status == s.status
            if r.status != "OK":
                continue
            assert r.chain_ids == s.chain_ids
            assert (r.model_recompute_cost, r.model_peak_bytes, r.ckpt_bytes, r.blocks) == \
                   (s.model_recompute_cost, s.model_peak_bytes, s.ckpt_bytes, s.blocks)
            for a, b in zip(r.chain, approx_scale.groups_to_chain(s.groups)):
                assert np.array_equal(a, b)


@pytest.mark.parametrize("name", REFERENCE + ["synth6"])
def test_emitted_dp_plans_round_trip_and_replay_cleanly(name):
    """Block numbers and lower sets are one chain; the emitted schedule is valid and recomputes
    at least what the DP's model counts. (tests/test_emit checks the emitter against the reference's files.)"""
    from planner import simulate

    g, _ = _dg(name)
    ag = ActivationGraph.from_cg(g)
    for frac in (0.5, 1.0):
        r = dp.solve(g, frac * float(ag.bytes.sum()), family="approx")
        if r.status != "OK":
            continue
        groups = emit_scale.groups_of_chain(ag, r.chain)
        back = approx_scale.groups_to_chain(groups)
        assert len(back) == len(r.chain)
        assert all(np.array_equal(a, b) for a, b in zip(r.chain, back))
        sched = emit_scale.emit_groups(g, groups, ag)
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
    dense = planner.plan(g, budget="50%", tasks=2)
    monkeypatch.setattr(approx_scale, "EXACT_LIMIT", 0)    # every graph on the scale path
    scaled = planner.plan(g, budget="50%", tasks=2, dp_window=0, dp_front_cap=0)
    assert scaled.report["dp_exact"] is True and "dp_exact" not in dense.report
    assert _without(scaled.report) == _without(dense.report)
    assert scaled.schedule.dumps() == dense.schedule.dumps()


def test_capped_plan_is_valid_reported_and_engine_independent():
    g = synth.build(layers=12, heads=2)
    reports = []
    for engine in MATRIX:
        p = planner.plan(g, budget="50%", dp_window=8, dp_front_cap=16, **engine)
        assert p.report["within_budget"] and p.peak_bytes <= p.budget_bytes
        assert (p.report["dp_window"], p.report["dp_front_cap"], p.report["dp_exact"]) == \
               (8, 16, False)
        reports.append(_without(p.report))
    assert reports[0] == reports[1] == reports[2]


def test_plan_options():
    small, big = approx_scale.EXACT_LIMIT, approx_scale.EXACT_LIMIT + 1
    assert approx_scale.plan_options(small) == (None, None)
    assert approx_scale.plan_options(big) == (approx_scale.DEFAULT_WINDOW,
                                              approx_scale.DEFAULT_FRONT_CAP)
    assert approx_scale.plan_options(big, 0, 0) == (None, None)
    assert approx_scale.plan_options(small, 5, None) == (5, None)
    assert approx_scale.plan_options(big, strategy="memory") == (approx_scale.MEMORY_WINDOW,
                                                                 approx_scale.MEMORY_FRONT_CAP)
