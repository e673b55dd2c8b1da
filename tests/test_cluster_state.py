"""Issue 25: ``hgraph cluster``'s state folder, node logs and recorded pids.

* the state folder is private (0700, this user's) and not at a predictable shared path such as
  ``/tmp/hgc-UID``; one that is another user's or open to group/others is refused in one line;
* a symbolic link planted at a node log's path is not followed: ``up`` fails, the target is
  untouched;
* ``down`` ends a recorded pid only while it is still the Ray process ``up`` started (same start
  time, a ``ray start`` command line); a pid now used by something else is left alone, in one line.

Everything but the last test runs without Ray (a stand-in process or no process at all).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cluster import commands_cluster as cc
from hgraph.common.errors import HGraphError
from jobs.cli import main

SLEEP = "import time; time.sleep(60)"
#: A stand-in for a node: sleeps, with a `ray start` command line as `up` starts nodes with.
RAY_LIKE = [sys.executable, "-c", SLEEP, "-m", "cluster.ray_node", "start"]


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _gone(proc: subprocess.Popen, timeout: float = 15.0) -> bool:
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


@pytest.fixture
def procs():
    """Processes a test starts; whatever is still running at the end is ended (by its pid)."""
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def private_dir():
    """A short private folder (mode 0700) to hold a state folder."""
    path = Path(tempfile.mkdtemp(prefix="hgs", dir="/tmp"))
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


class _FakePopen:
    """Records what `up` would start, starts nothing (pids above any real one)."""

    def __init__(self, argv, **_):
        self.pid = 4_100_000


def _dry_up(monkeypatch, state_dir):
    monkeypatch.setattr(subprocess, "Popen", _FakePopen)   # cc imports subprocess in _spawn
    monkeypatch.setattr(cc, "_wait_started", lambda *a, **k: None)
    monkeypatch.setattr(cc, "_wait_port", lambda *a, **k: None)
    monkeypatch.setattr(cc, "_port_open", lambda *a, **k: False)
    return cc.up(state_dir, nodes=1, port=6399, dashboard_port=None)


# -- the state folder ---------------------------------------------------------------------------

def test_default_state_folder_is_per_user_and_not_in_tmp(monkeypatch, tmp_path):
    monkeypatch.delenv("HGRAPH_CLUSTER_DIR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = cc.default_state_dir()
    assert path == tmp_path / "home" / ".cache" / "hgc"
    assert path != Path(f"/tmp/hgc-{os.getuid()}")
    assert not str(path).startswith(tempfile.gettempdir() + os.sep + "hgc")
    assert cc.state_folder(path, create=True) == path
    st = os.lstat(path)
    assert stat.S_ISDIR(st.st_mode) and _mode(path) == 0o700 and st.st_uid == os.geteuid()


def test_default_state_folder_uses_a_private_xdg_runtime_dir_only(monkeypatch, tmp_path):
    monkeypatch.delenv("HGRAPH_CLUSTER_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    runtime.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert cc.default_state_dir() == runtime / "hgc"
    runtime.chmod(0o755)                                  # not private: not used
    assert cc.default_state_dir() == tmp_path / "home" / ".cache" / "hgc"
    monkeypatch.setenv("HGRAPH_CLUSTER_DIR", str(tmp_path / "mine"))
    assert cc.default_state_dir() == tmp_path / "mine"


def test_up_makes_its_state_folder_0700(monkeypatch, tmp_path):
    state_dir = tmp_path / "a" / "hgc"
    _dry_up(monkeypatch, state_dir)
    assert _mode(state_dir) == 0o700
    assert _mode(cc.state_path(state_dir)) == 0o600
    assert _mode(state_dir / "node-0.log") == 0o600


def test_a_state_folder_open_to_others_is_refused(tmp_path, capsys):
    state_dir = tmp_path / "hgc"
    state_dir.mkdir()
    state_dir.chmod(0o755)
    cc.state_path(state_dir).write_text(json.dumps({"processes": [], "gcs_address": "x"}))
    for action in ("up", "down", "status"):
        assert main(["cluster", action, "--state-dir", str(state_dir), "--nodes", "1"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "open to group/others (mode 0755)" in err[0], err
    assert cc.state_path(state_dir).exists()                    # nothing done in it
    assert sorted(p.name for p in state_dir.iterdir()) == ["cluster.json"]


def test_another_users_state_folder_is_refused(tmp_path, monkeypatch):
    state_dir = tmp_path / "hgc"
    state_dir.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(state_dir, 4242, 4242)
    else:                                     # cannot give it away: pretend to be someone else
        me = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: me + 1)
    with pytest.raises(HGraphError, match=r"belongs to uid \d+, not to you"):
        cc.state_folder(state_dir, create=True)
    with pytest.raises(HGraphError, match="not to you"):
        cc.down(state_dir)


def test_a_linked_state_folder_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "hgc").symlink_to(real)
    with pytest.raises(HGraphError, match="is a symbolic link"):
        cc.state_folder(tmp_path / "hgc", create=True)


def test_a_missing_state_folder_is_no_cluster_and_is_not_made(tmp_path):
    assert cc.down(tmp_path / "none") is None
    assert not (tmp_path / "none").exists()


# -- node logs ----------------------------------------------------------------------------------

def test_a_link_at_a_node_log_is_not_followed(monkeypatch, private_dir):
    """A link planted at node-0.log: `up` refuses it; the file it names keeps its content."""
    state_dir = private_dir / "hgc"
    state_dir.mkdir(mode=0o700)
    target = private_dir / "precious.txt"
    target.write_text("precious\n")
    target.chmod(0o644)
    (state_dir / "node-0.log").symlink_to(target)
    monkeypatch.setattr(cc, "_ray_start",
                        lambda host: ["sh", "-c", "echo written-through-the-link; exit 1", "sh"])
    with pytest.raises(HGraphError, match="symbolic link"):
        cc.up(state_dir, nodes=1, port=cc._free_port(), dashboard_port=None)
    time.sleep(0.3)                   # had a node started, its output would be there by now
    assert target.read_text() == "precious\n"
    assert _mode(target) == 0o644
    assert (state_dir / "node-0.log").is_symlink()


def test_open_log_makes_new_logs_0600_and_tightens_old_ones(private_dir):
    new = private_dir / "new.log"
    os.close(cc._open_log(new))
    assert _mode(new) == 0o600
    old = private_dir / "old.log"
    old.write_text("earlier\n")
    old.chmod(0o644)
    fd = cc._open_log(old)
    os.write(fd, b"more\n")
    os.close(fd)
    assert _mode(old) == 0o600 and old.read_text() == "earlier\nmore\n"   # appended


def test_open_log_refuses_what_is_not_a_file(private_dir):
    fifo = private_dir / "fifo.log"
    os.mkfifo(fifo)
    with pytest.raises(HGraphError, match=str(fifo)):    # at once: opening does not block
        cc._open_log(fifo)
    with pytest.raises(HGraphError, match="symbolic link"):
        (private_dir / "dangling.log").symlink_to(private_dir / "nowhere")
        cc._open_log(private_dir / "dangling.log")
    assert not (private_dir / "nowhere").exists()


# -- down and recorded pids ---------------------------------------------------------------------

def _record(state_dir: Path, processes: list[dict]) -> None:
    state_dir.mkdir(mode=0o700, exist_ok=True)
    state = {"gcs_address": "127.0.0.1:1", "listen": "127.0.0.1", "auth_mode": "disabled",
             "jobs_address": None, "temp_dir": str(state_dir / "r"), "processes": processes}
    cc.state_path(state_dir).write_text(json.dumps(state))


def _unrelated(procs) -> subprocess.Popen:
    """A process that is not Ray, leading its own session as `up`'s nodes do."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    procs.append(proc)
    return proc


def _real_identity(pid: int) -> dict:
    """What `up` records to identify a process: its start time in clock ticks after boot
    (/proc/PID/stat field 22) and the boot id."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return {"create_time": int(fields[19]), "boot_id": boot_id}


def test_down_leaves_a_reused_pid_alone(private_dir, procs, capsys):
    """The recorded node is gone and its pid now belongs to an unrelated process (another start
    time): `down` must not end it."""
    other = _unrelated(procs)
    state_dir = private_dir / "hgc"
    fake = _real_identity(other.pid)
    fake["create_time"] -= 12345                       # the node `up` recorded started earlier
    _record(state_dir, [{"pid": other.pid, "sid": other.pid, "argv": RAY_LIKE, "cmdline": RAY_LIKE,
                         "log": str(state_dir / "node-0.log"), **fake}])
    assert main(["cluster", "down", "--state-dir", str(state_dir)]) == 0
    assert not _gone(other, timeout=1.0), "down ended a process it did not start"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"not stopping pid {other.pid}" in err[0] and "another time" in err[0]
    assert not cc.state_path(state_dir).exists()


@pytest.mark.parametrize("change", ["not_ray", "no_time", "other_boot"])
def test_down_ends_only_the_ray_process_it_recorded(private_dir, procs, capsys, change):
    """Same pid and start time but not a `ray start` command line; no recorded start time (a
    state file from before); another boot: all left alone."""
    other = _unrelated(procs)
    state_dir = private_dir / "hgc"
    record = {"pid": other.pid, "sid": other.pid, "argv": RAY_LIKE, "log": str(state_dir / "n.log"),
              **_real_identity(other.pid)}
    if change == "no_time":
        record["argv"] = ["sleep"]
        del record["create_time"], record["boot_id"]
    elif change == "other_boot":
        record["boot_id"] = "not-this-boot"
    _record(state_dir, [record])
    assert cc.down(state_dir) == 0
    assert not _gone(other, timeout=1.0)
    assert f"not stopping pid {other.pid}" in capsys.readouterr().err


def test_down_ends_the_process_up_recorded(private_dir):
    """`_spawn` records what identifies the node; `down` then ends its whole session."""
    state_dir = private_dir / "hgc"
    cc.state_folder(state_dir, create=True)
    child = "import subprocess, sys, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    record = cc._spawn([sys.executable, "-c", child, "-m", "cluster.ray_node", "start"],
                       state_dir / "node-0.log", dict(os.environ))
    assert record["create_time"] == cc._proc_info(record["pid"])["create_time"]
    assert record["cmdline"][-3:] == ["-m", "cluster.ray_node", "start"]
    deadline = time.monotonic() + 20
    while len(cc._session_members({record["sid"]})) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(cc._session_members({record["sid"]})) == 2   # the stand-in and its sleep
    _record(state_dir, [record])
    assert cc.down(state_dir) == 1
    assert cc._session_members({record["sid"]}) == []
    assert sorted(p.name for p in state_dir.iterdir()) == []


def test_down_after_the_node_died_ends_only_rays_processes(private_dir, capsys):
    """`ray start` has gone, processes of its session remain: Ray's are ended, others are not."""
    state_dir = private_dir / "hgc"
    cc.state_folder(state_dir, create=True)
    pids = private_dir / "pids"
    child = ("import subprocess, sys\n"
             f"a = subprocess.Popen([sys.executable, '-c', {SLEEP!r}, '-m', 'ray.fake_raylet'])\n"
             "b = subprocess.Popen(['sleep', '60'])\n"
             f"open({str(pids)!r}, 'w').write(f'{{a.pid}} {{b.pid}}')\n")
    record = cc._spawn([sys.executable, "-c", child, "-m", "cluster.ray_node", "start"],
                       state_dir / "node-0.log", dict(os.environ))
    try:
        os.waitpid(record["pid"], 0)                      # the node's `ray start` is gone
    except ChildProcessError:
        pass
    ray_pid, other_pid = map(int, pids.read_text().split())
    try:
        _record(state_dir, [record])
        assert cc.down(state_dir) == 1
        assert cc._proc_info(ray_pid) is None or cc._proc_info(ray_pid)["zombie"]
        assert cc._proc_info(other_pid) is not None and not cc._proc_info(other_pid)["zombie"]
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"not stopping pid {other_pid}" in err[0], err
    finally:
        for pid in (ray_pid, other_pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_status_counts_only_the_recorded_processes(private_dir, procs, capsys):
    other = _unrelated(procs)
    state_dir = private_dir / "hgc"
    fake = _real_identity(other.pid)
    fake["create_time"] -= 1
    _record(state_dir, [{"pid": other.pid, "sid": other.pid, "argv": RAY_LIKE,
                         "log": str(state_dir / "node-0.log"), **fake}])
    assert main(["cluster", "status", "--state-dir", str(state_dir)]) == 0
    assert capsys.readouterr().out.startswith("0/1 node processes alive")


# -- a real cluster -----------------------------------------------------------------------------

@pytest.mark.timeout(300)
def test_up_and_down_a_real_node(private_dir, monkeypatch, capsys):
    """One real Ray node: private folder and log, identity recorded, `down` ends it all."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    state_dir = private_dir / "hgc"
    state = cc.up(state_dir, nodes=1, cpus_per_node=1, port=cc._free_port(), dashboard_port=None)
    try:
        assert _mode(state_dir) == 0o700 and _mode(state_dir / "node-0.log") == 0o600
        node = state["processes"][0]
        assert cc._identify(node) == (True, "")
        assert cc._ray_start_command(node["cmdline"])
        members = cc._session_members({node["sid"]})
        assert len(members) >= 3                            # ray start, GCS, raylet at least
        infos = [info for info in map(cc._proc_info, members) if info and not info["zombie"]]
        assert [info["cmdline"][:3] for info in infos if not cc._ray_process(info["cmdline"])
                and "multiprocessing" not in " ".join(info["cmdline"])] == []
        assert main(["cluster", "status", "--state-dir", str(state_dir)]) == 0
        assert capsys.readouterr().out.startswith("1/1 node processes alive")
    finally:
        stopped = cc.down(state_dir)
    assert stopped == 1
    assert cc._session_members({node["sid"]}) == []
    assert "not stopping" not in capsys.readouterr().err
    assert sorted(p.name for p in state_dir.iterdir()) == []
