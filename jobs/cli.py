"""The ``hgraph`` command line: the top of the house, the one module that knows every command.

``hgraph submit JOB ...`` runs a named job from :mod:`jobs`; ``hgraph jobs`` lists them;
``hgraph graph TOOL ...`` runs graph tools (converters and generators); the cluster commands
(``status``, ``logs``, ``cluster up|down``) live in :mod:`cluster`. ``hgraph submit JOB ...
--address http://HOST:8265`` (or ``--detach``/``--wait``) does not run the job here: it goes to
:mod:`cluster.jobs_api`, which submits it as a Ray Job.

Every job and tool is a module with the same small surface, so the CLI knows nothing of what a
job does:

    NAME = "sssp"                      # the word after `hgraph submit`
    HELP = "one line for `hgraph jobs`"
    def add_arguments(parser): ...     # argparse, job-specific flags
    def main(args) -> int: ...         # run; return the exit code

Errors a user can cause are :class:`hgraph.common.errors.HGraphError`; they print as one line and exit
non-zero, never with a traceback. An interrupt (Ctrl-C, SIGINT) and a SIGTERM (``kill``, a
scheduler's stop, ``timeout``) end a command the same way: one line on stderr, exit 130 or 143
(128 + the signal), outputs not written (they are renamed into place only once complete), and
the embedded Ray stopped with its session folder by the exit hooks (without the handler, Ray's
own exits 15 and the Ray processes outlive the command).

A command that only plans runs NumPy's BLAS on one thread unless ``OPENBLAS_NUM_THREADS`` says
otherwise (as Ray's workers run OpenMP on one): hgraph's array work never reaches BLAS (its
matrix products are integer ones) and runs side by side on its own threads
(:mod:`planner.threads`), so the BLAS pool only takes cores from them — and starting and
stopping it costs a command CPU time on every core (``bench/small_plan_bench.py`` prints
``import numpy`` both ways). A command that executes a training step (``submit execute``,
``plan --execute``: :func:`runs_kernels`) keeps BLAS's default, every core, for its matrix
products and convolutions.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys
from typing import Sequence

from cluster import submit_flags
from hgraph.common.errors import HGraphError

#: The job table: name -> module. The only place that names what jobs exist.
JOBS = {
    "sssp": "jobs.sssp",
    "pagerank": "jobs.pagerank",
    "cc": "jobs.cc",
    "plan": "jobs.plan",
    "execute": "jobs.execute",
}

#: ``hgraph graph TOOL``: name -> module with the same surface as a job.
GRAPH_TOOLS = {
    "synth": "jobs.graph_synth",
    "zoo": "jobs.graph_zoo",
    "torch": "jobs.graph_torch",
}

#: Other top-level commands: name -> module with the same surface as a job.
COMMANDS = {
    "status": "cluster.commands_status",
    "logs": "cluster.commands_logs",
    "cluster": "cluster.commands_cluster",
}


def _load(module_name: str):
    return importlib.import_module(module_name)


#: Flags that name an output file, in any command: all are checked before any work is done.
OUTPUT_FLAGS = ("out", "report", "plot", "stats")


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit code 2 (a missing command shows the usage and
    the commands to choose from), and whose arguments may be added when it is first used to parse:
    a sub-command's flags (and what its module imports to declare them) cost nothing unless that
    sub-command is the one being run. A value such as ``-5GB`` is a value, not an unknown option,
    so ``--budget -5GB`` reaches the flag's own check (argparse takes only plain negative numbers)."""

    _fill = None

    def __init__(self, *args, **kwargs):
        import re

        super().__init__(*args, **kwargs)
        if hasattr(self, "_negative_number_matcher"):   # argparse's private switch; absent: its message
            self._negative_number_matcher = re.compile(r"^-\.?[0-9]")

    def error(self, message):  # noqa: D401 - argparse API
        if self._subparsers is not None and message.startswith("the following arguments are required"):
            self.print_help(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")

    def format_help(self):
        _fill_help(self)
        return super().format_help()

    def parse_known_args(self, args=None, namespace=None):
        fill, self._fill = self._fill, None
        if fill is not None:
            fill(self)
        return super().parse_known_args(args, namespace)


def version() -> str:
    """The installed package's version (its metadata), else the source tree's pyproject.toml."""
    from importlib import metadata
    from pathlib import Path

    try:
        return metadata.version("hgraph")
    except metadata.PackageNotFoundError:
        import tomllib

        try:
            with open(Path(__file__).resolve().parent.parent / "pyproject.toml", "rb") as handle:
                return tomllib.load(handle)["project"]["version"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """``--version``: the version is looked up only when asked (importing importlib.metadata
    is a noticeable share of a small plan; bench/NOTES_scale.md)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from hgraph.common.fileio import write_stream

        write_stream(sys.stdout, f"hgraph {version()}\n")   # stdout, as argparse's own action
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hgraph", description="Plan GPU memory for computational graphs on a "
                                                "Pregel engine over Ray.")
    parser.add_argument("--version", action=_VersionAction, nargs=0,
                        help="show hgraph's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    submit = sub.add_parser("submit", help="run a named job")
    jobs_sub = submit.add_subparsers(dest="job", required=True, metavar="JOB", parser_class=_Parser)
    _add_modules(jobs_sub, JOBS, extra=submit_flags.add_submit_arguments)  # --address, --wait/--detach

    sub.add_parser("jobs", help="list the jobs `hgraph submit` runs")

    graph = sub.add_parser("graph", help="graph tools: generators and converters")
    tools_sub = graph.add_subparsers(dest="tool", required=True, metavar="TOOL", parser_class=_Parser)
    _add_modules(tools_sub, GRAPH_TOOLS)
    _add_modules(sub, COMMANDS)
    return parser


def _add_modules(subparsers, table: dict, extra=None) -> None:
    """One sub-command per module of ``table`` (name -> module with HELP/add_arguments/main),
    none of them imported here: a module is loaded when its sub-command is the one being parsed
    (``_Parser._fill``: its flags, its ``main``) or when a help listing shows its HELP line
    (``_Parser.format_help``). A module that does not exist is left out (``find_spec``)."""
    for name, module_name in table.items():
        if not _exists(module_name):
            continue
        p = subparsers.add_parser(name, help="")      # the HELP line is filled when shown
        p._fill = functools.partial(_fill_arguments, module_name, extra)
    subparsers._lazy_help = table


def _fill_arguments(module_name, extra, parser) -> None:
    module = _load(module_name)
    parser.description = module.HELP
    module.add_arguments(parser)
    if extra is not None:
        extra(parser)
    parser.set_defaults(_module=module)


def _exists(module_name: str) -> bool:
    """Whether the module is there to import (its package is imported; the module is not)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module_name) is not None
    except ModuleNotFoundError:                 # its package is missing
        return False


def _fill_help(parser) -> None:
    """Give the sub-command listings of ``parser`` their HELP lines (imports those modules)."""
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        table = getattr(action, "_lazy_help", None)
        for choice in getattr(action, "_choices_actions", ()) if table else ():
            module = None if choice.help or choice.dest not in table else _try_load(table[choice.dest])
            if module is not None:
                choice.help = module.HELP


def _try_load(module_name: str):
    """Import a job module; a module not written yet is left out of the CLI, not an error."""
    try:
        return _load(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name):
            return None
        raise


def list_jobs() -> list[tuple[str, str]]:
    rows = []
    for name, module_name in JOBS.items():
        module = _try_load(module_name)
        if module is not None:
            rows.append((name, module.HELP))
    return rows


def runs_kernels(words: list[str]) -> bool:
    """Whether the command line runs a training step's kernels (``submit execute``, ``plan
    --execute``): those keep BLAS's every core, where a plan alone runs it on one (docstring).

    >>> runs_kernels(["submit", "execute", "--model", "mlp"]), runs_kernels(["submit", "plan"])
    (True, False)
    """
    words = [w for w in words if w.startswith("-") or w in JOBS or w == "submit"]
    return "--execute" in words or words[:2] == ["submit", "execute"]


def main(argv: list[str] | None = None) -> int:
    """Run one command line; the exit code. What ``print`` left in stdout's buffer is flushed
    here, before the interpreter would (a full disk or a closed pipe there is one line and exit
    2 as well, not ``Exception ignored``): :func:`hgraph.common.fileio.flush_stdout`."""
    from hgraph.common.fileio import flush_stdout

    try:
        code = _main(argv)
        flush_stdout()
        return code
    except SystemExit:                  # argparse: --help, --version, a usage error
        try:
            flush_stdout()
        except HGraphError as err:
            raise SystemExit(_said(err)) from None
        raise
    except HGraphError as err:          # stdout itself: `hgraph jobs`, --version, the last flush
        return _said(err)


def _said(err: HGraphError) -> int:
    """Print ``err`` as the one line on stderr; its exit code."""
    print(f"hgraph: error: {err}", file=sys.stderr)
    return err.exit_code


def _main(argv: list[str] | None) -> int:
    if not runs_kernels(list(sys.argv[1:] if argv is None else argv)):
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # before NumPy loads (docstring)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "jobs":
        from hgraph.common.fileio import write_stream

        rows = list_jobs()
        width = max(len(n) for n, _ in rows) if rows else 0
        write_stream(sys.stdout, "".join(f"{name.ljust(width)}  {help_text}\n"
                                         for name, help_text in rows))
        return 0
    from hgraph.common.fileio import check_writable

    restore = _sigterm_interrupts()     # from here on SIGTERM ends the command as Ctrl-C does
    notices = _notices_as_lines()
    try:
        for flag in OUTPUT_FLAGS:       # an output that cannot be written fails before any work
            check_writable(getattr(args, flag, None), f"--{flag}")
        if args.command == "submit":
            if submit_flags.wants_ray_job(args):   # --address http://HOST:8265: a Ray Job
                from cluster import jobs_api

                words = list(sys.argv[1:] if argv is None else argv)
                return jobs_api.submit(args, words[words.index("submit") + 2:])
        return int(args._module.main(args) or 0)
    except HGraphError as err:
        print(f"hgraph: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        if _TERMINATED:
            print("hgraph: terminated", file=sys.stderr)
            return 143
        print("hgraph: interrupted", file=sys.stderr)
        return 130
    finally:
        notices()
        restore()


def _notices_as_lines():
    """Until the returned callable restores Python's warnings, print every distinct
    :class:`hgraph.common.errors.Notice` (a request the library adjusted, e.g. ``--tasks`` cut to
    what the runtime can use) once, as one ``hgraph: ...`` line on stderr — a plan runs the
    engine several times, and the same cut is one line, not one per run; other warnings are
    shown as Python shows them."""
    import warnings

    from hgraph.common.errors import Notice

    guard = warnings.catch_warnings()
    guard.__enter__()
    warnings.simplefilter("always", Notice)     # every one reaches ``show``; it keeps them unique
    shown: set[str] = set()
    python_show = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, Notice):
            python_show(message, category, filename, lineno, file, line)
        elif str(message) not in shown:
            shown.add(str(message))
            print(f"hgraph: {message}", file=sys.stderr, flush=True)

    warnings.showwarning = show
    return lambda: guard.__exit__(None, None, None)


#: Set by SIGTERM's handler: the KeyboardInterrupt it raised was a SIGTERM (exit 143, not 130).
_TERMINATED: list[int] = []


def _raise_terminated(signum, frame):
    """SIGTERM unwinds the command as Ctrl-C does: a KeyboardInterrupt (``finally`` blocks and
    exit hooks run), remembered as a SIGTERM for the exit code. It must be a KeyboardInterrupt:
    a ``ray.get`` waiting in Ray's C++ turns only that into an interruption (any other exception
    raised by a signal handler there ends in a SystemError traceback; measured)."""
    _TERMINATED.append(signum)
    raise KeyboardInterrupt


def _sigterm_interrupts():
    """Handle SIGTERM like SIGINT until the returned callable restores the previous handler
    (module docstring). Before it is installed (parsing the command line) nothing has started
    and SIGTERM's default action is as good. Only the main thread may set a handler: elsewhere
    (a job run from a thread) it is left as it is."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    _TERMINATED.clear()
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    return lambda: signal.signal(signal.SIGTERM, previous)


def module_main(name: str, argv: Sequence[str] | None = None) -> int:
    """``python -m jobs.NAME ARGS`` == ``hgraph submit NAME ARGS`` (same flags, errors, exit codes):
    the entry point a Ray Job runs."""
    if argv is None:
        argv = sys.argv[1:]
    return main(["submit", name, *argv])


if __name__ == "__main__":
    sys.exit(main())
