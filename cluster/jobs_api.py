"""Submit an hgraph job to a Ray cluster through Ray's Job Submission API.

``hgraph submit JOB ARGS --address http://HOST:8265 [--wait | --detach]``:

1. **Package.** A staging folder gets a copy of the project's packages (``hgraph``, ``planner``,
   ``jobs``, ``cluster``) and every input file named on the command line (any option value or
   positional that is an existing local file), under ``_hgraph_inputs/``. It becomes the job's
   ``runtime_env.working_dir``: Ray zips and uploads it, the entry point runs inside it, and the
   job's Ray workers get it on their ``sys.path``. The cluster's Python must have the project's
   dependencies (numpy, msgpack, ray[default]; the image in ``cluster/configs/Dockerfile`` does).
2. **Entry point.** ``python3 -m jobs.NAME ARGS && python3 -m cluster.ship_outputs FILES``: the
   job's own module (the same flags as ``hgraph submit``), with input paths rewritten to the
   staged copies, output paths (``--out``, ``--stats``, ``--report``, ...) rewritten to a
   temporary folder on the node (see :func:`entrypoint`), ``--address`` dropped (inside a Ray job ``RAY_ADDRESS`` already names the
   cluster) and ``--runtime ray`` added, so the job's workers are Ray actors on the cluster.
   ``--python`` (or ``HGRAPH_JOB_PYTHON``) names another interpreter on the cluster.
3. **Results.** When the job succeeded, :mod:`cluster.ship_outputs` prints each result file into
   the job's log as a checksummed block; the client decodes them and writes them, atomically, to
   the paths the user named. This needs nothing but the dashboard address, so it works for a
   remote cluster as well as a local one. The user's paths are also kept in the job's metadata,
   so ``hgraph logs JOB_ID --fetch [--to DIR]`` writes the results of a detached job later —
   under DIR (default: the current directory) only, since the metadata comes from the cluster.
4. **Waiting.** ``--wait`` (the default) streams the job's log (result blocks, Ray's own INFO
   lines and its echo of the shell entry point hidden: :func:`job_output`; a ``[result file X
   shipped]`` line goes to stderr, a status beside the job's own output on stdout) until the job
   ends, within ``--job-timeout`` seconds; a failed job is one error line (the job's own last
   ``error:`` line when it printed one) and a non-zero exit. ``--detach`` prints the job id and
   returns; ``hgraph status JOB_ID`` / ``hgraph logs JOB_ID`` follow it.

Every network step has a timeout: the dashboard address is probed with a TCP connect first
(:func:`hgraph.runtime.ray_connect.probe`), so a bad or unreachable address is one line, never a hang.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from cluster import ship_outputs
from hgraph.common.errors import HGraphError
from hgraph.common.fileio import check_writable, write_bytes, write_stream
from hgraph.runtime.ray_connect import is_dashboard_address, probe, split_host_port

#: Packages a job needs on the cluster.
PACKAGES = ("hgraph", "planner", "jobs", "cluster")

#: Option destinations that name files a job writes (fetched back after the job).
OUTPUT_DESTS = frozenset({"out", "stats", "report", "schedule", "plan", "output", "trace",
                          "json", "csv", "svg", "png", "plot", "timeline", "arena"})

#: Ray job states that will not change any more.
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})

#: Ray SDK loggers whose INFO lines ("Uploading package ...") the CLI hides.
#: (Each by its own name: a module may set its logger's level itself, as dashboard_sdk does.)
QUIET_LOGGERS = ("ray.dashboard", "ray.dashboard.modules.dashboard_sdk",
                 "ray.dashboard.modules.job.sdk", "ray._private.runtime_env",
                 "ray._private.runtime_env.packaging")

#: A line Ray itself writes into a job's log: its INFO/DEBUG log records, and the echo of the
#: shell entry point (hgraph's own plumbing, not the user's command).
_RAY_CHATTER = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d+\s+(INFO|DEBUG)\s"
                          r"|Running entrypoint for job )")

DEFAULT_DASHBOARD_PORT = 8265
#: Seconds the dashboard may take to answer one HTTP request (uploads of the project included);
#: ``HGRAPH_JOBS_HTTP_TIMEOUT`` overrides it.
HTTP_READ_TIMEOUT_S = 120.0
POLL_S = 0.5
INPUTS_DIR = "_hgraph_inputs"
METADATA_KEY = "hgraph_outputs"


def jobs_address(address: str | None) -> str:
    """The dashboard URL from ``--address`` or ``RAY_ADDRESS`` (must be http(s)://)."""
    address = (address or os.environ.get("RAY_ADDRESS") or "").strip()
    if not address:
        raise HGraphError("no Ray Jobs address: give --address http://HOST:8265 or set RAY_ADDRESS")
    if not is_dashboard_address(address):
        raise HGraphError(f"{address} is not a Ray Jobs address; expected http://HOST:8265")
    return address.rstrip("/")


def connect(address: str | None, *, timeout: float = 5.0):
    """A :class:`ray.job_submission.JobSubmissionClient` for the dashboard, or one error line."""
    url = jobs_address(address)
    host, port = split_host_port(url, default_port=DEFAULT_DASHBOARD_PORT)
    probe(host, port, what="the Ray dashboard", timeout=timeout)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as err:
        raise HGraphError(f"Ray Jobs need ray[default] installed here ({err})") from None
    # After the import: importing ray configures its loggers, resetting levels set before.
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)   # "Uploading package ..." chatter
    class _Client(JobSubmissionClient):
        """Every HTTP request has a timeout (Ray's SDK sets none: a silent server hangs it)."""

        def _do_request(self, method, endpoint, **kwargs):
            read = float(os.environ.get("HGRAPH_JOBS_HTTP_TIMEOUT") or HTTP_READ_TIMEOUT_S)
            kwargs.setdefault("timeout", (timeout, read))
            return super()._do_request(method, endpoint, **kwargs)

    try:
        return _Client(url)
    except Exception as err:  # noqa: BLE001 - Ray raises several kinds; all mean "cannot use it"
        raise HGraphError(f"cannot use the Ray Jobs API at {url}: {_first_line(err)}") from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


# ------------------------------------------------------------------------------ packaging


def _job_parser(module) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    module.add_arguments(parser)
    return parser


class Staged(str):
    """A path argument that lives in the job's folders: ``kind`` is "input" or "output"."""

    kind = "input"


class _Output(Staged):
    kind = "output"


def rewrite_argv(module, argv: list[str]) -> tuple[list[str], list[tuple[Path, str]], dict[str, str]]:
    """Split a job's command line into what runs on the cluster.

    Returns ``(job_argv, inputs, outputs)``: ``job_argv`` holds :class:`Staged` words where a
    path is rewritten; ``inputs`` are (local file, path relative to the working_dir);
    ``outputs`` map a result file's name (relative to the job's output folder) to the path the
    user asked for, as typed (relative to the current directory unless absolute).
    """
    actions = _job_parser(module)._option_string_actions  # noqa: SLF001
    job_argv: list[str] = []
    inputs: list[tuple[Path, str]] = []
    outputs: dict[str, str] = {}
    has_runtime = False

    def convert(dest: str | None, value: str) -> str:
        if dest in OUTPUT_DESTS and value != "-":
            name = f"{len(outputs)}-{Path(value).name}"
            outputs[name] = value
            return _Output(name)
        if dest not in OUTPUT_DESTS and value and os.path.isfile(value):
            # A folder per input keeps the user's file name, which the job shows (a report's
            # graph name, a table's title); the folder number keeps equal names apart.
            rel = f"{INPUTS_DIR}/{len(inputs)}/{Path(value).name}"
            inputs.append((Path(value), rel))
            return Staged(rel)
        return value

    i = 0
    while i < len(argv):
        token = argv[i]
        option, eq, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        action = actions.get(option) if token.startswith("-") else None
        takes_value = action is not None and action.nargs is None and not isinstance(
            action, (argparse._StoreConstAction, argparse._StoreTrueAction,  # noqa: SLF001
                     argparse._StoreFalseAction, argparse._CountAction))  # noqa: SLF001
        if option in ("--detach", "--wait"):
            i += 1
            continue
        if option in ("--address", "--job-timeout", "--python"):
            i += 1 if eq else 2
            continue
        if action is None:
            job_argv.append(convert(None, token) if not token.startswith("-") else token)
            i += 1
            continue
        if action.dest == "runtime":
            has_runtime = True
        if not takes_value:
            job_argv.append(token)
            i += 1
            continue
        value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        i += 1 if eq else 2
        job_argv += [option, convert(action.dest, value)]
    if not has_runtime and "--runtime" in actions:
        job_argv += ["--runtime", "ray"]
    return job_argv, inputs, outputs


def stage(inputs: list[tuple[Path, str]], root: Path | None = None) -> Path:
    """A temporary working_dir holding the project's packages and the staged inputs."""
    root = root or Path(__file__).resolve().parents[1]
    staging = Path(tempfile.mkdtemp(prefix="hgraph-job-"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
    for package in PACKAGES:
        if (root / package).is_dir():
            shutil.copytree(root / package, staging / package, ignore=ignore)
    for local, rel in inputs:
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, staging / rel)
    return staging


def _word(word: str) -> str:
    if isinstance(word, _Output):
        return '"$O"/' + shlex.quote(str(word))
    if isinstance(word, Staged):
        return '"$W"/' + shlex.quote(str(word))
    return shlex.quote(word)


def entrypoint(name: str, job_argv: list[str], outputs: dict[str, str], python: str) -> str:
    """The job's shell command: ``python -m jobs.NAME ARGS``, then ship the result files.

    Paths are absolute (``$W``: the working_dir, ``$O``: a fresh output folder outside it)
    because Ray re-extracts the working_dir when the job's driver calls ``ray.init`` — a file
    written there, or a path relative to the old current directory, is gone afterwards.
    """
    py = shlex.quote(python)
    job = " ".join([py, "-m", f"jobs.{name}", *map(_word, job_argv)])
    if not outputs:
        return f'W="$PWD"; {job}'
    ship = f'cd "$W" && {py} -m cluster.ship_outputs --dir "$O" ' + " ".join(map(shlex.quote, outputs))
    return f'W="$PWD"; O="$(mktemp -d)"; {job} && {ship}; rc=$?; rm -rf "$O"; exit $rc'


# ------------------------------------------------------------------------------ submit and follow


def submit(args: argparse.Namespace, argv: list[str]) -> int:
    """``hgraph submit JOB ... --address http://...``; ``argv`` are the words after JOB."""
    name = args.job
    module = args._module  # noqa: SLF001 - set by jobs.cli
    url = jobs_address(args.address)
    client = connect(url)
    job_argv, inputs, outputs = rewrite_argv(module, argv)
    targets = {name: str(Path(path).resolve()) for name, path in outputs.items()}
    for target in targets.values():
        check_writable(target, "output")
    python = args.python or os.environ.get("HGRAPH_JOB_PYTHON") or "python3"
    staging = stage(inputs)
    command = entrypoint(name, job_argv, outputs, python)
    try:
        job_id = _submit_when_agent_ready(client, dict(
            entrypoint=command,
            runtime_env={"working_dir": str(staging), "env_vars": {"RAY_AUTH_MODE": os.environ.get(
                "RAY_AUTH_MODE", "disabled"), "PYTHONUNBUFFERED": "1"}},
            metadata={"hgraph_job": name, METADATA_KEY: json.dumps(outputs)},
        ))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"hgraph: submitted {name} as Ray job {job_id}", file=sys.stderr)
    if args.detach:
        write_stream(sys.stdout, job_id + "\n")
        print(f"hgraph: follow it with `hgraph status {job_id} --address {url}` and "
              f"`hgraph logs {job_id} --address {url} --follow --fetch`", file=sys.stderr)
        return 0
    return follow(client, job_id, timeout=args.job_timeout, fetch=True, targets=targets)


#: Seconds a submission keeps retrying while the head says no job agent is up yet.
AGENT_WAIT_S = 90.0


def _submit_when_agent_ready(client, request: dict) -> str:
    """Submit, retrying while the head answers "No available agent ... try again later".

    A freshly started head serves HTTP before its job agent has registered (CI on a loaded
    2-core machine met this on the first submissions); that answer is transient by Ray's own
    words, so it is retried for at most ``AGENT_WAIT_S`` seconds. Any other refusal is final.
    """
    deadline = time.monotonic() + AGENT_WAIT_S
    while True:
        try:
            return client.submit_job(**request)
        except HGraphError:
            raise
        except Exception as err:  # noqa: BLE001
            text = _first_line(err)
            if "No available agent" not in text or time.monotonic() >= deadline:
                raise HGraphError(f"Ray rejected the job: {text}") from None
        time.sleep(1.0)


def job_info(client, job_id: str):
    try:
        return client.get_job_info(job_id)
    except Exception as err:  # noqa: BLE001
        text = _first_line(err)
        if "does not exist" in text or "404" in text or "not found" in text.lower():
            raise HGraphError(f"no Ray job {job_id} on this cluster") from None
        raise HGraphError(f"cannot ask about Ray job {job_id}: {text}") from None


def job_logs(client, job_id: str) -> str:
    try:
        return client.get_job_logs(job_id)
    except Exception as err:  # noqa: BLE001
        raise HGraphError(f"cannot read the log of Ray job {job_id}: {_first_line(err)}") from None


def follow(client, job_id: str, *, timeout: float | None, fetch: bool, stream=None,
           echo: bool = True, targets: dict[str, str] | None = None, to=None) -> int:
    """Stream the job's log until it ends (within ``timeout``); fetch results (``targets`` or
    ``to``: see :func:`fetch_outputs`); the exit code."""
    stream = stream or sys.stdout
    deadline = None if timeout is None else time.monotonic() + timeout
    shown = 0
    while True:
        info = job_info(client, job_id)
        status = str(getattr(info.status, "value", info.status))
        text = ship_outputs.strip(job_logs(client, job_id))
        complete = text if status in TERMINAL else text[:text.rfind("\n") + 1]
        if echo and len(complete) > shown:
            lines = job_output(complete[shown:]).splitlines(keepends=True)
            write_stream(stream, "".join(x for x in lines if not ship_outputs.is_placeholder(x)))
            for line in filter(ship_outputs.is_placeholder, lines):     # status: stderr
                print(line.rstrip("\n"), file=sys.stderr)
            shown = len(complete)
        if status in TERMINAL:
            break
        if deadline is not None and time.monotonic() > deadline:
            raise HGraphError(f"Ray job {job_id} did not end within {timeout:g} s (still {status}); "
                              f"see `hgraph status {job_id}`", exit_code=1)
        time.sleep(POLL_S)
    if status != "SUCCEEDED":
        raise HGraphError(failure_line(job_id, info, text), exit_code=_exit_code(info))
    if fetch:
        fetch_outputs(client, job_id, info, targets=targets, to=to)
    return 0


def job_output(log_text: str) -> str:
    """What a job printed, without the lines Ray adds to its log (:data:`_RAY_CHATTER`)."""
    return "".join(line for line in log_text.splitlines(keepends=True)
                   if not _RAY_CHATTER.match(line))


def _exit_code(info) -> int:
    code = getattr(info, "driver_exit_code", None)
    return int(code) if isinstance(code, int) and 0 < code < 256 else 1


def failure_line(job_id: str, info, log_text: str) -> str:
    """One line: the job's own last error line if it printed one, else its last log line, else
    Ray's message."""
    status = str(getattr(info.status, "value", info.status))
    lines = [line.strip() for line in job_output(log_text).splitlines() if line.strip()
             and not ship_outputs.is_placeholder(line)]
    errors = [line for line in lines if re.search(r"(^hgraph: error: |Error: |error: )", line)]
    message = (info.message or "").strip().splitlines()
    reason = errors[-1] if errors else lines[-1] if lines else message[0] if message else "no message"
    reason = reason.removeprefix("hgraph: error: ")
    code = getattr(info, "driver_exit_code", None)
    suffix = f" (exit {code})" if isinstance(code, int) and code not in (0, 1, 2) else ""
    return f"Ray job {job_id} {status}: {reason}{suffix}"


def fetch_outputs(client, job_id: str, info=None, *, targets: dict[str, str] | None = None,
                  to=None) -> list[str]:
    """Write the result files shipped in the job's log; returns the paths written.

    ``targets`` (result name -> local path) is what this process asked for when it submitted
    the job and waited. Without it the names come from the job's metadata, which the cluster
    hands back and anyone able to submit a job controls: each is then written under the
    directory ``to`` (default: the current one) by :func:`safe_target`, never outside it.
    """
    info = info or job_info(client, job_id)
    if targets is None:
        recorded = json.loads((info.metadata or {}).get(METADATA_KEY, "{}"))
        root = Path(to if to is not None else ".")
        targets = {rel: str(safe_target(root, path, job_id)) for rel, path in recorded.items()}
    if not targets:
        return []
    shipped = ship_outputs.parse(job_logs(client, job_id))
    written = []
    for rel, target in targets.items():
        if rel not in shipped:
            raise HGraphError(f"Ray job {job_id} ended without sending back {target}", exit_code=1)
        write_bytes(target, shipped[rel])
        written.append(target)
        print(f"hgraph: wrote {target}", file=sys.stderr)
    return written


def safe_target(root: Path, recorded: str, job_id: str = "?") -> Path:
    """Where a result file the job's metadata names as ``recorded`` goes under ``root``.

    An absolute path loses its root (``/tmp/d.tsv`` -> ``ROOT/tmp/d.tsv``); a path with a
    ``..`` part, or one that resolves outside ``root`` (through a symbolic link), is refused
    with one line."""
    parts = Path(str(recorded)).parts
    if Path(str(recorded)).is_absolute():
        parts = parts[1:]
    if not parts or ".." in parts:
        raise HGraphError(f"Ray job {job_id}: refusing to write result file {recorded!r}: "
                          "it is not a plain path below the target directory")
    base = root.resolve()
    target = base.joinpath(*parts)
    if not target.parent.resolve().is_relative_to(base) or target.is_symlink():
        raise HGraphError(f"Ray job {job_id}: refusing to write result file {recorded!r}: "
                          f"it leads outside {root}")
    return target
