"""The plan job and planner.plan(): outputs, determinism across tasks/modes, infeasible budgets."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hgraph.common.errors import HGraphError, InfeasibleError
from jobs.cli import main
from planner import cg, simulate
import planner
from planner.schedule import Schedule
from tests.conftest import ROOT, data_path

SAMPLE = ROOT / "jobs" / "data" / "cg_resnet50.txt"
REPORT_KEYS = {"graph", "nodes", "solver", "strategy", "budget_bytes", "peak_bytes",
               "baseline_peak_bytes", "lower_bound_bytes", "recompute_cost", "forward_cost",
               "overhead", "recomputed", "seconds", "decisions", "model_recompute_cost",
               "model_peak_bytes", "blocks"}


def _stable(report):
    return {k: v for k, v in report.items() if k not in ("seconds", "engine")}


def test_plan_job_writes_schedule_report_and_plot(tmp_path, capsys):
    out, rep, png = tmp_path / "sch.txt", tmp_path / "r.json", tmp_path / "sub" / "t.png"
    rc = main(["submit", "plan", "--graph", str(SAMPLE), "--tasks", "4", "--budget", "60%",
               "--out", str(out), "--report", str(rep), "--plot", str(png)])
    assert rc == 0
    r = json.loads(rep.read_text())
    assert REPORT_KEYS <= set(r)
    assert r["graph"] == "resnet50" and r["nodes"] == 176 and r["solver"] == "approx"
    assert r["peak_bytes"] <= r["budget_bytes"] == int(0.6 * r["baseline_peak_bytes"])
    assert r["lower_bound_bytes"] <= r["peak_bytes"] < r["baseline_peak_bytes"]
    assert r["overhead"] == pytest.approx(r["recompute_cost"] / r["forward_cost"])
    assert len(r["decisions"]) == 176
    assert r["recomputed"] == sum(d["decision"] == "recompute" for d in r["decisions"]) > 0
    assert all(d["reason"] for d in r["decisions"])
    g = cg.read(SAMPLE)
    sim = simulate.replay(g, Schedule.read(out))
    assert sim.ok and sim.peak_bytes == r["peak_bytes"] and sim.recompute_cost == r["recompute_cost"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "peak (simulated)" in capsys.readouterr().out
    assert not [p for p in tmp_path.rglob(".*.tmp")]


@pytest.mark.parametrize("solver", ["approx", "exact", "chen"])
def test_plans_identical_for_tasks_and_modes(solver):
    g = cg.read(data_path("graphs", "cg_vgg19.txt"))
    runs = [planner.plan(g, budget="80%", solver=solver,
                         engine=planner.EngineOptions(tasks=t, blocks=b, mode=m))
            for t, b, m in [(1, 1, "hybrid"), (2, 1, "push"), (2, 2, "pull"), (4, 1, "hybrid"),
                            (4, 2, "push")]]
    first = runs[0]
    for p in runs[1:]:
        assert p.schedule.dumps() == first.schedule.dumps()
        assert _stable(p.report) == _stable(first.report)


def test_plans_identical_on_ray_tasks(ray_session):
    local = planner.plan(SAMPLE, budget="45%", engine=planner.EngineOptions(tasks=1))
    ray = planner.plan(SAMPLE, budget="45%", engine=planner.EngineOptions(tasks=4, runtime="ray"))
    assert ray.schedule.dumps() == local.schedule.dumps()
    assert _stable(ray.report) == _stable(local.report)
    assert ray.report["engine"]["runtime"] == "ray" and ray.report["engine"]["supersteps"] > 0


@pytest.mark.parametrize("strategy", ["time", "memory"])
def test_exact_bytes_plans_fit_the_budget(strategy):
    g = cg.read(SAMPLE)
    for pct in ("30%", "45%", "80%"):
        p = planner.plan(g, budget=pct, strategy=strategy)
        assert p.peak_bytes <= p.budget_bytes and p.within_budget


def test_infeasible_budget_gives_the_smallest_feasible_one():
    g = cg.read(SAMPLE)
    with pytest.raises(InfeasibleError, match="smallest feasible budget") as info:
        planner.plan(g, budget="10%")
    smallest = info.value.min_budget_bytes
    assert info.value.exit_code == 3
    p = planner.plan(g, budget=smallest)
    assert p.peak_bytes <= smallest
    with pytest.raises(InfeasibleError):
        planner.plan(g, budget=smallest - 1)


def test_reference_units_match_results_csv():
    rows = [r for r in csv.DictReader(open(data_path("reference", "results.csv")))
            if r["graph"] == "resnet50" and r["solver"] == "DP2fix" and r["status"] == "OK"]
    assert rows
    g = cg.read(data_path("graphs", "cg_resnet50.txt"))
    for row in rows[:4]:
        p = planner.plan(g, budget=int(row["budget_bytes"]), strategy=row["strategy"],
                         engine=planner.EngineOptions(tasks=2),
                         accounting=planner.AccountingOptions(units="reference"))
        assert (p.model_recompute_cost, p.model_peak_bytes, p.blocks) == (
            int(row["model_recompute_cost"]), int(row["model_peak_bytes"]), int(row["blocks"]))
        assert p.recompute_cost == int(row["sched_recompute_cost"])
        assert p.peak_bytes == int(row["sim_peak_bytes"])


def test_exact_limit_refuses_or_falls_back(tmp_path):
    g = cg.read(SAMPLE)
    with pytest.raises(HGraphError, match="lower sets"):
        planner.plan(g, budget="60%", solver="exact",
                     limits=planner.SolverLimits(max_lower_sets=50))
    p = planner.plan(g, budget="60%", solver="exact",
                     limits=planner.SolverLimits(max_lower_sets=50, fallback=True))
    assert p.fell_back and p.family == "approx"


def test_execute_measures_the_predicted_peak(tmp_path):
    rep = tmp_path / "r.json"
    assert main(["submit", "plan", "--graph", str(SAMPLE), "--budget", "2GB", "--execute",
                 "--report", str(rep), "--progress", "off"]) == 0
    ex = json.loads(rep.read_text())["execute"]
    assert ex["tracked_peak_bytes"] == ex["predicted_peak_bytes"]
    assert ex["meter"] == "tracemalloc" and ex["measured_peak_bytes"] > 0


def _run(*argv, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def test_errors_are_one_line_and_keep_old_outputs(tmp_path):
    rep = tmp_path / "r.json"
    rep.write_text("old\n")
    proc = _run("jobs.plan", "--graph", str(SAMPLE), "--budget", "1%", "--report", str(rep))
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "smallest feasible budget" in lines[0]
    assert rep.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    for budget, fragment in (("lots", "bad --budget"), ("5XB", "unknown unit")):
        proc = _run("jobs", "submit", "plan", "--graph", str(SAMPLE), "--budget", budget)
        assert proc.returncode == 2 and fragment in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    bad = tmp_path / "bad.txt"
    bad.write_text("3 2\n0 10 _\n")
    proc = _run("jobs", "submit", "plan", "--graph", str(bad), "--budget", "1GB")
    assert proc.returncode == 2 and str(bad) in proc.stderr and "Traceback" not in proc.stderr


def test_plan_survives_a_worker_failure():
    g = cg.read(data_path("graphs", "cg_vgg19.txt"))
    clean = planner.plan(g, budget="80%", engine=planner.EngineOptions(tasks=2))
    hurt = planner.plan(g, budget="80%", engine=planner.EngineOptions(tasks=2, checkpoint_every=2,
                                                                      inject_failure=3))
    assert hurt.schedule.dumps() == clean.schedule.dumps()
    assert main(["submit", "plan", "--graph", str(SAMPLE), "--budget", "2GB", "--stats", "s.json"]) == 2


def test_dp_scale_flags_reach_the_report(tmp_path):
    from planner import synth

    graph, rep = tmp_path / "g.txt", tmp_path / "r.json"
    cg.write(synth.build(layers=6, heads=2), graph)
    assert main(["submit", "plan", "--graph", str(graph), "--tasks", "2", "--budget", "50%",
                 "--dp-window", "6", "--dp-front-cap", "12", "--report", str(rep),
                 "--progress", "off"]) == 0
    r = json.loads(rep.read_text())
    assert (r["dp_window"], r["dp_front_cap"], r["dp_exact"]) == (6, 12, False)
    assert r["within_budget"] and r["engine"]["supersteps"] < 40
    assert main(["submit", "plan", "--graph", str(graph), "--budget", "50%",
                 "--dp-window", "-1"]) == 2


def test_a_window_without_a_plan_widens_and_says_which(tmp_path):
    """--dp-window 1 on parallel branches has no plan at any budget: the capped solve widens
    its window (1, 2, 4, ...: planner.dp.scale.widening) until one has a plan, and the report
    and the table name the window that gave it (before the widening: a one-line error naming
    the option; before that, an OverflowError after doubling the budget past int64)."""
    from planner import synth

    graph, rep = tmp_path / "s2.txt", tmp_path / "r.json"
    cg.write(synth.build(layers=2, heads=4), graph)
    p = planner.plan(cg.read(graph), budget="90%", limits=planner.SolverLimits(dp_window=1))
    assert p.report["dp_window"] > 1 and p.report["within_budget"]
    proc = _run("jobs", "submit", "plan", "--graph", str(graph), "--budget", "90%",
                "--dp-window", "1", "--out", str(tmp_path / "s.txt"), "--report", str(rep))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert json.loads(rep.read_text())["dp_window"] == p.report["dp_window"]
    assert f"window {p.report['dp_window']}," in proc.stdout


def test_more_engine_blocks_than_nodes_gives_the_same_plan():
    """The zoo mlp has 15 activations: tasks × blocks = 16 leaves engine blocks empty (on main:
    ValueError: cannot reshape array of size 0 in the lower-set statistics)."""
    from planner.execute import export, zoo

    g = export.to_cg(zoo.build("mlp"))
    assert len(g.forward) < 16
    one = planner.plan(g, budget="100%")
    for tasks, blocks in ((4, 4), (16, 2)):
        p = planner.plan(g, budget="100%",
                         engine=planner.EngineOptions(tasks=tasks, blocks=blocks))
        assert p.schedule.dumps() == one.schedule.dumps()
        assert _stable(p.report) == _stable(one.report)


@pytest.mark.parametrize("solver", ["approx", "exact"])
def test_a_plan_is_never_worse_than_not_planning(solver):
    """At or above the no-recomputation peak: keep everything, zero recompute (issue 11 item 4;
    on main the zoo mlp at 1000% recomputed 5 of 15 functions at 102.9% of the baseline)."""
    from planner.execute import export, zoo

    g = export.to_cg(zoo.build("mlp"))
    for budget in ("100%", "150%", "1000%"):
        p = planner.plan(g, budget=budget, solver=solver)
        assert (p.recompute_cost, p.recomputed, p.blocks) == (0, 0, 1), budget
        assert p.peak_bytes == p.baseline_peak_bytes <= p.budget_bytes
        m = planner.plan(g, budget=budget, solver=solver, strategy="memory")
        assert m.peak_bytes < m.baseline_peak_bytes or m.recompute_cost == 0, budget
    with pytest.raises(InfeasibleError):               # below it the DP plans, or says so
        planner.plan(g, budget="99%", solver=solver)
    ref = planner.plan(g, budget="1000%", solver=solver,
                       accounting=planner.AccountingOptions(units="reference"))
    assert ref.family == solver                    # the reference's own DP plan, unchanged


# --------------------------------------------------------------------------------------------
# what a user sees (issue 11 items 5, 6, 7, 10, 11, 12)


def _plan(*extra):
    return ["submit", "plan", "--graph", str(SAMPLE), "--budget", "60%", *map(str, extra)]


def _table(text):
    """The summary table's rows (what -> value) and its title line."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    return rows, text.strip().splitlines()[0].strip()


class _Recorder:
    """A stage tracker that records what the planner reports."""

    def __init__(self):
        self.stages, self.supersteps, self.positions = [], [], []

    def stage(self, name):
        import contextlib

        self.stages.append(name)
        return contextlib.nullcontext()

    def superstep(self, row):
        self.supersteps.append(row["superstep"])

    def position(self, done, total):
        self.positions.append((done, total))

    def close(self):
        pass


@pytest.mark.parametrize("solver", ["approx", "exact"])
def test_plan_reports_stages_supersteps_and_dp_position(solver):
    """Item 5: the planner tells the current tracker its stage, the engine's supersteps and
    the DP's position (state j of L) — what the live line shows (on main: no such hooks)."""
    from hgraph.common.progress import tracking

    rec = _Recorder()
    with tracking(tracker=rec):
        p = planner.plan(SAMPLE, budget="60%", solver=solver,
                         engine=planner.EngineOptions(tasks=2))
    assert rec.stages[:2] == ["reading the graph", "levels (engine)"]
    assert any(s.startswith(f"DP ({solver}") for s in rec.stages)
    assert "schedule and replay" in rec.stages
    assert (solver == "approx") == ("lower-set statistics (engine)" in rec.stages)
    assert len(rec.supersteps) >= p.report["engine"]["supersteps"] > 0
    assert rec.positions and all(0 < done < total for done, total in rec.positions)
    assert {total for _, total in rec.positions} == {p.report["n_lower_sets"]}
    n = len(rec.stages), len(rec.positions)
    planner.plan(SAMPLE, budget="60%")               # outside a job: nothing is reported
    assert (len(rec.stages), len(rec.positions)) == n


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_live_on_a_terminal_quiet_in_a_pipe(tmp_path, monkeypatch, capsys):
    """Item 5: on a terminal stderr shows the stages with a bar and an ETA; in a pipe (capsys)
    nothing but the table, which is on stdout (on main: silence on the terminal, the table on
    stderr)."""
    tty = _Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    assert main(_plan("--tasks", "2", "--report", tmp_path / "r.json")) == 0
    monkeypatch.undo()
    shown = tty.getvalue()
    for stage in ("levels (engine)", "lower-set statistics (engine)", "DP (approx, 177 states)",
                  "schedule and replay", "writing outputs", "ETA"):
        assert stage in shown, stage
    assert "peak (simulated)" in capsys.readouterr().out
    assert main(_plan("--tasks", "2")) == 0           # stderr is not a terminal: quiet
    captured = capsys.readouterr()
    assert captured.err == "" and "peak (simulated)" in captured.out


def test_progress_off_keeps_the_table_and_plain_gives_stage_lines(capsys):
    """Item 5: ``--progress off`` hides progress, not the result (on main it hid the table);
    ``--progress plain`` writes one line per top-level stage for logs; the flag has a help."""
    assert main(_plan("--progress", "off")) == 0
    captured = capsys.readouterr()
    assert "peak (simulated)" in captured.out and captured.err == ""
    assert main(_plan("--progress", "plain")) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines[0].startswith("reading the graph: ") and lines[0].endswith(" s")
    assert any(line.startswith("levels (engine): ") for line in lines)
    assert any(line.startswith("DP (approx, 177 states): ") for line in lines)
    assert "peak (simulated)" in captured.out
    with pytest.raises(SystemExit):
        main(["submit", "plan", "--help"])
    assert "results are printed either way" in " ".join(capsys.readouterr().out.split())


def test_the_table_is_the_result_on_stdout(tmp_path):
    """Item 11: ``> log`` captures the table (on main it went to stderr); with ``--report -``
    stdout carries the JSON and the table moves to stderr."""
    proc = _run("jobs", "submit", "plan", "--graph", str(SAMPLE), "--budget", "60%",
                "--out", str(tmp_path / "s.txt"))
    assert proc.returncode == 0, proc.stderr
    assert "peak (simulated)" in proc.stdout and proc.stderr == ""
    proc = _run("jobs", "submit", "plan", "--graph", str(SAMPLE), "--budget", "60%",
                "--report", "-")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["graph"] == "resnet50"
    assert "peak (simulated)" in proc.stderr


def test_a_row_plan_prints_its_result_line_on_stdout(tmp_path, capsys):
    """Item 11 for ``plan --rows``: with ``--report FILE`` the result line is on stdout; without,
    stdout carries the JSON and the line goes to stderr."""
    from planner.execute import export, zoo

    graph = tmp_path / "v.txt"
    cg.write(export.to_cg(zoo.build("vgg16", width=4, depth=1, image=32)), graph)
    assert main(["submit", "plan", "--graph", str(graph), "--rows", "4",
                 "--report", str(tmp_path / "r.json")]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("rows 4 overlap: ") and captured.err == ""
    assert main(["submit", "plan", "--graph", str(graph), "--rows", "4"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["rows"] == 4 and captured.err.startswith("rows 4 overlap: ")


def test_the_table_shows_approximations_and_how_the_baseline_was_made(tmp_path, capsys):
    """Item 12: the DP's scale approximations and the baseline's kind are in the table, not
    only in the JSON (on main: neither)."""
    from planner import report, synth

    graph = tmp_path / "g.txt"
    cg.write(synth.build(layers=6, heads=2), graph)
    assert main(["submit", "plan", "--graph", str(graph), "--budget", "50%",
                 "--dp-window", "6", "--dp-front-cap", "0"]) == 0
    rows, _ = _table(capsys.readouterr().out)
    assert rows["DP approximations"] == "window 6, no front cap; " + report.NO_BOUND_TEXT
    assert rows["baseline (no recompute)"].endswith("(simulated)")
    assert main(_plan()) == 0                        # small graph: no scale path, no such row
    assert "DP approximations" not in capsys.readouterr().out
    p = planner.plan(SAMPLE, budget="60%")
    rows = {"dp_window": 8, "dp_front_cap": 32, "dp_exact": False,
            "baseline_kind": "activation_sum"}
    buf = io.StringIO()
    report.print_summary(dict(p.report, **rows), file=buf)
    rows, _ = _table(buf.getvalue())
    assert rows["DP approximations"] == "window 8, front cap 32; " + report.NO_BOUND_TEXT
    assert rows["baseline (no recompute)"].endswith("(Σ activations, not simulated)")
    buf = io.StringIO()
    report.print_summary(dict(p.report, dp_window=None, dp_front_cap=None, dp_exact=True),
                         file=buf)
    assert "none (exact approximate DP: the family's optimum)" in buf.getvalue()


def test_fallback_is_shown_and_the_refusal_names_the_flag(tmp_path, capsys):
    """Item 7: after ``--fallback`` the table says the approximate family was used (on main:
    "exact"); without it the one-line refusal names ``--fallback``."""
    rep = tmp_path / "r.json"
    assert main(_plan("--solver", "exact", "--max-lower-sets", "50", "--fallback",
                      "--report", rep)) == 0
    rows, title = _table(capsys.readouterr().out)
    assert "exact -> approx (fallback)" in title and rows["DP family"].startswith("approx (fell")
    assert json.loads(rep.read_text())["fell_back"] is True
    assert main(_plan("--solver", "exact")) == 0     # no fallback needed: no such words
    assert "fallback" not in capsys.readouterr().out
    proc = _run("jobs", "submit", "plan", "--graph", str(SAMPLE), "--budget", "60%",
                "--solver", "exact", "--max-lower-sets", "50")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "--fallback" in proc.stderr


def test_execute_recycles_after_last_use_as_the_readme_says(tmp_path, capsys):
    """Item 10: ``--execute`` recycles after last use (on main: ``recycle: false``) and its
    numbers are under ``report["execute"]``, as the README's docs/cli.md says."""
    rep = tmp_path / "r.json"
    assert main(_plan("--execute", "--report", rep)) == 0
    r = json.loads(rep.read_text())
    ex = r["execute"]
    assert ex["recycle"] is True and ex["tracked_within_prediction"] is True
    assert ex["predicted_peak_bytes"] == r["peak_bytes"]
    assert 0 < ex["tracked_peak_bytes"] <= ex["predicted_peak_bytes"]
    assert ex["meter"] == "tracemalloc" and ex["measured_peak_bytes"] > 0
    assert ex["peak_within_prediction"] == (ex["measured_peak_bytes"] <= ex["predicted_peak_bytes"])
    out = capsys.readouterr().out
    assert "recycling after last use" in out and "plan's count" in out and "tracemalloc" in out
    readme = " ".join(" ".join((ROOT / page).read_text() for page in ("README.md", "docs/cli.md"))
                      .split())
    assert 'report["execute"]' in readme and "`recycle: true`" in readme
    assert "adds `predicted_peak_bytes`/`measured_peak_bytes` to the report" not in readme


def _quick_start_plan():
    """The Quick start's install-and-plan line (after the line that makes a venv)."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return next(line for line in block.splitlines() if "hgraph submit plan" in line)


def _words(line, tmp_path):
    """The plan command of a README line, its outputs under ``tmp_path``."""
    import shlex

    words = shlex.split(line.split("&&")[-1].strip())
    assert words[:3] == ["hgraph", "submit", "plan"]
    words = [str(ROOT / w) if w.startswith("jobs/data/") else w for w in words[1:]]
    return [str(tmp_path / w) if w.startswith("out/") else w for w in words]


def _on(words, runtime):
    """``words`` with ``--runtime`` set to ``runtime``."""
    out = list(words)
    out[out.index("--runtime") + 1] = runtime
    return out


def test_quick_start_installs_and_plans_on_ray(tmp_path, capsys):
    """The Quick start's command installs and plans on an embedded Ray (issue 38: one command
    from a fresh machine); the same words with ``--runtime local`` plan in-process, here."""
    line = _quick_start_plan()
    assert line.startswith("python3 -m pip install -e . && hgraph submit plan")
    words = _words(line, tmp_path)
    assert words[words.index("--runtime") + 1] == "ray"
    assert main(_on(words, "local")) == 0
    assert "peak (simulated)" in capsys.readouterr().out
    for name in ("schedule.txt", "report.json", "timeline.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0


@pytest.mark.ray
def test_quick_start_ray_line_gives_the_same_schedule(ray_session, tmp_path):
    """Item 6: the README's Ray command makes the same schedule as the same plan in-process."""
    ray = _words(_quick_start_plan(), tmp_path / "ray")
    local = _on(_words(_quick_start_plan(), tmp_path / "local"), "local")
    assert main([*local, "--progress", "off"]) == 0 and main([*ray, "--progress", "off"]) == 0
    sch = [Path(w[w.index("--out") + 1]).read_text() for w in (local, ray)]
    assert sch[0] == sch[1] and sch[0]
