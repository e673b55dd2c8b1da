"""``hgraph cluster up --nodes N`` / ``hgraph cluster down``: a multi-node Ray on this machine.

``up`` starts one ``ray start --head --block`` and N-1 ``ray start --address HEAD --block``
processes, each as the leader of a new session (``setsid``), with a private Ray temp folder, and
records their pids and session ids in a state file. ``down`` signals exactly those sessions —
SIGTERM, then SIGKILL for anything still alive after a short grace period (a ``ray start``
node "drains" for up to 30 s on SIGTERM; a throwaway cluster need not wait for that) — so it
stops the Ray processes it started and nothing else. It never runs ``ray stop``, which kills every Ray
process on the machine, including other people's. Then it removes what ``up`` left in the state
folder (the node logs ``node-*.log`` and Ray's temp folder ``r/``) unless ``--keep-logs``; an
``up`` that fails keeps them, since its error names the node log to read.

**What it exposes.** By default every node binds to loopback (``127.0.0.1``): the GCS, the
raylets, the object stores, the agents and the dashboard (Ray Jobs) are reachable from this
machine only, and token auth defaults to off (``RAY_AUTH_MODE=disabled``) unless the
environment already sets ``RAY_AUTH_MODE`` (that setting is kept, e.g. ``token``). ``--listen
HOST`` binds the nodes and the dashboard to HOST instead: anyone who reaches HOST can then
submit jobs, i.e. run code as you, unless token auth is on — so with ``--listen`` token auth is
left at Ray's default (on) unless ``RAY_AUTH_MODE`` says otherwise.

``ray start --node-ip-address 127.0.0.1`` alone does not do it: Ray rewrites a loopback node
address to the machine's network address (and then listens on every interface).
:mod:`cluster.ray_node` starts the nodes with that rewrite turned off.

Example::

    hgraph cluster up --nodes 3            # prints the GCS and the Ray Jobs addresses
    hgraph submit sssp --graph g.txt --address 127.0.0.1:6390 --tasks 3 --out d.tsv
    hgraph submit sssp --graph g.txt --address http://127.0.0.1:8265 --out d.tsv
    hgraph cluster down
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from hgraph.errors import HGraphError
from hgraph.fileio import write_text
from hgraph.runtime.ray_connect import probe

NAME = "cluster"
HELP = ("start (up --nodes N) or stop (down) a multi-node Ray cluster on this machine, bound to "
        "loopback unless --listen HOST")

#: Seconds `up` waits for the cluster to come up, and `down` for processes to end.
START_TIMEOUT_S = 90.0
STOP_GRACE_S = 3.0
LOOPBACK = "127.0.0.1"
#: Ray's switch that keeps a process's Ray on 127.0.0.1 (see :mod:`cluster.ray_node`).
LOOPBACK_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def default_state_dir() -> Path:
    """Short (Unix-socket paths are limited to 107 bytes), per user."""
    return Path(os.environ.get("HGRAPH_CLUSTER_DIR") or f"/tmp/hgc-{os.getuid()}")


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=["up", "down", "status"],
                        help="up: start the nodes; down: stop them; status: how many are alive")
    parser.add_argument("--nodes", type=int, default=3, help="Ray nodes including the head (default 3)")
    parser.add_argument("--cpus-per-node", type=int, default=2, help="logical CPUs per node (default 2)")
    parser.add_argument("--port", type=int, default=6390, help="GCS port of the head (default 6390)")
    parser.add_argument("--dashboard-port", type=int, default=8265,
                        help="Ray Jobs / dashboard port (default 8265)")
    parser.add_argument("--no-dashboard", action="store_true", help="no dashboard (no Ray Jobs)")
    parser.add_argument("--listen", default=LOOPBACK, metavar="HOST",
                        help="address every node and the dashboard (Ray Jobs) bind to; default "
                             f"{LOOPBACK}: reachable from this machine only. Another HOST exposes "
                             "the cluster to that network: anyone reaching it can run code as you "
                             "unless token auth is on (Ray's default, kept unless RAY_AUTH_MODE is "
                             "set; on loopback RAY_AUTH_MODE defaults to disabled)")
    parser.add_argument("--state-dir", default=None,
                        help="where the state file and Ray's temp folder live (default "
                             "$HGRAPH_CLUSTER_DIR or /tmp/hgc-UID)")
    parser.add_argument("--keep-logs", action="store_true",
                        help="down: keep the node logs and Ray's temp folder (default: removed)")


def main(args) -> int:
    state_dir = Path(args.state_dir) if args.state_dir else default_state_dir()
    if args.action == "up":
        state = up(state_dir, nodes=args.nodes, cpus_per_node=args.cpus_per_node, port=args.port,
                   dashboard_port=None if args.no_dashboard else args.dashboard_port,
                   listen=args.listen)
        print(f"Ray cluster up: {len(state['processes'])} nodes, listening on {state['listen']}"
              f" (token auth: {state['auth_mode']})")
        print(f"  join (engine):   --address {state['gcs_address']}")
        if state.get("jobs_address"):
            print(f"  Ray Jobs:        --address {state['jobs_address']}")
        print(f"  stop:            hgraph cluster down{_state_flag(args)}")
        return 0
    if args.action == "down":
        stopped = down(state_dir, keep_logs=args.keep_logs)
        print(f"Ray cluster down: stopped {stopped} process group(s)" if stopped is not None
              else "no cluster recorded")
        if stopped is not None and args.keep_logs:
            print(f"  logs kept in {state_dir} (node-*.log, Ray's in r/)")
        return 0
    state = read_state(state_dir)
    if state is None:
        print("no cluster recorded")
        return 1
    alive = sum(_alive(p["pid"]) for p in state["processes"])
    print(f"{alive}/{len(state['processes'])} node processes alive; GCS {state['gcs_address']}"
          + (f"; Ray Jobs {state['jobs_address']}" if state.get("jobs_address") else ""))
    return 0


def _state_flag(args) -> str:
    return f" --state-dir {args.state_dir}" if args.state_dir else ""


def state_path(state_dir: Path) -> Path:
    return Path(state_dir) / "cluster.json"


def read_state(state_dir: Path) -> dict | None:
    path = state_path(state_dir)
    if not path.exists():
        return None
    return json.loads(path.read_text())


def _alive(pid: int) -> bool:
    """Running: a process that exited but was not reaped yet (a zombie — ``up`` does not wait
    for its nodes) is not, so a node that fails to start is reported at once."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path(f"/proc/{pid}")
    return not (proc.exists() and _zombie(proc))


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _ray_start(host: str) -> list[str]:
    """The command that starts a node bound to ``host`` (see the module docstring)."""
    if _is_loopback(host):
        return [sys.executable, "-m", "cluster.ray_node", "start"]
    exe = Path(sys.executable).parent / "ray"
    return [str(exe) if exe.exists() else "ray", "start"]


def _reach(host: str) -> str:
    """The address to connect to a node bound to ``host`` from this machine."""
    return LOOPBACK if host in ("0.0.0.0", "::", "") else host


def auth_mode(host: str) -> str:
    """The ``RAY_AUTH_MODE`` the nodes get: the user's, else disabled on loopback, else Ray's
    default (token)."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode:
        return mode
    return "disabled" if _is_loopback(host) else "token"


def _env(host: str) -> dict:
    env = dict(os.environ)
    env["RAY_AUTH_MODE"] = auth_mode(host)
    if _is_loopback(host):
        env[LOOPBACK_ONLY_ENV] = "0"   # every Ray process of the node stays on loopback
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env.pop("RAY_ADDRESS", None)
    # Ray Jobs run `python3 ...` through the PATH of the node: make it this interpreter.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _spawn(argv: list[str], log: Path, env: dict) -> dict:
    import subprocess   # here and below, not at the top: every `hgraph` command loads this module

    with open(log, "ab") as handle:
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    return {"pid": proc.pid, "sid": proc.pid, "argv": argv, "log": str(log)}


def up(state_dir: Path, *, nodes: int = 3, cpus_per_node: int = 2, port: int = 6390,
       dashboard_port: int | None = 8265, listen: str = LOOPBACK) -> dict:
    """Start the cluster bound to ``listen`` and return its state (also written to the state
    file)."""
    if nodes < 1:
        raise HGraphError(f"--nodes must be >= 1, got {nodes}")
    state_dir = Path(state_dir)
    existing = read_state(state_dir)
    if existing and any(_alive(p["pid"]) for p in existing["processes"]):
        raise HGraphError(f"a cluster from {state_path(state_dir)} is still running; "
                          "`hgraph cluster down` first")
    for what, p in (("GCS", port), ("dashboard", dashboard_port)):
        if p is not None and _port_open(p, _reach(listen)):
            raise HGraphError(f"port {p} ({what}) is already in use on this machine; pick another")
    state_dir.mkdir(parents=True, exist_ok=True)
    temp_dir = state_dir / "r"
    start = _ray_start(listen)
    bind = [f"--node-ip-address={listen}"]
    head = [*start, "--head", "--block", f"--port={port}", f"--num-cpus={cpus_per_node}",
            f"--temp-dir={temp_dir}", "--disable-usage-stats", *bind]
    if dashboard_port is None:
        head.append("--include-dashboard=false")
    else:
        head += ["--include-dashboard=true", f"--dashboard-host={listen}",
                 f"--dashboard-port={dashboard_port}"]
    reach = _reach(listen)
    gcs = f"{reach}:{port}"
    env = _env(listen)
    state = {"gcs_address": gcs, "processes": [], "listen": listen, "auth_mode": env["RAY_AUTH_MODE"],
             "jobs_address": None if dashboard_port is None else f"http://{reach}:{dashboard_port}",
             "temp_dir": str(temp_dir), "started": time.time()}
    try:
        # One node at a time: on a small machine, nodes starting together time out.
        for i in range(nodes):
            argv = head if i == 0 else [*start, "--block", f"--address={gcs}",
                                        f"--num-cpus={cpus_per_node}", "--disable-usage-stats", *bind]
            argv = argv + _agent_port_flags(head=i == 0)
            state["processes"].append(_spawn(argv, state_dir / f"node-{i}.log", env))
            write_text(state_path(state_dir), json.dumps(state, indent=1))
            _wait_started(i, state)
        if dashboard_port is not None:
            _wait_port(dashboard_port, state, "the dashboard", reach)
    except BaseException:
        down(state_dir, keep_logs=True)      # the error names a node log: keep it to be read
        raise
    return state


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _agent_port_flags(head: bool) -> list[str]:
    """Free ports for a node's per-node agents instead of Ray's fixed defaults.

    Every Ray node runs a dashboard agent (default port 52365, plus gRPC, metrics and
    runtime-env ports). On one machine a second node — or any other Ray already running here,
    such as an embedded ``ray.init`` — holds those defaults, the new agent cannot bind, and the
    head then answers every Ray Jobs submission with "No available agent to submit job".
    """
    flags = [f"--dashboard-agent-listen-port={_free_port()}",
             f"--dashboard-agent-grpc-port={_free_port()}",
             f"--metrics-export-port={_free_port()}",
             f"--runtime-env-agent-port={_free_port()}"]
    if head:
        flags.append(f"--ray-client-server-port={_free_port()}")
    return flags


def _port_open(port: int, host: str = LOOPBACK) -> bool:
    try:
        probe(host, port, what="", timeout=1.0)
        return True
    except HGraphError:
        return False


def _check_running(state: dict) -> None:
    for i, p in enumerate(state["processes"]):
        if not _alive(p["pid"]):
            raise HGraphError(f"Ray node {i} exited while starting; see {p['log']}")


def _wait_port(port: int, state: dict, what: str, host: str = LOOPBACK) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _port_open(port, host):
        _check_running(state)
        if time.monotonic() > deadline:
            raise HGraphError(f"{what} did not open port {port} within {START_TIMEOUT_S:g} s")
        time.sleep(0.3)


def _wait_started(i: int, state: dict) -> None:
    """Until node ``i``'s `ray start --block` says it is up (it logs that it now blocks)."""
    log = Path(state["processes"][i]["log"])
    deadline = time.monotonic() + START_TIMEOUT_S
    while "block forever" not in log.read_text(errors="replace"):
        _check_running(state)
        if time.monotonic() > deadline:
            raise HGraphError(f"Ray node {i} did not start within {START_TIMEOUT_S:g} s; see {log}")
        time.sleep(0.3)


def _zombie(proc: Path) -> bool:
    """Exited, waiting to be reaped (nothing left to stop)."""
    try:
        return (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _session_members(sids: set[int]) -> list[int]:
    """Pids of live processes in the sessions we created (children of `ray start` included)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if os.getsid(pid) in sids and not _zombie(entry):
                pids.append(pid)
        except (ProcessLookupError, PermissionError):
            continue
    return pids


def down(state_dir: Path, *, keep_logs: bool = False) -> int | None:
    """Stop every process in the sessions recorded by :func:`up`, then remove their logs and
    Ray's temp folder unless ``keep_logs``; None when no cluster is recorded."""
    import signal

    state = read_state(Path(state_dir))
    if state is None:
        return None
    sids = {p["sid"] for p in state["processes"]}
    # Workers first, the head last: the head's GCS should see its nodes leave.
    for p in reversed(state["processes"]):
        for pid in _session_members({p["sid"]}):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + STOP_GRACE_S
    while _session_members(sids) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in _session_members(sids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline:
        for p in state["processes"]:  # reap our direct children, if this process started them
            try:
                os.waitpid(p["pid"], os.WNOHANG)
            except ChildProcessError:
                pass
        if not _session_members(sids):
            break
        time.sleep(0.1)
    state_path(Path(state_dir)).unlink(missing_ok=True)
    if not keep_logs:
        _remove_logs(Path(state_dir), state)
    return len(sids)


def _remove_logs(state_dir: Path, state: dict) -> None:
    """The node logs and Ray's temp folder that :func:`up` made — only inside ``state_dir``,
    whatever the state file says."""
    folder = state_dir.resolve()
    made = [p["log"] for p in state["processes"]] + ([state["temp_dir"]] if state.get("temp_dir") else [])
    for path in map(Path, made):
        path = path.resolve()
        if path.parent != folder:
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
