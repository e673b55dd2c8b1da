"""The schedule stage in slices (issue 37): emit, hoist and replay a plan's schedule a slice of
blocks at a time, the schedule's lines streamed to a file, never the whole op list in memory.

Why: at 10^6 activations the whole emission (``planner.emit.emit_groups``, then
``planner.simulate.replay``) held ~5·10^6 ``Op`` tuples, a Python object per node in a dozen
tables and the hoisting's arrays over all ops: ~1.9 KB an activation on the driver, its peak
(bench/NOTES_scale.md). Here:

1. the emitter runs piece by piece (:func:`planner.emit.emit_pieces`): the forward phase of
   each slice in order, then the backward phase of each in reverse, handing its live sets on;
2. each piece is hoisted alone (:func:`planner.emit.hoist_piece`); a forget whose value was
   last touched in an earlier piece is set aside with the line of that touch (an array of the
   last touching line per value and gradient, 16 bytes a var, is the hand-over);
3. the pieces go to a spool file (their ops as plain tuples); one pass then reads them back
   in order, puts each set-aside forget after its anchor line (the anchor's latest forget
   first, as the whole hoisting does), writes the schedule's text to its file and feeds the
   same ops to the replay (the one schedule walk, :class:`planner.walk.ScheduleWalker`),
   whose peak is over the whole.

The schedule is byte-identical to the whole emission's (tests/test_sliced.py on transformer
and CNN graphs, slices of a few blocks up), and the replay's figures equal.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import tempfile
import weakref

import numpy as np

from planner import simulate
from planner.emit import emit_pieces, hoist_piece
from planner.schedule import Op, ScheduleFile

__all__ = ["SLICE_NODES", "applies", "slices", "emit_and_replay"]

#: Activations a slice holds at most (unless one block is larger): a piece's ops and tables
#: are ~2-3 KB an activation while it is made, so ~16k activations are ~40 MB.
SLICE_NODES = 1 << 14
#: Lines of text written at a time.
CHUNK_LINES = 1 << 16


def applies(n: int, decision) -> bool:
    """Whether a plan's schedule is made in slices: from the segmented DP's size
    (:data:`planner.dp.scale.SEGMENTED_LIMIT` activations, read when asked) and
    for the canonical schedule of a chain (a MILP decision's own choices are not sliced)."""
    from planner.dp import scale

    return n >= scale.SEGMENTED_LIMIT and decision.keep is None


def slices(groups: np.ndarray, nodes: int = SLICE_NODES) -> list:
    """``(b0, b1)`` block ranges covering the chain's blocks in order, each as many blocks as
    hold at most ``nodes`` activations together (one block alone when it is larger: a block
    is never split); a search per slice, not a loop over blocks."""
    ends = np.cumsum(np.bincount(np.asarray(groups, np.int64)))
    out, b0 = [], 0
    while b0 < ends.size:
        base = int(ends[b0 - 1]) if b0 else 0
        b1 = max(b0 + 1, int(np.searchsorted(ends, base + nodes, "right")))
        out.append((b0, b1))
        b0 = b1
    return out


def emit_and_replay(g, groups: np.ndarray, ag, check: bool = True, nodes: int | None = None,
                    mode: str = "reference"):
    """``(schedule, replay)`` of the chain ``groups`` as ``emit_groups`` + ``replay`` make
    them, in slices of ``nodes`` activations: the schedule a :class:`ScheduleFile`, the
    replay a :class:`planner.simulate.SimResult` (see the module docstring); ``nodes``:
    :data:`SLICE_NODES` unless given."""
    nodes = SLICE_NODES if nodes is None else nodes
    fd, spool_path = tempfile.mkstemp(prefix="hgraph-pieces-")
    with _cycles_paused():
        try:
            with os.fdopen(fd, "wb") as spool:
                moved, total = _spool(g, emit_pieces(g, groups, ag, slices(groups, nodes)), spool)
            fd, path = tempfile.mkstemp(prefix="hgraph-schedule-", suffix=".txt")
            os.close(fd)
            schedule = ScheduleFile(path, total)
            weakref.finalize(schedule, _unlink, path)
            stream = _Merged(g, spool_path, moved, total, path)
            sim = simulate.replay(g, stream, mode=mode, check=check)
            if stream.written != total:
                raise RuntimeError(f"sliced schedule: {stream.written} lines written of {total}")
            return schedule, sim
        finally:
            _unlink(spool_path)


def _spool(g, pieces, spool):
    """Hoist each piece of ops (:func:`planner.emit.hoist_piece`) into ``spool`` (a pickled
    list of each op's fields): ``(moved, ops)``, the set-aside forgets as two arrays (anchor
    line, key) sorted as they go back (by anchor; an anchor's latest forget first), and the
    ops in all."""
    last_touch = np.full(2 * g.num_vars, -1, np.int64)
    parts, pos0, line0 = [], 0, 0
    for ops in pieces:
        kept, (anchor, pos, key) = hoist_piece(g, ops, last_touch, line0)
        # plain tuples: pickled and read back in ~0.45 of the time of the named ones
        pickle.dump(list(map(tuple, kept)), spool, protocol=pickle.HIGHEST_PROTOCOL)
        parts.append((anchor, pos + pos0, key))
        pos0 += len(ops)
        line0 += len(kept)
    empty = np.zeros(0, np.int64)
    anchor, pos, key = (np.concatenate(c) for c in zip(*parts)) if parts else (empty,) * 3
    order = np.lexsort((-pos, anchor))
    return (anchor[order], key[order]), pos0


class _Merged:
    """The hoisted schedule, read back once: the spooled pieces' ops with the set-aside
    forgets after their anchors (those with none at the front), each written to ``path`` as
    it passes. A sized iterable, so that the replay walks it as a list (its curve is sized
    by ``len``)."""

    def __init__(self, g, spool_path, moved, total: int, path):
        self.n, self.spool_path, self.path, self.total = g.num_vars, spool_path, path, total
        self.anchor, self.key = moved
        self.written = 0

    def __len__(self) -> int:
        return self.total

    def __iter__(self):
        with open(self.spool_path, "rb") as spool, open(self.path, "w", encoding="utf-8") as out:
            text = []
            for op in self._ops(spool):
                text.append(op.line())
                if len(text) == CHUNK_LINES:
                    self._flush(out, text)
                yield op
            self._flush(out, text)

    def _flush(self, out, text: list) -> None:
        if text:
            out.write("\n".join(text) + "\n")
            self.written += len(text)
            text.clear()

    def _ops(self, spool):
        """The ops in their hoisted order."""
        anchor, key, n = self.anchor.tolist(), self.key.tolist(), self.n
        make = tuple.__new__                     # an Op of its fields, as Op(*fields) makes it
        j, line = 0, -1
        while j < len(anchor) and anchor[j] == line:
            yield _forget(key[j], n)
            j += 1
        while True:
            try:
                piece = pickle.load(spool)
            except EOFError:
                return
            for fields in piece:
                line += 1
                yield make(Op, fields)
                while j < len(anchor) and anchor[j] == line:
                    yield _forget(key[j], n)
                    j += 1


def _forget(key: int, n: int) -> Op:
    return Op("forget", key - n, (), "backward") if key >= n else Op("forget", key, (), "forward")


@contextlib.contextmanager
def _cycles_paused():
    """Python's cycle collector off for the stage (on again after it, if it was on). Why: the
    stage makes and drops a few tuples per op (~5·10^6 ops at 10^6 activations), none of them
    in a cycle, and each 700 allocations started a collection; those of the oldest generation
    walk every object the driver holds (the graph, the DP's tables): ~1/4 of the stage's CPU
    at 10^5 (bench/NOTES_scale.md). Reference counting frees everything here as before."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
