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
3. the pieces go to a spool file (their ops as columns: :func:`planner.schedule.columns_text`);
   one pass then reads them back in order, puts each set-aside forget after its anchor line
   (the anchor's latest forget first, as the whole hoisting does; ``np.insert`` per piece),
   writes the piece's text to the schedule's file and feeds the same ops to the replay (the
   one schedule walk, :class:`planner.walk.ScheduleWalker`), whose peak is over the whole.

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
from itertools import chain

import numpy as np

from planner import simulate
from planner.emit import emit_pieces, hoist_piece
from planner.schedule import (FORGET_BACKWARD, FORGET_FORWARD, ScheduleFile, columns_ops,
                              columns_text)

__all__ = ["SLICE_NODES", "applies", "slices", "emit_and_replay"]

#: Activations a slice holds at most (unless one block is larger): a piece's ops and tables
#: are ~2-3 KB an activation while it is made, so ~16k activations are ~40 MB.
SLICE_NODES = 1 << 14


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
    """Hoist each piece of ops (:func:`planner.emit.hoist_piece`) into ``spool`` (its
    columns, pickled): ``(moved, ops)``, the set-aside forgets as two arrays (anchor line,
    key) sorted as they go back (by anchor; an anchor's latest forget first), and the ops
    in all."""
    last_touch = np.full(2 * g.num_vars, -1, np.int64)
    parts, pos0, line0 = [], 0, 0
    for ops in pieces:
        kept, (anchor, pos, key) = hoist_piece(g, ops, last_touch, line0)
        pickle.dump(kept, spool, protocol=pickle.HIGHEST_PROTOCOL)
        parts.append((anchor, pos + pos0, key))
        pos0 += len(ops)
        line0 += kept[0].size
    empty = np.zeros(0, np.int64)
    anchor, pos, key = (np.concatenate(c) for c in zip(*parts)) if parts else (empty,) * 3
    order = np.lexsort((-pos, anchor))
    return (anchor[order], key[order]), pos0


class _Merged:
    """The hoisted schedule, read back once: the spooled pieces' ops with the set-aside
    forgets after their anchors (those with none at the front), each piece's text written
    to ``path`` as it passes. A sized iterable, so that the replay walks it as a list (its
    curve is sized by ``len``); its ops are :class:`Op` made in C from each piece's columns
    (:func:`planner.schedule.columns_ops`), the walk's only Python per op."""

    def __init__(self, g, spool_path, moved, total: int, path):
        self.n, self.spool_path, self.path, self.total = g.num_vars, spool_path, path, total
        self.anchor, self.key = moved
        self.written = 0

    def __len__(self) -> int:
        return self.total

    def __iter__(self):
        return chain.from_iterable(self._pieces())

    def _pieces(self):
        """Each piece's ops, after its text is written."""
        with open(self.spool_path, "rb") as spool, open(self.path, "w", encoding="utf-8") as out:
            for cols in self._columns(spool):
                out.write(columns_text(*cols))
                self.written += cols[0].size
                yield columns_ops(*cols)

    def _columns(self, spool):
        """Each spooled piece's columns with the set-aside forgets anchored in it (or at the
        front) put after their lines."""
        anchor, key, n = self.anchor, self.key, self.n
        code = np.where(key >= n, FORGET_BACKWARD, FORGET_FORWARD).astype(np.int8)
        index = np.where(key >= n, key - n, key)
        j, line0 = 0, 0
        while True:
            try:
                cols = pickle.load(spool)
            except EOFError:
                return
            size = cols[0].size
            hi = int(np.searchsorted(anchor, line0 + size, "left"))
            at = anchor[j:hi] - line0 + 1                      # the piece's lines before each
            yield (np.insert(cols[0], at, code[j:hi]), np.insert(cols[1], at, index[j:hi]),
                   np.insert(cols[2], at, 0), cols[3])
            j, line0 = hi, line0 + size


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
