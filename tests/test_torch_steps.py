"""Training steps that must not be silently wrong (issue 28): random ops replayed, not redrawn,
when recomputed; labels read afresh on every step; planning leaves the caller's tensors alone;
the step's limits said in one line."""

import copy

import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
nn = torch.nn

import torch._functorch.config as functorch_config  # noqa: E402
import torch._inductor.config as inductor_config  # noqa: E402
from torch._inductor.custom_graph_pass import CustomPartitionerFn  # noqa: E402

from hgraph.common.errors import HGraphError  # noqa: E402
import planner.torch as pt  # noqa: E402
from tests.conftest import MEAN  # noqa: E402
from planner.torch.partition import apply_keep, partition  # noqa: E402


def dropout_mlp():
    torch.manual_seed(0)
    layers = [nn.Linear(16, 32)]
    for _ in range(2):
        layers += [nn.GELU(), nn.Dropout(0.3), nn.Linear(32, 32)]
    return nn.Sequential(*layers, nn.Linear(32, 1)).double(), torch.randn(8, 16,
                                                                        dtype=torch.float64)


def grad_gap(a, b) -> float:
    """Largest parameter-gradient difference, relative to the gradient's scale."""
    return max(float((p.grad - q.grad).abs().max() / q.grad.abs().max())
               for p, q in zip(a.parameters(), b.parameters()))


class KeepNothing(CustomPartitionerFn):
    """hgraph's partition with nothing kept: the backward recomputes every forward value it
    reads, dropout's random numbers included (the case that redrew them)."""

    def __init__(self):
        self.parts = []

    def __call__(self, gm, joint_inputs, **kwargs):
        fw, bw = partition(gm, kwargs["num_fwd_outputs"], set())
        self.parts.append(bw)
        return fw, bw

    def uuid(self):
        return None


def test_recomputed_dropout_under_compile_equals_torch_compile():
    m, x = dropout_mlp()
    ours, theirs = copy.deepcopy(m), copy.deepcopy(m)
    part = KeepNothing()
    ca = torch.compile(lambda v: ours(v).mean(), dynamic=False)
    cb = torch.compile(lambda v: theirs(v).mean(), dynamic=False)
    with inductor_config.patch(custom_partitioner_fn=part, fx_graph_cache=False), \
            functorch_config.patch(enable_autograd_cache=False):
        torch.manual_seed(1)
        la = ca(x)
        la.backward()
    torch.manual_seed(1)
    lb = cb(x)
    lb.backward()
    code = part.parts[0].code
    # the masks are recomputed from the forward's seeds, which are saved, never drawn again
    assert "prims.inductor_random" in code and "prims.inductor_seeds" not in code
    assert la.item() == lb.item()
    assert grad_gap(ours, theirs) == 0.0


@pytest.mark.parametrize("how", ["keep nothing", "tightest plan"])
def test_recomputed_dropout_under_apply_equals_eager(how):
    m, x = dropout_mlp()
    ours, eager = copy.deepcopy(m), copy.deepcopy(m)
    if how == "keep nothing":
        step = apply_keep(ours, set(), decompose=False, loss=MEAN)
    else:
        tg = pt.graph(m, x, loss=MEAN, decompose=False)
        p = pt.plan(tg, _smallest(tg))
        assert p.recompute_cost > 0
        step = pt.apply(ours, p, x, loss=MEAN)
    for seed in (1, 2):         # two steps: the generator advances as eager's does
        torch.manual_seed(seed)
        la = step(x)
        torch.manual_seed(seed)
        lb = eager(x).mean()
        lb.backward()
        assert la.item() == lb.item()
        assert grad_gap(ours, eager) == 0.0
    if how == "keep nothing":
        assert "run_with_rng_state" in step.partition["backward"].code


def _smallest(tg):
    from hgraph.common.errors import InfeasibleError

    try:
        return pt.plan(tg, 1).peak_bytes
    except InfeasibleError as err:
        return err.min_budget_bytes


def test_compiled_dropout_step_equals_torch_compile():
    m, x = dropout_mlp()
    ours, theirs = copy.deepcopy(m), copy.deepcopy(m)
    step = pt.compile(ours, budget="min", loss=MEAN)   # the lowest peak it reaches
    ref = torch.compile(lambda v: theirs(v).mean())
    torch.manual_seed(3)
    la = step(x)
    torch.manual_seed(3)
    lb = ref(x)
    lb.backward()
    assert la.item() == lb.item() and grad_gap(ours, theirs) == 0.0


def test_compile_replans_when_shapes_change():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)).double()
    ours, theirs = copy.deepcopy(m), copy.deepcopy(m)
    step = pt.compile(ours, budget="min", loss=MEAN)
    for batch in (4, 6, 9):
        x = torch.randn(batch, 8, dtype=torch.float64)
        la = step(x)
        lb = theirs(x).mean()
        lb.backward()
        assert la.item() == pytest.approx(lb.item(), rel=1e-12)
        assert grad_gap(ours, theirs) < 1e-12
    assert len(step.partitioner.plans) == 3


def labelled():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)).double()
    xs = [torch.randn(6, 8, dtype=torch.float64) for _ in range(3)]
    ys = [torch.randint(0, 4, (6,)) for _ in range(3)]
    return m, xs, ys


LABEL = None          # a global label, reassigned before each step


def test_apply_reads_labels_afresh_every_step():
    global LABEL
    m, xs, ys = labelled()
    y = ys[0]
    batch = {"y": ys[0]}

    def by_closure(out):
        return nn.functional.cross_entropy(out, y)

    def by_dict(out):
        return nn.functional.cross_entropy(out, batch["y"])

    def by_global(out):
        return nn.functional.cross_entropy(out, LABEL)

    LABEL = ys[0]
    for loss in (by_closure, by_dict, by_global):
        ours, eager = copy.deepcopy(m), copy.deepcopy(m)
        tg = pt.graph(ours, xs[0], loss=loss, decompose=False)
        step = pt.apply(ours, pt.plan(tg, "100%"), xs[0], loss=loss)
        for x, label in zip(xs, ys):
            y, batch["y"], LABEL = label, label, label
            la = step(x)
            lb = nn.functional.cross_entropy(eager(x), label)
            lb.backward()
            assert la.item() == lb.item(), loss.__name__
            assert grad_gap(ours, eager) == 0.0, loss.__name__


def test_planning_leaves_callers_tensors_unchanged():
    class WritesItsInput(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            x.mul_(2)
            return self.lin(x)

    torch.manual_seed(0)
    x = torch.randn(3, 4)
    target = torch.randn(3, 4)
    before, target_before = x.clone(), target.clone()
    model = WritesItsInput()
    params = [p.detach().clone() for p in model.parameters()]
    pt.graph(model, x, loss=lambda out: ((out - target) ** 2).mean())
    assert torch.equal(x, before) and torch.equal(target, target_before)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), params))


def _one_line(err) -> str:
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_apply_says_it_is_fixed_to_its_shapes():
    m, xs, _ = labelled()
    step = pt.apply(m, pt.plan(pt.graph(m, xs[0], loss=MEAN, decompose=False)), xs[0],
                    loss=MEAN)
    step(xs[0])
    with pytest.raises(HGraphError) as err:
        step(torch.randn(7, 8, dtype=torch.float64))
    msg = _one_line(err)
    assert "6x8" in msg and "7x8" in msg and "fixed to its shapes" in msg


def test_tuple_output_without_loss_is_one_line():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            y = self.lin(x)
            return y.sin(), y.cos()

    with pytest.raises(HGraphError) as err:
        pt.graph(Two(), torch.randn(2, 3))
    assert "returns a tuple" in _one_line(err) and "loss=" in str(err.value)


def test_non_scalar_loss_is_one_line():
    m, xs, _ = labelled()
    with pytest.raises(HGraphError) as err:
        pt.graph(m, xs[0], loss=lambda out: out * 2)
    assert "scalar" in _one_line(err) and "(6, 4)" in str(err.value)


def test_loss_reading_an_attribute_is_one_line():
    m, xs, ys = labelled()

    class Holder:
        pass

    h = Holder()
    h.y = ys[0]
    with pytest.raises(HGraphError) as err:
        pt.graph(m, xs[0], loss=lambda out: nn.functional.cross_entropy(out, h.y))
    assert "cannot follow" in _one_line(err)


def test_each_compile_plans_its_own_budget():
    """Dynamo would reuse one compile for another model of the same structure (same lambda
    code, modules inlined), partition, plan and budget included."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(),
                      nn.Linear(32, 1)).double()
    x = torch.randn(16, 8, dtype=torch.float64)
    a, b = (pt.compile(copy.deepcopy(m), budget="100%", loss=MEAN),
            pt.compile(copy.deepcopy(m), budget="min", loss=MEAN))
    a(x)
    b(x)
    assert len(a.partitioner.plans) == 1 and len(b.partitioner.plans) == 1


def test_a_front_planned_in_one_compile_serves_another():
    """A front reused from an earlier compile (``fronts=``) holds that compile's joint graph;
    the partition must split the graph of the compile at hand (other fake tensors)."""
    from planner.torch.compiled import KEEP_ALL, HGraphPartitioner, fresh_function

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)).double()
    x = torch.randn(16, 8, dtype=torch.float64)
    fronts, losses = {}, []
    for budget in ("100%", "min"):
        net = copy.deepcopy(m)
        part = HGraphPartitioner(budget, fronts=fronts)
        step = torch.compile(fresh_function(lambda v: net(v).mean()), dynamic=False)
        with inductor_config.patch(custom_partitioner_fn=part, fx_graph_cache=False), \
                functorch_config.patch(enable_autograd_cache=False):
            out = step(x)
        out.backward()
        losses.append(out.item())
        assert len(part.plans) == 1
    # "100%" planned the keep-everything step alone, "min" the whole front: one of each
    whole = [k for k in fronts if not isinstance(k, tuple)]
    assert len(whole) == 1 and set(fronts) == {whole[0], (KEEP_ALL, whole[0])}
    assert losses[0] == losses[1]


def test_a_budget_the_keep_all_step_fits_plans_it_alone_and_picks_as_the_front_does():
    """At ``"100%"`` (compile's default) and above, the front's pick is a keep-everything plan:
    the partitioner plans those two alone (no other budgets, no min-cut) and splits the graph
    exactly as the whole front's pick does; below it, the whole front is planned."""
    from planner.torch.compiled import KEEP_ALL, HGraphPartitioner, fresh_function

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.GELU(),
                      nn.Linear(32, 1)).double()
    x = torch.randn(16, 8, dtype=torch.float64)
    picked = {}
    for budget, whole in (("100%", False), ("100%", True), ("120%", False), ("90%", False)):
        net = copy.deepcopy(m)
        part = HGraphPartitioner(budget, whole_front=whole, progress="off")
        step = torch.compile(fresh_function(lambda v: net(v).mean()), dynamic=False)
        with inductor_config.patch(custom_partitioner_fn=part, fx_graph_cache=False), \
                functorch_config.patch(enable_autograd_cache=False):
            step(x).backward()
        fast = all(isinstance(k, tuple) and k[0] == KEEP_ALL for k in part.fronts)
        assert fast == (not whole and budget != "90%"), (budget, whole)
        if fast:
            (key,) = part.fronts
            assert len(part.fronts[key][0]) <= 2
        c = part.plans[-1]
        picked[budget, whole] = (c.report["step_peak_bytes"], c.report["step_recompute_flops"])
    assert picked["100%", False] == picked["100%", True] == picked["120%", False]
    assert picked["100%", True][1] == 0
    assert picked["90%", False][0] < picked["100%", True][0]


def test_meters_follow_a_replayed_random_op():
    """The allocator, MemTracker (the labelled view) and the FLOP counter (TorchDispatchModes)
    meter a step whose backward replays dropout through the RNG operators."""
    from planner.torch import measure

    m, x = dropout_mlp()
    step = apply_keep(m, set(), decompose=False, loss=MEAN)
    got = measure.measure_step(step, m, (x,))
    assert got["measured_peak_bytes"] > 0 and "allocator" in got["peak_measured_by"]
    assert measure.labelled_peak(step, m, (x,)) > 0
    assert measure.step_flops(step, (x,)) > 0


def test_recomputed_dropout_with_fallback_random_equals_eager():
    """With ``fallback_random`` Inductor draws as eager does; the replayed random ops keep that."""
    from planner.torch.compiled import fresh_function

    m, x = dropout_mlp()
    ours, eager = copy.deepcopy(m), copy.deepcopy(m)
    part = KeepNothing()
    with inductor_config.patch(fallback_random=True, custom_partitioner_fn=part,
                               fx_graph_cache=False), \
            functorch_config.patch(enable_autograd_cache=False):
        step = torch.compile(fresh_function(lambda v: ours(v).mean()), dynamic=False)
        torch.manual_seed(1)
        la = step(x)
        la.backward()
    torch.manual_seed(1)
    lb = eager(x).mean()
    lb.backward()
    assert "run_with_rng_state" in part.parts[0].code       # the backward replays the draw
    assert la.item() == pytest.approx(lb.item(), rel=1e-12)
    assert grad_gap(ours, eager) < 1e-12


def test_a_budget_below_every_plan_is_refused_not_raised():
    """A step budget no plan meets raises InfeasibleError (one line, the smallest reachable
    peak), from plan_for_step and from the first call of a compiled step alike; a plan that
    meets its budget says so."""
    from hgraph.common.errors import InfeasibleError

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)).double()
    x = torch.randn(16, 8, dtype=torch.float64)
    tg = pt.graph(m, x, loss=MEAN)
    with pytest.raises(InfeasibleError) as err:
        pt.plan_for_step(tg, 1)
    assert "smallest step peak" in _one_line(err) and err.value.min_budget_bytes > 1
    p = pt.plan_for_step(tg, err.value.min_budget_bytes)
    assert p.report["within_budget"] and p.report["step_peak_bytes"] == err.value.min_budget_bytes
    assert pt.plan_for_step(tg, "min").report["step_peak_bytes"] == err.value.min_budget_bytes
    step = pt.compile(copy.deepcopy(m), budget=1, loss=MEAN)
    with pytest.raises(InfeasibleError) as err:
        step(x)
    assert "below every step measured" in _one_line(err) and err.value.min_budget_bytes > 1


@pytest.mark.parametrize("name", ["bert", "mobilenet", "lstm"])
def test_example_models_of_new_families_plan(name):
    """The BERT-style encoder (dropout on), the depthwise-convolution CNN and the LSTM import,
    plan below keep-all and train a step equal to eager (bert: to its own keep-all step, since
    Inductor's decomposition of dropout draws other masks than eager's kernel)."""
    import os

    from planner.torch.model_file import load

    root = os.path.join(os.path.dirname(__file__), "..", "examples", "torch")
    spec = load(os.path.join(root, f"{name}.py:model"))
    tg = pt.graph(spec.model, *spec.inputs, loss=spec.loss, decompose=False)
    p = pt.plan(tg, _smallest(tg))
    assert p.recompute_cost > 0
    ours, ref = copy.deepcopy(spec.model), copy.deepcopy(spec.model)
    step = pt.apply(ours, p, *spec.inputs, loss=spec.loss)
    keep_all = pt.apply(ref, pt.plan(tg, "100%"), *spec.inputs, loss=spec.loss)
    torch.manual_seed(5)
    la = step(*spec.inputs)
    torch.manual_seed(5)
    lb = keep_all(*spec.inputs)
    assert la.item() == lb.item() and grad_gap(ours, ref) == 0.0
