"""What a command loads: ``hgraph submit plan`` stays a small-graph, sub-second command.

Each check runs the real command in a fresh interpreter and then reads ``sys.modules``: a module
imported at the top of the CLI, a job or the planner (Ray, matplotlib, rich, torch, SciPy, the
Ray Jobs client) costs every run 0.1-1 s before any work, whether it is used or not.
bench/small_plan_bench.py measures the time; these tests keep the import graph honest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from planner import cg, synth
from planner.plain_table import _RICH_ENV
from tests.conftest import ROOT

#: Runs ``python -m jobs ARGV`` in this interpreter, then prints the top-level packages loaded.
PROBE = """
import json, runpy, sys
sys.argv = ["hgraph", *json.loads(sys.argv[1])]
try:
    runpy.run_module("jobs", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    code = stop.code
else:
    code = 0
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

NEVER_FOR_HELP = ("ray", "matplotlib", "rich", "torch", "scipy", "cluster.jobs_api")
NEVER_FOR_A_LOCAL_PLAN = ("ray", "matplotlib", "torch", "scipy", "cluster.jobs_api")


def _loaded(*argv, env=None) -> tuple[int, set[str]]:
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps([str(a) for a in argv])],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    last = proc.stdout.strip().splitlines()[-1]
    out = json.loads(last)
    return out["code"], set(out["modules"])


def _offenders(modules: set[str], banned) -> list[str]:
    return sorted(m for m in modules if any(m == b or m.startswith(b + ".") for b in banned))


def test_plan_help_loads_no_heavy_package():
    code, modules = _loaded("submit", "plan", "--help")
    assert code == 0
    assert not _offenders(modules, NEVER_FOR_HELP)
    # only the chosen sub-command declares its flags: the zoo's model table is not loaded
    assert "planner.execute.zoo" not in modules


def test_local_plan_loads_no_ray_torch_or_matplotlib(tmp_path):
    graph = tmp_path / "cg_small.txt"
    cg.write(synth.build(layers=2, heads=2), graph)
    out = tmp_path / "s.txt"
    code, modules = _loaded("submit", "plan", "--graph", graph, "--runtime", "local",
                            "--budget", "60%", "--out", out)
    assert code == 0 and out.read_text().startswith("compute ")
    assert not _offenders(modules, NEVER_FOR_A_LOCAL_PLAN)
    # engine pieces a run without checkpoints or a cluster never needs
    assert not _offenders(modules, ("hgraph.checkpoint", "hgraph.runtime.ray_actors", "socket"))
    # nor the other jobs (their modules load only when run or listed), numpy.ma (np.unique),
    # the scale path's stacked loop or Chen's solver
    assert not _offenders(modules, ("jobs.sssp", "jobs.pagerank", "jobs.cc", "jobs.execute",
                                    "jobs.graph_synth", "hgraph.algorithms", "numpy.ma",
                                    "planner.dp.stacked", "planner.chen"))


#: What a plan of a reference cg.txt dump (no op arguments: nothing to run, no whole step to
#: budget) never needs: the executor, the op table and its kernels, the row planner, the
#: PyTorch bridge, the heavy optional packages, and fractions/decimal (exact budget arithmetic
#: is done on integers). Each is 5-150 ms of every small plan (bench/small_plan_bench.py).
NEVER_FOR_A_REFERENCE_PLAN = ("planner.execute", "planner.ops", "planner.winograd",
                              "planner.rows", "planner.torch", "torch", "scipy", "matplotlib",
                              "rich", "ray", "fractions", "decimal")


@pytest.mark.parametrize("units", ["reference", "bytes"])
def test_a_reference_plan_loads_no_executor_kernels_or_heavy_package(tmp_path, units):
    graph = ROOT / "tests" / "data" / "graphs" / "cg_googlenet.txt"
    out = tmp_path / "s.txt"
    # as in a pipe or a log (pytest sets COLUMNS, which hands the summary to rich)
    env = {k: v for k, v in os.environ.items() if k not in _RICH_ENV}
    code, modules = _loaded("submit", "plan", "--graph", graph, "--units", units,
                            "--budget", "60%", "--out", out, env=env)
    assert code == 0 and out.read_text().startswith("compute ")
    assert _offenders(modules, NEVER_FOR_A_REFERENCE_PLAN) == []


def test_help_lists_every_job_s_help_line():
    """The job table does not import its modules to build the parser; a help listing does."""
    from jobs import cli

    proc = subprocess.run([sys.executable, "-m", "jobs", "submit", "--help"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    for name, module in cli.JOBS.items():
        help_line = " ".join(__import__(module, fromlist=["HELP"]).HELP.split())
        assert name in text and help_line in text, name


def test_plain_summary_is_rich_s_text(tmp_path):
    """In a pipe the summary is drawn without rich, character for character as rich draws it;
    where rich would wrap (a title wider than the table, a row past the width) it is left to rich."""
    import io

    import planner
    from rich.console import Console
    from planner import report
    from planner.plain_table import PlainTable

    for layers, budget in ((2, "60%"), (3, "45%"), (1, "100%")):
        rep = planner.plan(synth.build(layers=layers, heads=2), budget=budget).report
        for name in ("g", "graph-with-a-long-name", "odd"):
            rep["graph"] = name
            want = io.StringIO()
            Console(file=want, width=100).print(report.summary_table(rep))
            got = report.summary_table(rep, PlainTable).render(100)
            assert got == want.getvalue() if len(name) < 5 else got in (want.getvalue(), None)
    wide = PlainTable(title="t", show_header=False)
    wide.add_column("a")
    wide.add_row("x" * 120)
    assert wide.render(100) is None
    buf = io.StringIO()                     # not a terminal: the plain text, same as rich's
    report.print_summary(rep, file=buf)
    assert buf.getvalue() == report.summary_table(rep, PlainTable).render(100)
