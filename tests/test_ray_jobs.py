"""Ray Jobs end to end (issue 4): ``hgraph submit JOB ... --address http://HOST:PORT``.

One local head per module, started by ``hgraph cluster up`` (``ray start --head --block`` with
the dashboard, token auth off) and stopped by ``hgraph cluster down`` — by its own session, never
``ray stop``. A submission returns the same output file as a local run; a detached job is
followed with ``hgraph status`` / ``hgraph logs --fetch``; a failing job, a bad address and an
unreachable or silent cluster each give one error line and a non-zero exit, within a time bound.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from cluster import commands_cluster
from jobs.cli import main as hgraph_main
from hgraph.generators import random_graph
from tests.conftest import ROOT

JOB_TIMEOUT = "240"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    path = tmp_path_factory.mktemp("jobs") / "g.tsv"
    g = random_graph(150, 700, seed=11)
    with open(path, "w") as handle:
        for s, d, w in zip(g.src.tolist(), g.dst.tolist(), g.weights.tolist()):
            handle.write(f"{s}\t{d}\t{w!r}\n")
    return path


@pytest.fixture(scope="module")
def head_state():
    """A 1-node Ray cluster with the dashboard (`hgraph cluster up`); yields its state."""
    state_dir = Path(tempfile.mkdtemp(prefix="hgj", dir="/tmp"))   # short: Unix-socket paths
    state = commands_cluster.up(state_dir, nodes=1, cpus_per_node=2, port=free_port(),
                                dashboard_port=free_port())
    try:
        yield state
    finally:
        commands_cluster.down(state_dir)
        for p in state["processes"]:
            assert not commands_cluster._alive(p["pid"]) or _zombie(p["pid"])
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def head(head_state):
    """The Ray Jobs address of :func:`head_state`'s cluster."""
    return head_state["jobs_address"]


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
    except OSError:
        return True


def local_run(job: str, *words: str, out: Path) -> bytes:
    assert hgraph_main(["submit", job, *words, "--progress", "off", "--out", str(out)]) == 0
    return out.read_bytes()


def test_submission_returns_the_same_output_as_a_local_run(head, graph, tmp_path, capsys):
    expected = local_run("sssp", "--graph", str(graph), "--source", "3", out=tmp_path / "local.tsv")
    out, stats = tmp_path / "sub" / "ray.tsv", tmp_path / "ray-stats.json"
    code = hgraph_main(["submit", "sssp", "--graph", str(graph), "--source", "3", "--tasks", "2",
                        "--address", head, "--wait", "--job-timeout", JOB_TIMEOUT,
                        "--out", str(out), "--stats", str(stats), "--progress", "plain"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert out.read_bytes() == expected
    rows = json.loads(stats.read_text())
    assert [r["superstep"] for r in rows] == list(range(len(rows)))
    assert "superstep 0" in captured.out              # the job's log was streamed
    assert "hgraph-output-begin" not in captured.out  # result blocks are hidden
    assert_no_ray_chatter(captured)


def assert_no_ray_chatter(captured) -> None:
    """Neither Ray's INFO lines (its SDK here, its job manager in the log) nor its echo of the
    shell entry point reach the user."""
    for text in (captured.out, captured.err):
        assert "Running entrypoint" not in text and '"$W"' not in text, text
        assert not [line for line in text.splitlines() if "\tINFO " in line or " INFO " in line], text


def test_a_plan_job_shows_the_users_file_name(head, tmp_path, capsys):
    """The remote job's table and report name the graph as the user's file, not the staged
    copy ("0-cg_mlp" before)."""
    graph = tmp_path / "cg_mlp.txt"
    assert hgraph_main(["graph", "zoo", "mlp", "--out", str(graph)]) == 0
    capsys.readouterr()
    report = tmp_path / "r.json"
    code = hgraph_main(["submit", "plan", "--graph", str(graph), "--budget", "100%",
                        "--address", head, "--job-timeout", JOB_TIMEOUT, "--report", str(report)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(report.read_text())["graph"] == "mlp"
    assert "plan: mlp (" in captured.out                # the summary table's title
    assert_no_ray_chatter(captured)


def test_detached_job_status_logs_and_fetch(head, graph, tmp_path, capsys, monkeypatch):
    expected = local_run("pagerank", "--graph", str(graph), "--iterations", "10",
                         out=tmp_path / "local.tsv")
    monkeypatch.chdir(tmp_path)
    assert hgraph_main(["submit", "pagerank", "--graph", str(graph), "--iterations", "10",
                        "--address", head, "--detach", "--out", "sub/ray.tsv"]) == 0
    job_id = capsys.readouterr().out.strip().splitlines()[-1]
    assert job_id.startswith("raysubmit_")
    assert not (tmp_path / "sub" / "ray.tsv").exists()
    assert hgraph_main(["logs", job_id, "--address", head, "--follow", "--fetch",
                        "--to", "fetched", "--timeout", JOB_TIMEOUT]) == 0
    assert (tmp_path / "fetched" / "sub" / "ray.tsv").read_bytes() == expected
    assert not (tmp_path / "sub" / "ray.tsv").exists()
    capsys.readouterr()
    assert hgraph_main(["status", job_id, "--address", head]) == 0
    line = capsys.readouterr().out.strip()
    assert line.split("\t")[:3] == [job_id, "SUCCEEDED", "pagerank"]


def test_failing_job_is_one_error_line_and_its_exit_code(head, graph, tmp_path, capsys):
    code = hgraph_main(["submit", "sssp", "--graph", str(graph), "--source", "99999",
                        "--address", head, "--job-timeout", JOB_TIMEOUT,
                        "--out", str(tmp_path / "never.tsv")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("hgraph: error: Ray job raysubmit_")
    assert "FAILED: --source 99999 is not a vertex of the graph" in err[-1]
    assert not (tmp_path / "never.tsv").exists()


def test_unknown_job_id(head, capsys):
    assert hgraph_main(["status", "raysubmit_nosuchjob", "--address", head]) != 0
    assert capsys.readouterr().err.strip() == "hgraph: error: no Ray job raysubmit_nosuchjob on this cluster"


@pytest.fixture
def silent_server():
    """A TCP port that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


def run_cli(*words: str, env_extra: dict | None = None, limit: float = 60.0):
    env = dict(os.environ, RAY_AUTH_MODE="disabled", **(env_extra or {}))
    env.pop("RAY_ADDRESS", None)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "jobs", *words], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=limit)
    return proc, time.monotonic() - t0


@pytest.mark.parametrize("address, message", [
    ("http://127.0.0.1:{closed}", "cannot reach the Ray dashboard at 127.0.0.1:{closed}: Connection refused"),
    ("http://127.0.0.1:notaport", "bad Ray address 'http://127.0.0.1:notaport'"),
    ("http://nohost.invalid:8265", "cannot reach the Ray dashboard at nohost.invalid:8265: unknown host"),
    ("127.0.0.1:{closed}", "cannot reach the Ray cluster at 127.0.0.1:{closed}: Connection refused"),
    ("http://127.0.0.1:{silent}", "cannot use the Ray Jobs API at http://127.0.0.1:{silent}"),
])
def test_bad_or_unreachable_address_is_one_line_never_a_hang(graph, tmp_path, silent_server,
                                                             address, message):
    ports = {"closed": free_port(), "silent": silent_server}
    address, message = address.format(**ports), message.format(**ports)
    proc, seconds = run_cli("submit", "sssp", "--graph", str(graph), "--address", address,
                            "--out", str(tmp_path / "x.tsv"), "--progress", "off",
                            env_extra={"HGRAPH_JOBS_HTTP_TIMEOUT": "3"})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0
    assert len(lines) == 1 and lines[0].startswith("hgraph: error: " + message), proc.stderr
    assert seconds < 45
    assert not (tmp_path / "x.tsv").exists()


def test_wait_or_detach_need_a_jobs_address(graph, tmp_path):
    proc, _ = run_cli("submit", "sssp", "--graph", str(graph), "--detach")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("hgraph: error: --detach/--wait submit a Ray Job: "
                                   "give --address http://HOST:8265")


# ---------------------------------------------------------------------------- no cluster needed


def test_submission_rewrites_paths_and_drops_submitter_flags(graph, tmp_path):
    from cluster import jobs_api
    from jobs import sssp

    words = ["--graph", str(graph), "--source", "3", "--address", "http://h:8265", "--detach",
             "--job-timeout=30", "--out", str(tmp_path / "d.tsv"), "--stats=-"]
    argv, inputs, outputs = jobs_api.rewrite_argv(sssp, words)
    assert inputs == [(graph, "_hgraph_inputs/0/g.tsv")]
    assert outputs == {"0-d.tsv": str(tmp_path / "d.tsv")}   # as typed; fetched under --to
    assert argv == ["--graph", "_hgraph_inputs/0/g.tsv", "--source", "3", "--out", "0-d.tsv",
                    "--stats", "-", "--runtime", "ray"]
    command = jobs_api.entrypoint("sssp", argv, outputs, "python3")
    assert command.startswith('W="$PWD"; O="$(mktemp -d)"; python3 -m jobs.sssp --graph '
                              '"$W"/_hgraph_inputs/0/g.tsv --source 3 --out "$O"/0-d.tsv')
    assert 'python3 -m cluster.ship_outputs --dir "$O" 0-d.tsv; rc=$?' in command


def test_ray_chatter_is_dropped_from_a_jobs_output():
    from cluster.jobs_api import job_output

    log = ("2026-11-23 14:14:58,444\tINFO job_manager.py:581 -- Runtime env is setting up.\n"
           "Running entrypoint for job raysubmit_X: W=\"$PWD\"; python3 -m jobs.plan ...\n"
           "superstep 0  push\n"
           "2026-11-23 14:14:59,001\tWARNING worker.py:1 -- kept: a warning matters\n"
           "hgraph: error: bad\n")
    assert job_output(log) == ("superstep 0  push\n"
                               "2026-11-23 14:14:59,001\tWARNING worker.py:1 -- kept: a warning matters\n"
                               "hgraph: error: bad\n")


def test_result_files_survive_the_log_round_trip(tmp_path):
    import io

    from cluster import ship_outputs

    (tmp_path / "a.bin").write_bytes(bytes(range(256)) * 1000)
    (tmp_path / "empty.txt").write_bytes(b"")
    buf = io.StringIO()
    ship_outputs.ship([tmp_path / "a.bin", tmp_path / "empty.txt"], out=buf)
    log = "superstep 0 ...\n" + buf.getvalue() + "done\n"
    files = ship_outputs.parse(log)
    assert files == {str(tmp_path / "a.bin"): bytes(range(256)) * 1000, str(tmp_path / "empty.txt"): b""}
    assert ship_outputs.strip(log).splitlines() == [
        "superstep 0 ...", f"[result file {tmp_path / 'a.bin'} shipped]",
        f"[result file {tmp_path / 'empty.txt'} shipped]", "done"]
    damaged = log.replace(log.splitlines()[2][:8], "AAAAAAAA", 1)
    with pytest.raises(Exception):
        ship_outputs.parse(damaged)


def test_example_configs_are_well_formed():
    import jsonschema
    import ray
    import yaml

    configs = ROOT / "cluster" / "configs"
    autoscaler = yaml.safe_load((configs / "ray-autoscaler.yaml").read_text())
    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    jsonschema.validate(autoscaler, schema)
    image = autoscaler["docker"]["image"]
    kuberay = yaml.safe_load((configs / "kuberay-raycluster.yaml").read_text())
    assert (kuberay["apiVersion"], kuberay["kind"]) == ("ray.io/v1", "RayCluster")
    assert kuberay["spec"]["rayVersion"] == ray.__version__
    pods = [kuberay["spec"]["headGroupSpec"]["template"]] + [
        group["template"] for group in kuberay["spec"]["workerGroupSpecs"]]
    assert {c["image"] for pod in pods for c in pod["spec"]["containers"]} == {image}
    dockerfile = (configs / "Dockerfile").read_text()
    assert f"rayproject/ray:{ray.__version__}-" in dockerfile
    from cluster.jobs_api import PACKAGES

    for package in PACKAGES:
        assert f"COPY --chown=ray:users {package} ./{package}" in dockerfile


def test_cluster_command_without_a_cluster(tmp_path):
    proc, _ = run_cli("cluster", "status", "--state-dir", str(tmp_path))
    assert (proc.returncode, proc.stdout.strip()) == (1, "no cluster recorded")
    proc, _ = run_cli("cluster", "down", "--state-dir", str(tmp_path))
    assert (proc.returncode, proc.stdout.strip()) == (0, "no cluster recorded")


def test_embedded_ray_has_laptop_settings(tmp_path):
    """No address: a local Ray with a bounded object store and no dashboard (own process)."""
    code = ("from hgraph.runtime.ray_connect import ensure_ray, EMBEDDED_OBJECT_STORE_BYTES as B\n"
            "ensure_ray(num_cpus=2)\n"
            "import ray\n"
            "store = int(ray.cluster_resources()['object_store_memory'])\n"
            "url = ray._private.worker.global_worker.node.address_info.get('webui_url')\n"
            "print(store == B, repr(url))\n")
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env.pop("RAY_AUTH_MODE", None)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout.strip().splitlines()[-1] == "True ''", proc.stderr[-2000:]


def test_a_process_joins_one_cluster(ray_session):
    from hgraph.common.errors import HGraphError
    from hgraph.runtime.ray_connect import ensure_ray

    with pytest.raises(HGraphError, match="already connected to the Ray cluster at .*; it cannot "
                                          "also join 127.0.0.1:1$"):
        ensure_ray("127.0.0.1:1")
    ensure_ray(ray_session.get_runtime_context().gcs_address)   # the same one: fine


def _listening_addresses(pids) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The local addresses of the TCP sockets in LISTEN state that ``pids`` hold (/proc)."""
    inodes = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[len("socket:["):-1])
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:     # 0A: LISTEN
                continue
            raw = bytes.fromhex(fields[1].split(":")[0])
            packed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.append(ipaddress.ip_address(packed))
    return found


def _loopback(address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def test_cluster_up_listens_on_loopback_only(head_state):
    pids = commands_cluster._session_members({p["sid"] for p in head_state["processes"]})
    addresses = _listening_addresses(pids)
    assert len(addresses) >= 3                     # GCS, raylet, dashboard at least
    assert [str(a) for a in addresses if not _loopback(a)] == []
    assert head_state["gcs_address"].startswith("127.0.0.1:")


def test_engine_joins_the_loopback_cluster_by_its_gcs_address(head_state, graph, tmp_path):
    """Ray rewrites 127.0.0.1 to the network address, where a loopback cluster does not listen;
    the engine still joins it (own process: this session may hold the embedded Ray)."""
    expected = local_run("sssp", "--graph", str(graph), "--source", "3", out=tmp_path / "local.tsv")
    proc, seconds = run_cli("submit", "sssp", "--graph", str(graph), "--source", "3", "--tasks", "2",
                            "--address", head_state["gcs_address"], "--progress", "off",
                            "--out", str(tmp_path / "joined.tsv"), limit=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "joined.tsv").read_bytes() == expected


class _FakePopen:
    """Records what `hgraph cluster up` would start, starts nothing."""

    started: list = []

    def __init__(self, argv, env=None, **_):
        self.pid = 4_000_000 + len(self.started)       # above any real pid: nothing to signal
        _FakePopen.started.append((list(argv), dict(env or {})))


def _dry_up(monkeypatch, tmp_path, **options):
    _FakePopen.started = []
    monkeypatch.setattr(subprocess, "Popen", _FakePopen)   # commands_cluster imports it in _spawn
    monkeypatch.setattr(commands_cluster, "_wait_started", lambda *a, **k: None)
    monkeypatch.setattr(commands_cluster, "_wait_port", lambda *a, **k: None)
    monkeypatch.setattr(commands_cluster, "_port_open", lambda *a, **k: False)
    state_dir = tmp_path / f"s{len(list(tmp_path.iterdir()))}"
    commands_cluster.up(state_dir, nodes=2, port=6399, dashboard_port=8299, **options)
    commands_cluster.down(state_dir)
    return _FakePopen.started


def test_cluster_up_binds_loopback_and_keeps_the_users_auth(monkeypatch, tmp_path):
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    started = _dry_up(monkeypatch, tmp_path)
    assert len(started) == 2
    for argv, env in started:
        assert "--node-ip-address=127.0.0.1" in argv
        assert env["RAY_AUTH_MODE"] == "disabled"        # defaulted for loopback only
    assert "--dashboard-host=127.0.0.1" in started[0][0]
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert {env["RAY_AUTH_MODE"] for _, env in _dry_up(monkeypatch, tmp_path)} == {"token"}


def test_cluster_up_listen_exposes_only_what_it_is_told(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")   # as after an embedded Ray
    started = _dry_up(monkeypatch, tmp_path, listen="10.1.2.3")
    for argv, env in started:
        assert "--node-ip-address=10.1.2.3" in argv
        assert env["RAY_AUTH_MODE"] == "token"           # Ray's default kept off loopback
        assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in env     # not held on loopback
    assert "--dashboard-host=10.1.2.3" in started[0][0]
    with pytest.raises(SystemExit):
        hgraph_main(["cluster", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--listen HOST" in text and "127.0.0.1: reachable from this machine only" in text
    assert "exposes the cluster" in text


class _FakeJobsClient:
    def __init__(self, metadata: dict, log: str):
        self.metadata, self.log = metadata, log

    def get_job_info(self, job_id):
        return SimpleNamespace(status="SUCCEEDED", message="", driver_exit_code=0,
                               metadata={"hgraph_job": "sssp", "hgraph_outputs": json.dumps(self.metadata)})

    def get_job_logs(self, job_id):
        return self.log


def _shipped_log(tmp_path, names: dict[str, bytes], monkeypatch) -> str:
    import io

    from cluster import ship_outputs

    work = tmp_path / "job"
    work.mkdir()
    for name, data in names.items():
        (work / name).write_bytes(data)
    monkeypatch.chdir(work)
    buf = io.StringIO()
    ship_outputs.ship(list(names), out=buf)
    return "superstep 0\n" + buf.getvalue()


def test_fetch_writes_only_under_the_directory_named(tmp_path, monkeypatch, capsys):
    from cluster import jobs_api

    outside = tmp_path / "outside" / "a.tsv"
    log = _shipped_log(tmp_path, {"0-a.tsv": b"A\n", "1-b.tsv": b"B\n"}, monkeypatch)
    client = _FakeJobsClient({"0-a.tsv": str(outside), "1-b.tsv": "sub/b.tsv"}, log)
    monkeypatch.setattr(jobs_api, "connect", lambda address, **_: client)
    dest = tmp_path / "dest"
    assert hgraph_main(["logs", "raysubmit_x", "--address", "http://127.0.0.1:1", "--fetch",
                        "--to", str(dest)]) == 0
    assert not outside.exists()
    assert (dest / outside.relative_to("/")).read_bytes() == b"A\n"   # the root is stripped
    assert (dest / "sub" / "b.tsv").read_bytes() == b"B\n"
    monkeypatch.chdir(tmp_path)                                         # default: the current dir
    assert hgraph_main(["logs", "raysubmit_x", "--address", "http://127.0.0.1:1", "--fetch"]) == 0
    assert (tmp_path / "sub" / "b.tsv").read_bytes() == b"B\n" and not outside.exists()


def test_fetch_refuses_a_path_that_climbs_out(tmp_path, monkeypatch, capsys):
    from cluster import jobs_api

    log = _shipped_log(tmp_path, {"0-a.tsv": b"A\n"}, monkeypatch)
    client = _FakeJobsClient({"0-a.tsv": "../../escaped.tsv"}, log)
    monkeypatch.setattr(jobs_api, "connect", lambda address, **_: client)
    dest = tmp_path / "dest"
    capsys.readouterr()
    assert hgraph_main(["logs", "raysubmit_x", "--address", "http://127.0.0.1:1", "--fetch",
                        "--to", str(dest)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "refusing to write result file '../../escaped.tsv'" in err[0]
    assert not (tmp_path / "escaped.tsv").exists() and not list(tmp_path.rglob("escaped.tsv"))


def test_waiting_prints_the_jobs_output_on_stdout_and_shipped_files_on_stderr(tmp_path,
                                                                              monkeypatch, capsys):
    """``[result file X shipped]`` is a status line (issue 39, item 10): stderr, not mixed into
    the job's output on stdout, which a pipe may be reading."""
    import io

    from cluster import jobs_api

    log = _shipped_log(tmp_path, {"0-a.tsv": b"A\n"}, monkeypatch)
    out = io.StringIO()
    capsys.readouterr()
    assert jobs_api.follow(_FakeJobsClient({}, log), "raysubmit_x", timeout=30, fetch=False,
                           stream=out) == 0
    assert out.getvalue() == "superstep 0\n"
    assert capsys.readouterr().err.splitlines() == ["[result file 0-a.tsv shipped]"]
