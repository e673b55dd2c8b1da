"""Progress for long runs: per superstep of the engine, and per stage of a driver job.

:func:`make_reporter` returns a callable the engine calls once per superstep with that superstep's
stats row (``superstep``, ``mode``, ``active``, ``messages``, ``bytes``, ``seconds``) — exactly what
``hgraph.run(..., progress=reporter)`` passes. On a terminal it draws a live rich progress bar; in
a log or a pipe (Ray Jobs, CI) it prints one plain line per superstep instead, so logs stay
readable. Progress always goes to stderr: stdout is left to the job's own output.

A driver job that runs in stages (the memory planner: levels on the engine, lower-set statistics
on the engine, the DP, the replay) shows them with :class:`StageProgress`: the stage, the
engine's superstep while one runs, the position inside a long loop with an ETA. The job makes one
current (:func:`tracking`) and the code below reports to :func:`current` without being handed
it; with none current every report is a no-op, so library calls stay silent.

Example (stdout here; the default stream is stderr)::

    >>> import sys
    >>> from hgraph.common.progress import make_reporter
    >>> report = make_reporter("plain", stream=sys.stdout)
    >>> report({"superstep": 0, "mode": "pull", "active": 1, "messages": 2, "bytes": 48,
    ...         "seconds": 0.001})
    superstep 0  pull  active 1  messages 2  bytes 48 B  0.001 s
    >>> report.close()
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import time
from typing import Any, Callable, Iterator, Mapping, TextIO

from hgraph.common.formatting import format_bytes

KINDS = ("auto", "bar", "plain", "off")


def format_row(row: Mapping[str, Any]) -> str:
    """One superstep's stats row as the plain progress line."""
    parts = [f"superstep {row.get('superstep', '?')}", str(row.get("mode", "?"))]
    if "active" in row:
        parts.append(f"active {row['active']:,}")
    if "messages" in row:
        parts.append(f"messages {row['messages']:,}")
    if "bytes" in row:
        parts.append(f"bytes {format_bytes(row['bytes'])}")
    if "seconds" in row:
        parts.append(f"{row['seconds']:.3f} s")
    failure = failure_note(row)
    if failure:
        parts.append(failure)
    return "  ".join(parts)


def failure_note(row: Mapping[str, Any]) -> str:
    """``'worker 1 lost at superstep 3, resumed at 2 after 0.41 s'`` when the row records a
    recovery (the engine adds ``failure`` and ``recovery_seconds``), else ``''``."""
    failure = row.get("failure")
    if not failure:
        return ""
    text = f"worker {failure.get('worker', '?')} lost at superstep {failure.get('superstep', '?')}"
    if "resumed_at" in failure:
        text += f", resumed at {failure['resumed_at']}"
    if "recovery_seconds" in row:
        text += f" after {float(row['recovery_seconds']):.2f} s"
    return text


def mode_runs(modes) -> str:
    """``['pull', 'pull', 'push'] -> 'pull x2, push x1'``: a run's mode trace, compressed."""
    runs: list[list] = []
    for mode in modes:
        if runs and runs[-1][0] == mode:
            runs[-1][1] += 1
        else:
            runs.append([mode, 1])
    return ", ".join(f"{mode} x{count}" for mode, count in runs)


def summary_line(stats) -> str:
    """One line for a finished run: supersteps, the mode trace, bytes across workers, seconds,
    recoveries — what a user wants to see after the progress lines."""
    rows = list(stats)
    total_bytes = sum(int(row.get("bytes", 0)) for row in rows)
    seconds = sum(float(row.get("seconds", 0.0)) for row in rows)
    text = (f"{len(rows)} supersteps ({mode_runs(row.get('mode', '?') for row in rows)}), "
            f"{format_bytes(total_bytes)} across workers, {seconds:.2f} s")
    failures = sum(1 for row in rows if row.get("failure"))
    if failures:
        text += f", {failures} worker failure{'s' if failures > 1 else ''} recovered"
    return text


class PlainReporter:
    """One line per superstep on ``stream`` (a log-friendly progress display)."""

    def __init__(self, stream: TextIO | None = None, prefix: str = ""):
        self.stream = stream if stream is not None else sys.stderr
        self.prefix = prefix
        self.rows = 0

    def __call__(self, row: Mapping[str, Any]) -> None:
        self.rows += 1
        print(self.prefix + format_row(row), file=self.stream, flush=True)

    def close(self) -> None:
        pass


class FailuresReporter(PlainReporter):
    """Only the supersteps that lost a worker: what ``auto`` prints in a pipe or a log, where a
    line per superstep is noise but a recovery is a diagnostic worth keeping."""

    def __call__(self, row: Mapping[str, Any]) -> None:
        if row.get("failure"):
            super().__call__(row)


class BarReporter:
    """A live rich progress bar: superstep count (of ``total`` when known), mode, active, bytes."""

    def __init__(self, stream: TextIO | None = None, total: int | None = None,
                 description: str = "supersteps"):
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                                   TextColumn, TimeElapsedColumn)

        self.console = Console(file=stream if stream is not None else sys.stderr)
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[mode]:>6}"),
            TextColumn("active {task.fields[active]:>12}"),
            TextColumn("bytes {task.fields[bytes]:>10}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self.progress.start()
        self.task = self.progress.add_task(description, total=total, mode="-", active="-",
                                           bytes="-")
        self.bytes_by_step: dict[int, int] = {}
        self.rows = 0

    def __call__(self, row: Mapping[str, Any]) -> None:
        # Keyed by superstep: after a recovery the replayed supersteps replace their first run.
        step = int(row.get("superstep", self.rows))
        self.bytes_by_step[step] = int(row.get("bytes", 0))
        self.bytes_by_step = {k: v for k, v in self.bytes_by_step.items() if k <= step}
        self.rows = step + 1
        failure = failure_note(row)
        if failure:
            self.progress.console.print(f"[yellow]{failure}")
        self.progress.update(self.task, completed=self.rows, mode=str(row.get("mode", "?")),
                             active=f"{int(row.get('active', 0)):,}",
                             bytes=format_bytes(sum(self.bytes_by_step.values())))

    def close(self) -> None:
        task = self.progress.tasks[0]
        if task.total is None or task.completed < task.total:
            # Halted before max_supersteps (or no bound): show the bar as finished.
            self.progress.update(self.task, total=self.rows, completed=self.rows)
        self.progress.stop()


class _Off:
    rows = 0

    def __call__(self, row: Mapping[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def make_reporter(kind: str = "auto", *, total: int | None = None,
                  stream: TextIO | None = None) -> Callable[[Mapping[str, Any]], None]:
    """A progress callable for ``hgraph.run(progress=...)``; call ``.close()`` when the run ends.

    ``kind``: ``"bar"`` (live rich bar), ``"plain"`` (one line per superstep), ``"off"``, or
    ``"auto"`` — a bar when ``stream`` (default stderr) is a terminal; otherwise (a log or a
    pipe) only the lines of supersteps that lost a worker (``"plain"`` asks for every line).
    ``total``: the superstep bound if known (e.g. ``--max-supersteps``), for the bar's length.
    """
    if kind not in KINDS:
        raise ValueError(f"progress kind must be one of {', '.join(KINDS)}, got {kind!r}")
    target = stream if stream is not None else sys.stderr
    if kind == "auto":
        if not _is_terminal(target):
            return FailuresReporter(target)
        kind = "bar"
    if kind == "bar":
        return BarReporter(target, total=total)
    if kind == "plain":
        return PlainReporter(target)
    return _Off()


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


# --------------------------------------------------------------------------------------------
# stages of a driver job


class StageProgress:
    """The stages of a long driver job on ``stream`` (stderr by default).

    ``kind``: ``"bar"`` — a live rich line (stage, progress bar, position, engine superstep,
    elapsed time, ETA) that disappears when the job ends; ``"plain"`` — one line per finished
    top-level stage with its seconds (for logs), and one per stage opened with ``logged=True``
    however deep it runs (a wait a log should name: starting Ray, which happens inside whatever
    stage first needs it); ``"off"`` — nothing. Report with :meth:`stage` (a context manager;
    stages nest, the innermost shows), :meth:`superstep` (the engine's per-superstep callback)
    and :meth:`position` (``done`` of ``total`` steps of the current stage: the bar and ETA).
    """

    def __init__(self, kind: str = "bar", stream: TextIO | None = None):
        if kind not in ("bar", "plain", "off"):
            raise ValueError(f"stage progress kind must be bar, plain or off, got {kind!r}")
        self.kind = kind
        self.stream = stream if stream is not None else sys.stderr
        self.names: list[str] = []
        self.progress = None
        if kind == "bar":
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                                       TextColumn, TimeElapsedColumn, TimeRemainingColumn)

            self.progress = Progress(
                SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                MofNCompleteColumn(), TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                TextColumn("ETA"), TimeRemainingColumn(),
                console=Console(file=self.stream), transient=True)
            self.progress.start()
            self.task = self.progress.add_task("starting", total=None, info="")

    @contextlib.contextmanager
    def stage(self, name: str, *, logged: bool = False) -> Iterator[None]:
        """Run the body as stage ``name`` (its position and superstep start afresh); ``logged``:
        its plain line is printed even when it runs inside another stage."""
        self.names.append(name)
        self._show(name)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.names.pop()
            if self.kind == "plain" and (logged or not self.names):   # top-level stages, logged ones
                print(f"{name}: {time.perf_counter() - t0:.2f} s", file=self.stream, flush=True)
            if self.names:
                self._show(self.names[-1])

    def _show(self, name: str) -> None:
        if self.progress is not None:           # a fresh task: no stale total, its own clock
            self.progress.remove_task(self.task)
            self.task = self.progress.add_task(name, total=None, info="")
            self.progress.refresh()             # a new stage shows at once, not at the next tick

    def superstep(self, row: Mapping[str, Any]) -> None:
        """The engine's ``progress`` callback: show the superstep running in this stage."""
        if self.progress is not None:
            self.progress.update(self.task, info=f"superstep {row.get('superstep', '?')} "
                                                 f"{row.get('mode', '')} active "
                                                 f"{int(row.get('active', 0)):,}")

    def position(self, done: int, total: int) -> None:
        """``done`` of ``total`` steps of the current stage (a DP's states): bar and ETA."""
        if self.progress is not None:
            self.progress.update(self.task, completed=done, total=total)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class _NoStages:
    """What :func:`current` gives when no job tracks its stages: every report is a no-op."""

    kind = "off"

    def stage(self, name: str, *, logged: bool = False):
        return contextlib.nullcontext()

    def superstep(self, row) -> None:
        pass

    def position(self, done: int, total: int) -> None:
        pass

    def close(self) -> None:
        pass


_NONE = _NoStages()
_CURRENT: contextvars.ContextVar = contextvars.ContextVar("hgraph_stage_progress", default=_NONE)


def current():
    """The stage progress the running job reports to (a no-op one when none is tracked)."""
    return _CURRENT.get()


@contextlib.contextmanager
def tracking(kind: str = "auto", stream: TextIO | None = None, *,
             tracker=None) -> Iterator[StageProgress]:
    """Make a :class:`StageProgress` current for the body, and close it after.

    ``kind="auto"``: a live bar when ``stream`` (default stderr) is a terminal, else nothing —
    a log or a pipe gets no progress noise (``"plain"`` asks for one line per stage).
    ``tracker``: a ready-made one instead (anything with ``stage``/``superstep``/``position``/
    ``close``, e.g. a recorder in a test; ``stage`` is also called with ``logged=True`` by the
    engine's Ray start, which a recorder that never starts Ray need not take).
    """
    if kind not in KINDS:
        raise ValueError(f"progress kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if tracker is None:
        target = stream if stream is not None else sys.stderr
        if kind == "auto":
            kind = "bar" if _is_terminal(target) else "off"
        tracker = StageProgress(kind, target)
    token = _CURRENT.set(tracker)
    try:
        yield tracker
    finally:
        _CURRENT.reset(token)
        tracker.close()


def joining(kind: str = "auto"):
    """A context manager giving the stage progress to report to: the running job's, where one
    is tracked (a CLI job's: its stages then show inside the job's), else a new one of ``kind``
    (:func:`tracking`) for the body. Why: library calls that take long (the PyTorch bridge's
    ``graph``, ``plan_for_step``, ``compile``) show their stages when called from a script and
    must not open a second live line inside a job that already has one."""
    have = current()
    return contextlib.nullcontext(have) if have.kind != "off" else tracking(kind)
