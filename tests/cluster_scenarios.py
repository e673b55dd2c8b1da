"""Jobs on a 3-node Ray cluster, with and without faults (run by tests/test_cluster.py).

Runs in its own process because a process joins one Ray cluster and the test session already
holds an embedded one (``conftest.ray_session``). It starts a 3-node cluster on this machine
with :class:`ray.cluster_utils.Cluster`, joins it, and runs ``hgraph submit`` jobs with
``--address`` (the real CLI path: flags, engine, Ray actors spread over the nodes):

* ``sssp``, ``pagerank``, ``plan`` failure-free;
* ``sssp`` and ``plan`` with a worker actor killed at superstep 3 (``--inject-failure 3``, the
  engine's own fault injection, with ``--checkpoint-every 2``);
* ``sssp`` and ``plan`` with the whole node of a worker removed at superstep 3 (a node is added
  back afterwards so every scenario starts with 3 nodes).

The runtime pins each worker actor (softly) to its own node, round robin, so the jobs span
three nodes. Soft affinity is a preference, not a guarantee: under CPU load Ray once placed all
three workers on the head node, and the node faults then had no worker node to remove. So this
process makes the runtime's affinity hard (:class:`HardNodeAffinity`): every worker starts on the
node the runtime chose, among the nodes alive at that moment (a replacement too). Node loss comes from a hook on :meth:`hgraph.runtime.ray_actors.RayRuntime.step` — the point
``--inject-failure`` uses, but taking down a whole node — and recoveries are counted on
:meth:`hgraph.master.Master._recover`, so a fault that never fired cannot pass for a recovery.

Usage: ``python tests/cluster_scenarios.py GRAPH CG OUTDIR`` — writes one result file per
scenario and ``summary.json`` into OUTDIR.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
# Notice a lost node within seconds (defaults take ~30 s).
os.environ.setdefault("RAY_health_check_initial_delay_ms", "0")
os.environ.setdefault("RAY_health_check_period_ms", "500")
os.environ.setdefault("RAY_health_check_timeout_ms", "500")
os.environ.setdefault("RAY_health_check_failure_threshold", "3")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ray  # noqa: E402
import psutil  # noqa: E402 - ships with ray (ray/thirdparty_files), found once ray is imported
from ray.cluster_utils import Cluster  # noqa: E402
from ray.util import scheduling_strategies  # noqa: E402

import hgraph.master  # noqa: E402
from jobs.cli import main as hgraph_main  # noqa: E402
from hgraph.runtime import ray_actors, ray_connect  # noqa: E402
from tests.test_ray_loopback import listening  # noqa: E402

# The nodes bind loopback as every Ray of the project does (``Cluster`` reads Ray's switch when
# it adds a node, and its node processes inherit it; without it they listen on every interface).
ray_connect.stay_on_loopback(ray)

NODES = 3
FAULT_SUPERSTEP = 3


class HardNodeAffinity(scheduling_strategies.NodeAffinitySchedulingStrategy):
    """Node affinity that never falls back to another node (``soft`` is ignored): installed in
    place of Ray's class, which the runtime imports when it starts an actor."""

    made = 0      # how many placements it made (the test checks it was used at all)

    def __init__(self, node_id: str, soft: bool = False, **kwargs):
        super().__init__(node_id, soft=False, **kwargs)
        HardNodeAffinity.made += 1


scheduling_strategies.NodeAffinitySchedulingStrategy = HardNodeAffinity


class Faults:
    """At superstep 3 of the next engine run, remove the node of a worker actor."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.armed: str | None = None
        self.fired: list[dict] = []
        self.recoveries = 0
        self.actor_nodes: list[list[str]] = []
        step, recover = ray_actors.RayRuntime.step, hgraph.master.Master._recover
        faults = self

        def hooked_step(rt, superstep, *args, **kwargs):
            if superstep == 1:
                faults.actor_nodes.append(faults.nodes_of(rt))
            if faults.armed and superstep == FAULT_SUPERSTEP:
                kind, faults.armed = faults.armed, None
                faults.fire(kind, rt)
            return step(rt, superstep, *args, **kwargs)

        def counted_recover(master, *args, **kwargs):
            faults.recoveries += 1
            return recover(master, *args, **kwargs)

        ray_actors.RayRuntime.step = hooked_step
        hgraph.master.Master._recover = counted_recover

    @staticmethod
    def nodes_of(rt) -> list[str]:
        ray.get([a.pid.remote() for a in rt.actors], timeout=120)   # placed and alive
        table = ray._private.state.actors()
        return [table.get(a._actor_id.hex(), {}).get("Address", {}).get("NodeID", "?")
                for a in rt.actors]

    @staticmethod
    def wait_dead(rt, node_id: str, timeout: float = 90.0) -> None:
        """Until Ray reports the node and the actors on it dead: the job then meets a lost node,
        not a node whose orphaned worker processes still answer."""
        ids = [a._actor_id.hex() for a in rt.actors]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            table = ray._private.state.actors()
            on_node = [table[i] for i in ids if table.get(i, {}).get("Address", {}).get("NodeID") == node_id]
            node_alive = any(n["Alive"] for n in ray.nodes() if n["NodeID"] == node_id)
            if not node_alive and all(a.get("State") == "DEAD" for a in on_node):
                return
            time.sleep(0.2)
        raise RuntimeError(f"node {node_id} or its actors still alive {timeout:g} s after removal")

    def fire(self, kind: str, rt) -> None:
        by_id = {n.node_id: n for n in self.cluster.worker_nodes}
        for task, node_id in enumerate(self.nodes_of(rt)):
            if node_id in by_id:
                t0 = time.perf_counter()
                self.cluster.remove_node(by_id[node_id], allow_graceful=False)
                self.wait_dead(rt, node_id)
                self.fired.append({"kind": kind, "task": task, "node": node_id,
                                   "seconds_to_dead": time.perf_counter() - t0})
                return
        raise RuntimeError(f"no worker actor runs on a removable (non-head) node: actors on "
                           f"{self.nodes_of(rt)}, worker nodes {sorted(by_id)}, alive "
                           f"{[n['NodeID'] for n in ray.nodes() if n['Alive']]}")


def start_cluster(temp_dir: str, attempts: int = 3) -> Cluster:
    """The 3-node cluster. Ray gives a node 30 s to register with the GCS ("The current node
    timed out during startup"), which a loaded 2-core machine can miss: then the processes of
    the attempt (found by the temp folder in their command line) are stopped and it starts again."""
    for attempt in range(1, attempts + 1):
        cluster = Cluster()
        try:
            cluster.add_node(num_cpus=1, include_dashboard=False, temp_dir=temp_dir,
                             object_store_memory=100 * 2**20)
            for _ in range(NODES - 1):
                cluster.add_node(num_cpus=1, object_store_memory=100 * 2**20)
            cluster.wait_for_nodes()
            return cluster
        except Exception as err:  # noqa: BLE001 - Ray raises a bare Exception for the timeout
            print(f"cluster start {attempt}/{attempts} failed: {err}", file=sys.stderr)
            cluster.shutdown()
            stop_processes_of(temp_dir)
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def stop_processes_of(temp_dir: str) -> None:
    """SIGKILL this process's Ray processes: those whose command line names ``temp_dir``."""
    needle = temp_dir.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def submit(*words: str) -> None:
    code = hgraph_main(["submit", *words, "--progress", "off"])
    if code != 0:
        raise SystemExit(f"hgraph submit {' '.join(words)} exited {code}")


def main(graph: str, cg: str, outdir: str) -> None:
    out = Path(outdir)
    temp_dir = tempfile.mkdtemp(prefix="hgc", dir="/tmp")
    # ray.cluster_utils.Cluster records the head's address in <RAY_TMPDIR>/ray/ray_current_cluster
    # whatever the nodes' temp_dir, and fails where that folder does not exist (no /tmp/ray on a
    # fresh machine): point it at our own folder, so that it is removed with the rest at the end.
    os.environ["RAY_TMPDIR"] = temp_dir
    os.makedirs(os.path.join(temp_dir, "ray"), exist_ok=True)
    t0 = time.perf_counter()
    cluster = start_cluster(temp_dir)
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    summary = {"start_seconds": time.perf_counter() - t0, "address": cluster.address, "runs": {},
               "listening": listening([me := psutil.Process(), *me.children(recursive=True)])}
    faults = Faults(cluster)
    engine = ["--tasks", str(NODES), "--address", cluster.address]
    sssp = ["sssp", "--graph", graph, "--source", "3", *engine]
    plan = ["plan", "--graph", cg, "--budget", "60%", *engine]
    scenarios = [
        ("sssp", None, [*sssp, "--out", str(out / "sssp.tsv")]),
        ("pagerank", None, ["pagerank", "--graph", graph, "--iterations", "12", *engine,
                            "--out", str(out / "pagerank.tsv")]),
        ("plan", None, [*plan, "--out", str(out / "plan.txt")]),
        # --inject-failure: the engine kills one worker actor at superstep 3 (every engine run).
        ("sssp_kill", "inject", [*sssp, "--inject-failure", str(FAULT_SUPERSTEP),
                                 "--checkpoint-every", "2", "--out", str(out / "sssp_kill.tsv"),
                                 "--stats", str(out / "sssp_kill.json")]),
        ("sssp_node", "node", [*sssp, "--checkpoint-every", "2", "--out", str(out / "sssp_node.tsv"),
                               "--stats", str(out / "sssp_node.json")]),
        ("plan_kill", "inject", [*plan, "--inject-failure", str(FAULT_SUPERSTEP),
                                 "--checkpoint-every", "2", "--out", str(out / "plan_kill.txt")]),
        ("plan_node", "node", [*plan, "--out", str(out / "plan_node.txt")]),
    ]
    try:
        for name, fault, words in scenarios:
            start = time.perf_counter()
            armed = fault if fault == "node" else None   # "inject": the engine's own
            faults.armed, before, runs_before = armed, faults.recoveries, len(faults.actor_nodes)
            submit(*words)
            alive = sum(n["Alive"] for n in ray.nodes())
            summary["runs"][name] = {
                "seconds": time.perf_counter() - start,
                "fault": faults.fired[-1] if armed else ({"kind": fault} if fault else None),
                "fault_fired": armed is None or faults.armed is None,
                "recoveries": faults.recoveries - before,
                "actor_nodes": faults.actor_nodes[runs_before:runs_before + 1],
                "alive_nodes_after": alive,
            }
            if fault == "node":
                cluster.add_node(num_cpus=1, object_store_memory=100 * 2**20)
                cluster.wait_for_nodes()
    finally:
        summary["hard_affinity_placements"] = HardNodeAffinity.made
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
