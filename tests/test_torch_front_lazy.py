"""Issue 36: ``compile``'s front priced only where it can change (planner.torch.front's unread
fronts, planner.torch.seeds' shared min-cut solves), candidate for candidate the front of
before: the union of the two fronts (as traced, subexpressions merged) with every plan priced."""

import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")

from planner.torch import front, seeds  # noqa: E402
from planner.torch.capture import capture, cse  # noqa: E402
from planner.torch.model_graph import from_joint  # noqa: E402
from tests.conftest import MEAN  # noqa: E402
from tests.test_torch_seeds import small_gpt_block  # noqa: E402


def _row(c):
    return (c.source, c.plan.solver, c.keep, c.step_peak, c.recompute_flops)


@pytest.fixture(scope="module")
def joints():
    """(joint as traced, with subexpressions merged, forward outputs, min-cut keep sets)."""
    m, x = small_gpt_block()
    joint, n_out = capture(m, (x,), loss=MEAN, decompose=True)
    merged = cse(joint)
    return joint, merged, n_out, seeds.min_cut_keeps(merged, None, num_fwd_outputs=n_out)


def _two_fronts(joints):
    """``compile``'s two fronts of one graph (:meth:`HGraphPartitioner._plan_front`), unread."""
    joint, merged, n_out, keeps = joints
    return [front.front(from_joint(joint, n_out, decompose=True)),
            front.front(from_joint(merged, n_out, decompose=True), seeds=keeps)]


def _counting(monkeypatch):
    """Counts the plans partitioned and replayed (:func:`front.measured_candidate`)."""
    calls = []
    real = front.measured_candidate
    monkeypatch.setattr(front, "measured_candidate",
                        lambda tg, p: calls.append(p) or real(tg, p))
    return calls


def test_the_union_of_unread_fronts_is_the_union_of_the_whole_fronts(joints, monkeypatch):
    calls = _counting(monkeypatch)
    got = front.union(_two_fronts(joints))
    priced = len(calls)
    whole = [list(fr) for fr in _two_fronts(joints)]          # read: every plan priced
    plans = len(calls) - priced
    want = front.union(whole)
    assert [_row(c) for c in got] == [_row(c) for c in want]
    assert all(a.plan is not b.plan for a, b in zip(got, want))
    assert any(c.source == "min-cut" for c in got) and any(c.source == "plan" for c in got)
    assert priced < plans, f"priced {priced} of {plans} plans: nothing ruled out"


def test_the_comparison_sees_a_shortcut_that_drops_a_plan_of_the_front(joints, monkeypatch):
    """Bounds that overstate (a plan ruled out that the union keeps) change the front, and the
    comparison above says so: it can fail."""
    want = [_row(c) for c in front.union([list(fr) for fr in _two_fronts(joints)])]
    real = front._Pricing.bounds
    monkeypatch.setattr(front._Pricing, "bounds",
                        lambda self, i: tuple(10 * v + 10**9 for v in real(self, i)))
    got = [_row(c) for c in front.union(_two_fronts(joints))]
    assert got != want


def test_an_unread_front_reads_as_the_whole_front(joints):
    joint, _, n_out, _ = joints
    tg = from_joint(joint, n_out, decompose=True)
    lazy = front.front(tg)
    assert isinstance(lazy, list) and not lazy.read
    whole = front.union([[lazy.pricing.price(i) for i in range(len(lazy.pricing))]])
    assert [_row(c) for c in lazy] == [_row(c) for c in whole] and lazy.read
    again = front.front(tg)                 # kept on tg: a new list of its own copies
    assert not again.read and again == lazy and again is not lazy
    assert len(again) == len(whole) and again[0].plan is not lazy[0].plan
    assert [*again] == list(again) == again[:] and [] + again == list(again)
    assert front.union([again, front.front(tg)]) == front.union([list(lazy)])


def test_plans_priced_inside_the_partitioner_call_are_at_least_their_bounds():
    """Inside AOTAutograd's partitioner call (where ``compile`` prices its fronts), every plan of
    both fronts prices at or above its :class:`JointIndex` bounds, and the union of the unread
    fronts is the union of the whole ones."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    import torch._inductor.custom_graph_pass

    from planner.torch.bounds import JointIndex
    from planner.torch.compiled import fresh_function

    seen = {}

    class Check(torch._inductor.custom_graph_pass.CustomPartitionerFn):
        def __call__(self, gm, joint_inputs, **kwargs):
            n_out = kwargs["num_fwd_outputs"]
            merged_gm = cse(gm)
            keeps = seeds.min_cut_keeps(merged_gm, joint_inputs, **kwargs)
            graphs = [from_joint(g, n_out, decompose=True) for g in (gm, merged_gm)]
            lazy = front.union([front.front(graphs[0]), front.front(graphs[1], seeds=keeps)])
            graphs = [from_joint(g, n_out, decompose=True) for g in (gm, merged_gm)]
            fronts = [list(front.front(graphs[0])), list(front.front(graphs[1], seeds=keeps))]
            seen["same"] = [_row(c) for c in lazy] == [_row(c) for c in front.union(fronts)]
            seen["below"] = []
            for g in graphs:
                index = JointIndex(g.joint, n_out)
                pricing = front.front(g).pricing
                for i in range(len(pricing.plans)):
                    c = pricing.price(i)
                    peak, flops = index.bounds(c.keep)
                    if peak > c.step_peak or flops > c.recompute_flops:
                        seen["below"].append((c.step_peak, peak, c.recompute_flops, flops))
            raise RuntimeError("stop: the front is checked")

        def uuid(self):
            return None

    m, x = small_gpt_block()
    compiled = torch.compile(fresh_function(lambda x: MEAN(m(x))), dynamic=False)
    with inductor_config.patch(custom_partitioner_fn=Check(), fx_graph_cache=False), \
            functorch_config.patch(enable_autograd_cache=False):
        with pytest.raises(Exception, match="stop: the front is checked"):
            compiled(x)
    torch._dynamo.reset()
    assert seen["same"] and seen["below"] == []


def test_shared_min_cut_solves_give_the_keep_sets_of_separate_partitions(joints, monkeypatch):
    import torch._functorch.partitioners as parts

    _, merged, n_out, _ = joints
    solves = []
    real = parts.solve_min_cut

    def counted(*args, **kwargs):
        solves.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(parts, "solve_min_cut", counted)
    alone = {}
    for b in seeds.MIN_CUT_BUDGETS:             # each budget its own partition, its own solves
        keep = seeds.representable(merged, seeds.min_cut_saved(merged, None, b,
                                                               num_fwd_outputs=n_out))
        alone.setdefault(keep, f"min-cut {b:g}")
    separate = len(solves)
    shared = seeds.min_cut_keeps(merged, None, num_fwd_outputs=n_out)
    assert shared == {label: keep for keep, label in alone.items()}
    assert len(solves) - separate < separate
    assert parts.solve_min_cut is counted          # the solver of before, restored
