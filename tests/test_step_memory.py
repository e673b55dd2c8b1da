"""Issue 23, "a budget that holds": the whole step's predicted peak (``step_peak_bytes``,
:mod:`planner.execute.step_memory`) against tracemalloc's (``measured_step_peak_bytes``: the
meter started before the parameters and inputs are built), for every zoo model at three whole-step
budgets (the smallest reachable one included) and for row plans (VGG-16 and ResNet-50, R = 4 and
8, batch 1 and 8): measured within [0.9, 1.0] of predicted and at most the budget; a lower budget
never a higher measured peak; a budget below the smallest is refused naming it.
"""

from __future__ import annotations


import pytest

from hgraph.common.errors import InfeasibleError
from planner import ops as ops_mod
import planner
from planner.execute import executor, export, rows_exec, step_memory, zoo
from planner.rows.step import predict_rows
from planner.whole_step import PARTS
from planner.rows import plan as rows_plan

#: Every zoo model, at sizes whose step (1-5 MB) dwarfs the interpreter's own noise under
#: tracemalloc (tens of KB: free lists, object headers), and fast (a few seconds each).
SIZES = {"mlp": dict(batch=64, width=256), "resnet": dict(width=16), "unet": dict(),
         "transformer": dict(batch=8, seq=32), "vgg16": dict(width=8),
         "resnet50": dict(width=4, image=64)}
MODELS = tuple(SIZES)
WINDOW = (0.9, 1.0)


def _graph(name, **kw):
    return export.to_cg(zoo.build(name, **kw))


def _smallest(g) -> int:
    with pytest.raises(InfeasibleError) as err:
        planner.plan(g, budget=1, certify="off")
    assert "smallest reachable budget" in str(err.value) and "\n" not in str(err.value)
    return int(err.value.min_budget_bytes)


@pytest.mark.parametrize("name", MODELS)
def test_zoo_step_within_prediction_and_budget_at_three_budgets(name):
    g = _graph(name, **SIZES[name])
    lo = _smallest(g)
    full = planner.plan(g, budget="100%", certify="off")
    assert full.report["accounting"] == "whole-step" and full.within_budget
    budgets = [lo, (lo + full.budget_bytes) // 2, full.budget_bytes]
    runs = []
    for b in budgets:
        p = planner.plan(g, budget=b, certify="off")
        rep = p.report
        assert rep["budget_bytes"] == b and rep["step_peak_bytes"] <= b and p.within_budget
        assert set(PARTS) <= rep["step_peak_breakdown"].keys()
        assert sum(rep["step_peak_breakdown"][k] for k in PARTS) == rep["step_peak_bytes"]
        r = executor.run(g, p.schedule, executor.RunOptions(workspace=rep["workspace_bytes"]))
        ratio = r.measured_step_peak_bytes / rep["step_peak_bytes"]
        assert WINDOW[0] <= ratio <= WINDOW[1], (name, b, r.measured_step_peak_bytes, rep["step_peak_bytes"])
        assert r.measured_step_peak_bytes <= b
        runs.append((p.schedule.dumps(), rep["workspace_bytes"], r.measured_step_peak_bytes))
    for (s1, w1, m1), (s2, w2, m2) in zip(runs, runs[1:]):
        if (s1, w1) == (s2, w2):         # the same plan: the same step, up to the interpreter's noise
            assert abs(m1 - m2) <= 0.01 * m2
        else:                            # a lower budget never a higher measured peak
            assert m1 <= m2, (name, runs)


def test_a_budget_below_the_smallest_is_refused_and_the_smallest_is_reachable():
    g = _graph("resnet", **SIZES["resnet"])
    lo = _smallest(g)
    with pytest.raises(InfeasibleError):
        planner.plan(g, budget=lo - 1, certify="off")
    p = planner.plan(g, budget=lo, certify="off")
    assert p.within_budget and p.report["step_peak_bytes"] <= lo
    # a tight budget takes a smaller convolution workspace than the default, and says so
    assert p.report["workspace_bytes"] < ops_mod.CONV_WORKSPACE_BYTES


def test_reference_graphs_keep_the_activation_accounting(tmp_path):
    from tests.conftest import ROOT

    p = planner.plan(ROOT / "jobs" / "data" / "cg_resnet50.txt", budget="60%", certify="off")
    assert p.report["accounting"] == "activations" and "step_peak_bytes" not in p.report
    q = planner.plan(_graph("resnet"), budget="100%", certify="off", accounting="activations")
    assert q.report["accounting"] == "activations" and q.step is None


ROWS = [("vgg16", dict(width=8, image=32)), ("resnet50", dict(width=4, image=64))]


@pytest.mark.parametrize("name,kw", ROWS)
@pytest.mark.parametrize("batch", [1, 8])
def test_row_steps_within_prediction(name, kw, batch):
    g = _graph(name, batch=batch, **kw)
    for bands in (4, 8):
        p = rows_plan.plan(g, bands, "overlap")
        pred = predict_rows(g, p)
        r = rows_exec.run(g, p)
        ratio = r.measured_step_peak_bytes / pred.step_peak_bytes
        assert WINDOW[0] <= ratio <= WINDOW[1], (name, batch, bands, r.measured_step_peak_bytes,
                                                 pred.step_peak_bytes)


def _metered_kernels(monkeypatch, rec):
    """The executor's kernels metered per call (:func:`step_memory.metered_ops`)."""
    monkeypatch.setattr(executor, "OPS", step_memory.metered_ops(rec))


@pytest.mark.parametrize("name", ["resnet", "unet", "transformer"])
def test_kernel_temporaries_match_the_kernels(name, monkeypatch):
    """:func:`planner.ops.kernel_temp_bytes` against tracemalloc around each kernel call: never
    below it by more than a call's Python objects, and not far above (every op of the zoo)."""
    rec = []
    _metered_kernels(monkeypatch, rec)
    g = _graph(name)
    executor.run(g, executor.plain_schedule(g), executor.RunOptions(workspace=64 << 10))
    assert rec
    for k, phase, ins, out, a, e, want, into, got in rec:
        a = executor.with_workspace(a, k, 64 << 10)
        pred = ops_mod.kernel_temp_bytes(k, phase, ins, out, a, e, want, into)
        assert got - 6000 <= pred <= 1.1 * got + 12000, (k, phase, ins, out, into, pred, got)


def test_the_cli_refuses_an_unreachable_whole_step_budget_in_one_line(tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT

    path = tmp_path / "resnet.txt"
    export.write(zoo.build("resnet"), path)
    proc = subprocess.run([sys.executable, "-m", "jobs", "submit", "plan", "--graph", str(path),
                           "--budget", "50%", "--certify", "off"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 3 and len(lines) == 1 and "Traceback" not in proc.stderr
    assert "smallest reachable budget is" in lines[0] and "whole step" in lines[0]


def test_evaluate_reports_the_whole_step_under_the_plans_workspace():
    """The execution report of a plan that chose a small workspace: the whole step predicted and
    measured, and gradients bitwise equal to a plain step under the same cap."""
    g = _graph("resnet")
    p = planner.plan(g, budget=_smallest(g), certify="off")
    ws = p.report["workspace_bytes"]
    assert ws < ops_mod.CONV_WORKSPACE_BYTES
    rep = step_memory.evaluate(g, p.schedule, workspace=ws, recycle=True)
    assert rep["accounting"] == "whole-step" and rep["workspace_bytes"] == ws
    assert rep["step_peak_bytes"] == p.report["step_peak_bytes"] and rep["gradients_match"]
    assert rep["step_within_prediction"] and 0.9 <= rep["measured_over_step_peak"] <= 1.0
