"""Waiting for Ray is a named stage (issue 39, item 10): ``hgraph submit plan --runtime ray``
showed "levels (engine) 0/? ETA" for the ~20 s the embedded Ray took to start, and nothing in a
``--progress plain`` log. Starting (or joining) Ray is now the stage ``starting Ray`` (``joining
the Ray cluster at ...``) on the live line and a line of its own in a plain log, although it runs
inside whichever stage first needs Ray.
"""

from __future__ import annotations

import io

import pytest

from hgraph.common.progress import StageProgress, tracking
from hgraph.runtime import ray_connect


def test_plain_prints_a_logged_stage_however_deep():
    out = io.StringIO()
    stages = StageProgress("plain", out)
    with stages.stage("levels (engine)"):
        with stages.stage("starting Ray", logged=True):
            pass
        with stages.stage("an inner step"):
            pass
    lines = out.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == ["starting Ray", "levels (engine)"]


@pytest.mark.parametrize("address, stage", [(None, "starting Ray"),
                                            ("auto", "joining the Ray cluster at auto")])
def test_ensure_ray_reports_its_wait_as_a_logged_stage(monkeypatch, address, stage):
    """Inside another stage (as when the plan's first engine run needs Ray), the wait still
    has its line in a plain log."""
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    started = []
    monkeypatch.setattr(ray_connect, "_start_embedded", lambda *a, **k: started.append("local"))
    monkeypatch.setattr(ray, "init", lambda **k: started.append(k["address"]))
    out = io.StringIO()
    with tracking(tracker=StageProgress("plain", out)) as stages:
        with stages.stage("levels (engine)"):
            ray_connect.ensure_ray(address)
    assert [line.split(":")[0] for line in out.getvalue().splitlines()] == [stage, "levels (engine)"]
    assert started == [address or "local"]


def test_an_engine_job_logs_the_ray_start_in_plain_progress(tmp_path):
    """``hgraph submit sssp --runtime ray --progress plain``: the wait for the embedded Ray is
    the first progress line, before the supersteps (its own Ray: a subprocess, RAY_TMPDIR short
    for Unix-socket paths, removed with the job)."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    from tests.conftest import ROOT

    ray_tmp = tempfile.mkdtemp(prefix="hgs", dir="/tmp")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_TMPDIR": ray_tmp}
    env.pop("RAY_ADDRESS", None)
    try:
        proc = subprocess.run([sys.executable, "-m", "jobs", "submit", "sssp", "--graph",
                               str(ROOT / "examples" / "tiny.edges"), "--source", "0",
                               "--runtime", "ray", "--progress", "plain", "--out",
                               str(tmp_path / "d.tsv")], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("starting Ray: ") and lines[0].endswith(" s"), proc.stderr
    assert lines[1].startswith("superstep 0 "), proc.stderr
