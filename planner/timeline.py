"""A schedule's buffer timeline: every buffer a run creates, its size and its lifetime.

Every value or gradient instance a run of a schedule (``planner.schedule.Schedule``, reference
format) creates becomes a buffer with a size and a half-open lifetime ``[start, end)`` in schedule
steps: allocated at the step that first writes it (lazy allocation), a forward compute of an
already computed function makes a new instance of its output (the schedule's recomputations),
and with ``recycle=True`` a buffer is freed right after its last read, even when the schedule
forgets it later (parameter and input gradients, the step's results, are kept); with
``recycle=False`` exactly at the schedule's ``forget`` lines (the planner's accounting,
:mod:`planner.simulate` in reference mode, byte for byte).

It is a visitor of the schedule walk (:class:`planner.walk.ScheduleWalker`, as the simulator
is): the walk derives each op's buffer events and checks them; the timeline records them as
the compiled step list (:class:`Step`) that the whole-step prediction and the executors walk
(:class:`planner.walk.Walker`).

Why it lives in the planner: it is what both sides read. The whole-step prediction
(:mod:`planner.whole_step`) prices a plan's step from it while planning; the executor
(:mod:`planner.execute.executor`) runs it. The planner proper never imports the executor.

>>> from planner.schedule import Schedule
>>> from planner import synth
>>> g = synth.build(layers=1, heads=1)
>>> from planner.fixed_schedules import plain_schedule
>>> tl = timeline(g, plain_schedule(g))
>>> tl.num_buffers > 0 and tl.live_peak() > 0
True
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hgraph.common.errors import HGraphError
from planner import arena as arena_mod
from planner.schedule import Op
from planner.walk import ScheduleWalker

__all__ = ["Step", "Timeline", "timeline"]

@dataclasses.dataclass
class Step:
    """One schedule op as buffer events (a step of :class:`planner.walk.Walker`'s list)."""

    op: Op
    reads: list            # buffer ids read (values and gradients)
    grad_in: int | None    # gradient buffer read by a backward block; None: the loss's ones
    writes: list           # (output position j or -1 for a forward output, buffer id, accumulate)
    frees_before: list     # buffers replaced by a recomputation, freed before the step runs
    frees_after: list      # buffers freed after the step (forgets, recycling)
    allocs: list = dataclasses.field(default_factory=list)    # buffers the step writes first


@dataclasses.dataclass
class Timeline:
    steps: list
    var: np.ndarray        # int64 [B]: the var of each buffer
    grad: np.ndarray       # bool [B]: True for a gradient buffer
    nbytes: np.ndarray     # int64 [B]
    start: np.ndarray      # int64 [B]: step that allocates it
    end: np.ndarray        # int64 [B]: first step at which it is no longer held
    recycle: bool

    @property
    def num_buffers(self) -> int:
        return int(self.var.size)

    def live_peak(self) -> int:
        return arena_mod.lower_bound(self.nbytes, self.start, self.end)

    def live_curve(self) -> np.ndarray:
        """Bytes held during each schedule step (int64 [steps]), for memory-timeline plots."""
        delta = np.zeros(len(self.steps) + 1, dtype=np.int64)
        np.add.at(delta, self.start, self.nbytes)
        np.add.at(delta, self.end, -self.nbytes)
        return np.cumsum(delta)[:-1]

    def arena(self, alignment: int = 64) -> arena_mod.ArenaPlan:
        return arena_mod.plan(self.nbytes, self.start, self.end, alignment=alignment)


def timeline(g, schedule, recycle: bool = True) -> Timeline:
    """The buffers a run of ``schedule`` on ``g`` creates, and when each is allocated and freed."""
    if getattr(schedule, "impossible", False):
        raise HGraphError("the schedule is IMPOSSIBLE: nothing to execute")
    ops = schedule.ops if hasattr(schedule, "ops") else list(schedule)
    return _Builder(g, ops, recycle).walk(ops)


class _Builder(ScheduleWalker):
    """The timeline as a visitor of the schedule walk (:mod:`planner.walk`): each buffer's
    allocation and free step, each op's :class:`Step`; a problem the walk finds raises (a run
    cannot go on)."""

    def __init__(self, g, ops, recycle: bool):
        super().__init__(g)
        self.ops, self.recycle = ops, recycle
        self.steps, self.start, self.end, self.last = [], [], [], []
        self.freed = []                  # buffers the op being walked frees

    def bad(self, s: int, msg: str) -> None:
        raise HGraphError(f"schedule op {s + 1} ({self.ops[s].line()}): {msg}"
                          if 0 <= s < len(self.ops) else f"schedule: {msg}")

    def alloc(self, b) -> None:
        self.start.append(self.s)
        self.end.append(len(self.ops))
        self.last.append(self.s)

    def free(self, b) -> None:
        self.end[b] = self.s
        self.freed.append(b)

    def visit(self, s: int, op) -> None:
        if op.kind == "forget":
            self.steps.append(Step(op, [], None, [], [], self.freed))
        else:
            self.steps.append(Step(op, self.reads, self.grad_in, self.writes, self.freed, [],
                                   [b for _, b, acc in self.writes if not acc]))
            for b in self.reads:
                self.last[b] = s
        self.freed = []

    def finish(self, n: int) -> Timeline:
        var = np.array(self.buf_var, np.int64)
        grad, nbytes = np.array(self.buf_grad, bool), self.g.var_bytes[var].astype(np.int64)
        start, end = np.array(self.start, np.int64), np.array(self.end, np.int64)
        if self.recycle:
            _recycle(self.steps, var, grad, end, np.array(self.last, np.int64),
                     self.g.is_activation, n)
        return Timeline(self.steps, var, grad, nbytes, start, end, self.recycle)


def _recycle(steps, var, grad, end, last, is_act, n: int) -> None:
    """Free every buffer right after its last read (``end`` and the steps' frees, in place),
    but parameters' and inputs' gradients: the step's results."""
    result = grad & ~is_act[var] if var.size else np.zeros(0, bool)
    early = ~result & (last + 1 < end)
    for b in np.flatnonzero(early).tolist():
        old_end = int(end[b])
        if old_end < n and b in steps[old_end].frees_after:
            steps[old_end].frees_after.remove(b)
        elif old_end < n and b in steps[old_end].frees_before:
            steps[old_end].frees_before.remove(b)
        end[b] = last[b] + 1
        steps[last[b]].frees_after.append(b)
