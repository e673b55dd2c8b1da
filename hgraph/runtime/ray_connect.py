"""How the engine's Ray runtime connects this process to Ray: one place, never a hang.

* no address and no ``RAY_ADDRESS``: start an embedded local Ray with laptop settings — no
  dashboard unless asked, a bounded object store (:data:`EMBEDDED_OBJECT_STORE_BYTES`), quiet
  logs, token auth off (``RAY_AUTH_MODE=disabled`` unless the environment says otherwise: a
  cluster with token auth needs ``RAY_AUTH_MODE=token`` and its token in the environment). It
  **binds loopback only** (``127.0.0.1``): the GCS, the raylet and object manager, the
  dashboard and its agents, the driver's and the workers' gRPC servers all listen on
  127.0.0.1, never on every interface — with auth off, a port reachable from the network
  would let anyone there run code as you (Ray's own default listens on ``*``; see
  :func:`stay_on_loopback`). Its session folder is a fresh short one (``RAY_TMPDIR`` or
  ``/tmp``; Unix-socket paths are limited to 107 bytes), removed when the process exits unless
  :data:`KEEP_LOGS_ENV` is set;
* ``address="HOST:PORT"`` (a GCS address), ``"auto"`` or ``RAY_ADDRESS``: join that cluster;
* ``address="http://HOST:8265"`` is a cluster's dashboard, not a GCS: the engine cannot join it
  (:func:`is_dashboard_address` tells the two apart for callers that submit work there).

Joining never hangs: the address is checked for shape, then probed with a plain TCP connect
(:data:`PROBE_TIMEOUT_S`) before Ray is asked, because Ray itself retries an unreachable GCS for
a long time (measured: ``ray.init("127.0.0.1:1")`` was still retrying after 60 s). Every failure
is one :class:`~hgraph.common.errors.HGraphError` line naming the address.

This module lives in the engine's runtime package because the engine needs it; code that
operates clusters builds on it, never the other way round.

:func:`ensure_ray` (no address: the embedded local Ray or ``RAY_ADDRESS``; ``"HOST:PORT"``: join
that cluster) starts Ray, so its example is the engine's Ray tests (``tests/test_engine_ray.py``);
telling the two kinds of address apart needs no Ray::

    >>> from hgraph.runtime.ray_connect import is_dashboard_address, split_host_port
    >>> is_dashboard_address("http://127.0.0.1:8265"), is_dashboard_address("10.0.0.5:6379")
    (True, False)
    >>> split_host_port("10.0.0.5:6379")
    ('10.0.0.5', 6379)
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from urllib.parse import urlparse

from hgraph.common.errors import HGraphError

#: Object store for the embedded Ray: bounded so a laptop keeps its memory.
EMBEDDED_OBJECT_STORE_BYTES = 512 * 2**20

#: Set (to anything but ``""``/``0``) to keep the embedded Ray's session folder (its logs) at exit.
KEEP_LOGS_ENV = "HGRAPH_KEEP_RAY_LOGS"

#: Seconds a TCP connect to a cluster address may take before it counts as unreachable.
PROBE_TIMEOUT_S = 5.0


def is_dashboard_address(address: str | None) -> bool:
    """``http(s)://...``: a cluster's dashboard (where Ray Jobs are submitted), not its GCS."""
    return bool(address) and address.strip().lower().startswith(("http://", "https://"))


def split_host_port(address: str, *, default_port: int | None = None) -> tuple[str, int]:
    """``HOST:PORT`` (or an http URL) -> (host, port); a malformed address is an HGraphError."""
    text = address.strip()
    parsed = urlparse(text if "://" in text else f"//{text}")
    try:
        port = parsed.port
    except ValueError:
        raise HGraphError(f"bad Ray address {address!r}: the port must be a number 1..65535") from None
    host = parsed.hostname
    if port is None:
        port = default_port
    if not host or port is None or not 0 < port < 65536 or (parsed.path not in ("", "/")):
        raise HGraphError(f"bad Ray address {address!r}: expected HOST:PORT"
                          + (" or http://HOST:PORT" if default_port else ""))
    return host, port


def probe(host: str, port: int, *, what: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """A TCP connect to (host, port) within ``timeout``, or one HGraphError line."""
    import socket       # here, not at the top: the CLI imports this module for every command

    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except socket.gaierror as err:
        raise HGraphError(f"cannot reach {what} at {host}:{port}: unknown host ({err.strerror})") from None
    except (socket.timeout, TimeoutError):
        raise HGraphError(f"cannot reach {what} at {host}:{port}: no answer within {timeout:g} s") from None
    except OSError as err:
        raise HGraphError(f"cannot reach {what} at {host}:{port}: {err.strerror or err}") from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _import_ray():
    """``ray``, imported with this project's settings in the environment (Ray reads some at
    import, its processes inherit them): no usage statistics, and token auth off for local
    clusters (embedded, tests) unless the environment says otherwise — a cluster with token
    auth needs ``RAY_AUTH_MODE=token`` (and its token) in the environment."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    return ray


@contextlib.contextmanager
def _keeping_sigterm():
    """Keep the application's SIGTERM handler across ``ray.init``.

    ``ray.init`` replaces the process's SIGTERM handler with one that exits with status 15 and
    no word of why (measured with ``signal.getsignal`` before and after). An application that
    handles SIGTERM itself (the CLI: one line, exit 143, Ray shut down by the exit hooks) gets
    its handler back, and a SIGTERM that Ray's handler took while ``ray.init`` ran (its
    ``SystemExit(15)``) goes to the application's handler as well; a process without one (the
    default action) keeps Ray's, which at least runs the exit hooks that stop an embedded Ray."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    except SystemExit as stop:
        if callable(before) and stop.code == signal.SIGTERM:
            before(signal.SIGTERM, None)        # the application's answer (may raise)
        raise
    finally:
        if callable(before) and signal.getsignal(signal.SIGTERM) is not before:
            signal.signal(signal.SIGTERM, before)


def _stage(name: str):
    """Starting or joining Ray as a stage of the running job's progress: the wait (seconds on a
    laptop, ~20 s on a loaded machine) is named on the live line — not "levels (engine) 0/?" —
    and in a plain log (:class:`hgraph.common.progress.StageProgress`)."""
    from hgraph.common.progress import current

    return current().stage(name, logged=True)


def ensure_ray(address: str | None = None, *, num_cpus: int | None = None,
               dashboard: bool = False, probe_timeout: float = PROBE_TIMEOUT_S) -> None:
    """Connect this process to Ray once; later calls are no-ops (see the module docstring)."""
    ray = _import_ray()
    if ray.is_initialized():
        if address and address != "auto" and not is_dashboard_address(address):
            _check_same_cluster(ray, address)
        return
    address = (address or os.environ.get("RAY_ADDRESS") or "").strip() or None
    if address and is_dashboard_address(address):
        raise HGraphError(f"{address} is a Ray dashboard address; the engine joins a cluster "
                          "by its GCS address HOST:PORT (a dashboard takes submitted Ray Jobs)")
    if address is None:
        with _stage("starting Ray"):
            _start_embedded(ray, num_cpus=num_cpus, dashboard=dashboard)
        return
    if address != "auto":
        host, port = split_host_port(address)
        probe(host, port, what="the Ray cluster", timeout=probe_timeout)
        if _loopback_only(host, port):
            stay_on_loopback(ray)
    try:
        with _stage(f"joining the Ray cluster at {address}"), _keeping_sigterm():
            ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except (ConnectionError, ValueError, RuntimeError) as err:
        hint = ""
        if "auth" in str(err).lower() or "token" in str(err).lower():
            hint = " (set RAY_AUTH_MODE to the cluster's auth mode)"
        raise HGraphError(f"cannot join the Ray cluster at {address}: {_first_line(err)}{hint}") from None


def start_local(*, num_cpus: int | None = None, dashboard: bool = False,
                object_store_bytes: int = EMBEDDED_OBJECT_STORE_BYTES) -> None:
    """Start a fresh local Ray in this process, bound to loopback — the one way the project
    starts a single-node Ray (:func:`ensure_ray` without an address, and the test session's
    fixture), so no caller can forget the loopback switch. Unlike :func:`ensure_ray` it never
    joins ``RAY_ADDRESS``: a test session must not run on whatever cluster the environment
    names. :func:`stop_local` stops it before the process exits; otherwise an exit hook does."""
    _start_embedded(_import_ray(), num_cpus=num_cpus, dashboard=dashboard,
                    object_store_bytes=object_store_bytes)


def stop_local() -> None:
    """Stop this process's Ray (the one :func:`start_local`/:func:`ensure_ray` started: its
    session folder goes too); nothing to do when none runs."""
    import ray

    if _EMBEDDED:
        _stop_embedded(ray, _EMBEDDED[-1])
    elif ray.is_initialized():
        ray.shutdown()


#: The session folder of the embedded Ray this process runs (at most one), while it runs.
_EMBEDDED: list[str] = []


def local_folder() -> str | None:
    """The folder of the loopback Ray this process started (its processes name it on their
    command lines), or None when it runs none."""
    return _EMBEDDED[-1] if _EMBEDDED else None


def _start_embedded(ray, *, num_cpus: int | None, dashboard: bool,
                    object_store_bytes: int = EMBEDDED_OBJECT_STORE_BYTES) -> None:
    """A local Ray bound to loopback, in a session folder of its own, cleaned up when this
    process exits.

    Loopback needs more than ``_node_ip_address``: without Ray's switch, Ray rewrites a
    loopback node address to the network one, and its servers (GCS, raylet, object manager,
    agents, the driver's and the workers' gRPC servers) listen on ``*`` (measured with
    ``ss -ltn``; ``tests/test_ray_loopback.py``). The switch goes into the environment before
    ``ray.init``, so every Ray process started from here (raylet, agents, workers) inherits it.
    """
    stay_on_loopback(ray)
    temp_dir = tempfile.mkdtemp(prefix="hgr", dir=os.environ.get("RAY_TMPDIR") or "/tmp")
    try:
        with _keeping_sigterm():
            ray.init(address="local", num_cpus=num_cpus or max(4, os.cpu_count() or 1),
                     include_dashboard=dashboard, dashboard_host=LOOPBACK,
                     _node_ip_address=LOOPBACK, log_to_driver=False, logging_level="ERROR",
                     object_store_memory=object_store_bytes, _temp_dir=temp_dir)
    except BaseException as err:
        ray.shutdown()                  # what ray.init had started (a SIGTERM may stop it midway)
        shutil.rmtree(temp_dir, ignore_errors=True)
        if isinstance(err, (ConnectionError, ValueError, RuntimeError, OSError)):
            raise HGraphError(f"cannot start a local Ray: {_first_line(err)}") from None
        raise
    _EMBEDDED.append(temp_dir)
    # Registered after ray.init, so it runs before Ray's own exit hook (atexit is last-in first-out).
    atexit.register(_stop_embedded, ray, temp_dir)


def _stop_embedded(ray, temp_dir: str) -> None:
    """Stop the embedded Ray, then remove its session folder (or say where its logs are kept).
    Runs once per Ray: at exit, or earlier from :func:`stop_local`."""
    if temp_dir not in _EMBEDDED:
        return
    _EMBEDDED.remove(temp_dir)
    atexit.unregister(_stop_embedded)
    ray.shutdown()
    if os.environ.get(KEEP_LOGS_ENV, "") not in ("", "0"):
        print(f"hgraph: Ray logs kept in {temp_dir}", file=sys.stderr)
        return
    shutil.rmtree(temp_dir, ignore_errors=True)
    if os.path.exists(temp_dir):        # a Ray process still closing a file: once more
        shutil.rmtree(temp_dir, ignore_errors=True)


#: Ray's switch that keeps a process's Ray on 127.0.0.1 instead of the machine's network address.
LOOPBACK_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
LOOPBACK = "127.0.0.1"
LOOPBACK_HOSTS = (LOOPBACK, "localhost", "::1")


def _network_address() -> str | None:
    """This machine's address as other hosts see it (the one Ray turns 127.0.0.1 into)."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("192.0.2.1", 9))      # TEST-NET: no packet is sent for a UDP connect
            return sock.getsockname()[0]
    except OSError:
        return None


def _loopback_only(host: str, port: int) -> bool:
    """A GCS at a loopback address that does not answer on the network address: a cluster bound
    to loopback (``--node-ip-address 127.0.0.1`` kept by ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``)."""
    if host not in LOOPBACK_HOSTS and not host.startswith("127."):
        return False
    network = _network_address()
    if network is None or network.startswith("127."):
        return False
    try:
        probe(network, port, what="", timeout=1.0)
    except HGraphError:
        return True
    return False


def stay_on_loopback(ray) -> None:
    """Keep this process's Ray on 127.0.0.1: an embedded Ray then listens on loopback only, and
    a loopback-bound cluster is joined as a loopback node (Ray would otherwise rewrite 127.0.0.1
    to the network address, where nothing listens, and retry for minutes). Ray reads the switch
    at import, so the already-imported constant is set too; Ray processes started afterwards
    inherit the environment variable."""
    os.environ[LOOPBACK_ONLY_ENV] = "0"
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    if constants is not None and hasattr(constants, "ENABLE_RAY_CLUSTER"):
        constants.ENABLE_RAY_CLUSTER = False


def _check_same_cluster(ray, address: str) -> None:
    """A process joins one Ray cluster; asking for another one is an error, not a silent reuse."""
    host, port = split_host_port(address)
    current = ray.get_runtime_context().gcs_address or ""
    try:
        current_host, current_port = split_host_port(current)
    except HGraphError:
        return
    loopback = {"127.0.0.1", "localhost", "::1"}
    same_host = host == current_host or host in loopback or current_host in loopback
    if port != current_port or not same_host:
        raise HGraphError(f"this process is already connected to the Ray cluster at {current}; "
                          f"it cannot also join {address}")
