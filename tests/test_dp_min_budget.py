"""The smallest feasible budget in one pass (:mod:`planner.dp.min_budget`) against the bisection.

An infeasible budget's error names the smallest feasible one; :func:`planner.plan` used to find
it by bisecting :meth:`Solver.solve` (``planner.search.smallest_budget``) and now asks
:meth:`Solver.min_budget` where it applies. The number must not change: here the pass is
compared with that bisection on random single-sink DAGs (both families, both strategies, many
tied weights), on the shared graphs under 1,000 nodes in bytes and reference units (the
bisection itself where it takes under a second; on the slow ones the bisection's defining
property — a plan at the value, none one byte below — which with a monotone feasibility is the
same number), and end to end through :func:`planner.plan`'s error.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import planner
from conftest import data_path
from hgraph.common.errors import InfeasibleError
from planner import cg, search
from planner.dp.min_budget import min_budget
from planner.dp.solve import solve_family
from planner.dp_families import DPGraph, approx_family, exact_family
from planner.options import SolverLimits
from planner.solver import Solver, make_solver
from tests.family_oracle import random_single_sink_dag


def _bisect(ok, total: int):
    """``search.smallest_budget`` as :func:`planner.plan` calls it."""
    top = max(5 * total, 1)
    return search.smallest_budget(ok, max(2 * total, 1), top)


def _case(seed: int) -> DPGraph:
    rng = np.random.default_rng(900 + seed)
    n = 6 + seed % 9
    src, dst, _ = random_single_sink_dag(rng, n, (0.15, 0.3, 0.5)[seed % 3])
    if seed % 2:                                   # few distinct values: ties everywhere
        m, t = rng.integers(0, 3, n), rng.integers(0, 2, n)
    else:
        m, t = rng.integers(1, 60, n), rng.choice([1, 10], n)
    return DPGraph(m=m, t=t, src=src, dst=dst)


@pytest.mark.parametrize("seed", range(14))
@pytest.mark.parametrize("family", ["approx", "exact"])
def test_random_dags_match_bisection(seed, family):
    """Both strategies: a plan at the value, none one below; and the bisection (over the
    memory-centric solve, the last ``ok``) finds the same number."""
    g = _case(seed)
    fam = (approx_family if family == "approx" else exact_family)(g)
    b = min_budget(fam, g)
    for strategy in ("time", "memory"):
        ok = lambda x: solve_family(fam, g, x, strategy).status == "OK"   # noqa: E731
        assert ok(b) and (b == 0 or not ok(b - 1))
    assert _bisect(ok, int(g.m.sum())) == max(1, b)


def test_known_feasible_bound_is_kept():
    """``upper`` (a budget with a plan) only caps the search: the value is the same."""
    g = _case(5)
    fam = approx_family(g)
    b = min_budget(fam, g)
    assert min_budget(fam, g, upper=b) == b == min_budget(fam, g, upper=2 * b + 7)


@functools.lru_cache(maxsize=None)
def _graph(name):
    return cg.read(data_path("graphs", f"cg_{name}.txt"))


#: Shared graphs under 1,000 nodes; True where the bisection is run itself (≤ ~0.7 s each
#: unit), else only the value and one byte below are solved.
SHARED = {"vgg19": True, "unet": True, "resnet50": True, "googlenet": True, "densenet": False}


@pytest.mark.parametrize("units", ["bytes", "reference"])
@pytest.mark.parametrize("name", sorted(SHARED))
def test_shared_graphs_approx(name, units):
    s = make_solver(_graph(name), "approx", "time", units)
    assert s.direct_min_budget()
    top = 5 * s.act_sum
    b = s.min_budget(top)
    if SHARED[name]:
        assert b == _bisect(lambda x: s.solve(x)[0] == "OK", s.act_sum)
    else:
        assert s.solve(b)[0] == "OK" and s.solve(b - 1)[0] != "OK"


@pytest.mark.parametrize("name", ["vgg19", "unet"])
def test_shared_graphs_exact(name):
    """Small exact families (47 and 331 sets): a plan at the value, both strategies, none
    below (resnet50's 241 sets agree too, 1 s more)."""
    for strategy in ("time", "memory"):
        s = make_solver(_graph(name), "exact", strategy, "reference")
        assert s.direct_min_budget()
        b = s.min_budget(5 * s.act_sum)
        assert s.solve(b)[0] == "OK" and s.solve(b - 1)[0] != "OK"
    if name == "vgg19":                               # 1 s of bisection
        assert b == _bisect(lambda x: s.solve(x)[0] == "OK", s.act_sum)


def test_big_exact_family_and_chen_bisect(monkeypatch):
    """Chen's solver and exact families over MIN_BUDGET_MAX_SETS bisect, the last over the
    memory-centric search (:meth:`Solver.feasible`): the same number. The scale path on a
    graph of at most EXACT_LIMIT activations widens its window up to none, so it has the
    unpruned DP's floor in one pass (tests/test_dp_widening.py checks it against bisection)."""
    from planner import solver as solver_mod

    g = _graph("vgg19")
    assert not make_solver(g, "chen").direct_min_budget()
    capped = SolverLimits(dp_window=8, dp_front_cap=64)
    assert make_solver(g, "approx", limits=capped).direct_min_budget()
    direct = _error(g, "exact", "bytes")
    monkeypatch.setattr(solver_mod, "MIN_BUDGET_MAX_SETS", 10)
    assert not make_solver(g, "exact").direct_min_budget()
    assert _error(g, "exact", "bytes") == direct


@pytest.mark.parametrize("solver", ["approx", "exact"])
def test_feasible_is_solve_status(solver):
    """:meth:`Solver.feasible` (memory-centric) says what a time-centric :meth:`Solver.solve`
    says, around the smallest budget and above it."""
    s = make_solver(_graph("vgg19"), solver, "time", "reference")
    b = s.min_budget(5 * s.act_sum)
    for x in (b - 1000, b - 1, b, b + 1, int(1.3 * b), 2 * s.act_sum):
        assert s.feasible(x) == (s.solve(x)[0] == "OK"), x


def _error(g, solver: str, units: str):
    """(smallest budget, message) of :func:`planner.plan`'s error at 20 %."""
    with pytest.raises(InfeasibleError) as info:
        planner.plan(g, budget="20%", solver=solver,
                     accounting=planner.AccountingOptions(units=units))
    return info.value.min_budget_bytes, str(info.value)


@pytest.mark.parametrize("units", ["bytes", "reference"])
@pytest.mark.parametrize("name", ["unet"])
def test_plan_error_names_the_same_budget(monkeypatch, name, units):
    """:func:`planner.plan`'s error: the same smallest budget with the pass as with the
    bisection (forced by switching the pass off)."""
    direct = _error(_graph(name), "approx", units)
    monkeypatch.setattr(Solver, "direct_min_budget", lambda self: False)
    assert _error(_graph(name), "approx", units) == direct


def test_reference_units_across_ratio_windows():
    """Reference units where the smallest budget lies past the first scaling ratio's window
    (a sink of 80 % of the activations: every plan holds it twice). The bisection solves at
    both ratios; :meth:`Solver.min_budget` finds the first ratio's window empty and the
    answer in the next."""
    from planner.units import LIMIT, comp_ratio

    s = make_solver(_graph("vgg19"), "approx", "time", "reference")
    m = s.ag.bytes.astype(np.int64)
    has_succ = np.zeros(s.ag.n, bool)
    has_succ[s.ag.src] = True
    sink = int(np.flatnonzero(~has_succ)[0])
    m = np.maximum(m * 10**8 // int(m.sum()), 1)
    m[sink] = 8 * 10**8
    s.ag.bytes = m
    s.act_sum = int(m.sum())
    b = s.min_budget(5 * s.act_sum)
    assert b > (LIMIT + 1) * comp_ratio(0, s.act_sum) - 1          # past the first window
    assert b == _bisect(lambda x: s.solve(x)[0] == "OK", s.act_sum)
    assert s.min_budget(b) == b and s.min_budget(b - 1) is None      # the cap, as bisection's
