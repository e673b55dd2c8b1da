"""Per-superstep progress for long engine runs.

:func:`make_reporter` returns a callable the engine calls once per superstep with that superstep's
stats row (``superstep``, ``mode``, ``active``, ``messages``, ``bytes``, ``seconds``) — exactly what
``hgraph.run(..., progress=reporter)`` passes. On a terminal it draws a live rich progress bar; in
a log or a pipe (Ray Jobs, CI) it prints one plain line per superstep instead, so logs stay
readable. Progress always goes to stderr: stdout is left to the job's own output.

Example::

    from hgraph.progress import make_reporter
    report = make_reporter("plain", total=None)
    report({"superstep": 0, "mode": "pull", "active": 1, "messages": 2, "bytes": 48,
            "seconds": 0.001})
    report.close()
    # stderr: superstep 0  pull  active 1  messages 2  bytes 48 B  0.001 s
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Mapping, TextIO

KINDS = ("auto", "bar", "plain", "off")


def format_bytes(n: float) -> str:
    """Bytes as a short human string (binary units): ``1536 -> '1.5 KiB'``."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover - loop always returns


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
    ``"auto"`` — a bar when ``stream`` (default stderr) is a terminal, plain lines otherwise.
    ``total``: the superstep bound if known (e.g. ``--max-supersteps``), for the bar's length.
    """
    if kind not in KINDS:
        raise ValueError(f"progress kind must be one of {', '.join(KINDS)}, got {kind!r}")
    target = stream if stream is not None else sys.stderr
    if kind == "auto":
        kind = "bar" if _is_terminal(target) else "plain"
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
