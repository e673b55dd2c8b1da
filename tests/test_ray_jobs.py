"""Ray Jobs end to end (issue 4): ``hgraph submit JOB ... --address http://HOST:PORT``.

One local head per module, started by ``hgraph cluster up`` (``ray start --head --block`` with
the dashboard, token auth off) and stopped by ``hgraph cluster down`` — by its own session, never
``ray stop``. A submission returns the same output file as a local run; a detached job is
followed with ``hgraph status`` / ``hgraph logs --fetch``; a failing job, a bad address and an
unreachable or silent cluster each give one error line and a non-zero exit, within a time bound.
"""

from __future__ import annotations

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

import pytest

from cluster import commands_cluster
from hgraph.cli import main as hgraph_main
from hgraph.examples import random_graph
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
def head():
    """A 1-node Ray cluster with the dashboard; yields its Ray Jobs address."""
    state_dir = Path(tempfile.mkdtemp(prefix="hgj", dir="/tmp"))   # short: Unix-socket paths
    state = commands_cluster.up(state_dir, nodes=1, cpus_per_node=2, port=free_port(),
                                dashboard_port=free_port())
    try:
        yield state["jobs_address"]
    finally:
        commands_cluster.down(state_dir)
        for p in state["processes"]:
            assert not commands_cluster._alive(p["pid"]) or _zombie(p["pid"])
        shutil.rmtree(state_dir, ignore_errors=True)


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
                        "--out", str(out), "--stats", str(stats)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert out.read_bytes() == expected
    rows = json.loads(stats.read_text())
    assert [r["superstep"] for r in rows] == list(range(len(rows)))
    assert "superstep 0" in captured.out              # the job's log was streamed
    assert "hgraph-output-begin" not in captured.out  # result blocks are hidden


def test_detached_job_status_logs_and_fetch(head, graph, tmp_path, capsys):
    expected = local_run("pagerank", "--graph", str(graph), "--iterations", "10",
                         out=tmp_path / "local.tsv")
    out = tmp_path / "ray.tsv"
    assert hgraph_main(["submit", "pagerank", "--graph", str(graph), "--iterations", "10",
                        "--address", head, "--detach", "--out", str(out)]) == 0
    job_id = capsys.readouterr().out.strip().splitlines()[-1]
    assert job_id.startswith("raysubmit_")
    assert not out.exists()
    assert hgraph_main(["logs", job_id, "--address", head, "--follow", "--fetch",
                        "--timeout", JOB_TIMEOUT]) == 0
    assert out.read_bytes() == expected
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
    proc = subprocess.run([sys.executable, "-m", "hgraph", *words], cwd=ROOT, env=env,
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
    assert inputs == [(graph, "_hgraph_inputs/0-g.tsv")]
    assert outputs == {"0-d.tsv": str((tmp_path / "d.tsv").resolve())}
    assert argv == ["--graph", "_hgraph_inputs/0-g.tsv", "--source", "3", "--out", "0-d.tsv",
                    "--stats", "-", "--runtime", "ray"]
    command = jobs_api.entrypoint("sssp", argv, outputs, "python3")
    assert command.startswith('W="$PWD"; O="$(mktemp -d)"; python3 -m jobs.sssp --graph '
                              '"$W"/_hgraph_inputs/0-g.tsv --source 3 --out "$O"/0-d.tsv')
    assert 'python3 -m cluster.ship_outputs --dir "$O" 0-d.tsv; rc=$?' in command


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
    code = ("from cluster.connect import ensure_ray, EMBEDDED_OBJECT_STORE_BYTES as B\n"
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
    from cluster.connect import ensure_ray
    from hgraph.errors import HGraphError

    with pytest.raises(HGraphError, match="already connected to the Ray cluster at .*; it cannot "
                                          "also join 127.0.0.1:1$"):
        ensure_ray("127.0.0.1:1")
    ensure_ray(ray_session.get_runtime_context().gcs_address)   # the same one: fine
