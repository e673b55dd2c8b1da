"""Issue 36: a PyTorch step's front computed once, budgets picked from it, each stage shown.

What must not change while planning gets faster: a planning session's plans are ``plan()``'s,
a priced candidate's numbers are those of its partition built for real, the keep-everything
shortcut picks what the whole front picks.
"""

import pytest

torch = pytest.importorskip("torch")

import planner  # noqa: E402
import planner.torch as pt  # noqa: E402
from hgraph.common.errors import InfeasibleError  # noqa: E402
from hgraph.common.progress import StageProgress, tracking  # noqa: E402
from planner import synth  # noqa: E402
from planner.api import Planning  # noqa: E402
from planner.torch import front, measure  # noqa: E402
from tests.conftest import MEAN  # noqa: E402


def _mlp_graph():
    torch.manual_seed(0)
    layers = [torch.nn.Linear(8, 64)]
    for act in (torch.nn.Tanh, torch.nn.GELU, torch.nn.Tanh, torch.nn.GELU):
        layers += [act(), torch.nn.Linear(64, 64)]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(64, 1)).double()
    return pt.graph(model, torch.randn(256, 8, dtype=torch.float64), loss=MEAN, progress="off")


@pytest.fixture(scope="module")
def tg():
    return _mlp_graph()


def _point(c):
    return (c.plan.solver, c.source, c.step_peak, c.recompute_flops, c.keep)


@pytest.mark.parametrize("solver", ["approx", "exact"])
def test_a_planning_session_plans_what_plan_does(solver):
    g = synth.build(layers=2, heads=2)
    session = Planning(g, solver=solver, certify="off")
    for b in ("100%", "80%", "62%", 1, "70%"):
        try:
            want = planner.plan(g, budget=b, solver=solver, certify="off")
        except InfeasibleError as err:
            got = session.at(b, keep_errors=True)
            assert isinstance(got, InfeasibleError) and str(got) == str(err)
            assert got.min_budget_bytes == err.min_budget_bytes
            continue
        got = session.at(b)
        assert (got.peak_bytes, got.recompute_cost, got.budget_bytes) == \
            (want.peak_bytes, want.recompute_cost, want.budget_bytes)
        assert [(o.kind, o.index, o.which) for o in got.schedule.ops] == \
            [(o.kind, o.index, o.which) for o in want.schedule.ops]


def test_a_priced_candidate_is_its_partition_built_for_real(tg):
    for b in ("100%", "90%"):
        p = planner.plan(tg.cg, budget=b, certify="off")
        c = front.measured_candidate(tg, p)
        fw, bw = front.split(c, tg.num_fwd_outputs)             # real modules, code and all
        assert c.step_peak == measure.predict_step_peak(fw, bw) + tg.step_slack   # issue 35
        assert c.recompute_flops == measure.recompute_flops(tg.joint, bw)


def test_the_front_is_computed_once_and_each_budget_gets_its_own_plan(tg, monkeypatch):
    tg.fronts.clear()
    made = []
    real_init = Planning.__init__

    def counted(self, *args, **kwargs):
        made.append(kwargs.get("solver"))
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(Planning, "__init__", counted)
    p80 = pt.plan_for_step(tg, "80%", progress="off")
    sessions = len(made)
    assert sessions >= 1 and len(tg.fronts) == 1
    report80 = dict(p80.report)
    lowest = pt.plan_for_step(tg, "min", progress="off")
    p90 = pt.plan_for_step(tg, "90%", progress="off")
    assert len(made) == sessions                                   # picked, not planned
    assert p80.report == report80                                  # a later pick leaves it be
    assert lowest.report["step_budget_bytes"] == lowest.report["step_peak_bytes"]
    assert p90.report["step_peak_bytes"] <= p90.report["step_budget_bytes"]
    again = front.front(tg)
    assert [_point(c) for c in again] == [_point(c) for c in front.front(tg)]
    assert all(a.plan is not b.plan for a, b in zip(again, front.front(tg)))


def test_a_budget_covering_the_keep_all_step_plans_it_alone_and_picks_as_the_front():
    tg = _mlp_graph()
    p = pt.plan_for_step(tg, "100%", progress="off")
    assert tg.fronts == {}                                         # no front was planned
    whole = front.pick(front.front(tg), "100%")
    assert (p.solver, p.report["step_peak_bytes"], p.report["step_recompute_flops"]) == \
        (whole.plan.solver, whole.step_peak, whole.recompute_flops)
    fr = front.front(tg)
    assert front.covers(fr, "100%")
    assert len(fr) > 1 and not front.covers(fr, "min")             # the lowest recomputes


def test_graph_and_plan_for_step_show_their_stages():
    import io

    out = io.StringIO()
    with tracking(tracker=StageProgress("plain", out)):
        tg = _mlp_graph()
        pt.plan_for_step(tg, "90%")
    names = [line.rsplit(": ", 1)[0] for line in out.getvalue().splitlines()]
    assert names[0] == "capturing the training step (AOTAutograd trace)"
    assert names[1].startswith("the planner's graph (")
    # the allocator's slack is measured inside plan_for_step, when its first price reads it
    assert names[2:] == ["plan_for_step at 90%"]
    assert all(line.endswith(" s") for line in out.getvalue().splitlines())


def test_a_keep_sets_bounds_are_never_above_its_partitions_price(tg):
    from planner.torch.bounds import JointIndex

    index = JointIndex(tg.joint, tg.num_fwd_outputs)
    fr = front.front(tg)
    for c in fr:
        peak, flops = index.bounds(c.keep)
        assert 0 < peak <= c.step_peak and 0 <= flops <= c.recompute_flops
    assert index.bounds(fr[-1].keep)[1] == fr[-1].recompute_flops == 0


def test_the_shortlist_picks_what_the_whole_front_picks_pricing_fewer():
    whole = _mlp_graph()
    fr = front.front(whole)
    priced = []
    for b in ("90%", "80%", "60%", "40%", "min", 1):
        tg = _mlp_graph()
        try:
            want = front.pick(fr, b)
        except InfeasibleError as err:
            with pytest.raises(InfeasibleError) as got:
                front.pick(front.for_budget(tg, b), b)
            assert str(got.value) == str(err) and got.value.min_budget_bytes == err.min_budget_bytes
            continue
        got = front.pick(front.for_budget(tg, b), b)
        assert _point(got) == _point(want)
        timeless = [{k: v for k, v in c.plan.report.items() if k != "seconds"} for c in (got, want)]
        assert timeless[0] == timeless[1]                          # step_budget_bytes included
        (short,) = tg.fronts.values()
        priced.append(len(short.priced) / len(short.plans))
    assert min(priced) < 1                      # some budget partitions only a few plans
