"""Issue 36: the capped DP (the scale path's window and front cap) as the torch front uses it.

Two things it needs before it can replace the exact DP on deep models: a window that widens
until a plan exists (a graph with many sources, a Hugging Face GPT-2's dropout masks, has no
chain at all within 8 states of the family's order), and a fit that keeps the best plan a
session found, since the capped DP is not monotone in the budget.
"""

from __future__ import annotations

import numpy as np
import pytest

import planner
from hgraph.common.errors import InfeasibleError
from planner import synth
from planner.api import Planning
from planner.dp.fronts import has_end
from planner.dp.loop import run_dp
from planner.dp.min_budget import min_budget
from planner.dp.solve import solve_family
from planner.dp_families import DPGraph, approx_family
from planner.options import SolverLimits
from planner.solver import Solver


def _many_sources(k: int = 20) -> DPGraph:
    """Sources ``s_0..s_{k-1}`` (nodes 0..k-1), each feeding one link of a chain
    ``c_0 → … → c_{k-1}`` (nodes k..2k-1, the sink last). The sources' one-node lower sets come
    first in the family's order (least ``m(L)``), so the chain's first set, ``{s_0, c_0}``, is
    ``k`` states after its only subsets, ∅ and ``{s_0}``: no window under ``k`` has a chain."""
    src = np.r_[np.arange(k), np.arange(k, 2 * k - 1)]
    dst = np.r_[np.arange(k, 2 * k), np.arange(k + 1, 2 * k)]
    m = np.r_[np.full(k, 1), np.full(k, 3)]
    t = np.r_[np.full(k, 2), np.arange(1, k + 1)]
    return DPGraph(m=m, t=t, src=src, dst=dst)


@pytest.mark.parametrize("dense", [True, False])
def test_the_window_widens_until_a_plan_exists(dense):
    g = _many_sources()
    fam = approx_family(g, dense=dense)
    top = 5 * int(g.m.sum())                                  # every transition fits
    assert not has_end(run_dp(fam, g.t, g.m, top, window=8, front_cap=4))
    r = solve_family(fam, g, top, window=8, front_cap=4)
    assert r.status == "OK" and (r.window is None or r.window > 8)
    # the widened solve has a plan exactly from the unpruned DP's smallest budget
    floor = min_budget(approx_family(g), g)
    assert solve_family(fam, g, floor, window=8, front_cap=4).status == "OK"
    assert solve_family(fam, g, floor - 1, window=8, front_cap=4).status == "IMPOSSIBLE"
    assert solve_family(fam, g, floor).status == "OK"


def test_the_smallest_budget_on_the_scale_path_is_the_bisections(monkeypatch):
    """:func:`planner.plan`'s refusal on the scale path names the same smallest budget in one
    pass as the bisection over :meth:`Solver.feasible` (forced by switching the pass off)."""
    g, capped = synth.build(layers=2, heads=2), SolverLimits(dp_window=8, dp_front_cap=4)

    def refusal():
        with pytest.raises(InfeasibleError) as info:
            planner.plan(g, "20%", limits=capped, certify="off")
        return info.value.min_budget_bytes, str(info.value)

    direct = refusal()
    monkeypatch.setattr(Solver, "direct_min_budget", lambda self: False)
    assert refusal() == direct


def test_a_capped_session_is_monotone_where_single_plans_are_not():
    """Budgets ascending in one session: the recompute never rises, and no plan is worse than
    :func:`planner.plan`'s at the same budget alone — which, the capped DP not being monotone,
    does rise somewhere on this graph (so the session's fit is what makes it monotone). A cap
    of 2: with 4, the fit's re-solve lowered from the model peak (``planner.api._lowered``)
    left the single plans monotone on this graph, and the test would prove nothing."""
    g, capped = synth.build(layers=2, heads=2), SolverLimits(dp_window=8, dp_front_cap=2)
    s = Planning(g, certify="off", limits=capped)
    top = s.at("100%").peak_bytes
    lo = s.at(1, keep_errors=True).min_budget_bytes
    alone, session = [], []
    for b in np.unique(np.linspace(lo, top - 1, 25).astype(np.int64)):
        p = s.at(int(b))
        assert p.peak_bytes <= b and p.model.dp_window is not None   # the scale path
        session.append(p.recompute_cost)
        alone.append(planner.plan(g, int(b), limits=capped, certify="off").recompute_cost)
    assert all(b <= a for a, b in zip(session, session[1:]))
    assert all(x <= y for x, y in zip(session, alone))
    assert any(b > a for a, b in zip(alone, alone[1:]))


torch = pytest.importorskip("torch")


def test_the_torch_fronts_picks_are_monotone_on_the_capped_path(monkeypatch):
    import planner.torch as pt
    from planner.torch import front
    from tests.conftest import MEAN

    torch.manual_seed(0)
    layers = [torch.nn.Linear(8, 64)]
    for act in (torch.nn.Tanh, torch.nn.GELU) * 4:
        layers += [act(), torch.nn.Linear(64, 64)]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(64, 1)).double()
    tg = pt.graph(model, torch.randn(256, 8, dtype=torch.float64), loss=MEAN, progress="off")
    monkeypatch.setattr(front, "CAPPED_FROM", 0)           # this small model on the scale path
    fr = front.front(tg, solvers=("approx",), points=8)
    assert all(c.plan.model.dp_window is not None for c in fr if c.plan.recompute_cost)
    picked = []
    for b in ("100%", "95%", "90%", "85%", "80%", "75%", "70%", "min"):
        try:
            c = front.pick(fr, b)
        except InfeasibleError:
            continue
        assert c.step_peak <= front.resolve_step_budget(fr, b)
        picked.append((c.step_peak, c.recompute_flops))
    assert len(set(picked)) >= 3
    assert all(p2 <= p1 and f2 >= f1 for (p1, f1), (p2, f2) in zip(picked, picked[1:]))


@pytest.mark.parametrize("dense", [True, False])
def test_a_window_that_failed_is_not_tried_again_at_less_budget(dense, monkeypatch):
    """:func:`planner.dp.solve._widened` skips a window that had no plan at a budget at least
    the one asked (reachability does not depend on the cap and falls with the budget), and
    every plan is still the one a fresh family gives, at budgets descending (a fit's
    re-solves) and ascending."""
    from planner.dp import solve

    g = _many_sources()
    floor = min_budget(approx_family(g), g)
    top = 5 * int(g.m.sum())
    budgets = sorted({int(b) for b in np.linspace(floor, top, 7)})

    def key(r):
        return r.status, None if r.groups is None else r.groups.tolist(), r.saved, r.window

    fresh = {b: key(solve_family(approx_family(g, dense=dense), g, b, window=8, front_cap=4))
             for b in budgets}
    tried = []
    real = solve._scale_passes
    monkeypatch.setattr(solve, "_scale_passes",
                        lambda fam, g, b, s, w, *a: tried.append((b, w)) or real(fam, g, b, s, w, *a))
    for order in (budgets[::-1], budgets):
        fam = approx_family(g, dense=dense)
        tried.clear()
        for b in order:
            assert key(solve_family(fam, g, b, window=8, front_cap=4)) == fresh[b], b
        eights = [b for b, w in tried if w == 8]
        if order[0] > order[-1]:          # descending: window 8 failed at the first budget
            assert eights == [order[0]], tried
        else:
            assert eights == order, tried
