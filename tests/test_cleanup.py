"""Issue 11 item 14: what the project creates is cleaned up — the test session's Ray temp
folder, the embedded Ray's session folder (kept, and named, only when asked), the node logs
``hgraph cluster down`` used to leave, and a failed run's temporary checkpoint folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from cluster import commands_cluster
import hgraph
from hgraph.common.errors import HGraphError
from jobs.cli import main
from tests.conftest import ROOT

PROBE = '''
import os
from pathlib import Path


def test_probe(ray_session):
    node = ray_session._private.worker._global_node
    Path(os.environ["PROBE_OUT"]).write_text(node.get_session_dir_path())
'''


def test_the_session_ray_leaves_no_temp_folder(tmp_path):
    """A pytest session that used the ``ray_session`` fixture leaves no Ray temp folder behind
    (it used to leave /tmp/hgr*, a Ray session with its logs, after every run)."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    out = tmp_path / "session.txt"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PROBE_OUT=str(out))
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest",
                           "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "base"),
                           str(tmp_path / "test_probe.py")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    session = Path(out.read_text())
    assert session.parent.name.startswith("hgr"), session       # the fixture's own folder
    assert not session.parent.exists(), f"left behind: {sorted(session.parent.iterdir())}"


@pytest.fixture
def ray_tmpdir():
    """A short RAY_TMPDIR for a subprocess's embedded Ray (Unix-socket paths: 107 bytes)."""
    path = tempfile.mkdtemp(prefix="hgt", dir="/tmp")
    try:
        yield Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _submit_on_embedded_ray(ray_tmpdir, **env):
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_TMPDIR=str(ray_tmpdir), **env)
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", "jobs", "submit", "sssp", "--graph",
                           str(ROOT / "examples" / "tiny.edges"), "--runtime", "ray"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_the_embedded_ray_leaves_no_session_folder(ray_tmpdir):
    """A job on the embedded Ray leaves nothing under RAY_TMPDIR (it used to leave
    ray/session_*, logs and all, after every run)."""
    proc = _submit_on_embedded_ray(ray_tmpdir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(ray_tmpdir.iterdir()) == []


def test_the_embedded_rays_logs_are_kept_when_asked_and_named(ray_tmpdir):
    proc = _submit_on_embedded_ray(ray_tmpdir, HGRAPH_KEEP_RAY_LOGS="1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    kept = [line.split(" kept in ", 1)[1] for line in proc.stderr.splitlines()
            if line.startswith("hgraph: Ray logs kept in ")]
    assert len(kept) == 1 and Path(kept[0]).parent == ray_tmpdir, proc.stderr[-2000:]
    assert list(Path(kept[0]).glob("session_*/logs/raylet.out")), sorted(Path(kept[0]).rglob("*"))[:20]


def _recorded_cluster(state_dir: Path) -> subprocess.Popen:
    """What ``cluster up`` leaves in its state folder — a node process in its own session, its
    log, Ray's temp folder ``r/`` and the state file — with a stand-in for the node."""
    state_dir.mkdir(mode=0o700)        # `down` refuses a state folder open to others
    (state_dir / "r" / "session_x" / "logs").mkdir(parents=True)
    (state_dir / "r" / "session_x" / "logs" / "raylet.out").write_text("ray log\n")
    log = state_dir / "node-0.log"
    # `down` ends only what `up` recorded: a `ray start` command line, and its start time
    argv = [sys.executable, "-c", "import time; time.sleep(300)", "-m", "cluster.ray_node",
            "start"]
    with open(log, "w") as handle:
        node = subprocess.Popen(argv, stdout=handle, start_new_session=True)
    info = commands_cluster._proc_info(node.pid)
    state = {"gcs_address": "127.0.0.1:1", "listen": "127.0.0.1", "auth_mode": "disabled",
             "jobs_address": None, "temp_dir": str(state_dir / "r"),
             "processes": [{"pid": node.pid, "sid": node.pid, "argv": argv, "log": str(log),
                            "create_time": info["create_time"], "boot_id": info["boot_id"],
                            "cmdline": info["cmdline"]}]}
    commands_cluster.state_path(state_dir).write_text(json.dumps(state))
    return node


def test_cluster_down_removes_its_logs(tmp_path, capsys):
    state_dir = tmp_path / "hgc"
    node = _recorded_cluster(state_dir)
    assert main(["cluster", "down", "--state-dir", str(state_dir)]) == 0
    assert node.wait(timeout=30) is not None
    assert sorted(p.name for p in state_dir.iterdir()) == []


def test_cluster_down_keeps_its_logs_when_asked_and_says_where(tmp_path, capsys):
    state_dir = tmp_path / "hgc"
    node = _recorded_cluster(state_dir)
    assert main(["cluster", "down", "--state-dir", str(state_dir), "--keep-logs"]) == 0
    assert node.wait(timeout=30) is not None
    assert sorted(p.name for p in state_dir.iterdir()) == ["node-0.log", "r"]
    assert f"logs kept in {state_dir}" in capsys.readouterr().out


def test_a_failed_cluster_up_keeps_the_log_its_error_names(tmp_path, monkeypatch):
    """``up``'s error points at the node log; the cleanup after the failure must keep it."""
    monkeypatch.setattr(commands_cluster, "_ray_start",
                        lambda host: ["sh", "-c", "echo this node cannot start; exit 1", "sh"])
    state_dir = tmp_path / "hgc"
    with pytest.raises(HGraphError, match="exited while starting; see ") as info:
        commands_cluster.up(state_dir, nodes=1, port=commands_cluster._free_port(),
                            dashboard_port=None)
    log = Path(str(info.value).rsplit("see ", 1)[1])
    assert "this node cannot start" in log.read_text()


class _FailsAtSuperstep2(hgraph.VertexProgram):
    """Every vertex stays active; the update raises at superstep 2 (a bug in user code)."""

    value_dtype = message_dtype = np.float64
    combiner = np.add

    def init(self, block):
        return np.zeros(block.size), np.ones(block.size, dtype=bool)

    def update(self, ctx, block, values, inbox, has_message):
        if ctx.superstep == 2:
            raise ValueError("boom")
        return hgraph.Update(values + 1, respond=np.ones(block.size, dtype=bool))

    def message(self, src_values, weights):
        return src_values


def test_a_failed_run_removes_its_temporary_checkpoints(tmp_path, monkeypatch):
    """The temporary hgraph-ckpt-* folder goes when the run fails too, not only on success."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    g = hgraph.Graph.from_edges([0, 1, 2], [1, 2, 0])
    with pytest.raises(ValueError, match="boom"):
        hgraph.run(_FailsAtSuperstep2(), g, hgraph.EngineOptions(tasks=2, checkpoint_every=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    result = hgraph.run(_FailsAtSuperstep2(), g,
                        hgraph.EngineOptions(tasks=2, checkpoint_every=1), max_supersteps=2)
    assert result.checkpoint_dir is None and sorted(tmp_path.iterdir()) == []
