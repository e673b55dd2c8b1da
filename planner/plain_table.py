"""The summary table as plain text, laid out exactly as rich lays it out, for logs and pipes.

rich is slow to import, a large share of a small plan's whole run (bench/NOTES_scale.md);
where nobody sees colours (a
pipe, a log, a file) :class:`PlainTable` draws the same box characters, widths, justification
and centred title as ``rich.console.Console(width=...).print(rich.table.Table(...))`` for the
tables :func:`planner.report.summary_table` builds (no header, two or more columns, one line
per cell). :meth:`PlainTable.render` returns None whenever rich would do more (wrap or shrink a
cell, measure a wide character): the caller then lets rich print it.
"""

from __future__ import annotations

import os

#: Environment switches with which rich colours (or measures) a stream that is not a terminal.
_RICH_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "COLUMNS")


def plain_stream(stream) -> bool:
    """True when rich would print to ``stream`` without colours: not a terminal, not forced."""
    try:
        if stream.isatty():
            return False
    except (AttributeError, ValueError):
        return False
    return not any(os.environ.get(name) for name in _RICH_ENV)


class PlainTable:
    """rich.table.Table's constructor/add_column/add_row surface, rendered by :meth:`render`."""

    def __init__(self, title: str = "", show_header: bool = True):
        self.title = title
        self.show_header = show_header
        self.justify: list[str] = []
        self.rows: list[tuple[str, ...]] = []

    def add_column(self, header: str = "", *, style=None, justify: str = "left") -> None:
        self.justify.append(justify)

    def add_row(self, *cells: str) -> None:
        self.rows.append(tuple(cells))

    def render(self, width: int) -> str | None:
        """The table as rich prints it in ``width`` columns, or None where that needs rich."""
        cells = [c for row in self.rows for c in row] + [self.title]
        if (self.show_header or not self.rows or any(len(r) != len(self.justify) for r in self.rows)
                or not all(c.isascii() and c.isprintable() and "[" not in c for c in cells)
                or set(self.justify) - {"left", "right"}):
            return None
        widths = [max(len(r[i]) for r in self.rows) for i in range(len(self.justify))]
        total = sum(widths) + 3 * len(widths) + 1
        if total > width or len(self.title) > total or not all(widths):
            return None
        lines = []
        if self.title:
            excess = total - len(self.title)
            lines.append(" " * (excess // 2) + self.title + " " * (excess - excess // 2))
        lines.append("┌" + "┬".join("─" * (w + 2) for w in widths) + "┐")
        for row in self.rows:
            lines.append("│" + "│".join(
                f" {c.rjust(w) if j == 'right' else c.ljust(w)} "
                for c, w, j in zip(row, widths, self.justify)) + "│")
        lines.append("└" + "┴".join("─" * (w + 2) for w in widths) + "┘")
        return "\n".join(lines) + "\n"
