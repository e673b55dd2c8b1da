"""What a new user meets first on the command line (issue 11, items 8, 13, 16): outputs that
cannot be written fail before any work, budgets that are almost surely slips are refused with a
hint, ``--version``, a bare ``hgraph`` that shows the commands, and a help text for every flag;
and (issue 39 item 2) every output of every command that cannot be written — a full disk, a
read-only or missing folder, a closed pipe, stdout on a full disk — is one line naming it.

Every check runs the real command (a subprocess) and asserts what the user sees: one line, exit
code 2, no traceback — and, for outputs, that no work was done first.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "examples" / "tiny.edges")

#: Linux capabilities that let root write any file and replace other users' files.
_CAP_DAC_OVERRIDE, _CAP_FOWNER = 1, 3
_PR_CAPBSET_DROP = 24


def _as_ordinary_user():
    """A ``preexec_fn`` under which root obeys file modes and sticky folders like any user:
    CAP_DAC_OVERRIDE and CAP_FOWNER leave the bounding set, so the command exec'd has neither
    (a test run as root could otherwise write a read-only file). Nothing to do for a user."""
    if os.geteuid() != 0:
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def drop():
        for cap in (_CAP_DAC_OVERRIDE, _CAP_FOWNER):
            if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
    return drop


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """A small training graph (the zoo's mlp) to plan."""
    from jobs.cli import main

    path = tmp_path_factory.mktemp("graphs") / "mlp.txt"
    assert main(["graph", "zoo", "mlp", "--out", str(path)]) == 0
    return path


def hgraph(*args, preexec_fn=None, stdout=subprocess.PIPE):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}
    return subprocess.run([sys.executable, "-m", "jobs", *map(str, args)], cwd=ROOT, env=env,
                          stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300,
                          preexec_fn=preexec_fn)


def assert_one_line_error(proc, *fragments):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hgraph: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], proc.stderr


# ------------------------------------------------------------------------------ item 8: outputs


def test_a_folder_at_an_output_path_fails_before_the_run(tmp_path):
    """execute --report onto a folder: refused up front (before, the run finished and then
    crashed with IsADirectoryError)."""
    (tmp_path / "r.json").mkdir()
    proc = hgraph("submit", "execute", "--model", "mlp", "--report", tmp_path / "r.json")
    assert_one_line_error(proc, "--report", "is a directory")
    assert proc.stdout == ""                     # no report, no allocator lines: nothing ran


def test_an_output_below_a_file_fails_before_the_tool_runs(tmp_path):
    (tmp_path / "f").write_text("a file, not a folder\n")
    proc = hgraph("graph", "zoo", "mlp", "--out", tmp_path / "f" / "mlp.txt")
    assert_one_line_error(proc, "--out", "Not a directory")


def test_a_read_only_output_file_is_refused_before_the_run(tmp_path):
    target = tmp_path / "values.tsv"
    target.write_text("keep me\n")
    target.chmod(0o444)
    stats = tmp_path / "stats.json"
    proc = hgraph("submit", "sssp", "--graph", TINY, "--out", target, "--stats", stats,
                  "--progress", "off", preexec_fn=_as_ordinary_user())
    assert_one_line_error(proc, "--out", str(target), "cannot be replaced")
    assert target.read_text() == "keep me\n" and not stats.exists()   # nothing ran, nothing written


def test_another_users_file_in_a_sticky_folder_is_refused_before_the_plan(tmp_path, mlp):
    """The case of the issue: the file may be written but not renamed over (``/tmp``-like
    folder, someone else's file): before, the whole plan ran, then PermissionError."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a file owned by another user")
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / "sch.txt"
    target.write_text("someone else's\n")
    target.chmod(0o666)
    for path in (target, shared):
        os.chown(path, 65534, 65534)
    shared.chmod(0o1777)
    proc = hgraph("submit", "plan", "--graph", mlp, "--budget",
                  "100%", "--runtime", "local", "--report", tmp_path / "r.json", "--plot",
                  tmp_path / "p.png", "--out", target, preexec_fn=_as_ordinary_user())
    assert_one_line_error(proc, "--out", "another user", "cannot be replaced")
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "p.png").exists()
    assert target.read_text() == "someone else's\n"


# ------------------------------------------------------------------------------ item 13: budgets


@pytest.mark.parametrize("words, fragments", [
    (["--budget", "0.5"], ["'0.5'", "bare number is bytes", "did you mean 50%?"]),
    (["--budget", "0.05"], ["did you mean 5%?"]),
    (["--budget", "0"], ["0 bytes fits nothing"]),
    (["--budget", "-5GB"], ["'-5GB'", "cannot be negative"]),
    (["--budget=-5GB"], ["'-5GB'", "cannot be negative"]),
    (["--budget", "-60%"], ["cannot be negative"]),
])
def test_budget_slips_are_one_clear_line(words, fragments, mlp):
    proc = hgraph("submit", "plan", "--graph", mlp, "--runtime", "local", *words)
    assert_one_line_error(proc, "--budget", *fragments)


# ------------------------------------------------------------------------------ item 16


def test_version_comes_from_the_package_metadata():
    from importlib import metadata

    proc = hgraph("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"hgraph {metadata.version('hgraph')}"


def test_version_falls_back_to_the_source_trees_pyproject(monkeypatch):
    """Run from a checkout that was never installed: the version is pyproject.toml's."""
    import tomllib
    from importlib import metadata

    from jobs import cli

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    with open(ROOT / "pyproject.toml", "rb") as handle:
        assert cli.version() == tomllib.load(handle)["project"]["version"]


def test_bare_hgraph_shows_the_usage_and_the_commands():
    proc = hgraph()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("usage: hgraph")
    for command in ("submit", "jobs", "graph", "status", "logs", "cluster"):
        assert f"\n    {command} " in proc.stderr, command
    assert "--version" in proc.stderr


def test_every_flag_of_every_command_has_a_help_text():
    missing = []

    def walk(parser, path):
        for action in parser._actions:  # noqa: SLF001 - argparse has no public walk
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])
            elif not action.help:
                missing.append(" ".join([*path, *(action.option_strings or [action.dest])]))

    walk(build_parser(), ["hgraph"])
    assert missing == []


# ------------------------------------------------------------- issue 39 item 2: failed writes

#: Every output flag of every command, on a small input: (name, the words before the path).
WRITERS = [
    ("plan --out", ["submit", "plan", "--graph", "{mlp}", "--budget", "100%", "--out"]),
    ("plan --report", ["submit", "plan", "--graph", "{mlp}", "--budget", "100%", "--report"]),
    ("plan --plot", ["submit", "plan", "--graph", "{mlp}", "--budget", "100%", "--plot"]),
    ("sssp --out", ["submit", "sssp", "--graph", TINY, "--out"]),
    ("sssp --stats", ["submit", "sssp", "--graph", TINY, "--stats"]),
    ("pagerank --out", ["submit", "pagerank", "--graph", TINY, "--out"]),
    ("cc --out", ["submit", "cc", "--graph", TINY, "--out"]),
    ("execute --report", ["submit", "execute", "--model", "mlp", "--report"]),
    ("graph zoo --out", ["graph", "zoo", "mlp", "--out"]),
    ("graph synth --out", ["graph", "synth", "--layers", "1", "--hidden", "16", "--seq", "4",
                           "--out"]),
]


def _words(words, mlp):
    return [str(mlp) if w == "{mlp}" else w for w in words]


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _read_only(tmp_path: Path) -> Path:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


#: Where an output cannot go: (name, the path under tmp_path, what the line says).
PLACES = {
    "/dev/full": (lambda tmp: Path("/dev/full"), "cannot write: No space left on device"),
    "read-only folder": (lambda tmp: _read_only(tmp) / "out", "cannot create a file in"),
    "missing folder in a read-only one": (lambda tmp: _read_only(tmp) / "new" / "out",
                                          "cannot create a file in"),
    "missing folder below a file": (lambda tmp: (tmp / "f").write_text("x") and tmp / "f" / "out",
                                    "Not a directory"),
}


@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("name, words", WRITERS, ids=[w[0] for w in WRITERS])
def test_an_output_that_cannot_be_written_is_one_line(name, words, place, mlp, tmp_path):
    """Each output flag onto a full disk, a read-only folder, a folder that cannot be made:
    one line naming the file, exit 2, nothing left behind (before: 12-55 lines of traceback,
    exit 1, for /dev/full)."""
    make, says = PLACES[place]
    target = make(tmp_path)
    before = _files(tmp_path)
    proc = hgraph(*_words(words, mlp), target, preexec_fn=_as_ordinary_user())
    assert_one_line_error(proc, str(target), says)
    assert _files(tmp_path) == before                  # no temporary file, no folder made


#: How stdout can fail: (a file object for the child's stdout, what the line says).
STDOUTS = {
    "/dev/full": (lambda: open("/dev/full", "w"), "No space left on device"),
    "closed pipe": (lambda: _closed_pipe(), "Broken pipe"),
}


def _closed_pipe():
    read, write = os.pipe()
    os.close(read)
    return os.fdopen(write, "w")


@pytest.mark.parametrize("how", list(STDOUTS))
@pytest.mark.parametrize("words", [
    *[[*w, "-"] for _, w in WRITERS],                   # every output flag onto stdout
    ["submit", "plan", "--graph", "{mlp}", "--budget", "100%"],          # the summary table
    ["submit", "execute", "--model", "mlp"],             # the report on stdout by default
    ["jobs"], ["--version"],
], ids=[*[f"{n} -" for n, _ in WRITERS], "plan table", "execute report", "jobs", "version"])
def test_stdout_that_cannot_be_written_is_one_line(words, how, mlp, tmp_path):
    """stdout on a full disk or a reader that closed the pipe (``| head -c 10``): one line
    naming stdout, exit 2 — not a traceback, nor Python's ``Exception ignored`` at exit."""
    make, says = STDOUTS[how]
    with make() as stdout:
        proc = hgraph(*_words(words, mlp), stdout=stdout)
    assert_one_line_error(proc, "stdout: cannot write", says)


def _file_size_limit(nbytes):
    """A ``preexec_fn`` under which a regular file cannot grow past ``nbytes`` (EFBIG: "File
    too large", a disk that fills up partway through the outputs)."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return limit


def test_a_failed_write_keeps_what_was_written_and_every_earlier_file(mlp, tmp_path):
    """The schedule (900 B) is written, then the report (4 kB) hits the limit: the schedule stays
    whole, the earlier report is not truncated, the folder made for the plot is not left
    behind, and there is no temporary file."""
    schedule, report = tmp_path / "sch.txt", tmp_path / "r.json"
    report.write_text("the earlier report\n")
    proc = hgraph("submit", "plan", "--graph", mlp, "--budget", "100%", "--out", schedule,
                  "--report", report, preexec_fn=_file_size_limit(2000))
    assert_one_line_error(proc, f"{report}: cannot write: File too large")
    assert report.read_text() == "the earlier report\n"
    assert schedule.read_text().startswith(hgraph("submit", "plan", "--graph", mlp, "--budget",
                                                  "100%", "--out", "-").stdout)
    assert _files(tmp_path) == ["r.json", "sch.txt"]
    proc = hgraph("submit", "plan", "--graph", mlp, "--budget", "100%", "--report",
                  tmp_path / "new" / "deeper" / "r.json", preexec_fn=_file_size_limit(2000))
    assert_one_line_error(proc, "File too large")
    assert _files(tmp_path) == ["r.json", "sch.txt"]   # the folders made for it are gone


# ------------------------------------------- issue 39 items 8, 10: what the summary table says

VGG19 = str(ROOT / "tests" / "data" / "graphs" / "cg_vgg19.txt")


def _row(table: str, name: str) -> str:
    """The text of a table row (its continuation lines joined), "" when there is none."""
    found, text = False, []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("│|").split("│")] if "│" in line else []
        if len(cells) != 2:
            if found:
                break
            continue
        if cells[0] == name or (found and cells[0] == ""):
            found = True
            text.append(cells[1])
        elif found:
            break
    return " ".join(text)


@pytest.mark.parametrize("solver", ["approx", "milp"])
def test_a_reference_units_plan_above_its_budget_says_so_and_why(solver, tmp_path):
    """The README's MILP line (vgg19, 60 %, --units reference): the replayed peak, 2.67 GiB, is
    above the 2.24 GiB budget. Before, the table showed both with no remark, exit 0, and only
    the JSON's within_budget said it; now a row says it and which accounting differs."""
    report = tmp_path / "r.json"
    proc = hgraph("submit", "plan", "--graph", VGG19, "--budget", "60%", "--units", "reference",
                  "--solver", solver, "--milp-time-limit", "60", "--report", report)
    assert proc.returncode == 0, proc.stderr
    import json

    rep = json.loads(report.read_text())
    assert rep["within_budget"] is False and rep["peak_bytes"] > rep["budget_bytes"]
    row = _row(proc.stdout, "above the budget")
    assert row.startswith("peak 2.67 GiB > budget 2.24 GiB: --units reference"), proc.stdout
    assert "parameters' gradients" in row and "--units bytes fits the replay" in row
    # in bytes the same budget is refused with the smallest that fits; a plan that fits: no row
    fits = hgraph("submit", "plan", "--graph", VGG19, "--budget", "80%")
    assert fits.returncode == 0 and "above the budget" not in fits.stdout


def test_chens_chain_above_the_budget_says_it_ignores_the_budget():
    proc = hgraph("submit", "plan", "--graph", VGG19, "--budget", "40%", "--solver", "chen")
    assert proc.returncode == 0, proc.stderr
    assert "Chen's sqrt(n) chain ignores the budget" in _row(proc.stdout, "above the budget")


@pytest.mark.parametrize("model, shown", [("transformer", False), ("resnet", True)])
def test_the_convolution_workspace_is_shown_only_for_a_model_with_a_convolution(model, shown,
                                                                               tmp_path):
    """The README's transformer (no convolution) showed a 32 MiB "convolution workspace"; its
    report now says null and the table has no such row. ResNet's cap stays in both."""
    graph, report = tmp_path / "g.txt", tmp_path / "r.json"
    assert hgraph("graph", "zoo", model, "--out", graph).returncode == 0
    proc = hgraph("submit", "plan", "--graph", graph, "--budget", "98.5%", "--report", report)
    assert proc.returncode == 0, proc.stderr
    import json

    rep = json.loads(report.read_text())
    assert rep["accounting"] == "whole-step"
    assert (rep["workspace_bytes"] is not None) is shown
    assert bool(_row(proc.stdout, "convolution workspace")) is shown, proc.stdout
