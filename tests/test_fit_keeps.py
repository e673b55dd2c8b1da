"""The budget fit on a large graph does not keep a rejected plan's schedule while it solves
the next one (issue 37: ~0.7 KB an activation on the driver); on a small one it does."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from planner import api


@pytest.mark.parametrize("large", [True, False])
def test_a_rejected_replay_is_dropped_on_a_large_graph(monkeypatch, large):
    peaks = iter([105, 100])                  # the first replay is over the budget of 100

    def solve_and_replay(a, s, dp_budget, check):
        return ("stage", "model", f"schedule at {dp_budget}",
                SimpleNamespace(peak_bytes=next(peaks)))

    monkeypatch.setattr(api, "_solve_and_replay", solve_and_replay)
    a = SimpleNamespace(replays={}, baseline_schedule=None if large else object())
    s = SimpleNamespace(units="bytes", budget_free=False)
    found = api._fit(a, s, 100, True)
    assert found[2] == "schedule at 95"
    kept = sorted(k[1] for k in a.replays)
    assert kept == ([95] if large else [95, 100])
