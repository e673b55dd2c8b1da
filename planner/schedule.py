"""Recomputation schedules in the reference's text format (FORMAT.md §2.2).

One operation per line, in execution order::

    compute f            forward function f (f < M/2); a repeated f is a recomputation
    compute f j1 j2 ...  backward block f (f >= M/2), gradients of outputs j1, j2, ... (0-based)
    forget v forward     free the forward value of var v
    forget v backward    free the gradient of var v
    IMPOSSIBLE           the whole output when no strategy fits the budget

Example::

    >>> s = Schedule.loads("compute 0\\ncompute 1 0\\nforget 3 forward\\n")
    >>> s.ops[1]
    Op(kind='compute', index=1, grads=(0,), which='forward')
    >>> s.dumps() == "compute 0\\ncompute 1 0\\nforget 3 forward\\n"
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from typing import NamedTuple

import numpy as np

from hgraph.common.errors import InputError
from hgraph.common.fileio import write_text

__all__ = ["Op", "Schedule", "ScheduleFile", "compute", "forget", "COMPUTE", "FORGET_FORWARD",
           "FORGET_BACKWARD", "columns_text", "columns_ops"]


class Op(NamedTuple):
    """One schedule line.

    ``kind`` is ``"compute"`` or ``"forget"``. For a compute, ``index`` is the function block and
    ``grads`` the output indices of a backward block (empty for a forward compute). For a forget,
    ``index`` is the var id and ``which`` says whether its ``"forward"`` value or ``"backward"``
    gradient is freed (``which`` is ``"forward"`` and unused for computes).
    """

    kind: str
    index: int
    grads: tuple = ()
    which: str = "forward"

    def line(self) -> str:
        if self.kind == "compute":
            return " ".join(["compute", str(self.index), *map(str, self.grads)])
        return f"forget {self.index} {self.which}"


# ---- ops as columns ---------------------------------------------------------------------------
# A piece of a schedule as four arrays: ``code`` (per op: COMPUTE, FORGET_FORWARD or
# FORGET_BACKWARD), ``index`` (the function or var), ``glen`` (how many gradient indices a
# compute lists) and ``gflat`` (those indices, op after op). Why: the sliced emission
# (planner/sliced.py) spools, merges and writes ~5·10^6 ops at 10^6 activations; as columns
# that is NumPy per piece, where an Op at a time (pickled, rebuilt, formatted by Op.line) was
# ~1/3 of the stage's CPU (bench/NOTES_scale.md). The text and the ops are Op.line's and
# Op's, line for line (tests/test_sliced.py: byte-identical schedules).

COMPUTE, FORGET_FORWARD, FORGET_BACKWARD = 0, 1, 2
_KIND = np.array(["compute", "forget", "forget"], object)
_WHICH = np.array(["forward", "forward", "backward"], object)
_FORGET_LINES = ["forget %d forward\n", "forget %d backward\n"]


def columns_text(code: np.ndarray, index: np.ndarray, glen: np.ndarray,
                 gflat: np.ndarray) -> str:
    """The ops' lines (each ``Op.line()`` and a newline): one ``%`` of a format string per
    line (by kind and gradient count) joined, over the ops' numbers in line order — the
    formatting in C, not a Python call per op."""
    if not code.size:
        return ""
    glen = np.asarray(glen, np.int64)
    most = int(glen.max())
    formats = np.array(_FORGET_LINES + ["compute %d" + " %d" * j + "\n" for j in range(most + 1)],
                       object)
    which = np.where(code == COMPUTE, 2 + glen, code - 1)
    ends = np.cumsum(glen)
    first = np.arange(code.size) + ends - glen          # where each op's numbers begin
    nums = np.empty(code.size + int(ends[-1]), np.int64)
    nums[first] = index
    grads = np.ones(nums.size, bool)
    grads[first] = False
    nums[grads] = gflat
    return "".join(formats[which].tolist()) % tuple(nums.tolist())


def columns_ops(code: np.ndarray, index: np.ndarray, glen: np.ndarray, gflat: np.ndarray):
    """The ops as :class:`Op` (an iterator; each built in C from its fields, a compute's
    gradient indices a tuple of ``gflat``'s)."""
    grads = [()] * code.size
    ends = np.cumsum(glen)
    some = np.flatnonzero(glen)
    flat = gflat.tolist()
    for r, a, b in zip(some.tolist(), (ends - glen)[some].tolist(), ends[some].tolist()):
        grads[r] = tuple(flat[a:b])
    fields = zip(_KIND[code].tolist(), index.tolist(), grads, _WHICH[code].tolist())
    return map(tuple.__new__, repeat(Op), fields)


def compute(index: int, grads=()) -> Op:
    """A ``compute`` op (``grads`` only for backward blocks)."""
    return Op("compute", int(index), tuple(int(j) for j in grads))


def forget(var: int, which: str = "forward") -> Op:
    """A ``forget v forward|backward`` op."""
    return Op("forget", int(var), (), which)


@dataclass
class Schedule:
    """A list of :class:`Op` or the reference's ``IMPOSSIBLE`` verdict."""

    ops: list = field(default_factory=list)
    impossible: bool = False

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self):
        return iter(self.ops)

    @classmethod
    def loads(cls, text: str, path="<string>") -> "Schedule":
        if isinstance(text, (bytes, bytearray)):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError as err:
                line = bytes(text)[: err.start].count(b"\n") + 1
                raise InputError(path, line, "expected schedule text, found binary data") from None
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if lines == ["IMPOSSIBLE"]:
            return cls([], impossible=True)
        ops = []
        for no, line in enumerate(lines, 1):
            parts = line.split(" ")
            try:
                if parts[0] == "compute" and len(parts) >= 2:
                    ops.append(Op("compute", _nat(parts[1]), tuple(_nat(p) for p in parts[2:])))
                    continue
                if parts[0] == "forget" and len(parts) == 3 and parts[2] in ("forward", "backward"):
                    ops.append(Op("forget", _nat(parts[1]), (), parts[2]))
                    continue
            except ValueError:
                pass
            if line == "IMPOSSIBLE":
                raise InputError(path, no, "IMPOSSIBLE must be the only line of a schedule")
            raise InputError(path, no, "expected 'compute f [j ...]', 'forget v forward|backward' "
                                       f"or 'IMPOSSIBLE', got {line[:60]!r}")
        return cls(ops)

    @classmethod
    def read(cls, path) -> "Schedule":
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as err:
            raise InputError(path, None, f"cannot read: {err.strerror}") from None
        return cls.loads(data, path=str(path))

    def dumps(self) -> str:
        return "".join(self.chunks())

    def chunks(self, ops: int = 1 << 16):
        """The text in pieces of ``ops`` lines: :meth:`write` streams them, so that the
        schedule of a 10^6-activation plan (~5·10^6 lines) is never one string beside its
        ops (a few MB at a time instead of ~100 bytes a line; bench/NOTES_scale.md)."""
        if self.impossible:
            yield "IMPOSSIBLE\n"
            return
        for lo in range(0, len(self.ops), ops):
            yield "".join(op.line() + "\n" for op in self.ops[lo:lo + ops])

    def write(self, path) -> None:
        write_text(path, self.chunks())


class ScheduleFile:
    """A schedule kept in a text file (the sliced emission's, :mod:`planner.sliced`): read
    like a :class:`Schedule` (``ops``, ``len``, iteration, :meth:`chunks`, :meth:`write`)
    without its op list in memory — a 10^6-activation plan's ~5·10^6 ops were ~600 MB of the
    driver (bench/NOTES_scale.md). ``ops`` reads the file when asked (small uses: tests,
    ``--execute``); :meth:`write` copies it in pieces through the one writer."""

    impossible = False

    def __init__(self, path, count: int):
        self.path, self.count = str(path), int(count)

    def __len__(self) -> int:
        return self.count

    @property
    def ops(self) -> list:
        return Schedule.read(self.path).ops

    def __iter__(self):
        return iter(self.ops)

    def chunks(self, size: int = 1 << 20):
        """The text in pieces of ``size`` characters."""
        with open(self.path, encoding="utf-8") as fh:
            while piece := fh.read(size):
                yield piece

    def dumps(self) -> str:
        return "".join(self.chunks())

    def write(self, path) -> None:
        write_text(path, self.chunks())


def _nat(token: str) -> int:
    if not token.isdigit() or not token.isascii():
        raise ValueError(token)
    return int(token)
