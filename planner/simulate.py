"""Replay a schedule with the reference's accounting (FORMAT.md §3) and check that it is valid.

The replay is independent of how the schedule was made: it only needs the graph and the ops.

Accounting (``mode="reference"``, a 64-bit copy of DP.cpp ``eval()``):

* the state is two sets, F (live forward values) and G (live gradients);
* ``compute f`` (forward) adds f's output to F; ``compute f j...`` (backward) adds output ``j`` of
  block f to G for each j -- gradients of parameters and model inputs included, which are never
  forgotten and accumulate;
* ``forget`` removes the var from the matching set;
* after every compute, ``peak = max(peak, bytes(F) + bytes(G))``; parameters and inputs are never
  in F (free); the loss gradient (ones) is not counted.

``mode="exact"`` applies the same rules and additionally counts the loss gradient (the ``ones``
tensor created with the loss, freed by ``forget loss backward``), which the reference leaves out.
Parameters, model inputs and workspace are still not counted (they do not depend on the schedule;
``param_bytes`` reports the first two).

Recomputation cost: ``sum_f t(f) * (#compute lines of forward f - 1)`` with the reference's cost
model (Conv = 10, else 1).

Validity (each problem is one line in ``violations``):

* a compute reads only live values: activation inputs of a forward function in F; a backward
  block's ``input``/``output`` activations in F and its ``gradient`` var in G (the loss's gradient
  is available once the loss has been computed);
* the gradient it reads is complete: every consumer's backward block has already produced it;
* no gradient (block, index) is produced twice (it would be accumulated twice);
* every forward function runs; every backward output is produced; indices are in range.

Example::

    >>> import planner
    >>> from planner import simulate, synth
    >>> g = synth.build(layers=2, heads=2)
    >>> p = planner.plan(g, budget="60%")
    >>> r = simulate.replay(g, p.schedule)           # e.g. of Schedule.read("s.txt")
    >>> r.peak_bytes == p.peak_bytes, r.recompute_cost, r.violations
    (True, 25, [])
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.walk import ScheduleWalker

__all__ = ["SimResult", "replay"]


@dataclass
class SimResult:
    """What a replay measured.

    ``peak_bytes`` (max live bytes after a compute), ``peak_step`` (op index of the first peak),
    ``peak_act_only_bytes`` (same without parameter/input gradients), ``recompute_cost``,
    ``forward_cost`` (T(V)), ``computes`` (int64 [M/2]: compute lines per forward function),
    ``timeline`` (int64 [len(ops)]: live bytes after each op), ``violations`` (list of strings,
    empty for a valid schedule), ``param_bytes`` (bytes of parameters and inputs, not counted).
    """

    peak_bytes: int = 0
    peak_step: int = -1
    peak_act_only_bytes: int = 0
    recompute_cost: int = 0
    forward_cost: int = 0
    computes: np.ndarray = None
    timeline: np.ndarray = None
    violations: list = field(default_factory=list)
    param_bytes: int = 0
    impossible: bool = False

    @property
    def ok(self) -> bool:
        return not self.violations and not self.impossible

    @property
    def recomputed(self) -> int:
        """Number of forward functions computed more than once."""
        return int(np.count_nonzero(self.computes > 1)) if self.computes is not None else 0


def replay(g, schedule, mode: str = "reference", check: bool = True) -> SimResult:
    """Replay ``schedule`` (a :class:`planner.schedule.Schedule` or list of ops) on graph ``g``."""
    if mode not in ("reference", "exact"):
        raise ValueError(f"mode must be 'reference' or 'exact', got {mode!r}")
    # a sized iterable (the sliced emission's stream) is walked as it comes, never listed
    ops = schedule.ops if hasattr(schedule, "ops") else \
        schedule if hasattr(schedule, "__len__") else list(schedule)
    res = SimResult(forward_cost=int(g.forward_costs.sum()),
                    param_bytes=int(g.var_bytes[~g.is_activation].sum()))
    if getattr(schedule, "impossible", False):
        res.impossible = True
        res.computes = np.zeros(g.num_forward, dtype=np.int64)
        res.timeline = np.zeros(0, dtype=np.int64)
        return res
    return (_ExactReplay if mode == "exact" else _Replay)(g, res, check).walk(ops)


class _Replay(ScheduleWalker):
    """The reference's accounting as a visitor of the schedule walk (:mod:`planner.walk`): the
    walk's live bytes (F and G) and their peak after every compute, its curve; the walk's
    problems are the violations."""

    def __init__(self, g, res: SimResult, check: bool):
        super().__init__(g, check)
        self.res = res
        self.problems = res.violations
        self.loss_grad = bytearray(self.n)   # exact mode: the ones tensor of each computed sink

    def loss_available(self, a: int) -> bool:
        return bool(self.loss_grad[a])

    def finish(self, n: int) -> SimResult:
        res = self.res
        comp = np.asarray(self.computes, dtype=np.int64)
        res.peak_bytes, res.peak_step = int(self.peak), int(self.peak_step)
        res.peak_act_only_bytes = int(self.peak_act)
        res.computes = comp
        res.recompute_cost = int((self.g.forward_costs * np.maximum(comp - 1, 0)).sum())
        res.timeline = np.frombuffer(self.curve, dtype=np.int64)
        return res


class _ExactReplay(_Replay):
    """``mode="exact"``: the loss's ones too, made with the loss (counted in the peak after
    that compute), freed by its ``forget backward``."""

    def visit(self, s: int, op) -> None:
        vbytes = self._vbytes
        if op.kind == "compute":
            if op.index < self.nf:
                y = self._fwd_out[op.index]
                if y in self.sinks and not self.loss_grad[y]:
                    self.loss_grad[y] = 1
                    self.live += vbytes[y]
                    self.live_act += vbytes[y]
        elif op.which == "backward" and 0 <= op.index < self.n and self.loss_grad[op.index]:
            self.loss_grad[op.index] = 0
            self.live -= vbytes[op.index]
            self.live_act -= vbytes[op.index]
