"""SIGTERM ends a command as Ctrl-C does (issue 39, item 3): one line on stderr, exit 143, the
embedded Ray shut down with its session folder, no Ray process left behind, no output file.

Before, a SIGTERM on ``hgraph submit plan ... --runtime ray`` exited 1 with 9 lines of Ray's
crash dump, left a 5.7 MB session folder and two Ray workers that lived 30-50 s more: ``ray.init``
had replaced the process's SIGTERM handler. The command runs as a user runs it (a subprocess);
its own ``RAY_TMPDIR`` holds the embedded Ray's session folder, so what is left there is this
command's alone (other processes on the machine use their own temp folders).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from tests.conftest import ROOT

#: Seconds the command may take to start Ray and its worker actors on a loaded 2-core machine.
START_TIMEOUT_S = 180
#: Seconds Ray's processes may take to go once the command has exited.
GONE_TIMEOUT_S = 15


def _tree(proc):
    import psutil

    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _names(processes) -> list[str]:
    import psutil

    names = []
    for p in processes:
        try:
            names.append(" ".join(p.cmdline()) or p.name())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return names


def _alive(processes) -> list:
    import psutil

    alive = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.fixture
def ray_tmpdir():
    """A short folder of its own for the command's Ray (Unix-socket paths: at most 107 bytes)."""
    folder = tempfile.mkdtemp(prefix="hgs", dir="/tmp")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


#: (what runs, the process whose start in the command's tree says it is time for the SIGTERM):
#: a plan whose engine runs on Ray actors, and a job whose Ray is still starting (``ray.init``
#: has its own SIGTERM handler while it runs; a SIGTERM then may land before or after it ends,
#: the outcome must be the same).
CASES = {
    "plan running": (["plan", "--graph", str(ROOT / "jobs" / "data" / "cg_resnet50.txt"),
                      "--tasks", "2", "--budget", "60%"], "WorkerActor"),
    "Ray starting": (["sssp", "--graph", str(ROOT / "examples" / "tiny.edges"), "--source", "0"],
                     "gcs_server"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sigterm_on_a_command_on_the_embedded_ray(case, tmp_path, ray_tmpdir):
    import ray  # noqa: F401 - puts ray's own psutil (ray/thirdparty_files) on the path
    import psutil

    words, cue = CASES[case]
    out = tmp_path / "x.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled",
           "RAY_TMPDIR": ray_tmpdir}
    for name in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
        env.pop(name, None)
    command = [sys.executable, "-m", "jobs", "submit", *words, "--runtime", "ray",
               "--out", str(out), "--progress", "off"]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        me = psutil.Process(proc.pid)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not any(cue in name for name in _names(_tree(me))):
            assert proc.poll() is None, f"the command ended first: {proc.communicate()}"
            assert time.monotonic() < deadline, f"no {cue} after {START_TIMEOUT_S} s"
            time.sleep(0.05)
        tree = _tree(me)[1:]                 # Ray's processes, captured before the signal
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, stderr
    assert stderr.strip().splitlines() == ["hgraph: terminated"], stderr
    assert stdout == ""
    assert not out.exists() and list(tmp_path.iterdir()) == []       # no output, no temp file
    deadline = time.monotonic() + GONE_TIMEOUT_S
    while _alive(tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(tree) == [], f"left running: {_names(_alive(tree))}"
    assert os.listdir(ray_tmpdir) == []                               # the session folder is gone


def test_sigterm_handler_is_the_callers_again_after_a_command():
    """The CLI's handler lives while a command runs; a process calling ``main`` (a test, a Ray
    Job's driver) has its own back afterwards."""
    from jobs.cli import main

    before = signal.getsignal(signal.SIGTERM)
    assert main(["submit", "sssp", "--graph", str(ROOT / "examples" / "tiny.edges"),
                 "--source", "0", "--progress", "off", "--out", os.devnull]) == 0
    assert signal.getsignal(signal.SIGTERM) is before
