"""``hgraph cluster up --nodes N`` / ``hgraph cluster down``: a multi-node Ray on this machine.

``up`` starts one ``ray start --head --block`` and N-1 ``ray start --address HEAD --block``
processes, each as the leader of a new session (``setsid``), with a private Ray temp folder, and
records their pids, session ids, start times and command lines in a state file. ``down`` signals
exactly those sessions — SIGTERM, then SIGKILL for anything still alive after a short grace
period (a ``ray start`` node "drains" for up to 30 s on SIGTERM; a throwaway cluster need not
wait for that) — so it stops the Ray processes it started and nothing else. It never runs ``ray
stop``, which kills every Ray process on the machine, including other people's. Then it removes
what ``up`` left in the state folder (the node logs ``node-*.log`` and Ray's temp folder ``r/``)
unless ``--keep-logs``; an ``up`` that fails keeps them, since its error names the node log to
read.

**The state folder and the pids in it.** The state folder (default ``$XDG_RUNTIME_DIR/hgc``
when that folder is private, else ``~/.cache/hgc``; ``--state-dir`` or ``$HGRAPH_CLUSTER_DIR``
choose another) is created mode 0700; one that exists but is not a folder of yours with no
group/other permissions is refused, whatever the command. Node logs are opened without following
symbolic links (a link at a log's path is an error, its target untouched) and created mode 0600.
A recorded pid may have been reused since ``up`` (the cluster died, the machine rebooted):
``down`` ends a node's session only when the pid still exists with the start time recorded at
``up`` (same boot) and a ``ray start`` command line; any other recorded pid is left alone, in one
line on stderr. When a node's ``ray start`` has gone but processes of its session remain, only
those that are Ray's are ended.

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

Commands: ``hgraph cluster up --nodes 3`` (prints the GCS and the Ray Jobs addresses), then
``hgraph submit sssp --graph g.txt --address 127.0.0.1:6390 --tasks 3 --out d.tsv`` (joins the
GCS) or ``--address http://127.0.0.1:8265`` (a Ray Job), and ``hgraph cluster down``;
docs/cluster.md has the walk-through, ``tests/test_cluster.py`` runs it on free ports.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path, PurePath

from hgraph.common.errors import HGraphError
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
    """``$HGRAPH_CLUSTER_DIR``, else ``hgc`` in ``$XDG_RUNTIME_DIR`` when that is a private folder
    of this user, else ``~/.cache/hgc``: per user, in no shared folder where another user could
    make it first, and short (Ray's Unix-socket paths inside it are limited to 107 bytes)."""
    chosen = os.environ.get("HGRAPH_CLUSTER_DIR")
    if chosen:
        return Path(chosen)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and _private_folder(runtime):
        return Path(runtime) / "hgc"
    return Path.home() / ".cache" / "hgc"


def _private_folder(path) -> bool:
    """A folder (links followed) owned by this user, with no group/other permissions."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def state_folder(state_dir, *, create: bool) -> Path | None:
    """``state_dir`` once checked private: made (mode 0700, its parents as usual) when missing and
    ``create``, else None when missing. A path that is a symbolic link, not a folder, another
    user's, or open to group/others is refused in one line — another user could have made it,
    or read and plant files in it."""
    path = Path(state_dir)
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)          # the umask may have taken some of the owner's bits
        except FileExistsError:
            pass
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    where = f"cluster state folder {path}"
    if stat.S_ISLNK(st.st_mode):
        raise HGraphError(f"{where} is a symbolic link: refusing to use it; pick another with "
                          "--state-dir")
    if not stat.S_ISDIR(st.st_mode):
        raise HGraphError(f"{where} is not a folder; pick another with --state-dir")
    if st.st_uid != os.geteuid():
        raise HGraphError(f"{where} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): "
                          "refusing to use it; pick another with --state-dir")
    if st.st_mode & 0o077:
        raise HGraphError(f"{where} is open to group/others (mode {stat.S_IMODE(st.st_mode):04o}): "
                          f"refusing to use it; `chmod 700 {path}` or pick another with --state-dir")
    return path


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
                        help="where the state file, the node logs and Ray's temp folder live, "
                             "a folder of yours with mode 0700 (made so if missing; default "
                             "$HGRAPH_CLUSTER_DIR, else $XDG_RUNTIME_DIR/hgc, else ~/.cache/hgc)")
    parser.add_argument("--keep-logs", action="store_true",
                        help="down: keep the node logs and Ray's temp folder (default: removed)")


def main(args) -> int:
    state_dir = Path(args.state_dir) if args.state_dir else default_state_dir()
    if args.action == "up":
        state = up(state_dir, nodes=args.nodes, cpus_per_node=args.cpus_per_node, port=args.port,
                   dashboard_port=None if args.no_dashboard else args.dashboard_port,
                   listen=args.listen)
        _result(f"Ray cluster up: {len(state['processes'])} nodes, listening on {state['listen']}"
                f" (token auth: {state['auth_mode']})",
                f"  join (engine):   --address {state['gcs_address']}",
                *([f"  Ray Jobs:        --address {state['jobs_address']}"]
                  if state.get("jobs_address") else []),
                f"  stop:            hgraph cluster down{_state_flag(args)}")
        return 0
    if args.action == "down":
        stopped = down(state_dir, keep_logs=args.keep_logs)
        _result(f"Ray cluster down: stopped {stopped} process group(s)" if stopped is not None
                else "no cluster recorded",
                *([f"  logs kept in {state_dir} (node-*.log, Ray's in r/)"]
                  if stopped is not None and args.keep_logs else []))
        return 0
    state = read_state(state_dir)
    if state is None:
        _result("no cluster recorded")
        return 1
    alive = sum(_alive(p["pid"]) and _identify(p)[0] for p in state["processes"])
    _result(f"{alive}/{len(state['processes'])} node processes alive; GCS {state['gcs_address']}"
            + (f"; Ray Jobs {state['jobs_address']}" if state.get("jobs_address") else ""))
    return 0


def _result(*lines: str) -> None:
    """Lines on stdout, by the one writer (a full disk or a closed pipe: one line, exit 2)."""
    from hgraph.common.fileio import write_stream

    write_stream(sys.stdout, "".join(line + "\n" for line in lines))


def _state_flag(args) -> str:
    return f" --state-dir {args.state_dir}" if args.state_dir else ""


def state_path(state_dir: Path) -> Path:
    return Path(state_dir) / "cluster.json"


def read_state(state_dir: Path) -> dict | None:
    """The state ``up`` recorded in ``state_dir`` (checked private), None when there is none."""
    if state_folder(state_dir, create=False) is None:
        return None
    try:
        fd = os.open(state_path(state_dir), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise HGraphError(f"{state_path(state_dir)} is a symbolic link: refusing to read it")
        raise
    with os.fdopen(fd, "rb") as handle:
        return json.loads(handle.read())


def _write_state(state_dir: Path, state: dict) -> None:
    """Atomically, by the one writer (a 0600 temporary file renamed over it: a link at the path
    is replaced, not followed; a full disk is one line naming the file)."""
    from hgraph.common.fileio import write_text

    write_text(state_path(state_dir), json.dumps(state, indent=1), private=True)


def _open_log(path: Path) -> int:
    """A node log opened for appending without following a link at its path (an error instead:
    the link's target is never written), made 0600 if new; only a regular file of this user's."""
    flags = (os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
             | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))     # a FIFO there must not block
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise HGraphError(f"node log {path} is a symbolic link: refusing to write through "
                              "it; remove it") from None
        raise HGraphError(f"cannot open node log {path}: {err.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise HGraphError(f"node log {path} is not a regular file of yours: refusing to "
                              "write it; remove it")
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o600)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_log(path: Path) -> str:
    """A node log's text, not through a link ('' while it cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as handle:
        return handle.read().decode(errors="replace")


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _proc_info(pid: int) -> dict | None:
    """What identifies process ``pid`` now — start time (clock ticks after boot, Linux's
    ``/proc/PID/stat`` field 22), boot id, command line, zombie — or None when there is none
    (or no ``/proc`` to ask)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError):
        return None
    return {"create_time": int(fields[19]), "boot_id": _boot_id(), "zombie": fields[0] == "Z",
            "cmdline": [a.decode(errors="replace") for a in raw.rstrip(b"\0").split(b"\0")]
            if raw.strip(b"\0") else []}


def _ray_start_command(cmdline: list[str]) -> bool:
    """``python -m cluster.ray_node start ...`` or ``[python] .../ray start ...`` — the command
    :func:`up` starts a node with."""
    for a, b, c in zip(cmdline, cmdline[1:], cmdline[2:] + [""]):
        if (a, b, c) == ("-m", "cluster.ray_node", "start") or (PurePath(a).name == "ray"
                                                                  and b == "start"):
            return True
    return False


def _ray_package_dir() -> str | None:
    """The installed ``ray`` package's folder, found without importing it."""
    from importlib.util import find_spec

    try:
        spec = find_spec("ray")
    except (ImportError, ValueError):
        return None
    locations = list(getattr(spec, "submodule_search_locations", None) or [])
    return os.path.realpath(locations[0]) if locations else None


def _ray_process(cmdline: list[str], ray_dir: str | None = None) -> bool:
    """A process of a Ray node: its ``ray start``, a binary or script of the installed ``ray``
    package (gcs_server, raylet, dashboard, monitors, agents), ``python -m ray.*``, or a process
    that names itself ``ray::...`` (workers, agents) or ``ray-dashboard-...``."""
    if not cmdline:
        return False
    if _ray_start_command(cmdline) or cmdline[0].startswith(("ray::", "ray-dashboard-")):
        return True
    for a, b in zip(cmdline, cmdline[1:]):
        if a == "-m" and (b == "ray" or b.startswith("ray.")):
            return True
    ray_dir = ray_dir or _ray_package_dir()
    return ray_dir is not None and any(
        os.path.isabs(a) and os.path.realpath(a).startswith(ray_dir + os.sep) for a in cmdline[:3])


def _identify(record: dict) -> tuple[bool, str]:
    """Whether ``record``'s pid is still the process ``up`` started: (True, "") when it exists
    with the recorded start time (same boot) and a ``ray start`` command line (or has exited
    and awaits reaping: the pid is still it); else (False, why)."""
    info = _proc_info(record["pid"])
    if info is None:
        return False, "no such process"
    if record.get("create_time") is None:
        return False, "no start time was recorded for it"
    if (info["create_time"], info["boot_id"]) != (record["create_time"], record.get("boot_id")):
        return False, "it started at another time than the recorded node"
    if not info["zombie"] and not _ray_start_command(info["cmdline"]):
        return False, "its command line is not `ray start`"
    return True, ""


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
    else:                              # --listen HOST: not kept on loopback by an inherited switch
        env.pop(LOOPBACK_ONLY_ENV, None)   # (a process that ran an embedded Ray has it set)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env.pop("RAY_ADDRESS", None)
    # Ray Jobs run `python3 ...` through the PATH of the node: make it this interpreter.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _exec_info(pid: int, wait_s: float = 5.0) -> dict:
    """:func:`_proc_info` of a child ``Popen`` just started, once its command line shows.

    Popen returns when the child's close-on-exec pipe closes, which the kernel does before
    the new program's argument pages are mapped: on a loaded machine ``/proc/PID/cmdline``
    can still read empty then (CI saw it), and a node recorded without its command line
    could never be identified again. So read until it shows, the process ends, or
    ``wait_s`` passes."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        info = _proc_info(pid) or {}
        if info.get("cmdline") or info.get("zombie") or not info \
                or time.monotonic() > deadline:
            return info
        time.sleep(0.01)


def _spawn(argv: list[str], log: Path, env: dict) -> dict:
    """Start ``argv`` in a new session, output to ``log``; its record, with what identifies the
    process later (start time, boot id, command line: :func:`_identify`)."""
    import subprocess   # here and below, not at the top: every `hgraph` command loads this module

    fd = _open_log(log)
    try:
        proc = subprocess.Popen(argv, stdout=fd, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    finally:
        os.close(fd)
    info = _exec_info(proc.pid)
    return {"pid": proc.pid, "sid": proc.pid, "argv": argv, "log": str(log),
            "create_time": info.get("create_time"), "boot_id": info.get("boot_id"),
            "cmdline": info.get("cmdline")}


def up(state_dir: Path, *, nodes: int = 3, cpus_per_node: int = 2, port: int = 6390,
       dashboard_port: int | None = 8265, listen: str = LOOPBACK) -> dict:
    """Start the cluster bound to ``listen`` and return its state (also written to the state
    file)."""
    if nodes < 1:
        raise HGraphError(f"--nodes must be >= 1, got {nodes}")
    state_dir = Path(state_dir)
    existing = read_state(state_dir)
    if existing and any(_alive(p["pid"]) and _identify(p)[0] for p in existing["processes"]):
        raise HGraphError(f"a cluster from {state_path(state_dir)} is still running; "
                          "`hgraph cluster down` first")
    for what, p in (("GCS", port), ("dashboard", dashboard_port)):
        if p is not None and _port_open(p, _reach(listen)):
            raise HGraphError(f"port {p} ({what}) is already in use on this machine; pick another")
    state_folder(state_dir, create=True)
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
            _write_state(state_dir, state)
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
    while "block forever" not in _read_log(log):
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


def _session_members(sids: set[int], ray_only: dict | None = None) -> list[int]:
    """Pids of live processes in the sessions we created (children of `ray start` included).
    ``ray_only`` maps some of ``sids`` to a node's record: of those sessions, only Ray's
    processes (:func:`_ray_process`) started after that node (same boot) count."""
    pids = []
    ray_dir = _ray_package_dir() if ray_only else None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            sid = os.getsid(pid)
            if sid in sids and not _zombie(entry):
                if ray_only and sid in ray_only and not _started_by(pid, ray_only[sid], ray_dir):
                    continue
                pids.append(pid)
        except (ProcessLookupError, PermissionError):
            continue
    return pids


def _still_running(signalled: dict[int, int]) -> list[int]:
    """Of ``signalled`` (pid -> start time), the pids still running as that same process (not
    gone, not a zombie, not a new process that reused the pid)."""
    out = []
    for pid, started in signalled.items():
        info = _proc_info(pid)
        if info is not None and not info["zombie"] and info["create_time"] == started:
            out.append(pid)
    return out


def _started_by(pid: int, record: dict, ray_dir: str | None) -> bool:
    """Whether ``pid`` is a Ray process that started with or after ``record``'s node."""
    info = _proc_info(pid)
    return (info is not None and record.get("create_time") is not None
            and info["boot_id"] == record.get("boot_id")
            and info["create_time"] >= record["create_time"]
            and _ray_process(info["cmdline"], ray_dir))


def _say(line: str) -> None:
    print(f"hgraph: {line}", file=sys.stderr)


def down(state_dir: Path, *, keep_logs: bool = False) -> int | None:
    """Stop every process in the sessions recorded by :func:`up` whose node is still the process
    it recorded (:func:`_identify`; a pid that is not is left alone, in one line on stderr; of a
    session whose ``ray start`` has gone, only Ray's processes), then remove their logs and
    Ray's temp folder unless ``keep_logs``; None when no cluster is recorded."""
    import signal

    state = read_state(Path(state_dir))
    if state is None:
        return None
    sids: set[int] = set()
    orphans: dict[int, dict] = {}     # sessions whose `ray start` has gone: Ray's processes only
    for i, p in enumerate(state["processes"]):
        ours, why = _identify(p)
        if ours:
            sids.add(p["sid"])
        elif why == "no such process":
            if p.get("create_time") is not None and p["sid"] == p["pid"]:
                sids.add(p["sid"])
                orphans[p["sid"]] = p
        else:
            _say(f"cluster down: not stopping pid {p['pid']} (node {i}): {why}; left alone")
    stopped = sids - set(orphans)
    for sid, p in orphans.items():
        for pid in sorted(set(_session_members({sid})) - set(_session_members({sid}, orphans))):
            _say(f"cluster down: not stopping pid {pid} (in the session of node "
                 f"{state['processes'].index(p)}, whose `ray start` has gone): not a Ray process "
                 "started since; left alone")
    # Workers first, the head last: the head's GCS should see its nodes leave.
    signalled: dict[int, int] = {}      # pid -> its start time when it was sent SIGTERM
    for p in reversed(state["processes"]):
        if p["sid"] not in sids:
            continue
        for pid in _session_members({p["sid"]}, orphans):
            stopped.add(p["sid"])
            info = _proc_info(pid)
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            if info is not None:
                signalled[pid] = info["create_time"]

    def running() -> list[int]:
        # a process on its way out has lost its command line before it is a zombie, and then no
        # longer looks like Ray's: wait on what was signalled too, not only on the sessions
        return sorted(set(_session_members(sids, orphans)) | set(_still_running(signalled)))

    deadline = time.monotonic() + STOP_GRACE_S
    while running() and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in running():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline:
        for p in state["processes"]:  # reap our direct children, if this process started them
            if p["sid"] not in sids or p["sid"] in orphans:
                continue
            try:
                os.waitpid(p["pid"], os.WNOHANG)
            except ChildProcessError:
                pass
        if not running():
            break
        time.sleep(0.1)
    state_path(Path(state_dir)).unlink(missing_ok=True)
    if not keep_logs:
        _remove_logs(Path(state_dir), state)
    return len(stopped)


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
