"""The one walk over a step list; the simulator, the timeline, the whole-step predictors and the
executors are its visitors.

Why one: a training step under a plan is a list of steps, each of which frees buffers, allocates
buffers and runs a kernel (or pretends to). Four loops used to walk such lists, each with its own
order of those events and its own liveness bookkeeping, and they had to agree byte for byte (the
prediction is checked against the run). Here the order is written once, as torch.fx's
``Interpreter`` is for an fx graph: a visitor overrides what an event means to it and never
iterates itself (``tests/test_walk.py`` holds that).

* :class:`Walker` walks a *compiled* step list -- a schedule's buffer timeline
  (:class:`planner.timeline.Step`), a row plan's walk (:class:`planner.rows.walk.Step`), the row
  executor's compiled program -- whose steps name their events: ``frees_before`` (a buffer a
  recomputation replaces), ``allocs``, the step itself, ``frees_after``. Its visitors: the
  whole-step predictors (:class:`PoolWalker`: the buffers through the pool's free list), the
  executor, the stand-in executor and the row executor (in :mod:`planner.execute`, which imports
  this module downward).
* :class:`ScheduleWalker` walks a schedule's raw ops (:class:`planner.schedule.Op`), whose events
  it derives from the liveness it keeps (which buffer holds each var's value and gradient, how
  often each function ran, which gradient parts are in) and whose validity it checks: the same
  events, through the same hooks. Its visitors: the simulator (:func:`planner.simulate.replay`:
  bytes, peak, violations) and the timeline (:func:`planner.timeline.timeline`: every buffer's
  lifetime, the compiled step list the :class:`Walker`'s visitors walk).

>>> from planner import synth
>>> from planner.fixed_schedules import plain_schedule
>>> g = synth.build(layers=1, heads=1)
>>> class Count(ScheduleWalker):
...     def __init__(self, g):
...         super().__init__(g)
...         self.allocated = 0
...     def alloc(self, b):
...         self.allocated += 1
...     def finish(self, n):
...         return self.allocated == self.num_buffers and not self.problems
>>> Count(g).walk(plain_schedule(g).ops)
True
"""

from __future__ import annotations

from array import array

import numpy as np

from planner.arrays import byte_array, int_array
from planner.backend_costs import BackendCosts
from planner.cg import GRADIENT
from planner.pool import BestFit

__all__ = ["PoolWalker", "ScheduleWalker", "Walker"]

#: The most violations a walk records (the simulator reports them; the rest are counted out).
MAX_PROBLEMS = 100


class Walker:
    """A walk over a compiled step list: for each step, its ``frees_before``, its ``allocs``, the
    step (:meth:`visit`), its ``frees_after``; then :meth:`finish`, whose value :meth:`walk`
    returns. The hooks do nothing here; a visitor overrides those it needs."""

    def walk(self, steps):
        free, alloc, visit = self.free, self.alloc, self.visit
        for s, step in enumerate(steps):
            for b in step.frees_before:
                free(b)
            for b in step.allocs:
                alloc(b)
            visit(s, step)
            for b in step.frees_after:
                free(b)
        return self.finish(len(steps))

    def alloc(self, b) -> None:
        """Buffer ``b`` is allocated (its first write is the step about to run)."""

    def free(self, b) -> None:
        """Buffer ``b`` is freed."""

    def visit(self, s: int, step) -> None:
        """Step ``s`` runs (after its allocations, before its frees after)."""

    def finish(self, n: int):
        """The walk's result, after its ``n`` steps."""
        return None


class ScheduleWalker(Walker):
    """A walk over a schedule's ops (``compute f``, ``compute f j...``, ``forget v
    forward|backward``), turned into buffer events as it goes: every value or gradient instance
    the schedule creates is a buffer (ids from 0 in creation order; :attr:`buf_var`,
    :attr:`buf_grad`); a forward compute frees the instance it replaces (a recomputation) and
    allocates its output's, a backward compute allocates each gradient not live yet (a live one
    accumulates), a forget frees. :meth:`visit` sees each op after its events, with the current
    compute's :attr:`reads` (buffers), :attr:`grad_in` (the gradient buffer a backward block
    reads; None: the loss's ones) and :attr:`writes` (``(j, buffer, accumulate)``, ``j = -1`` a
    forward output). A problem is :meth:`bad` (recorded in :attr:`problems` here; the timeline
    raises). ``check``: also check that every read is live and every gradient complete (the
    simulator's ``check=False`` skips it for speed)."""

    def __init__(self, g, check: bool = True):
        self.g, self.check = g, check
        self.nf, self.n = g.num_forward, g.num_vars
        cols = g.columns
        # the graph's columns as compact arrays (8 bytes an entry, 1 for flags: a list of
        # ints was ~40, ~0.7 KB an activation at 10^5; bench/NOTES_scale.md), read like lists
        self._in_var, self._in_tag = int_array(cols.in_var), byte_array(cols.in_tag)
        self._ip, self._op = int_array(cols.in_ptr), int_array(cols.out_ptr)
        self._out_var = int_array(cols.out_var)
        self._fwd_out = int_array(g.forward_output)
        self._is_act = byte_array(g.is_activation)
        # each forward function's activation inputs (what a forward compute reads), gathered
        # once: the walk's check reads them without testing every input per compute
        fin = cols.in_var[:cols.in_ptr[self.nf]]
        act = g.is_activation[fin]
        blk = np.repeat(np.arange(self.nf), np.diff(cols.in_ptr[:self.nf + 1]))[act]
        self._fwd_act = int_array(fin[act])
        self._fa_ptr = int_array(np.r_[0, np.cumsum(np.bincount(blk, minlength=self.nf))])
        self._bw_out = cols.out_var[cols.out_ptr[self.nf]:]
        self._parts = int_array(np.bincount(self._bw_out, minlength=self.n))
        self._done_parts = array("q", bytes(8 * self.n))
        self.sinks = set(np.flatnonzero(g.loss_mask).tolist())
        self.value_of, self.grad_of = {}, {}          # var -> buffer of its live value / gradient
        self.buf_var, self.buf_grad = array("q"), bytearray()
        self._vbytes = int_array(g.var_bytes)
        #: bytes of the live buffers, and the same without parameters' and inputs' gradients;
        #: their peaks after a compute (the first op at the peak), the live bytes after each op
        self.live = self.live_act = 0
        self.peak = self.peak_act = 0
        self.peak_step = -1
        self.curve = array("q")
        self.produced = bytearray(len(self._out_var))
        self.computes = array("q", bytes(8 * self.nf))
        self.problems = []
        self.s = -1
        self.reads, self.grad_in, self.writes = [], None, []

    @property
    def num_buffers(self) -> int:
        return len(self.buf_var)

    def bad(self, s: int, msg: str) -> None:
        """A problem at op ``s`` (0-based)."""
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(f"op {s + 1}: {msg}")

    def _free(self, b: int) -> None:
        v = self.buf_var[b]
        nbytes = self._vbytes[v]
        self.live -= nbytes
        if self._is_act[v]:
            self.live_act -= nbytes
        if self._free_hook is not None:
            self._free_hook(b)

    def walk(self, ops):
        nf, n = self.nf, self.n
        # a hook a visitor does not override is not called (the simulator's walk is hot)
        mine = type(self)
        self._alloc = self.alloc if mine.alloc is not Walker.alloc else None
        self._free_hook = self.free if mine.free is not Walker.free else None
        visit = self.visit if mine.visit is not Walker.visit else None
        curve = self.curve = array("q", bytes(8 * len(ops)))    # 8 bytes an op
        value_of, grad_of, forward, backward = \
            self.value_of, self.grad_of, self._forward, self._backward
        vbytes, is_act, free_hook = self._vbytes, self._is_act, self._free_hook
        # an op is unpacked once (any 4-tuple of its fields: an Op or the sliced stream's
        # rows) and its fields handed on: attribute reads per op were a share of the walk
        for s, op in enumerate(ops):
            self.s = s
            kind, index, grads, which = op
            if kind == "compute":
                if 0 <= index < nf:
                    forward(s, index, grads)
                elif nf <= index < 2 * nf:
                    backward(s, index, grads)
                else:
                    self.bad(s, f"compute {index}: no such function (M={2 * nf})")
                    self.reads, self.grad_in, self.writes = [], None, []
                if visit is not None:
                    visit(s, op)
                # the peak after a compute, as the reference's
                if self.live > self.peak or self.peak_step < 0:
                    self.peak, self.peak_step = self.live, s
                if self.live_act > self.peak_act:
                    self.peak_act = self.live_act
            else:
                if not 0 <= index < n:
                    self.bad(s, f"forget {index}: no such variable (N={n})")
                else:
                    b = (value_of if which == "forward" else grad_of).pop(index, None)
                    if b is not None:            # _free, inlined (a forget is a third of ops)
                        nbytes = vbytes[index]
                        self.live -= nbytes
                        if is_act[index]:
                            self.live_act -= nbytes
                        if free_hook is not None:
                            free_hook(b)
                if visit is not None:
                    visit(s, op)
            curve[s] = self.live
        self._complete(len(ops))
        return self.finish(len(ops))

    def _forward(self, s, f, grads) -> None:
        if grads:
            self.bad(s, f"forward compute {f} lists gradient indices")
        value_of = self.value_of
        self.reads = reads = []
        if self.check:                   # the activation inputs' values are live
            for a in self._fwd_act[self._fa_ptr[f]:self._fa_ptr[f + 1]]:
                b = value_of.get(a)
                if b is None:
                    self.bad(s, f"compute {f} reads var {a} (forward), which is not live")
                else:
                    reads.append(b)
        self.computes[f] += 1
        y = self._fwd_out[f]
        old = value_of.pop(y, None)
        if old is not None:
            self._free(old)
        b = value_of[y] = len(self.buf_var)          # a new buffer (_new, inlined: hot)
        self.buf_var.append(y)
        self.buf_grad.append(False)
        nbytes = self._vbytes[y]
        self.live += nbytes
        self.live_act += nbytes                      # a forward output is an activation
        if self._alloc is not None:
            self._alloc(b)
        self.grad_in, self.writes = None, [(-1, b, False)]

    def _backward(self, s, f, grads) -> None:
        self.reads, self.grad_in = reads, _ = [], None
        if self.check:
            self._backward_reads(s, f)
        if not grads:
            self.bad(s, f"backward compute {f} lists no gradient indices")
        base, count = self._op[f], self._op[f + 1] - self._op[f]
        grad_of, produced, out_var = self.grad_of, self.produced, self._out_var
        self.writes = writes = []
        for j in grads:
            if j >= count:
                self.bad(s, f"compute {f}: gradient index {j} out of range ({count} outputs)")
                continue
            v = out_var[base + j]
            if produced[base + j]:
                self.bad(s, f"compute {f}: gradient index {j} produced twice")
            else:
                produced[base + j] = 1
                self._done_parts[v] += 1
            b = grad_of.get(v)
            if b is not None:
                writes.append((j, b, True))
                reads.append(b)
            else:
                b = grad_of[v] = len(self.buf_var)      # a new buffer (_new, inlined: hot)
                self.buf_var.append(v)
                self.buf_grad.append(True)
                nbytes = self._vbytes[v]
                self.live += nbytes
                if self._is_act[v]:
                    self.live_act += nbytes
                if self._alloc is not None:
                    self._alloc(b)
                writes.append((j, b, False))

    def _backward_reads(self, s, f) -> None:
        """The buffers backward block ``f`` reads, each checked live (and a gradient complete)."""
        ip, value_of, grad_of, is_act = self._ip, self.value_of, self.grad_of, self._is_act
        reads, lo, hi = self.reads, ip[f], ip[f + 1]
        for a, tag in zip(self._in_var[lo:hi], self._in_tag[lo:hi]):
            if tag == GRADIENT:
                if a in self.sinks:
                    if a not in value_of and self.computes[f - self.nf] == 0 and \
                            not self.loss_available(a):
                        self.bad(s, f"compute {f} reads the loss gradient of var {a} "
                                    f"before the loss is computed")
                    continue
                b = grad_of.get(a)
                if b is None:
                    self.bad(s, f"compute {f} reads var {a} (gradient), which is not live")
                    continue
                if self._done_parts[a] < self._parts[a]:
                    blk, j = self._first_missing(a)
                    self.bad(s, f"compute {f} reads the gradient of var {a} before "
                                f"block {blk} added its part")
                self.grad_in = b
                reads.append(b)
            elif is_act[a]:
                b = value_of.get(a)
                if b is None:
                    self.bad(s, f"compute {f} reads var {a} (forward), which is not live")
                else:
                    reads.append(b)

    def loss_available(self, a: int) -> bool:
        """Whether the loss gradient of sink ``a`` is held though its value is not (the
        simulator's exact mode keeps it until ``forget a backward``)."""
        return False

    def _first_missing(self, a: int):
        """(block, index) of the first backward output of var ``a`` not produced yet."""
        nf, cols = self.nf, self.g.columns
        for k in np.flatnonzero(self._bw_out == a).tolist():
            k += self._op[nf]
            if not self.produced[k]:
                blk = int(np.searchsorted(cols.out_ptr, k, side="right")) - 1
                return blk, k - self._op[blk]
        return None

    def _complete(self, n_ops: int) -> None:
        """Every forward function ran and every backward output was produced."""
        comp = np.asarray(self.computes, dtype=np.int64)
        never = np.flatnonzero(comp == 0)
        if never.size:
            self.bad(n_ops - 1, f"{never.size} forward function(s) never run, first "
                                f"{int(never[0])}")
        op_, nf = self._op, self.nf
        missing = np.flatnonzero(np.frombuffer(bytes(self.produced), np.uint8)[op_[nf]:] == 0) \
            + op_[nf]
        if missing.size:
            blk = int(np.searchsorted(self.g.columns.out_ptr, missing[0], side="right")) - 1
            self.bad(n_ops - 1, f"{missing.size} backward output(s) never produced, first block "
                                f"{blk} index {int(missing[0]) - op_[blk]}")


class PoolWalker(Walker):
    """The whole-step predictors' common walk: a step list's buffers through the pool's free
    list (:class:`planner.pool.BestFit`, request for request as the executors' ``pool``
    allocator), the bytes live per part and what the interpreter holds beside them.

    ``nbytes(b)`` and ``part(b)`` (0 activation values, 1 their gradients, 2 parameters' and
    inputs' gradients) name a buffer's size and part; a subclass's :meth:`visit` reads
    :attr:`reserved`, :attr:`live_by`, :meth:`objects` and counts :attr:`computes`.
    ``costs``: the backend's overheads (:class:`planner.backend_costs.BackendCosts`: the
    pool's alignment, the interpreter's objects)."""

    def __init__(self, nbytes, part, costs: BackendCosts):
        self.pool, self.nbytes, self.part, self.costs = BestFit(costs.alignment), nbytes, part, costs
        self.blocks, self.part_of = {}, {}
        self.reserved = self.nblocks = self.computes = 0
        self.live_by = [0, 0, 0]

    def alloc(self, b) -> None:
        nbytes = self.nbytes(b)
        size = self.pool.take(nbytes)
        if size is None:
            size = self.pool.block_size(nbytes)
            self.reserved += size
            self.nblocks += 1
        self.blocks[b] = size
        part = self.part_of[b] = self.part(b)
        self.live_by[part] += nbytes

    def free(self, b) -> None:
        self.pool.give(self.blocks.pop(b))
        self.live_by[self.part_of.pop(b)] -= self.nbytes(b)

    def objects(self) -> int:
        """Bytes of Python objects now: per kernel call, per block and buffer, per step run."""
        return self.costs.interpreter_bytes(self.nblocks, len(self.blocks), self.computes)
