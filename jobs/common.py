"""Plumbing every engine job shares: flags, loading the graph, running, writing results.

A job module (``jobs/sssp.py`` and friends) only says what is particular to it — its flags, its
vertex program, how its values print — and hands the rest to :func:`run_engine_job`:

* the graph comes from ``--graph`` through :func:`hgraph.io.load` (bad input: one line naming
  file and line, exit 2);
* the runtime is in-process unless ``--runtime ray`` or ``--address`` says otherwise;
* per-superstep progress goes to stderr (:mod:`hgraph.common.progress`);
* ``--out`` gets ``vid<TAB>value`` lines sorted by vid and ``--stats`` a JSON list with one
  object per superstep, both by :func:`hgraph.common.fileio.write_text` (``-``: stdout;
  atomically: a failed run or write leaves no half-written file and keeps an earlier one; a
  write that fails is one line naming the file).

:func:`jobs.cli.module_main` makes ``python -m jobs.NAME ARGS`` behave exactly like
``hgraph submit NAME ARGS`` — the entry point a Ray Job runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from hgraph.common.errors import HGraphError
from hgraph.common.fileio import write_text
from jobs.flags import add_common_arguments, add_recovery_arguments

#: Stats fields every superstep row carries (the engine may add more, e.g. failures).
STATS_FIELDS = ("superstep", "mode", "active", "messages", "bytes", "seconds")


# --------------------------------------------------------------------------------------------
# flags


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """The engine flags (:func:`jobs.flags.add_common_arguments`), ``--max-recoveries`` and
    ``--out``."""
    add_common_arguments(parser)
    add_recovery_arguments(parser)
    parser.add_argument("--out", default=None, help="write vid<TAB>value lines (sorted by vid) here")


def runtime_of(args: argparse.Namespace) -> str:
    """``local`` unless ``--runtime ray`` or an ``--address`` asks for Ray."""
    runtime = getattr(args, "runtime", None)
    address = getattr(args, "address", None)
    if runtime is None:
        return "ray" if address else "local"
    if runtime == "local" and address:
        raise HGraphError("--address joins a Ray cluster; it cannot be combined with --runtime local")
    return runtime


# --------------------------------------------------------------------------------------------
# loading


def load_graph(path: str | os.PathLike):
    """Load ``--graph``; a missing or unreadable file is one clear line, not a traceback."""
    import hgraph.io

    p = Path(path)
    if not p.exists():
        raise HGraphError(f"{p}: no such file")
    if p.is_dir():
        raise HGraphError(f"{p}: is a directory, expected a graph file")
    try:
        return hgraph.io.load(p)
    except HGraphError:
        raise
    except (OSError, UnicodeDecodeError) as err:
        raise HGraphError(f"{p}: cannot read: {err}") from None


# --------------------------------------------------------------------------------------------
# running


def engine_options(args: argparse.Namespace):
    """The engine flags in ``args`` as one :class:`hgraph.EngineOptions` (a flag a job does not
    take keeps the option's default): what the engine jobs, the plan job and row plans run with."""
    import hgraph

    d = hgraph.EngineOptions()
    return hgraph.EngineOptions(
        tasks=getattr(args, "tasks", d.tasks), blocks=getattr(args, "blocks", d.blocks),
        mode=getattr(args, "mode", d.mode), runtime=runtime_of(args),
        address=getattr(args, "address", d.address),
        checkpoint_every=getattr(args, "checkpoint_every", d.checkpoint_every),
        inject_failure=getattr(args, "inject_failure", d.inject_failure),
        max_recoveries=getattr(args, "max_recoveries", d.max_recoveries))


def run_program(args: argparse.Namespace, program, graph, *, progress_total: int | None = None):
    """Run ``program`` on ``graph`` with the engine flags in ``args``; returns the engine's result."""
    import hgraph
    from hgraph.common.progress import make_reporter, tracking

    max_supersteps = getattr(args, "max_supersteps", None)
    total = max_supersteps if max_supersteps is not None else progress_total
    kind = getattr(args, "progress", "auto") or "auto"
    reporter = make_reporter(kind, total=total)
    # A plain log names the wait for Ray as well ("starting Ray: 14.3 s", a stage the engine
    # reports), before the superstep lines; a live bar has one display only, the superstep bar.
    stages = tracking("plain") if kind == "plain" else contextlib.nullcontext()
    try:
        with stages:
            return hgraph.run(program, graph, engine_options(args),
                              max_supersteps=max_supersteps, progress=reporter)
    finally:
        reporter.close()


def run_engine_job(args: argparse.Namespace, make_program: Callable[[Any], Any], *,
                   prepare_graph: Callable[[Any], Any] | None = None,
                   output: Callable[[Any, Any], np.ndarray] | None = None,
                   progress_total: int | None = None) -> int:
    """The whole life of an engine job: load, run, write ``--out`` and ``--stats``.

    ``make_program(graph)`` builds the vertex program (it may raise :class:`HGraphError` for an
    argument that does not fit the graph, e.g. a source vertex out of range);
    ``prepare_graph(graph)`` may derive the graph the program runs on (e.g. symmetrised);
    ``output(result, graph)`` turns the engine's values into one value per vertex for ``--out``.
    """
    graph = load_graph(args.graph)
    if prepare_graph is not None:
        graph = prepare_graph(graph)
    program = make_program(graph)
    result = run_program(args, program, graph, progress_total=progress_total)
    values = output(result, graph) if output is not None else np.asarray(result.values)
    # Outputs are written only after the run succeeded, each atomically.
    if getattr(args, "out", None):
        write_values(args.out, values)
    if getattr(args, "stats", None):
        write_stats(args.stats, result.stats)
    if (getattr(args, "progress", "auto") or "auto") != "off":
        from hgraph.common.progress import summary_line

        print(f"{getattr(args, 'job', None) or 'job'}: {summary_line(result.stats)}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------------------------
# writing


def format_values(values: np.ndarray) -> Iterable[str]:
    """Deterministic text for one value per vertex: ints as ints, floats as shortest round-trip
    ``repr`` (``0.1``, ``1e-05``, ``inf`` for unreachable), bools as 0/1."""
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"expected one value per vertex, got shape {values.shape}")
    if values.dtype.kind == "b":
        values = values.astype(np.int64)
    if values.dtype.kind in "iu":
        return map(str, values.tolist())
    if values.dtype.kind == "f":
        return map(repr, values.astype(np.float64).tolist())
    return map(str, values.tolist())


def write_values(path, values: np.ndarray) -> None:
    """``vid<TAB>value`` lines sorted by vid (values are in vertex-id order), atomically."""
    texts = format_values(values)
    lines = "\n".join(map("\t".join, zip(map(str, range(len(values))), texts)))
    write_text(path, lines + "\n" if lines else "")


def _plain(value):
    """JSON-safe plain Python for NumPy scalars and arrays in stats rows."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def write_stats(path, stats: Sequence[dict]) -> None:
    """The per-superstep stats as a JSON list of objects (one per line), atomically."""
    rows = [dict(row) for row in stats]
    # A JSON list with one object per line: valid JSON, and a superstep per line to read or grep.
    body = ",\n".join(json.dumps(row, default=_plain) for row in rows)
    text = f"[\n{body}\n]\n" if rows else "[]\n"
    write_text(path, text)


def read_values(path) -> dict[int, str]:
    """Read an ``--out`` file back (vid -> value text); for tests and tools."""
    result = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            vid, value = line.rstrip("\n").split("\t")
            result[int(vid)] = value
    return result


# --------------------------------------------------------------------------------------------
# entry points


def check_vertex(name: str, vid: int, graph) -> int:
    """An argument naming a vertex must be one of the graph's (one-line error otherwise)."""
    if graph.n == 0:
        raise HGraphError(f"{name} {vid}: the graph has no vertices")
    if not 0 <= vid < graph.n:
        raise HGraphError(f"{name} {vid} is not a vertex of the graph (vertices are 0..{graph.n - 1})")
    return vid
