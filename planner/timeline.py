"""A schedule's buffer timeline: every buffer a run creates, its size and its lifetime.

Every value or gradient instance a run of a schedule (``planner.schedule.Schedule``, reference
format) creates becomes a buffer with a size and a half-open lifetime ``[start, end)`` in schedule
steps: allocated at the step that first writes it (lazy allocation), a forward compute of an
already computed function makes a new instance of its output (the schedule's recomputations),
and with ``recycle=True`` a buffer is freed right after its last read, even when the schedule
forgets it later (parameter and input gradients, the step's results, are kept); with
``recycle=False`` exactly at the schedule's ``forget`` lines (the planner's accounting,
:mod:`planner.simulate` in reference mode, byte for byte).

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
from planner.fixed_schedules import loss_outputs
from planner.schedule import Op

__all__ = ["Step", "Timeline", "timeline"]

@dataclasses.dataclass
class Step:
    op: Op
    reads: list            # buffer ids read (values and gradients)
    grad_in: int | None    # gradient buffer read by a backward block; None: the loss's ones
    writes: list           # (output position j or -1 for a forward output, buffer id, accumulate)
    frees_before: list     # buffers replaced by a recomputation, freed before the step runs
    frees_after: list      # buffers freed after the step (forgets, recycling)


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
    nf = len(g.forward)
    is_act = g.is_activation
    sinks = loss_outputs(g)
    var, grad, nbytes, start, end, last = [], [], [], [], [], []
    value_of, grad_of = {}, {}
    steps = []

    def new(v, is_grad, s):
        var.append(v)
        grad.append(is_grad)
        nbytes.append(int(g.var_bytes[v]))
        start.append(s)
        end.append(len(ops))
        last.append(s)
        return len(var) - 1

    def where(s):
        return f"schedule op {s + 1} ({ops[s].line()})"

    for s, op in enumerate(ops):
        step = Step(op, [], None, [], [], [])
        steps.append(step)
        if op.kind == "forget":
            table = value_of if op.which == "forward" else grad_of
            b = table.pop(op.index, None)
            if b is not None:
                end[b] = s
                step.frees_after.append(b)
            continue
        f = op.index
        if 0 <= f < nf:
            fn = g.forward[f]
            for a, _ in fn.inputs:
                if is_act[a]:
                    if a not in value_of:
                        raise HGraphError(f"{where(s)} reads var {a}, which is not live")
                    step.reads.append(value_of[a])
            y = fn.outputs[0]
            old = value_of.pop(y, None)
            if old is not None:
                end[old] = s
                step.frees_before.append(old)
            b = new(y, False, s)
            value_of[y] = b
            step.writes.append((-1, b, False))
        elif nf <= f < 2 * nf:
            bw = g.functions[f]
            for a, tag in bw.inputs:
                if tag == "gradient":
                    if a in sinks:
                        continue
                    if a not in grad_of:
                        raise HGraphError(f"{where(s)} reads the gradient of var {a}, which is not live")
                    step.grad_in = grad_of[a]
                    step.reads.append(grad_of[a])
                elif is_act[a]:
                    if a not in value_of:
                        raise HGraphError(f"{where(s)} reads var {a}, which is not live")
                    step.reads.append(value_of[a])
            for j in op.grads:
                if not 0 <= j < len(bw.outputs):
                    raise HGraphError(f"{where(s)}: gradient index {j} out of range")
                v = bw.outputs[j]
                if v in grad_of:
                    step.writes.append((j, grad_of[v], True))
                    step.reads.append(grad_of[v])
                else:
                    b = new(v, True, s)
                    grad_of[v] = b
                    step.writes.append((j, b, False))
        else:
            raise HGraphError(f"{where(s)}: no function {f} (M={2 * nf})")
        for b in step.reads:
            last[b] = s

    var, grad, nbytes = np.array(var, np.int64), np.array(grad, bool), np.array(nbytes, np.int64)
    start, end, last = np.array(start, np.int64), np.array(end, np.int64), np.array(last, np.int64)
    if recycle:
        result = grad & ~is_act[var] if var.size else np.zeros(0, bool)   # param / input gradients
        early = ~result & (last + 1 < end)
        for b in np.flatnonzero(early).tolist():
            old_end = int(end[b])
            if old_end < len(ops) and b in steps[old_end].frees_after:
                steps[old_end].frees_after.remove(b)
            elif old_end < len(ops) and b in steps[old_end].frees_before:
                steps[old_end].frees_before.remove(b)
            end[b] = last[b] + 1
            steps[last[b]].frees_after.append(b)
    return Timeline(steps, var, grad, nbytes, start, end, recycle)
