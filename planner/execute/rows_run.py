"""Running a row plan for real beside a plain step: :func:`execute_rows` -> :class:`RowsExecution`
(``hgraph submit execute --rows R``).

The plan is :func:`planner.rows_api.plan_rows`'s (:class:`planner.rows_api.RowsPlan`); running it
is the executor's (:mod:`planner.execute.rows_exec` for the row step,
:mod:`planner.execute.executor` for the plain one), above the planner, which never imports
this package.

>>> from planner.execute import export, zoo
>>> from planner.rows_api import plan_rows
>>> g = export.to_cg(zoo.build("vgg16", width=4, depth=1, image=32))
>>> run = execute_rows(plan_rows(g, rows=4, policy="share"), backend="numpy")
>>> run.ok, run.gradients_match
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from hgraph.common.progress import current as current_progress
from planner.execute import backend as backend_mod
from planner.execute import executor, rows_exec
from planner.fixed_schedules import plain_schedule
from planner.rows.plan import RowPlan
from planner.rows.step import predict_rows
from planner.whole_step import WHOLE_STEP, predict

__all__ = ["RowsExecution", "execute_rows", "TOLERANCE"]

#: Largest relative gradient error of a row step against a plain step that still counts as equal.
TOLERANCE = {"float64": 1e-10, "float32": 1e-4}


@dataclass
class RowsExecution:
    """A row plan run for real (:mod:`planner.execute.rows_exec`) beside a plain step.

    ``rows``: what the row step measured (peak, activations, loss, parameter gradients);
    ``plain``: the plain step (no rows, no recomputation, buffers freed after last use);
    ``max_relative_error``: the largest relative gradient error of the row step against it;
    ``gradients_match``: within :data:`TOLERANCE` for the gradients' precision.
    """

    plan: RowPlan
    rows: object
    plain: object
    max_relative_error: float
    gradients_match: bool
    step: object = None          # planner.whole_step.StepPeak of the row step (NumPy, pool)
    plain_step: object = None    # ... of the plain step

    @property
    def peak_within_prediction(self) -> bool:
        """The row step's *measured* peak (tracemalloc / the CuPy pool) at most the prediction."""
        return self.rows.measured_peak_bytes <= self.rows.predicted_peak_bytes

    @property
    def tracked_within_prediction(self) -> bool:
        """The plan's own count of its buffers at most the prediction (its accounting held)."""
        return self.rows.tracked_peak_bytes <= self.rows.predicted_peak_bytes

    @property
    def ok(self) -> bool:
        """What the execute job's exit status says: the plan's accounting held (tracked within
        the prediction) and the gradients are equal. The measured peak is reported beside it
        (``peak_within_prediction``, ``measured_over_predicted``); the prediction does not yet
        count kernel temporaries, so it is no exit condition (issue 23)."""
        return self.tracked_within_prediction and self.gradients_match

    def report(self, graph: str) -> dict:
        """The execute job's JSON report (``graph``: how the job names the graph)."""
        p, r, plain = self.plan, self.rows, self.plain
        fl = p.flops()
        return {"graph": graph, "rows": p.bands, "row_policy": p.policy,
                "accounting": WHOLE_STEP,
                "step_peak_bytes": self.step.step_peak_bytes,
                "step_peak_breakdown": dict(self.step.breakdown),
                "measured_step_peak_bytes": r.measured_step_peak_bytes,
                "measured_over_step_peak": round(r.measured_step_peak_bytes / max(self.step.step_peak_bytes, 1), 4)
                if r.measured_step_peak_bytes is not None else None,
                "step_within_prediction": r.measured_step_peak_bytes is not None and
                r.measured_step_peak_bytes <= self.step.step_peak_bytes,
                "plain_step_peak_bytes": self.plain_step.step_peak_bytes,
                "plain_measured_step_peak_bytes": plain.measured_step_peak_bytes,
                "predicted_peak_bytes": r.predicted_peak_bytes, "tracked_peak_bytes": r.tracked_peak_bytes,
                "measured_peak_bytes": r.measured_peak_bytes, "meter": r.meter,
                "measured_over_predicted": round(r.measured_peak_bytes / max(r.predicted_peak_bytes, 1), 4),
                "peak_within_prediction": self.peak_within_prediction,
                "tracked_within_prediction": self.tracked_within_prediction,
                "activation_peak_bytes": r.activation_peak_bytes, "param_grad_bytes": r.param_grad_bytes,
                "device_peak_bytes": r.device_peak_bytes, "backend": r.backend,
                "gradients_match": self.gradients_match, "max_relative_error": self.max_relative_error,
                "loss": r.loss, "plain_loss": plain.loss, "loss_identical": r.loss == plain.loss,
                "extra_flops": fl["extra_flops"], "plain_flops": fl["plain_flops"],
                "combined_with_dp": bool(p.recompute or p.resweep), "dp_recomputed_ops": list(p.recompute),
                "dp_reswept_regions": list(p.resweep),
                "plain_tracked_peak_bytes": plain.tracked_peak_bytes,
                "plain_tracked_activation_peak_bytes": plain.tracked_peak_bytes - r.param_grad_bytes,
                "plain_measured_peak_bytes": plain.measured_peak_bytes,
                "seconds": round(r.seconds, 6), "plain_seconds": round(plain.seconds, 6)}


def execute_rows(planned: RowsPlan, backend=None, seed: int = 0) -> RowsExecution:
    """Run ``planned``'s row step and a plain step on ``backend`` (a name, a Backend or None:
    :func:`planner.execute.backend.get`'s default), from the same ``seed``; compare them."""
    g, p = planned.graph, planned.plan
    be = backend_mod.get(backend) if not isinstance(backend, backend_mod.Backend) else backend
    with current_progress().stage("row step"):
        r = rows_exec.run(g, p, backend=be, seed=seed)
    with current_progress().stage("plain step"):
        plain = executor.run(g, plain_schedule(g), executor.RunOptions(recycle=True, seed=seed),
                             backend=be)
    err = rows_exec.relative_error(r.param_grads, plain.param_grads)
    dtype = next(iter(r.param_grads.values())).dtype.name if r.param_grads else "float32"
    return RowsExecution(plan=p, rows=r, plain=plain, max_relative_error=err,
                         gradients_match=err <= TOLERANCE.get(dtype, 1e-4),
                         step=predict_rows(g, p),
                         plain_step=predict(g, plain_schedule(g)))
