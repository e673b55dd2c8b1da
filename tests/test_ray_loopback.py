"""Every Ray the project starts listens on loopback only (issues 25, 39): with token auth off,
a Ray port open on the network lets anyone there run code as this user.

Two Rays are checked, both started by :func:`hgraph.runtime.ray_connect.start_local` (the one
way to start a local Ray): the CLI's embedded Ray (``hgraph submit ... --runtime ray`` with no
``--address``), in a subprocess that starts it through ``ensure_ray()`` as the CLI does; and
this test session's own (``conftest.ray_session``), the Ray that runs while ``pytest`` (CI)
runs. Each runs one actor (so a worker's servers are up too); then every TCP socket in LISTEN
state held by its processes (the driver, GCS, raylet with its object manager, dashboard, agents,
workers) is listed by :func:`listening`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from hgraph.runtime import ray_connect

ROOT = Path(__file__).resolve().parents[1]

_EMBEDDED = """
import json, os
import ray, psutil              # psutil ships with ray (ray/thirdparty_files)
from hgraph.runtime.ray_connect import ensure_ray
from tests.test_ray_loopback import actor_pid, listening

ensure_ray(num_cpus=1)
actor = actor_pid(ray)
me = psutil.Process()
tree = [me, *me.children(recursive=True)]
print(json.dumps({"gcs": ray.get_runtime_context().gcs_address, "actor": actor,
                  "auth": os.environ.get("RAY_AUTH_MODE"), "listening": listening(tree),
                  "tree": [p.pid for p in tree]}))
"""


def actor_pid(ray) -> int:
    """Start one actor and return its pid: a worker process with its servers up."""
    @ray.remote(num_cpus=0)
    class Echo:
        def pid(self):
            return os.getpid()

    return ray.get(Echo.remote().pid.remote(), timeout=60)


def listening(processes) -> list[list]:
    """``[pid, name, ip, port]`` of every TCP socket in LISTEN state held by ``processes``
    (psutil processes); one that ended meanwhile listens no more."""
    import psutil               # ships with ray (ray/thirdparty_files)

    rows = []
    for proc in processes:
        try:
            name = proc.name()
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    rows.append([proc.pid, name, conn.laddr.ip, conn.laddr.port])
        except psutil.NoSuchProcess:
            pass
    return rows


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _assert_loopback_only(listening_rows, gcs_address: str) -> None:
    gcs_host, gcs_port = gcs_address.rsplit(":", 1)
    assert int(gcs_port) in {port for *_, port in listening_rows}      # the GCS is among them
    assert {"gcs_server", "raylet"} <= {name for _, name, *_ in listening_rows}
    exposed = [row for row in listening_rows if not _loopback(row[2])]
    assert exposed == [], f"Ray listens beyond loopback: {exposed}"
    assert gcs_host == "127.0.0.1"


def test_the_test_sessions_ray_listens_on_loopback_only(ray_session):
    """The Ray every Ray test of this run uses (CI's included): its processes are this
    process and those of its session folder (they name it on their command lines: GCS, raylet,
    dashboard, monitors) with their children (agents, workers)."""
    import psutil

    folder = ray_connect.local_folder()
    assert folder is not None, "the session's Ray was not started by ray_connect.start_local"
    actor = actor_pid(ray_session)
    me = psutil.Process()
    tops = [p for p in me.children() if folder in " ".join(_cmdline(p))]
    tree = [me, *tops, *(c for p in tops for c in p.children(recursive=True))]
    assert actor in {p.pid for p in tree}                             # workers are walked too
    _assert_loopback_only(listening(tree), ray_session.get_runtime_context().gcs_address)
    assert os.environ.get("RAY_AUTH_MODE") == "disabled"


def _cmdline(proc) -> list[str]:
    import psutil

    try:
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def test_embedded_ray_listens_on_loopback_only():
    env = dict(os.environ)
    for name in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
        env.pop(name, None)               # ensure_ray itself must keep Ray on loopback
    env["RAY_AUTH_MODE"] = "disabled"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", _EMBEDDED], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["actor"] in report["tree"]                          # workers are walked too
    _assert_loopback_only(report["listening"], report["gcs"])
    assert report["auth"] == "disabled"


class _FakeRay:
    """Records what ``ray.init`` was given and the environment it saw; starts nothing."""

    def __init__(self):
        self._private = SimpleNamespace(ray_constants=SimpleNamespace(ENABLE_RAY_CLUSTER=True))
        self.calls = []

    def init(self, **kwargs):
        self.calls.append((kwargs, dict(os.environ),
                           self._private.ray_constants.ENABLE_RAY_CLUSTER))

    def is_initialized(self):
        return False


def test_the_loopback_switch_is_set_before_ray_init(monkeypatch, tmp_path):
    """Ray processes inherit the switch only if it is in the environment when ``ray.init`` runs;
    a user's ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1`` does not expose the embedded Ray."""
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "1")   # restored after the test
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.setattr(ray_connect.atexit, "register", lambda *a: None)
    fake = _FakeRay()
    ray_connect._start_embedded(fake, num_cpus=1, dashboard=True)
    (kwargs, env, cluster_switch), = fake.calls
    assert env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0" and cluster_switch is False
    assert kwargs["_node_ip_address"] == "127.0.0.1" and kwargs["dashboard_host"] == "127.0.0.1"
    assert kwargs["address"] == "local"


@pytest.mark.parametrize("users, expected", [(None, "disabled"), ("token", "token")])
def test_ensure_ray_keeps_the_users_auth_mode(monkeypatch, users, expected):
    import ray

    if users is None:
        monkeypatch.setenv("RAY_AUTH_MODE", "x")       # recorded, so restored after the test
        monkeypatch.delenv("RAY_AUTH_MODE")
    else:
        monkeypatch.setenv("RAY_AUTH_MODE", users)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    seen = []
    monkeypatch.setattr(ray_connect, "_start_embedded",
                        lambda *a, **k: seen.append(os.environ.get("RAY_AUTH_MODE")))
    ray_connect.ensure_ray()
    assert seen == [expected]
