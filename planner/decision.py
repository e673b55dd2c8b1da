"""One decision: what a recomputation solver decides, as one small frozen value.

Why: the decision of what to keep and what to recompute travelled as a block index array
(``groups``) beside a dict of the MILP's keep / recompute / retain keywords, and as lower-set
masks (Chen's ``chain``); each consumer took its own pair. As in JAX's ``remat`` (the policy is
a value, the mechanism elsewhere), a solver now returns a :class:`Decision` and knows nothing
of schedules; the emitter (:func:`planner.emit.emit_decision`) turns one into the reference
schedule, and the backends (executors, row executor, torch partitioner) run that schedule.

A decision is a chain of stages over the activation graph's nodes: ``stage[v] = i`` puts node
``v`` in block ``i`` (the lower sets ``L_i = {stage <= i}``). By default each block's
checkpoints are kept through the forward and its interior recomputed before its backward;
the MILP decides those itself, per stage (``keep``: nodes kept from the forward;
``recompute[i]``: nodes recomputed before block ``i``'s backward; ``retain[i]``: nodes of
``L_{i-1}`` kept live into block ``i - 1``'s backward).

>>> d = Decision(np.array([0, 0, 1, 2]))
>>> d.stages, d.staged, d.choices()
(3, False, {})
>>> d.stage[0] = 1
Traceback (most recent call last):
ValueError: assignment destination is read-only
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["Decision"]


@dataclasses.dataclass(frozen=True, eq=False)
class Decision:
    """The stage of every activation node (int64 [n], read-only), and the MILP's own per-stage
    keep / recompute / retain (all three or none: None, the canonical schedule)."""

    stage: np.ndarray
    keep: object = None
    recompute: object = None
    retain: object = None

    def __post_init__(self):
        stage = np.array(self.stage, dtype=np.int64)
        stage.setflags(write=False)
        object.__setattr__(self, "stage", stage)
        if len({self.keep is None, self.recompute is None, self.retain is None}) != 1:
            raise ValueError("a decision's keep, recompute and retain: all three or none")

    @property
    def stages(self) -> int:
        return int(self.stage.max(initial=-1)) + 1

    @property
    def staged(self) -> bool:
        """Whether the decision says per stage what is kept and recomputed (the MILP's)."""
        return self.keep is not None

    def choices(self) -> dict:
        """The per-stage choices as :func:`planner.emit.emit_groups` takes them ({}: none)."""
        return dict(keep=self.keep, recompute=self.recompute, retain=self.retain) \
            if self.staged else {}
