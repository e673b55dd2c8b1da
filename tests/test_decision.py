"""One decision (issue 38): every solver returns a :class:`planner.decision.Decision` and the
emitter consumes it.

The decision is a small frozen value (the stage of every node, and the MILP's own per-stage
keep / recompute / retain or none); the schedule is the emitter's (:func:`emit_decision`),
whatever solver decided.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner import synth
from planner.decision import Decision
from planner.emit import emit_decision, emit_groups
from planner.solver import CLASSES, make_solver


def test_every_solver_returns_one_decision():
    g = synth.build(layers=2, heads=2)
    seen = set()
    for name in CLASSES:
        s = make_solver(g, name)
        top = int(g.var_bytes[g.is_activation].sum())
        status, d, model = s.solve(int(0.6 * top))
        assert status == "OK" and isinstance(d, Decision), name
        assert d.stage.shape == (s.ag.n,) and d.stage.dtype == np.int64 and d.stages >= 1
        with pytest.raises(dataclasses.FrozenInstanceError):
            d.stage = d.stage
        with pytest.raises(ValueError):
            d.stage[0] = 0                   # read-only: a decision does not change
        # the emitter consumes it: the decision's stages and, where it has them, its choices
        assert emit_decision(g, d, s.ag).dumps() == \
            emit_groups(g, np.array(d.stage), s.ag, **d.choices()).dumps()
        seen.add(d.staged)
    assert seen == {False, True}             # the MILP's decision is staged, the others' not
    status, d, model = make_solver(g, "approx").solve(1)
    assert status != "OK" and d is None      # no plan at 1 byte: no decision


def test_a_decision_is_all_three_choices_or_none():
    with pytest.raises(ValueError, match="all three or none"):
        Decision(np.zeros(3, np.int64), keep=np.ones(3, bool))
    d = Decision([0, 1, 1])
    assert d.stages == 2 and not d.staged and d.choices() == {}


def test_a_plan_carries_its_solvers_decision():
    import planner

    p = planner.plan(synth.build(layers=2, heads=2), budget="60%")
    assert isinstance(p.decision, Decision) and p.groups is p.decision.stage
    assert emit_decision(p.graph, p.decision).dumps() == p.schedule.dumps()
