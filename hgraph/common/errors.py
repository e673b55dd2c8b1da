"""User-facing errors.

Anything a user can cause (a malformed file, an absurd argument, an unreachable cluster) raises
:class:`HGraphError` (or a subclass). The CLI prints ``str(err)`` as one line on stderr and exits
with ``err.exit_code`` — never a traceback. Library callers get an ordinary exception.
"""

from __future__ import annotations


class HGraphError(Exception):
    """An error whose message is fit to show a user as one line."""

    exit_code = 2

    def __init__(self, message: str, *, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class Notice(UserWarning):
    """A request the library adjusted rather than refused (``tasks`` beyond what the runtime can
    use, say), worth one line to a user. Raised with :func:`warnings.warn`: a library caller
    sees an ordinary Python warning, the command line prints each distinct one once as
    ``hgraph: <text>`` on stderr — where the engine cannot print, not knowing who runs it."""


class InputError(HGraphError):
    """A malformed input file: the message names the file, the line and the problem."""

    def __init__(self, path, line: int | None, problem: str):
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {problem}")
        self.path, self.line, self.problem = path, line, problem


class InfeasibleError(HGraphError):
    """No plan fits the request (for example a memory budget below the smallest feasible one).

    ``min_budget_bytes``: the smallest budget that does fit, where the search that refuses
    knows it (a caller may retry there)."""

    exit_code = 3

    def __init__(self, message: str, *, min_budget_bytes: int | None = None):
        super().__init__(message)
        self.min_budget_bytes = min_budget_bytes
