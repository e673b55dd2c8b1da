"""The PyTorch bridge (planner.torch): import, apply bitwise, CLI, errors, torch missing."""

import copy
import operator
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
nn = torch.nn

import planner.torch as pt  # noqa: E402
from tests.conftest import MEAN  # noqa: E402
from jobs.cli import main as cli_main  # noqa: E402
from hgraph.common.errors import HGraphError, InfeasibleError  # noqa: E402
from planner import cg, simulate  # noqa: E402
from planner.torch.partition import kept_vars  # noqa: E402
from tests.test_torch_facade import REPORT_KEYS  # noqa: E402


def small_cnn():
    torch.manual_seed(0)
    # deep enough in activations (against its parameters) that recomputation can beat keeping
    # everything: at the smallest feasible budget the plan recomputes and peaks below the baseline
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                      *[layer for _ in range(3) for layer in (nn.Conv2d(4, 4, 3, padding=1),
                                                              nn.ReLU())],
                      nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 10), nn.LayerNorm(10)).double()
    return m, torch.randn(4, 3, 8, 8, dtype=torch.float64)


def tightest(tg, **kw):
    """The plan at the smallest feasible budget (the most recomputation)."""
    try:
        return pt.plan(tg, 1, **kw)
    except InfeasibleError as err:
        return pt.plan(tg, err.min_budget_bytes, **kw)


def eager_grads(m, x, loss=None):
    m = copy.deepcopy(m)
    out = m(x)
    (loss(out) if loss else out.mean()).backward()
    return [p.grad for p in m.parameters()], list(m.buffers())


@pytest.mark.parametrize("decompose", [False, True])
def test_import_round_trips_with_flop_costs(decompose):
    m, x = small_cnn()
    tg = pt.graph(m, x, loss=MEAN, decompose=decompose)
    g = tg.cg
    assert cg.dumps(cg.loads(cg.dumps(g))) == cg.dumps(g)
    again = cg.loads(cg.dumps(g))
    assert np.array_equal(again.costs, g.costs)
    conv = [f for f in g.forward if f.type == "aten.convolution.default"]
    # 2 * out elements * (in channels * 3 * 3): FlopCounterMode's count for the first conv
    assert again.costs[conv[0].index] == 2 * (4 * 4 * 8 * 8) * (3 * 3 * 3)
    # one var per computed tensor: views are folded, so no var is named after a view op
    assert not any(n.startswith(("view", "alias", "permute", "squeeze")) for n in g.var_names)
    assert sum(1 for f in g.forward if f.type == "hgraph.keep") == 1


def test_apply_is_bitwise_equal_to_eager_and_keeps_the_plan():
    m, x = small_cnn()
    tg = pt.graph(m, x, loss=MEAN, decompose=False)
    p = tightest(tg)
    assert p.recompute_cost > 0                       # the plan does recompute something
    m1 = copy.deepcopy(m)
    step = pt.apply(m1, p, x, loss=MEAN)
    step(x)
    grads, bufs = eager_grads(m, x)
    assert all(torch.equal(a.grad, b) for a, b in zip(m1.parameters(), grads))
    assert all(torch.equal(a, b) for a, b in zip(m1.buffers(), bufs))
    kept = {tg.cg.var_names[v] for v in kept_vars(tg.cg, p.schedule)}
    fw = step.partition["forward"]
    out = next(n for n in fw.graph.nodes if n.op == "output").args[0]
    saved = {n.name for n in out if n is not None} - {n.name for n in fw.graph.nodes
                                                       if n.op == "placeholder"}
    assert saved and saved <= kept | {n for n in saved if n.startswith("clone")} | {
        n.name for n in out[:4] if n is not None}


def test_cli_graph_torch_writes_a_plannable_graph(tmp_path, capsys):
    spec = tmp_path / "m.py"
    spec.write_text("import torch\n"
                    "def model():\n"
                    "    torch.manual_seed(0)\n"
                    "    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(),\n"
                    "                            torch.nn.Linear(16, 4)).double()\n"
                    "    y = torch.zeros(3, 4, dtype=torch.float64)\n"
                    "    return m, torch.randn(3, 8, dtype=torch.float64), "
                    "lambda o: ((o - y) ** 2).mean()\n")
    out = tmp_path / "g.txt"
    assert cli_main(["graph", "torch", f"{spec}:model", "--out", str(out)]) == 0
    g = cg.read(out)
    assert g.costs is not None and len(g.forward) > 3
    assert not simulate.replay(g, pt.plan(pt.graph(*_load(spec)[:2], loss=_load(spec)[2]),
                                          "100%").schedule).violations
    assert cli_main(["graph", "torch", f"{spec}:nope", "--out", str(out)]) == 2
    assert "no function 'nope'" in capsys.readouterr().err


def _load(spec):
    from planner.torch.model_file import load

    s = load(f"{spec}:model")
    return s.model, s.inputs[0], s.loss


def test_without_torch_one_line_install_hint(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(Exception) as err:
        pt.require_torch()
    assert "pip install torch==2.13.0" in str(err.value)
    assert cli_main(["graph", "torch", "x.py:model", "--out", str(tmp_path / "g.txt")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "pip install" in lines[0]


def test_execute_reports_saved_bytes_and_matching_gradients(tmp_path):
    """pt.execute (what ``submit execute --torch`` prints): a typed result, its fields the
    report's keys in the report's order."""
    import dataclasses

    spec = tmp_path / "cnn.py"
    spec.write_text("import torch, torch.nn as nn\n"
                    "def model():\n"
                    "    torch.manual_seed(0)\n"
                    "    convs = [l for _ in range(3) for l in (nn.Conv2d(4, 4, 3, padding=1), nn.ReLU())]\n"
                    "    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),\n"
                    "                      *convs, nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 10)).double()\n"
                    "    return m, torch.randn(4, 3, 8, 8, dtype=torch.float64), "
                    "lambda out: out.mean()\n")
    model, x, loss = _load(spec)
    p = tightest(pt.graph(model, x, loss=MEAN, decompose=False))
    sched = tmp_path / "s.txt"
    p.schedule.write(sched)
    r = pt.execute(f"{spec}:model", str(sched))     # the eager capture's schedule: runs that one
    assert isinstance(r, pt.TorchExecution)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.gradients_match = False
    report = r.report()
    assert list(report) == REPORT_KEYS
    assert report == {k: getattr(r, k) for k in REPORT_KEYS}
    assert (r.model, r.schedule, r.capture) == (f"{spec}:model", str(sched), "eager")
    assert r.gradients_match is True and r.gradients_reference == "eager"
    assert r.eager_gradients_max_rel_diff == 0.0
    assert r.model_recompute_cost == p.recompute_cost > 0
    assert r.plan_model_peak_bytes == p.peak_bytes
    assert abs(r.measured_saved_bytes - r.predicted_saved_bytes) <= 0.01 * r.predicted_saved_bytes
    base = pt.execute(f"{spec}:model")
    assert (base.schedule, base.capture, base.gradients_reference) == ("keep-all", "inductor",
                                                                       "keep-all")
    assert base.recompute_flops == 0 and base.measured_saved_bytes >= r.measured_saved_bytes
    # the partition's liveness replay counts the tensors ops return, never above the allocator;
    # a float64 convolution's kernel also holds its im2col columns, which only the allocator
    # sees (bench/NOTES_torch.md: the apply path's slack), so the replay is a lower bound here
    for rep in (r, base):
        assert rep.predicted_peak_bytes <= rep.measured_peak_bytes
    # saved tensors are freed at their last backward use: recomputing lowers the real peak
    assert r.measured_peak_bytes < base.measured_peak_bytes


def test_compile_partition_matches_torch_compile_default():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 32),
                      nn.LayerNorm(32), nn.Linear(32, 4)).double()
    x = torch.randn(64, 8, dtype=torch.float64)      # activations outweigh the parameters
    m1 = copy.deepcopy(m)
    torch.compile(lambda z: m1(z).mean())(x).backward()
    m2 = copy.deepcopy(m)
    step = pt.compile(m2, budget="min", loss=MEAN)       # the tightest plan: recomputes the most
    step(x)
    (plan,) = step.partitioner.plans
    assert plan.report["measured_peak_bytes"] <= plan.report["torch_default_peak_bytes"]
    for a, b in zip(m2.parameters(), m1.parameters()):
        assert (a.grad - b.grad).abs().max() <= 1e-6 * b.grad.abs().max()


def test_planned_graph_holds_only_values_the_backward_reads():
    """Decomposed, the planner's forward values are those a backward op reads (or the forward
    ends with): its peak model then follows the step torch runs, not one ~2x above it."""
    from planner.torch import measure
    from planner.torch.capture import capture
    from planner.torch.model_graph import from_joint
    from planner.torch.partition import keep_names, partition

    m, x = small_cnn()
    joint, n_out = capture(m, (x,), loss=MEAN, decompose=True)
    tg, unfolded = from_joint(joint, n_out, True), from_joint(joint, n_out, True, fold=False)
    assert len(tg.cg.forward) < len(unfolded.cg.forward)
    from planner.torch.model_graph import is_view

    def base(a):            # a view is read as the value it aliases
        while is_view(a):
            a = a.args[0] if a.target is not operator.getitem else a.args[0].args[0]
        return a.name

    read = {base(a) for n in joint.graph.nodes if n.meta.get("partitioner_tag") == "is_backward"
            for a in n.all_input_nodes}
    for f in tg.cg.forward:
        v = f.outputs[0]
        made = [h for h in tg.cg.forward if v in {u for u, _ in h.inputs}
                and h.type != "hgraph.keep"]
        # read by the backward, a leaf (loss, keep block), or smaller than all made from it
        assert (tg.cg.var_names[v] in read or not made
                or all(tg.cg.var_bytes[v] < tg.cg.var_bytes[h.outputs[0]] for h in made)), f
    p = pt.plan(tg, "100%")
    fw, bw = partition(joint, n_out, keep_names(tg.cg, p.schedule))
    step = measure.predict_step_peak(fw, bw)
    assert abs(p.peak_bytes - step) <= 0.15 * step


def test_front_chooses_the_least_recompute_plan_that_fits_the_step_peak():
    from planner.torch import front

    m, x = small_cnn()
    tg = pt.graph(m, x, loss=MEAN)
    fr = front.front(tg)
    peaks = [c.step_peak for c in fr]
    flops = [c.recompute_flops for c in fr]
    assert peaks == sorted(peaks) and flops == sorted(flops, reverse=True) and len(fr) >= 2
    assert fr[-1].recompute_flops == 0 and fr[0].recompute_flops > 0
    mid = (peaks[0] + peaks[-1]) // 2
    c = front.choose(fr, mid)
    assert c.step_peak <= mid and all(d.recompute_flops >= c.recompute_flops
                                      for d in fr if d.step_peak <= mid)
    assert front.choose(fr, 0) is fr[0]
    assert front.resolve_step_budget(fr, "100%") == peaks[-1]


def test_front_skips_the_exact_solver_past_its_lower_set_limit():
    """A graph with more lower sets than ``exact_max_lower_sets`` gets the approximate solver's
    front only (a U-Net's 13,321 sets made ``planner.torch.compile`` spend minutes in the exact
    DP); at the limit the exact solver's plans are there."""
    from planner.torch import front

    tg = pt.graph(*small_cnn(), loss=MEAN)
    n = tightest(tg, solver="exact").report["n_lower_sets"]
    assert n > 1
    assert front.front(tg, solvers=("exact",), exact_max_lower_sets=n - 1) == []
    assert front.front(tg, solvers=("exact",), exact_max_lower_sets=n) != []
    keeps = [c.keep for c in front.front(tg, exact_max_lower_sets=n - 1)]
    assert keeps == [c.keep for c in front.front(tg, solvers=("approx",))]
