"""The one budget search (:mod:`planner.search`) on hand-made candidates, and its one refusal.

Every plan kind (activation DP, whole step, rows, rows + DP, the PyTorch front and its
compiled step) supplies candidates and a meter; these tests hold what the search does with
them: the cheapest that fits, the kind's tie rule, the refusal naming the smallest reachable
budget (``min_budget_bytes``), and that nowhere else builds an ``InfeasibleError``.
"""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

from hgraph.common.errors import InfeasibleError
from planner import search

ROOT = Path(__file__).resolve().parents[1]

#: (name, peak, cost): a hand-made front, listed as a kind would list it.
CANDS = [("keep", 100, 0), ("a", 70, 3), ("b", 70, 3), ("c", 50, 8), ("d", 40, 20)]


def meter(c):
    """Peak, then least cost, then the lower peak (the torch and rows kinds' rule)."""
    return c[1], (c[2], c[1])


def refusal(smallest, lowest):
    return f"no plan fits; {smallest} B does ({lowest and lowest[0]})"


@pytest.mark.parametrize("budget, want", [(100, "keep"), (10**9, "keep"), (99, "a"), (70, "a"),
                                          (69, "c"), (50, "c"), (45, "d"), (40, "d")])
def test_pick_takes_the_cheapest_that_fits(budget, want):
    assert search.pick(CANDS, budget, meter, refusal)[0] == want
    assert search.cheapest(CANDS, budget, meter)[0] == want


def test_a_full_tie_goes_to_the_first_listed():
    assert search.pick(CANDS, 80, meter, refusal)[0] == "a"
    assert search.pick(CANDS[::-1], 80, meter, refusal)[0] == "b"


def test_the_kinds_order_decides_among_fits():
    """Memory-centric (lowest peak first) against time-centric on the same candidates."""
    by_peak = lambda c: (c[1], (c[1], c[2]))
    assert search.pick(CANDS, 100, by_peak, refusal)[0] == "d"
    assert search.pick(CANDS, 100, meter, refusal)[0] == "keep"


def test_refusal_names_the_smallest_reachable():
    with pytest.raises(InfeasibleError) as info:
        search.pick(CANDS, 39, meter, refusal)
    err = info.value
    assert str(err) == "no plan fits; 40 B does (d)"
    assert err.min_budget_bytes == 40 and type(err.min_budget_bytes) is int
    assert err.exit_code == 3
    assert search.cheapest(CANDS, 39, meter) is None


def test_refusal_counts_peaks_reached_outside_the_candidates():
    """Rows + DP: rows alone is reached, never picked there; it can be the smallest."""
    with pytest.raises(InfeasibleError) as info:
        search.pick(CANDS, 10, meter, refusal, reachable=[35])
    assert info.value.min_budget_bytes == 35 and str(info.value).endswith("(None)")
    with pytest.raises(InfeasibleError) as info:
        search.pick([], 10, meter, refusal, reachable=[35, 60])
    assert info.value.min_budget_bytes == 35
    with pytest.raises(InfeasibleError) as info:     # a tie: the candidate is named
        search.pick(CANDS, 10, meter, refusal, reachable=[40])
    assert str(info.value).endswith("(d)")
    assert search.pick(CANDS, 40, meter, refusal, reachable=[35])[0] == "d"


def test_refusal_survives_pickling():
    """A refusal raised on a Ray worker reaches the driver with its smallest budget."""
    err = pickle.loads(pickle.dumps(search.refuse("too small", 1234)))
    assert isinstance(err, InfeasibleError) and err.min_budget_bytes == 1234
    assert str(err) == "too small"


def test_at_budgets_plans_a_ladder_once_per_distinct_candidate():
    """A ladder: each budget planned in order; no plan there (None) and a plan equal to an
    earlier one (by the key) are left out, the first budget that got it kept."""
    made = []

    def make(b):
        made.append(b)
        return None if b < 20 else {"plan": min(b // 30, 2)}

    got = search.at_budgets(make, [100, 90, 60, 45, 30, 10], key=lambda c: c["plan"])
    assert got == [(100, {"plan": 2}), (45, {"plan": 1})] and made == [100, 90, 60, 45, 30, 10]


def test_smallest_budget_bisects_a_monotone_test():
    for floor in (1, 2, 3, 17, 1000, 4097):
        asked = []

        def ok(b, floor=floor):
            asked.append(b)
            return b >= floor

        assert search.smallest_budget(ok, 8, 10_000) == floor
    assert search.smallest_budget(lambda b: False, 8, 100) is None


def _constructions(path: Path) -> list:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", None)) == "InfeasibleError"]


def test_infeasible_error_is_built_only_by_the_search():
    """One refusal: every ``InfeasibleError(...)`` of the project is :func:`search.refuse`'s
    (the class's own definition aside), so each kind's smallest budget is set the same way."""
    found = {}
    for top in ("hgraph", "planner", "jobs", "cluster", "bench", "tests"):
        for path in sorted((ROOT / top).rglob("*.py")):
            lines = _constructions(path)
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    assert list(found) == ["planner/search.py"], found
    assert len(found["planner/search.py"]) == 1
    text = "\n".join(p.read_text(encoding="utf-8") for top in ("planner", "hgraph", "jobs")
                     for p in (ROOT / top).rglob("*.py"))
    assert "min_budget_bytes =" not in text.replace("self.min_budget_bytes =", "")
