"""The embedded Ray (``hgraph submit ... --runtime ray`` with no ``--address``) listens on
loopback only (issue 25): with token auth off, a Ray port open on the network lets anyone there
run code as this user.

The session's Ray (``tests/conftest.py``) is started by ``ray.init``, not by
:func:`hgraph.runtime.ray_connect.ensure_ray`, so the embedded Ray under test runs in a
subprocess of its own: it starts through ``ensure_ray()``, runs one actor (so a worker's
servers are up too), then reports every TCP socket in LISTEN state held by its own process tree
(the driver, GCS, raylet with its object manager, dashboard, agents, workers).
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

ensure_ray(num_cpus=1)

@ray.remote
class Echo:
    def pid(self):
        return os.getpid()

actor_pid = ray.get(Echo.remote().pid.remote(), timeout=60)
me = psutil.Process()
listening = []
tree = [me, *me.children(recursive=True)]
for proc in tree:
    try:
        name = proc.name()
        for conn in proc.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN:
                listening.append([proc.pid, name, conn.laddr.ip, conn.laddr.port])
    except psutil.NoSuchProcess:      # a worker that ended meanwhile listens no more
        pass
print(json.dumps({"gcs": ray.get_runtime_context().gcs_address, "actor": actor_pid,
                  "auth": os.environ.get("RAY_AUTH_MODE"), "listening": listening,
                  "tree": [p.pid for p in tree]}))
"""


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


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
    listening = report["listening"]
    gcs_host, gcs_port = report["gcs"].rsplit(":", 1)
    assert int(gcs_port) in {port for *_, port in listening}          # the GCS is in the tree
    assert {"gcs_server", "raylet"} <= {name for _, name, *_ in listening}
    assert report["actor"] in report["tree"]                          # workers are walked too
    exposed = [row for row in listening if not _loopback(row[2])]
    assert exposed == [], f"embedded Ray listens beyond loopback: {exposed}"
    assert gcs_host == "127.0.0.1"
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
