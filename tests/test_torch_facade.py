"""The PyTorch front as planner API calls (issue 25), checked without torch.

* ``hgraph submit execute --torch`` is CLI glue: jobs/execute_torch.py imports nothing of the
  planner but the facade ``planner.torch`` (no capture, partition, measure or model-file
  internals), and refuses flags the step would not use in one line.
* :class:`planner.torch.TorchExecution` is a frozen dataclass whose fields are the report's
  keys in the report's order (the JSON the job wrote before the work moved below).
* ``planner.torch.plan`` hands :func:`planner.api.plan`'s keywords on as they are.
* ``import planner.torch`` loads neither torch nor NumPy.

The runs themselves (a real step, the typed result's values) are in tests/test_torch_bridge.py
and tests/test_torch_cli.py, which need torch.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import subprocess
import sys

import pytest

import planner.torch as pt
from jobs.cli import main as cli_main
from tests.conftest import ROOT

#: The keys of ``hgraph submit execute --torch``'s report, in its order (as jobs/execute_torch.py
#: wrote them before the work moved into planner.torch.execution).
REPORT_KEYS = ["model", "schedule", "capture", "budget", "budget_bytes", "predicted_peak_bytes",
               "measured_peak_bytes", "within_budget", "peak_measured_by",
               "plan_model_peak_bytes", "predicted_saved_bytes", "measured_saved_bytes",
               "planned_recompute_flops", "recompute_flops", "model_recompute_cost",
               "step_seconds", "gradients_match", "gradients_reference",
               "eager_gradients_max_rel_diff"]


def _planner_imports(path) -> set[str]:
    """Every ``planner`` module a file imports (module level or in a function), with the names
    taken from it: ``planner.torch`` / ``planner.torch:execute``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "planner"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "planner":
            found |= {f"{node.module}:{a.name}" for a in node.names}
    return found


def test_the_torch_job_calls_the_facade_only():
    assert _planner_imports(ROOT / "jobs" / "execute_torch.py") == {"planner.torch"}


def test_the_import_scan_sees_internals(tmp_path):
    """The scan above would see the internals the job used to import."""
    path = tmp_path / "job.py"
    path.write_text("def run():\n    from planner.torch import measure\n"
                    "    from planner.torch.partition import apply_keep\n"
                    "    import planner.torch.capture as cap\n")
    assert _planner_imports(path) == {"planner.torch:measure", "planner.torch.partition:apply_keep",
                                      "planner.torch.capture"}


def test_torch_execution_is_a_frozen_record_of_the_report():
    assert dataclasses.is_dataclass(pt.TorchExecution)
    assert [f.name for f in dataclasses.fields(pt.TorchExecution)] == REPORT_KEYS
    values = dict(zip(REPORT_KEYS, ["m.py:model", "keep-all", "eager", "80%", 8, 1, 3, True,
                                    "allocator", 2, 4, 5, 6, 7, 9, 0.5, True, "eager", 0.0]))
    r = pt.TorchExecution(**values)
    assert r.report() == values and list(r.report()) == REPORT_KEYS
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.measured_peak_bytes = 0


def test_plan_hands_planner_plans_keywords_on(monkeypatch):
    """pt.plan delegates: every keyword of planner.plan reaches it as given, on ``tg.cg``
    (the list is planner.plan's to say; it is not copied into the facade)."""
    import types

    import planner.api

    keywords = [n for n in inspect.signature(planner.api.plan).parameters
                if n not in ("graph_or_path", "budget")]
    seen = {}
    monkeypatch.setattr(planner.api, "plan", lambda g, budget, **kw: seen.update(g=g, b=budget,
                                                                                 **kw))
    given = {n: object() for n in keywords}
    pt.plan(types.SimpleNamespace(cg="the graph"), "60%", **given)
    assert seen == {"g": "the graph", "b": "60%", **given}


def test_import_planner_torch_stays_light():
    code = ("import sys, planner.torch as pt; pt.TorchExecution; "
            "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert got.returncode == 0 and got.stdout.strip() == "[]", got.stderr


@pytest.mark.parametrize("flags, word", [
    (["--runtime", "ray"], "--runtime ray does not apply with --torch"),
    (["--address", "127.0.0.1:1"], "--address does not apply with --torch"),
    (["--model", "mlp"], "--model does not apply with --torch"),
    (["--batch", "4"], "--batch does not apply with --torch"),
    (["--backend", "numpy"], "--backend does not apply with --torch"),
    (["--workspace", "1024"], "--workspace does not apply with --torch"),
])
def test_flags_the_step_would_not_use_are_refused(tmp_path, capsys, flags, word):
    """Refused in one line before the model file is read (it does not exist here)."""
    argv = ["submit", "execute", "--torch", str(tmp_path / "none.py") + ":model", *flags]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and word in err[0], err
