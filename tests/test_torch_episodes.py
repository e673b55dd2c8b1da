"""A plan that recomputes a value twice (forget, recompute again): the backward follows it."""

import copy
import types

import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
nn = torch.nn

from hgraph.common.errors import InfeasibleError  # noqa: E402
from planner import schedule as sched  # noqa: E402
from planner import simulate  # noqa: E402
from planner.torch import measure  # noqa: E402
import planner.torch as pt  # noqa: E402
from tests.conftest import MEAN  # noqa: E402
from planner.torch.partition import apply_keep, apply_plan, keep_names  # noqa: E402


def mlp():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                      nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4)).double()
    return m, torch.randn(128, 16, dtype=torch.float64)


def tightest(tg):
    try:
        return pt.plan(tg, 1)
    except InfeasibleError as err:
        return pt.plan(tg, err.min_budget_bytes)


def forget_in_forward(p, name):
    """``p`` with var ``name`` forgotten after its last forward reader and recomputed before
    its first backward-phase reader: with the plan's own later recompute, two episodes."""
    g, ops = p.graph, list(p.schedule.ops)
    nf = len(g.forward)
    var = g.var_names.index(name)
    block = next(f.index for f in g.forward if f.outputs[0] == var)
    bw_start = next(i for i, op in enumerate(ops) if op.kind == "compute" and op.index >= nf)
    readers = [i for i, op in enumerate(ops) if op.kind == "compute"
               and var in {v for v, _ in g.functions[op.index].inputs}]
    last_fwd = max(i for i in readers if i < bw_start)
    first_bw = min(i for i in readers if i > bw_start)
    ops = (ops[:last_fwd + 1] + [sched.forget(var)] + ops[last_fwd + 1:first_bw]
           + [sched.compute(block)] + ops[first_bw:])
    return types.SimpleNamespace(graph=g, schedule=sched.Schedule(ops))


@pytest.fixture(scope="module")
def twice():
    m, x = mlp()
    tg = pt.graph(m, x, loss=MEAN, decompose=False)
    p = tightest(tg)
    q = forget_in_forward(p, "tanh_1")
    assert not simulate.replay(q.graph, q.schedule).violations
    nf = len(q.graph.forward)
    var = q.graph.var_names.index("tanh_1")
    recomputes = [i for i, op in enumerate(q.schedule.ops) if op.kind == "compute"
                  and op.index < nf and q.graph.functions[op.index].outputs[0] == var]
    assert len(recomputes) == 3                  # the forward's, then two in the backward
    return m, x, q, tg


def test_backward_has_one_copy_per_episode_in_the_plans_order(twice):
    m, x, q, tg = twice
    step = apply_plan(copy.deepcopy(m), q, (x,), loss=MEAN)
    step(x)
    bw = step.partition["backward"]
    nodes = list(bw.graph.nodes)
    runs = [n for n in nodes if n.meta.get("recompute_of", n.name) == "tanh_1"]
    assert len(runs) == 2 and "recompute_of" in runs[1].meta
    # each copy is read only within its own episode: every reader of the first comes before
    # the second is computed, and the second is computed from its own copy of the matmul
    first, second = runs
    assert all(nodes.index(u) < nodes.index(second) for u in first.users)
    assert second.args[0].meta.get("recompute_of") == first.args[0].name
    # a single-episode plan is partitioned as torch does it: no copies
    once = apply_plan(copy.deepcopy(m), tightest(pt.graph(m, x, loss=MEAN, decompose=False)),
                      (x,), loss=MEAN)
    once(x)
    assert not any("recompute_of" in n.meta for n in once.partition["backward"].graph.nodes)


def test_recompute_flops_count_every_episode(twice):
    from planner.torch.front import measured_candidate
    from planner.torch.partition import partition

    m, x, q, tg = twice
    _, bw = partition(tg.joint, tg.num_fwd_outputs, keep_names(q.graph, q.schedule))
    matmul = 2 * 128 * 64 * 64                   # the second linear, run once more
    once = measure.recompute_flops(tg.joint, bw)
    assert measured_candidate(tg, q).recompute_flops >= once + matmul


def test_gradients_stay_bitwise_equal_to_eager(twice):
    m, x, q, tg = twice
    m1 = copy.deepcopy(m)
    apply_plan(m1, q, (x,), loss=MEAN)(x)
    m2 = copy.deepcopy(m)
    m2(x).mean().backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(m1.parameters(), m2.parameters()))


def test_measured_peak_no_higher_than_one_recompute(twice):
    m, x, q, tg = twice
    keep = keep_names(q.graph, q.schedule)
    peaks, copies = {}, {}
    for follow in (False, True):
        m1 = copy.deepcopy(m)
        step = apply_keep(m1, keep, False, loss=MEAN, plan=q if follow else None)
        peaks[follow] = measure.measure_step(step, m1, (x,))["measured_peak_bytes"]
        bw = step.partition["backward"]
        copies[follow] = sum("recompute_of" in n.meta for n in bw.graph.nodes)
    assert copies == {False: 0, True: copies[True]} and copies[True] > 0
    assert peaks[True] <= peaks[False]
