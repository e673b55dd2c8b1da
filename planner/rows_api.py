"""The planner's call for row plans: :func:`plan_rows` -> :class:`RowsPlan`.

Row-centric plans (LR-CNN, :mod:`planner.rows`) and rows + the recomputation DP
(:mod:`planner.rows.with_dp`) enter the planner here, as recomputation plans enter through
:func:`planner.api.plan`, with the same engine options (``engine``, :class:`hgraph.EngineOptions`):
``tasks``/``blocks``/``mode`` say how the row analyses (:mod:`planner.rows.row_program`; the DP's lower-set statistics for rows + DP) run
on the engine, ``runtime``/``address`` where (an address that does not answer is the same one-line
error as for a recomputation plan), ``checkpoint_every``/``inject_failure`` pass to every engine
run (fault tolerance: the plan is the same after a recovery). The plan is the same for any of
them. The command line (``hgraph submit plan --rows R``) only parses flags and prints the result.
Running a row plan for real beside a plain step is the executor's
(:func:`planner.execute.rows_run.execute_rows`, ``hgraph submit execute --rows R``): the planner
never imports it.

Which plan:

* ``rows=R`` (``policy`` ``"overlap"``, the default, or ``"share"``): the row plan with ``R``
  bands; with a ``budget`` it is combined with the recomputation DP when rows alone do not fit;
* ``policy="auto"`` with a ``budget`` (and no ``rows``: auto chooses the band count): the fitting
  row plan with the least extra FLOPs (:func:`planner.rows.plan.choose`).

``budget``: bytes (int), text as ``--budget`` takes it (``"2GB"``, ``"75%"``, a percentage of the
plain step's peak) or a :class:`planner.budget.Budget`. It holds the whole step
(:func:`planner.rows.step.predict_rows`: parameters, gradients, band buffers, kernel
temporaries, the allocator; the report's ``accounting``, ``step_peak_bytes``,
``step_peak_breakdown``); a percentage is of the plain step's whole peak
(``step_baseline_peak_bytes``). A budget no plan fits raises
:class:`hgraph.common.errors.InfeasibleError` naming the smallest predicted peak.

Example::

    >>> from planner.execute import export, zoo
    >>> g = export.to_cg(zoo.build("vgg16", width=4, depth=1, image=32))
    >>> r = plan_rows(g, rows=4, policy="share", engine=EngineOptions(tasks=2))
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
from planner.rows import plan as rows_plan
from planner.rows import with_dp
from planner.rows.plan import RowPlan
from planner.rows.step import predict_rows
from planner.timeline import timeline

__all__ = ["RowsPlan", "plan_rows", "POLICIES", "plain_peak_bytes"]

#: ``policy`` values: a band policy of :mod:`planner.rows.plan`, or ``auto`` (chosen for a budget).
POLICIES = (*rows_plan.POLICIES, "auto")


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
              engine: EngineOptions = EngineOptions()) -> RowsPlan:
    """The row plan of a zoo graph (a cg.txt path or a :mod:`planner.cg` graph); see the module
    docstring. ``policy`` None is ``"overlap"``; ``engine``: where the engine analyses run
    (:class:`hgraph.EngineOptions`, as :func:`planner.plan` takes it)."""
    policy = policy or "overlap"
    _check(rows, policy, budget)
    b = None if budget is None else budget if isinstance(budget, Budget) else Budget.parse(budget)
    opts = engine
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
            steps[id(q)] = (q, predict_rows(g, q))
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
