"""The planner's call for row plans: :func:`plan_rows` -> :class:`RowsPlan`.

Row-centric plans (LR-CNN, :mod:`planner.rows`) and rows + the recomputation DP
(:mod:`planner.rows.with_dp`) enter the planner here, as recomputation plans enter through
:func:`planner.api.plan`, with the same engine options: ``tasks``/``blocks``/``mode`` say how the
row analyses (:mod:`planner.rows.row_program`; the DP's lower-set statistics for rows + DP) run
on the engine, ``runtime``/``address`` where (an address that does not answer is the same one-line
error as for a recomputation plan), ``checkpoint_every``/``inject_failure`` pass to every engine
run (fault tolerance: the plan is the same after a recovery). The plan is the same for any of
them. The command line (``hgraph submit plan --rows R``) only parses flags and prints the result.
:func:`execute_rows` runs a row plan for real beside a plain step (``hgraph submit execute
--rows R``) -> :class:`RowsExecution`.

Which plan:

* ``rows=R`` (``policy`` ``"overlap"``, the default, or ``"share"``): the row plan with ``R``
  bands; with a ``budget`` it is combined with the recomputation DP when rows alone do not fit;
* ``policy="auto"`` with a ``budget`` (and no ``rows``: auto chooses the band count): the fitting
  row plan with the least extra FLOPs (:func:`planner.rows.plan.choose`).

``budget``: bytes (int), text as ``--budget`` takes it (``"2GB"``, ``"75%"``, a percentage of the
plain step's peak) or a :class:`planner.budget.Budget`. It holds the whole step
(:func:`planner.execute.step_memory.predict_rows`: parameters, gradients, band buffers, kernel
temporaries, the allocator; the report's ``accounting``, ``step_peak_bytes``,
``step_peak_breakdown``); a percentage is of the plain step's whole peak
(``step_baseline_peak_bytes``). A budget no plan fits raises
:class:`hgraph.common.errors.InfeasibleError` naming the smallest predicted peak.

Example::

    >>> from planner.execute import export, zoo
    >>> g = export.to_cg(zoo.build("vgg16", width=4, depth=1, image=32))
    >>> r = plan_rows(g, rows=4, policy="share", tasks=2)
    >>> r.bands, r.policy, r.predicted_peak_bytes < r.plain_peak_bytes, r.combined_with_dp
    (4, 'share', True, False)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hgraph.common.errors import HGraphError
from hgraph.common.progress import current as current_progress
from planner import cg, whole_step
from planner.analyses.engine import EngineOptions
from planner.budget import Budget
from planner.fixed_schedules import plain_schedule
from planner.execute import backend as backend_mod
from planner.execute import executor, rows_exec, step_memory
from planner.rows import plan as rows_plan
from planner.rows import with_dp
from planner.rows.plan import RowPlan
from planner.timeline import timeline

__all__ = ["RowsPlan", "RowsExecution", "plan_rows", "execute_rows", "POLICIES", "TOLERANCE",
           "plain_peak_bytes"]

#: ``policy`` values: a band policy of :mod:`planner.rows.plan`, or ``auto`` (chosen for a budget).
POLICIES = (*rows_plan.POLICIES, "auto")
#: Largest relative gradient error of a row step against a plain step that still counts as equal.
TOLERANCE = {"float64": 1e-10, "float32": 1e-4}


@dataclass
class RowsPlan:
    """A row plan (rows alone, or rows + DP) and what the planner said about it.

    ``plan``: the :class:`~planner.rows.plan.RowPlan` (regions, band ranges, its walk: the step
    list the executor runs); ``report``: the JSON report (:meth:`RowPlan.report` with ``graph``,
    ``plain_peak_bytes`` and ``plain_activation_peak_bytes``); ``plain_peak_bytes``: the peak of
    a plain step (no rows, no recomputation) on the same accounting; ``budget_bytes``: the budget
    resolved to bytes (None without one); ``engine``: how the engine analyses ran.
    """

    plan: RowPlan
    report: dict
    graph: object
    plain_peak_bytes: int
    budget_bytes: int | None
    engine: EngineOptions

    @property
    def bands(self) -> int:
        return self.plan.bands

    @property
    def policy(self) -> str:
        return self.plan.policy

    @property
    def predicted_peak_bytes(self) -> int:
        return int(self.plan.predicted_peak_bytes)

    @property
    def plain_activation_peak_bytes(self) -> int:
        return int(self.report["plain_activation_peak_bytes"])

    @property
    def combined_with_dp(self) -> bool:
        """Whether the DP's recomputation was needed on top of the rows (``recompute``/``resweep``)."""
        return bool(self.plan.recompute or self.plan.resweep)


def plain_peak_bytes(g) -> int:
    """The peak of a plain training step of ``g`` (no recomputation, buffers freed after their
    last use): what a percentage budget of a row plan is of, and what its report compares with."""
    return int(timeline(g, plain_schedule(g), recycle=True).live_peak())


def _check(rows, policy: str, budget) -> None:
    """One line for options that do not make a plan (before any work)."""
    if policy not in POLICIES:
        raise HGraphError(f"unknown row policy {policy!r}; choose from {', '.join(POLICIES)}")
    if policy == "auto":
        if budget is None:
            raise HGraphError("--row-policy auto needs --budget")
        if rows is not None:
            raise HGraphError(f"--row-policy auto chooses the band count itself; drop --rows {rows} "
                              f"(or name a policy: overlap, share)")
        return
    if rows is None:
        raise HGraphError(f"--row-policy {policy} needs --rows R")
    if rows < 1:
        raise HGraphError(f"--rows must be >= 1, got {rows}")


def plan_rows(graph_or_path, rows: int | None = None, policy: str | None = None, budget=None, *,
              tasks: int = 1, blocks: int = 1, mode: str = "hybrid", runtime: str = "local",
              address: str | None = None, checkpoint_every: int | None = None,
              inject_failure: int | None = None) -> RowsPlan:
    """The row plan of a zoo graph (a cg.txt path or a :mod:`planner.cg` graph); see the module
    docstring. ``policy`` None is ``"overlap"``."""
    policy = policy or "overlap"
    _check(rows, policy, budget)
    b = None if budget is None else budget if isinstance(budget, Budget) else Budget.parse(budget)
    opts = EngineOptions(tasks=int(tasks), blocks=int(blocks), mode=mode, runtime=runtime,
                         address=address, checkpoint_every=checkpoint_every,
                         inject_failure=inject_failure)
    stages = current_progress()
    with stages.stage("reading the graph"):
        g = cg.read(graph_or_path) if isinstance(graph_or_path, (str, Path)) else graph_or_path
    with stages.stage("plain step peak"):
        plain = plain_peak_bytes(g)
        plain_step = whole_step.predict(g, plain_schedule(g)).step_peak_bytes
    budget_bytes = None if b is None else b.resolve(plain_step)
    steps = {}

    def step_of(q):
        """The whole step of row plan ``q`` (predicted once per plan): what the budget holds."""
        if id(q) not in steps:
            steps[id(q)] = (q, step_memory.predict_rows(g, q))
        return steps[id(q)][1]

    def peak(q):
        return step_of(q).step_peak_bytes

    if policy == "auto":
        with stages.stage("row plans for the budget (engine)"):
            p = rows_plan.choose(g, budget_bytes, opts, peak=peak)
    else:
        with stages.stage("row plan (engine)"):
            p = rows_plan.plan(g, rows, policy, opts)
        if budget_bytes is not None:
            with stages.stage("rows + DP"):
                p = with_dp.combine(p, budget_bytes, opts, peak=peak)
    report = p.report()
    report.update(step_of(p).report())
    report["step_baseline_peak_bytes"] = int(plain_step)
    if budget_bytes is not None:
        report["budget_bytes"] = int(budget_bytes)
        report["within_budget"] = report["step_peak_bytes"] <= budget_bytes
    report["graph"] = str(graph_or_path) if isinstance(graph_or_path, (str, Path)) else (
        str(g.path) if getattr(g, "path", None) else g.name)
    report["plain_peak_bytes"] = plain
    report["plain_activation_peak_bytes"] = plain - p.param_grad_bytes
    return RowsPlan(plan=p, report=report, graph=g, plain_peak_bytes=plain,
                    budget_bytes=budget_bytes, engine=opts)


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
    step: object = None          # step_memory.StepPeak of the row step (NumPy, pool)
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
                "accounting": whole_step.WHOLE_STEP,
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
        plain = executor.run(g, plain_schedule(g), backend=be, recycle=True, seed=seed)
    err = rows_exec.relative_error(r.param_grads, plain.param_grads)
    dtype = next(iter(r.param_grads.values())).dtype.name if r.param_grads else "float32"
    return RowsExecution(plan=p, rows=r, plain=plain, max_relative_error=err,
                         gradients_match=err <= TOLERANCE.get(dtype, 1e-4),
                         step=step_memory.predict_rows(g, p),
                         plain_step=whole_step.predict(g, plain_schedule(g)))
