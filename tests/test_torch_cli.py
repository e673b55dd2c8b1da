"""The PyTorch bridge from the command line, and recurrent models (issue 24).

* One capture for every path: ``hgraph graph torch M.py:model --out g.txt``, ``hgraph submit plan
  --graph g.txt --out s.txt`` and ``hgraph submit execute --torch M.py:model --schedule s.txt``
  run the same captured step (the default Inductor decomposition, or ``--eager`` on both).
* Errors raised in the user's model file are one line naming its file and line, exit 2, no
  traceback, from both commands.
* ``nn.LSTM`` / ``nn.GRU`` models import, plan and apply (a float32 LSTM on CPU traced as
  oneDNN's ``mkldnn_rnn_layer`` ended in a traceback inside AOTAutograd).
"""

import copy
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
nn = torch.nn

import planner  # noqa: E402
import planner.torch as pt  # noqa: E402
from tests.conftest import MEAN  # noqa: E402
from hgraph.common.errors import InfeasibleError  # noqa: E402
from jobs.cli import main as cli_main  # noqa: E402
from planner import cg  # noqa: E402
from tests.test_torch_facade import REPORT_KEYS  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples", "torch")


def example(tmp_path, name, **sizes):
    """A model file calling ``examples/torch/NAME.py``'s ``model(**sizes)`` (small sizes)."""
    path = tmp_path / f"small_{name}.py"
    path.write_text("import importlib.util\n"
                    f"_s = importlib.util.spec_from_file_location('ex_{name}', "
                    f"{os.path.join(EXAMPLES, name + '.py')!r})\n"
                    "_m = importlib.util.module_from_spec(_s)\n"
                    "_s.loader.exec_module(_m)\n"
                    "def model():\n"
                    f"    return _m.model(**{sizes!r})\n")
    return f"{path}:model"


def tightest_budget(graph_path) -> str:
    """The smallest feasible budget of the graph (the plan recomputes the most there)."""
    try:
        return str(int(planner.plan(cg.read(graph_path), budget=1).peak_bytes))
    except InfeasibleError as err:
        return str(int(err.min_budget_bytes))


def round_trip(tmp_path, spec, *flags):
    """graph torch -> submit plan (tightest budget) -> execute --torch; the report."""
    g, s, r = (str(tmp_path / n) for n in ("g.txt", "s.txt", "r.json"))
    assert cli_main(["graph", "torch", spec, "--out", g, *flags]) == 0
    assert cli_main(["submit", "plan", "--graph", g, "--budget", tightest_budget(g),
                     "--out", s]) == 0
    assert cli_main(["submit", "execute", "--torch", spec, "--schedule", s, "--report", r,
                     *flags]) == 0
    with open(r) as f:
        report = json.load(f)
    assert list(report) == REPORT_KEYS             # the job prints planner.torch.execute's record
    # the backward that ran recomputes what the plan's partition was priced with
    assert report["planned_recompute_flops"] == report["recompute_flops"]
    return report, g, s


def test_cli_round_trip_gpt(tmp_path, capsys):
    spec = example(tmp_path, "gpt", batch=2, seq=8, d=16, layers=1)
    report, g, s = round_trip(tmp_path, spec)
    assert report["capture"] == "inductor"
    assert report["gradients_match"] is True and report["gradients_reference"] == "keep-all"
    assert report["planned_recompute_flops"] > 0         # the plan does recompute
    assert report["eager_gradients_max_rel_diff"] < 1e-9
    # the schedule of the Inductor capture does not fit the eager one: one line saying so
    capsys.readouterr()
    assert cli_main(["submit", "execute", "--torch", spec, "--schedule", s, "--eager"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a valid schedule for the eager capture" in err[0]
    assert "hgraph graph torch" in err[0]
    # --eager with the Inductor graph, an IMPOSSIBLE schedule: one line each, before any capture
    impossible = tmp_path / "impossible.txt"
    impossible.write_text("IMPOSSIBLE\n")
    for argv, word in ((["--schedule", s, "--graph", g, "--eager"],
                        f"{g}: captured for Inductor, not --eager"),
                       (["--schedule", str(impossible)],
                        f"{impossible}: the schedule is IMPOSSIBLE")):
        assert cli_main(["submit", "execute", "--torch", spec, *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and word in err[0], err


def test_cli_round_trip_cnn_eager_and_with_graph(tmp_path, capsys):
    spec = example(tmp_path, "resnet", batch=2, image=8, width=4)
    report, g, s = round_trip(tmp_path, spec, "--eager")
    assert report["capture"] == "eager" and report["gradients_match"] is True
    assert report["gradients_reference"] == "eager"       # bitwise equal to eager autograd
    assert report["eager_gradients_max_rel_diff"] == 0.0
    # --graph: the capture is the graph's own (no --eager needed), and it must be that graph
    r = str(tmp_path / "r2.json")
    assert cli_main(["submit", "execute", "--torch", spec, "--schedule", s, "--graph", g,
                     "--report", r]) == 0
    with open(r) as f:
        assert json.load(f)["capture"] == "eager"
    # neither --eager nor --graph: the schedule is not the default graph's but the eager one's
    assert cli_main(["submit", "execute", "--torch", spec, "--schedule", s, "--report", r]) == 0
    with open(r) as f:
        again = json.load(f)
    assert again["capture"] == "eager" and again["gradients_match"] is True
    other = example(tmp_path, "resnet", batch=2, image=8, width=8)
    capsys.readouterr()
    assert cli_main(["submit", "execute", "--torch", other, "--schedule", s, "--graph", g]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not the eager graph of" in err[0] and "--eager" in err[0]


def test_execute_runs_the_default_capture_of_graph_torch(tmp_path):
    """A CNN written here (batch norm, max-pool): the default round trip runs Inductor's
    decomposition, gradients bitwise those of the same capture keeping everything."""
    path = tmp_path / "cnn.py"
    path.write_text("import torch, torch.nn as nn\n"
                    "def model():\n"
                    "    torch.manual_seed(0)\n"
                    "    convs = [l for _ in range(2) for l in (nn.Conv2d(4, 4, 3, padding=1), "
                    "nn.ReLU())]\n"
                    "    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), "
                    "nn.ReLU(), *convs,\n"
                    "                      nn.MaxPool2d(2), nn.Flatten(), "
                    "nn.Linear(64, 10)).double()\n"
                    "    return m, torch.randn(4, 3, 8, 8, dtype=torch.float64), "
                    "lambda out: out.mean()\n")
    report, _, _ = round_trip(tmp_path, f"{path}:model")
    assert report["capture"] == "inductor" and report["gradients_match"] is True
    assert report["recompute_flops"] > 0
    assert report["eager_gradients_max_rel_diff"] < 1e-9


# --- the round trip on the step torch runs: budget, allocator meter, planned recomputation -----

def _dispatched_recompute(spec_text, schedule_path) -> int:
    """FLOPs the planned step runs beyond the keep-everything step, counted op by op as they
    are dispatched (:func:`planner.torch.measure.step_flops`): independent of the partition
    and of the plan's own figure."""
    from types import SimpleNamespace

    from planner.fixed_schedules import baseline_schedule
    from planner.schedule import Schedule
    from planner.torch import measure
    from planner.torch.model_file import load
    from planner.torch.partition import apply_keep, keep_names

    spec = load(spec_text)
    tg = pt.graph(copy.deepcopy(spec.model), *spec.inputs, loss=spec.loss, progress="off")
    planned = Schedule.read(schedule_path)

    def run(schedule, order):
        m = copy.deepcopy(spec.model)
        step = apply_keep(m, keep_names(tg.cg, schedule), True, loss=spec.loss, plan=order)
        step(*spec.inputs)                          # traced outside the count
        return measure.step_flops(step, spec.inputs)

    return (run(planned, SimpleNamespace(graph=tg.cg, schedule=planned))
            - run(baseline_schedule(tg.cg), None))


def test_cli_round_trip_holds_the_step_budget(tmp_path, capsys):
    """graph torch writes the step front; plan budgets torch's step on it (100% = the
    keep-all step, 'min' = the lowest); execute --torch --budget runs exactly the planned
    recomputation (counted on the executed graph and, independently, op by op) and measures
    at most the budget by the allocator's events."""
    spec = example(tmp_path, "gpt", batch=2, seq=8, d=16, layers=1)
    g = str(tmp_path / "g.txt")
    assert cli_main(["graph", "torch", spec, "--out", g]) == 0
    assert "step front:" in capsys.readouterr().err
    seen = {}
    for budget in ("100%", "min"):
        s, p, r = (str(tmp_path / f"{k}_{budget[:-1] or 'min'}") for k in ("s", "p", "r"))
        assert cli_main(["submit", "plan", "--graph", g, "--budget", budget, "--out", s,
                         "--report", p]) == 0
        assert cli_main(["submit", "execute", "--torch", spec, "--graph", g, "--schedule", s,
                         "--budget", budget, "--report", r]) == 0
        with open(p) as f1, open(r) as f2:
            plan, run = json.load(f1), json.load(f2)
        seen[budget] = plan, run, s
        assert plan["accounting"] == "whole-step" and plan["within_budget"] is True
        assert run["budget_bytes"] == plan["budget_bytes"]          # one reading of the budget
        assert run["measured_peak_bytes"] <= run["budget_bytes"] and run["within_budget"]
        assert "CPU allocator" in run["peak_measured_by"]
        assert run["predicted_peak_bytes"] == plan["step_replayed_peak_bytes"]
        assert plan["recompute_cost"] == run["planned_recompute_flops"] == run["recompute_flops"]
        assert run["gradients_match"] is True
    full, low = seen["100%"][0], seen["min"][0]
    assert full["recompute_cost"] == 0                   # 100% is the keep-everything step
    assert full["budget_bytes"] == full["step_baseline_peak_bytes"] == full["step_peak_bytes"]
    assert low["recompute_cost"] > 0 and low["budget_bytes"] == low["step_peak_bytes"]
    assert low["budget_bytes"] < full["budget_bytes"]
    assert seen["min"][1]["measured_peak_bytes"] < seen["100%"][1]["measured_peak_bytes"]
    assert _dispatched_recompute(spec, seen["min"][2]) == low["recompute_cost"]
    # below the lowest step: refused in one line naming it, exit 3 (as every plan)
    capsys.readouterr()
    below = str(low["budget_bytes"] - 1)
    assert cli_main(["submit", "plan", "--graph", g, "--budget", below, "--out",
                     str(tmp_path / "x.txt")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "smallest reachable" in err[0] and "'min'" in err[0]


def test_execute_torch_reports_a_missed_budget_in_one_line(tmp_path, capsys):
    """A measured peak above --budget is the report's ``within_budget: false`` and one line on
    stderr, exit 0 (the step ran; as a plan above its budget); a percent budget without the
    graph's step front is one line, exit 2, before any step runs."""
    path = tmp_path / "mlp.py"
    path.write_text("import torch, torch.nn as nn\n"
                    "def model():\n"
                    "    torch.manual_seed(0)\n"
                    "    m = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))\n"
                    "    return m, torch.randn(16, 8), lambda out: out.pow(2).mean()\n")
    spec, r = f"{path}:model", str(tmp_path / "r.json")
    assert cli_main(["submit", "execute", "--torch", spec, "--budget", "1000",
                     "--report", r]) == 0
    with open(r) as f:
        report = json.load(f)
    assert report["budget_bytes"] == 1000 and report["within_budget"] is False
    assert report["measured_peak_bytes"] > 1000
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "above the budget" in err[1] and "1000" in err[1]
    assert cli_main(["submit", "execute", "--torch", spec, "--budget", "60%"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--graph" in err[0]


# --- errors raised in the model file: one line, its file and line, exit 2 -------------------

MODEL = '''import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)


def ok():
    torch.manual_seed(0)
    return Net().double(), torch.randn(5, 4, dtype=torch.float64)


def raises():
    torch.manual_seed(0)
    scale = 1 / 0
    return Net(), scale


def wrong():
    return Net()


def not_tensors():
    return Net(), "x"


def bad_shape():
    return Net().double(), torch.randn(5, 7, dtype=torch.float64)


def non_scalar():
    return Net().double(), torch.randn(5, 4, dtype=torch.float64), lambda out: out * 2


def loss_raises():
    return (Net().double(), torch.randn(5, 4, dtype=torch.float64),
            lambda out: out.no_such_method())
'''

#: case -> (file text, FUNC, the line the error names, a word the message holds)
CASES = {
    "exception in FUNC": (MODEL, "raises", 21, "ZeroDivisionError"),
    "FUNC returns one thing": (MODEL, "wrong", 25, "must return (model, inputs)"),
    "FUNC returns no tensors": (MODEL, "not_tensors", 29, "tensor"),
    "shape error in forward": (MODEL, "bad_shape", 11, "RuntimeError"),
    "non-scalar loss": (MODEL, "non_scalar", 38, "scalar"),
    "non-scalar output, no loss_fn": (MODEL, "ok", 14, "loss="),
    "exception in the loss": (MODEL, "loss_raises", 43, "AttributeError"),
    "import error": ("import torch\nimport no_such_module_hgraph\n" + MODEL, "ok", 2,
                     "No module named"),
    "syntax error": (MODEL + "\ndef broken(:\n    pass\n", "ok", MODEL.count("\n") + 2,
                     "syntax error"),
    "name error at top level": (MODEL + "\nSIZE = undefined_name\n", "ok",
                                MODEL.count("\n") + 2, "NameError"),
}


@pytest.mark.parametrize("command", ["graph", "execute"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_model_file_errors_are_one_line_with_file_and_line(tmp_path, capsys, case, command):
    text, func, line, word = CASES[case]
    path = tmp_path / "m.py"
    path.write_text(text)
    spec = f"{path}:{func}"
    if command == "graph":
        argv = ["graph", "torch", spec, "--out", str(tmp_path / "g.txt")]
    else:
        argv = ["submit", "execute", "--torch", spec]
    capsys.readouterr()
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"hgraph: error: {path}:{line}: "), err[0]
    assert word in err[0] and "Traceback" not in err[0]


def test_model_file_error_is_one_line_on_the_real_stderr(tmp_path):
    """Through the installed command: torch's own error log of a failing shape check (a
    traceback it logs before raising) does not reach the user either."""
    path = tmp_path / "m.py"
    path.write_text(MODEL)
    got = subprocess.run([sys.executable, "-m", "jobs.cli", "graph", "torch",
                          f"{path}:bad_shape", "--out", str(tmp_path / "g.txt")],
                         capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    lines = got.stderr.strip().splitlines()
    assert got.returncode == 2 and len(lines) == 1, got.stderr
    assert lines[0].startswith(f"hgraph: error: {path}:11: RuntimeError")


# --- recurrent models -----------------------------------------------------------------------

class Recurrent(nn.Module):
    """``nn.LSTM`` / ``nn.GRU`` (batch_first, two layers) and a linear head."""

    def __init__(self, kind, hidden=8, layers=2):
        super().__init__()
        self.rnn = getattr(nn, kind)(4, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, 2)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


def recurrent(kind, dtype=torch.float64, batch=8, seq=10, **kw):
    torch.manual_seed(0)
    return Recurrent(kind, **kw).to(dtype), torch.randn(batch, seq, 4, dtype=dtype)


def eager_step(m, x):
    m = copy.deepcopy(m)
    m(x).mean().backward()
    return m


def rel_gap(a, b) -> float:
    return max(float((p.grad - q.grad).abs().max() / q.grad.abs().max())
               for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("kind,budget", [("LSTM", "60%"), ("GRU", "70%")])
def test_recurrent_model_imports_plans_and_applies(kind, budget):
    m, x = recurrent(kind)
    tg = pt.graph(m, x, loss=MEAN)               # Inductor's decomposition (the default)
    p = pt.plan(tg, budget)
    assert p.recompute_cost > 0 and p.peak_bytes < p.report["baseline_peak_bytes"]
    planned = copy.deepcopy(m)
    pt.apply(planned, p, x, loss=MEAN)(x)
    assert rel_gap(planned, eager_step(m, x)) < 1e-12


def test_lstm_eager_capture_is_bitwise_eager():
    m, x = recurrent("LSTM")
    tg = pt.graph(m, x, loss=MEAN, decompose=False)
    p = pt.plan(tg, "60%")
    planned = copy.deepcopy(m)
    pt.apply(planned, p, x, loss=MEAN)(x)
    ref = eager_step(m, x)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(planned.parameters(),
                                                           ref.parameters()))


def test_float32_lstm_imports_as_native_ops():
    """On CPU a float32 LSTM runs oneDNN's mkldnn_rnn_layer, which AOTAutograd could not
    capture; it is traced as the native per-timestep ops (oneDNN stays as the caller set it)."""
    m, x = recurrent("LSTM", torch.float32, batch=4, seq=4, layers=1)
    before = torch.backends.mkldnn.enabled
    tg = pt.graph(m, x, loss=MEAN, decompose=False)
    assert torch.backends.mkldnn.enabled == before
    ops = {f.type for f in tg.cg.forward}
    assert not any("mkldnn" in op for op in ops) and "aten.sigmoid.default" in ops
    p = pt.plan(tg, "100%")
    planned = copy.deepcopy(m)
    pt.apply(planned, p, x, loss=MEAN)(x)
    assert rel_gap(planned, eager_step(m, x)) < 1e-5


def test_compiled_lstm_is_planned_not_run_eagerly():
    """Dynamo runs an ``nn.LSTM`` eagerly unless told otherwise; ``planner.torch.compile``
    traces it, so the LSTM's activations are in the partition hgraph plans."""
    m, x = recurrent("LSTM", seq=4, layers=1)
    planned = copy.deepcopy(m)
    step = pt.compile(planned, budget="min", loss=MEAN)
    step(x)
    plans = step.partitioner.plans
    assert plans, "the partitioner saw the step"
    assert any(op.startswith("aten.sigmoid") for op in {f.type for f in plans[-1].graph.forward})
    assert rel_gap(planned, eager_step(m, x)) < 1e-12
