"""Issue 36: the whole front prices only the plans its lower bounds cannot rule out.

:func:`planner.torch.front._undominated` skips partitioning a plan that a priced one
dominates by its bounds (:class:`planner.torch.bounds.JointIndex`); the front must be what
pricing every plan gives, candidate for candidate, min-cut seeds included.
"""

import pytest

torch = pytest.importorskip("torch")

import planner.torch as pt  # noqa: E402
from planner.torch import front  # noqa: E402
from planner.torch.partition import keep_names  # noqa: E402
from tests.conftest import MEAN  # noqa: E402


def _graph(kind: str):
    torch.manual_seed(0)
    if kind == "mlp":
        layers = [torch.nn.Linear(8, 64)]
        for act in (torch.nn.Tanh, torch.nn.GELU, torch.nn.Tanh, torch.nn.GELU):
            layers += [act(), torch.nn.Linear(64, 64)]
        model = torch.nn.Sequential(*layers, torch.nn.Linear(64, 1)).double()
        return pt.graph(model, torch.randn(256, 8, dtype=torch.float64), loss=MEAN,
                        progress="off")
    block = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(block, torch.nn.Linear(32, 1))
    return pt.graph(model, torch.randn(4, 16, 32), loss=MEAN, progress="off")


def _point(c):
    return (c.plan.solver, c.source, c.step_peak, c.recompute_flops, c.keep)


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_the_front_prices_fewer_plans_and_is_the_front_of_all_of_them(kind, monkeypatch):
    tg = _graph(kind)
    plans = [p for _, fresh in front._planned(tg, front.SOLVERS, front.POINTS,
                                              front.EXACT_MAX_LOWER_SETS, {}) for p in fresh]
    everything = [front.measured_candidate(tg, p) for p in plans]
    want = front.union([everything])
    priced = []
    real = front.measured_candidate
    monkeypatch.setattr(front, "measured_candidate",
                        lambda g, p: priced.append(p) or real(g, p))
    tg.fronts.clear()
    got = front.front(tg)
    assert [_point(c) for c in got] == [_point(c) for c in want]
    assert len(priced) <= len(plans)
    if len(want) < len(plans):              # union drops plans: some are never partitioned
        assert len(priced) < len(plans), (len(priced), len(plans), len(want))
    # a seed keeping what a skipped plan keeps is still left out (a plan met it first)
    skipped = [p for p in plans if all(q is not p for q in priced)]
    if skipped:
        keep = frozenset(keep_names(skipped[0].graph, skipped[0].schedule))
        tg.fronts.clear()
        seeded = front.front(tg, seeds={"min-cut 0.5": keep})
        assert [_point(c) for c in seeded] == [_point(c) for c in want]
