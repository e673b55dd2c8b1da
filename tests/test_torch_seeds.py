"""torch's min-cut partitions on hgraph's front (planner.torch.seeds): hgraph's partition of a
min-cut keep set is torch's partition, and the front keeps every one of them."""

import copy

import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
nn = torch.nn

from hgraph.common.errors import HGraphError  # noqa: E402
from planner.torch import front, measure, seeds  # noqa: E402
import planner.torch as pt  # noqa: E402
from tests.conftest import MEAN  # noqa: E402
from planner.torch.capture import capture, cse  # noqa: E402


def small_gpt_block():
    """Layer norm, GELU and a residual: the min-cut saves layer norm's normalised value and a
    backward op (``rsqrt / D``), which hgraph's partition must take as forward values."""
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.fc1, self.fc2 = nn.LayerNorm(32), nn.Linear(32, 64), nn.Linear(64, 32)
            self.ln2, self.head = nn.LayerNorm(32), nn.Linear(32, 4)

        def forward(self, x):
            x = x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln1(x))))
            return self.head(self.ln2(x))

    return Block().double(), torch.randn(16, 32, dtype=torch.float64)


def torch_partition(joint, n_out, budget):
    import torch._functorch.config as functorch_config
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    work = cse(joint)
    with functorch_config.patch(activation_memory_budget=budget):
        return min_cut_rematerialization_partition(work, None, num_fwd_outputs=n_out)


@pytest.mark.parametrize("budget", [0.2, 0.5, 1.0])
def test_hgraph_partition_of_a_min_cut_set_is_torchs_step(budget):
    """Same replayed peak, same recomputed FLOPs as torch's own partition of the same joint."""
    m, x = small_gpt_block()
    joint, n_out = capture(m, (x,), loss=MEAN, decompose=True)
    merged = cse(joint)
    t_fw, t_bw = torch_partition(joint, n_out, budget)
    keep = seeds.representable(merged, seeds.min_cut_saved(merged, None, budget,
                                                           num_fwd_outputs=n_out))
    assert keep, "the min-cut saves something"
    from planner.torch.model_graph import from_joint

    c = front.seeded_candidate(from_joint(merged, n_out, decompose=True), keep, "min-cut")
    assert c.source == "min-cut" and c.plan.solver == "min-cut"  # the label given
    assert c.step_peak == measure.predict_step_peak(t_fw, t_bw)
    assert c.recompute_flops == measure.recompute_flops(merged, t_bw)


def test_min_cut_saved_leaves_the_joint_graph_as_it_was():
    m, x = small_gpt_block()
    joint, n_out = capture(m, (x,), loss=MEAN, decompose=True)
    before = str(joint.graph)
    seeds.min_cut_saved(joint, None, 0.3, num_fwd_outputs=n_out)
    assert str(joint.graph) == before


def test_front_keeps_every_distinct_min_cut_set_and_prunes_plans_only():
    from planner.torch.model_graph import from_joint

    m, x = small_gpt_block()
    joint, n_out = capture(m, (x,), loss=MEAN, decompose=True)
    merged = cse(joint)
    keeps = seeds.min_cut_keeps(merged, None, num_fwd_outputs=n_out)
    assert len(set(keeps.values())) == len(keeps) >= 2
    tg = from_joint(merged, n_out, decompose=True)
    fr = front.front(tg, seeds=keeps)
    got = [c for c in fr if c.source == "min-cut"]
    plans = [c for c in fr if c.source == "plan"]
    dp_keeps = {c.keep for c in plans}
    assert {c.keep for c in got} == {k for k in keeps.values() if k not in dp_keeps}
    peaks = [c.step_peak for c in plans]
    flops = [c.recompute_flops for c in plans]
    assert peaks == sorted(peaks) and flops == sorted(flops, reverse=True)
    assert [c.step_peak for c in fr] == sorted(c.step_peak for c in fr)
    # the budget in percent is of the keep-all step, whatever the seeds' peaks
    assert front.resolve_step_budget(fr, "100%") == max(
        c.step_peak for c in fr if c.recompute_flops == 0)


def test_compile_with_min_cut_seeds_trains_like_eager_at_every_pick():
    """Whatever candidate the first call of a compiled step settles on, plan or min-cut
    partition, the step's gradients are eager's: each candidate of the front compiled."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    from planner.torch.compiled import HGraphPartitioner, fresh_function

    m, x = small_gpt_block()
    ref = copy.deepcopy(m)
    ref(x).mean().backward()
    part = HGraphPartitioner("min", progress="off")

    def run():
        mm = copy.deepcopy(m)
        step = torch.compile(fresh_function(lambda v: mm(v).mean()), dynamic=False)
        with inductor_config.patch(custom_partitioner_fn=part, fx_graph_cache=False), \
                functorch_config.patch(enable_autograd_cache=False):
            step(x).backward()
        for a, b in zip(mm.parameters(), ref.parameters()):
            assert (a.grad - b.grad).abs().max() <= 1e-9 * max(1.0, b.grad.abs().max())
        return part.plans[-1]

    run()                                           # plans the front, splits by its pick
    (key,) = part.keys
    fr = part.fronts[key][0]
    assert any(c.source == "min-cut" for c in fr), "the front offers min-cut partitions"
    for i, c in enumerate(fr):
        part.trial = {key: i}
        assert run() is c.plan


def test_compile_shows_its_planning_on_stderr(capsys):
    """Planning a step's front takes seconds to minutes: ``progress="plain"`` says so on
    stderr, a job's own tracker sees each stage, and the default stays quiet in a pipe."""
    from contextlib import nullcontext

    from hgraph.common.progress import tracking

    m, x = small_gpt_block()
    pt.compile(copy.deepcopy(m), budget="min", loss=MEAN, progress="plain")(x)
    err = capsys.readouterr().err
    assert "hgraph: planning the step:" in err and err.strip().endswith(" s")

    class Recorder:
        kind, names = "plain", []

        def stage(self, name):
            self.names.append(name)
            return nullcontext()

        def superstep(self, row):
            pass

        def position(self, done, total):
            pass

        def close(self):
            pass

    rec = Recorder()
    with tracking(tracker=rec):                     # below 100%: the whole front is planned
        pt.compile(copy.deepcopy(m), budget="min", loss=MEAN)(x)
    assert rec.names[:2] == ["hgraph: planning the step", "torch's min-cut partitions"]
    assert {"step front: approx plans", "step front: min-cut partitions"} <= set(rec.names)
    pt.compile(copy.deepcopy(m), loss=MEAN)(x)                 # "auto", stderr is no terminal here
    assert "hgraph" not in capsys.readouterr().err
    with pytest.raises(HGraphError, match="^progress must be one of auto, bar, plain, off, "
                                          "got 'loud'$"):
        pt.compile(copy.deepcopy(m), progress="loud")


def test_torchs_own_budget_grid_is_on_the_front():
    """torch's ``activation_memory_budget`` points in steps of 0.2 (what the realistic bench
    and issue 35 compare against) are all seeds, so each of torch's partitions there is one of
    the keep sets the front is offered (and keeps: the test above), labelled by the first
    budget giving it."""
    assert {0.2, 0.4, 0.6, 0.8, 1.0} <= set(seeds.MIN_CUT_BUDGETS)
    m, x = small_gpt_block()
    joint, n_out = capture(m, (x,), loss=MEAN, decompose=True)
    merged = cse(joint)
    keeps = seeds.min_cut_keeps(merged, None, num_fwd_outputs=n_out)
    for b in (0.2, 0.4, 0.6, 0.8, 1.0):
        keep = seeds.representable(merged, seeds.min_cut_saved(merged, None, b,
                                                               num_fwd_outputs=n_out))
        labels = [lab for lab, k in keeps.items() if k == keep]
        assert len(labels) == 1 and float(labels[0].split()[-1]) <= b


def test_recompute_flops_split_by_op_kind_adds_up():
    """``measure.recompute_flops(..., ops=)`` (the realistic bench's matmul / pointwise split of
    a front): the compute-intensive part and the rest add up to the whole; a low budget's
    min-cut partition of the block recomputes both kinds."""
    from torch._functorch.partitioners import get_default_op_list

    heavy = get_default_op_list().is_compute_intensive
    m, x = small_gpt_block()
    joint, n_out = capture(m, (x,), loss=MEAN, decompose=True)
    merged = cse(joint)
    bw = seeds.min_cut_partition(merged, None, 0.0, num_fwd_outputs=n_out)[2]
    total = measure.recompute_flops(merged, bw)
    mm = measure.recompute_flops(merged, bw, ops=heavy)
    rest = measure.recompute_flops(merged, bw, ops=lambda n: not heavy(n))
    assert mm + rest == total and mm > 0 and rest > 0
