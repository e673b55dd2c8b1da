"""Whole-step planning inside the planner (issue 38): one analysis per :func:`planner.plan` call
on every kind of graph, and the step's prediction for many workspace caps from one replay.

Before, a graph with op arguments was planned by a closure that called :func:`planner.plan`
again for every activation budget of :func:`planner.whole_step.fit`'s ladder: 12 analyses
(engine levels, the baseline replay) and 12 solver families per plan. The plans themselves are
unchanged (the ladder, the candidates and the choice are the same; bench/plan_hashes.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import planner
import planner.api as api
from hgraph.common.errors import InfeasibleError
from planner import synth, whole_step
from planner.execute import executor, export, zoo
from tests.conftest import ROOT

GOOGLENET = ROOT / "tests" / "data" / "graphs" / "cg_googlenet.txt"


@pytest.fixture
def analyses(monkeypatch):
    """The number of :func:`planner.api.analyse` runs since the test began."""
    count = [0]
    real = api.analyse

    def counting(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "analyse", counting)
    return count


def _zoo(name="resnet", **kw):
    return export.to_cg(zoo.build(name, **kw))


@pytest.mark.parametrize("graph, kwargs, whole", [
    (GOOGLENET, dict(budget="60%", accounting=planner.AccountingOptions(units="reference")),
     False),
    (GOOGLENET, dict(budget="60%"), False),
    ("synth", dict(budget="60%"), False),
    ("zoo", dict(budget="99%"), True),
    ("zoo", dict(budget="90%", certify="off", strategy="memory"), True),
    ("zoo", dict(budget="95%", solver="exact"), True),
    ("zoo", dict(budget="97%", solver="chen"), True),
    ("zoo", dict(budget="90%", accounting="activations"), False),
])
def test_one_analysis_per_plan_call(analyses, graph, kwargs, whole):
    g = {"synth": lambda: synth.build(layers=2, heads=2), "zoo": _zoo}.get(graph, lambda: graph)()
    p = planner.plan(g, **kwargs)
    assert analyses[0] == 1
    assert (p.report.get("accounting") == "whole-step") == whole
    if whole and kwargs.get("solver") != "chen":      # Chen's chain ignores the budget
        assert p.within_budget and p.report["step_peak_bytes"] <= p.budget_bytes


def test_one_analysis_when_no_whole_step_fits(analyses):
    with pytest.raises(InfeasibleError, match="smallest reachable budget"):
        planner.plan(_zoo(), budget=1, certify="off")
    assert analyses[0] == 1


def test_one_planning_session_plans_every_budget_once_analysed(analyses):
    """Planning.at on a whole-step graph: the ladder's plans reuse the session's analysis."""
    session = api.Planning(_zoo(), certify="off")
    plans = [session.at(b) for b in ("100%", "97%", "95%")]
    assert analyses[0] == 1
    assert [p.budget_bytes for p in plans] == sorted((p.budget_bytes for p in plans), reverse=True)


@pytest.mark.parametrize("name", ["resnet", "transformer", "vgg16"])
def test_one_replay_prices_every_workspace_cap_as_a_prediction_of_its_own(name):
    """predict_caps shares the pool replay and the kernel temporaries across caps and
    schedules (a :class:`whole_step.Pricer`): each cap's figures are those of a prediction
    made alone, from nothing cached."""
    g = _zoo(name)
    caps = [*whole_step.workspaces(), None]
    pricer = whole_step.Pricer(g)
    schedules = [executor.plain_schedule(g)]
    for budget in ("95%", "85%", "70%"):            # recomputing plans, where one fits
        try:
            schedules.append(planner.plan(g, budget=budget,
                                          accounting=planner.AccountingOptions(units="reference")).schedule)
        except InfeasibleError:
            pass
    assert len(schedules) > 1
    for schedule in schedules:
        for recycle in (True, False):
            shared = whole_step.predict_caps(g, schedule, caps, recycle=recycle, pricer=pricer)
            for cap in caps:
                alone = whole_step.predict(g, schedule, recycle=recycle, workspace=cap)
                got = shared[cap]
                assert got.step_peak_bytes == alone.step_peak_bytes
                assert got.breakdown == alone.breakdown and got.workspace_bytes == alone.workspace_bytes
                assert np.array_equal(got.curve, alone.curve)
                assert sum(got.breakdown[k] for k in whole_step.PARTS) == got.step_peak_bytes
                assert got.step_peak_bytes == int(got.curve.max())
    # a smaller cap never needs more temporaries: the caps' peaks are ordered
    peaks = [shared[c].step_peak_bytes for c in caps[:-1]]
    assert peaks == sorted(peaks, reverse=True)
