"""One solver on one graph: memory units, the DP family per scaling ratio, a solve per budget.

This is the one path from a graph and a budget in bytes to a chain: the budget and the
activation sizes go through :func:`planner.units.scale_units` (bytes, or the reference's
scaled ints), the family is built once per scaling ratio and reused across budgets (the
smallest-budget search solves many), and the DP runs on it (:mod:`planner.dp.solve`), or
Chen's chain (:mod:`planner.chen`). :func:`planner.plan` and the conformance tests both go
through here. Each step is a stage of the current progress (:func:`hgraph.common.progress.current`).

Example::

    >>> import numpy as np
    >>> from planner import synth
    >>> s = make_solver(synth.build(layers=1, heads=2))
    >>> r = s.dp(s.act_sum)                       # half the no-recomputation model peak
    >>> r.status, r.model_peak_bytes <= s.act_sum, r.comp_ratio
    ('OK', True, 1)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hgraph.common.errors import HGraphError, InfeasibleError
from hgraph.common.formatting import format_bytes
from hgraph.common.progress import current as current_progress
from planner.activation_graph import ActivationGraph
from planner.analyses.engine import EngineOptions
from planner.dp import scale
from planner.dp.solve import feasible_floor, solve_family
from planner.dp_families import approx_family, exact_family
from planner.decision import Decision
from planner.emit import groups_of_chain
from planner.options import SolverLimits
from planner.search import refuse
from planner.units import ratio_windows, scale_units

__all__ = ["Solver", "make_solver", "ApproxDP", "ExactDP", "ChenChain", "MILPSolver", "CLASSES", "NAMES",
           "ModelStats", "MIN_BUDGET_MAX_SETS"]

#: Exact families up to this many sets get their smallest feasible budget in one pass
#: (:meth:`Solver.min_budget`); bigger ones are bisected over :meth:`Solver.feasible`.
#: On a family as big as GoogLeNet's the one pass forms too many pairs under the peak test at
#: its smallest budget and is slower than bisecting with memory-centric searches (figures:
#: bench/NOTES_scale.md, "Figures formerly quoted in docstrings").
MIN_BUDGET_MAX_SETS = 4096


@dataclass(frozen=True)
class ModelStats:
    """What the solver's own model says of the chain it chose (memory in bytes: DP units ×
    ``comp_ratio``); the report's ``blocks`` … ``dp_exact`` fields (:func:`planner.report.build`).

    Made only by the constructors below, one per kind of chain: :meth:`of_dp` (a DP's result),
    :meth:`of_chen` (Chen's chain), :meth:`keep_everything` (the no-recomputation schedule).
    ``dp_window``/``dp_front_cap``/``dp_exact``: the approximate DP's scale options as used,
    on the scale path only (``dp_exact`` is None off it, and the report then leaves the three
    out; ``dp_window``/``dp_front_cap`` are None on it when off).
    """

    blocks: int
    model_recompute_cost: int
    model_peak_bytes: int
    n_lower_sets: int
    comp_ratio: int
    family: str
    fell_back: bool = False
    dp_window: int | None = None
    dp_front_cap: int | None = None
    dp_exact: bool | None = None
    milp: dict | None = None
    #: the segmented DP's account (:func:`planner.dp.segmented_engine.solve_result`): the
    #: report's ``dp_segmented``; None for a DP walked whole
    dp_segmented: dict | None = None

    @property
    def on_scale_path(self) -> bool:
        return self.dp_exact is not None

    @classmethod
    def of_dp(cls, r, scale: bool = False, segmented: dict | None = None) -> ModelStats:
        """Of a :class:`~planner.dp.solve.DPResult`; ``scale``: solved on the scale path (its
        window and front cap, as ``r`` records them, go in); ``segmented``: how the
        segmented DP made it (None: walked whole)."""
        extra = {}
        if scale:
            extra = dict(dp_window=r.window, dp_front_cap=r.front_cap,
                         dp_exact=r.window is None and r.front_cap is None)
        if segmented is not None:
            extra["dp_segmented"] = dict(segmented)
        return cls(blocks=int(r.blocks), model_recompute_cost=int(r.model_recompute_cost),
                   model_peak_bytes=int(r.model_peak_bytes), n_lower_sets=int(r.n_lower_sets),
                   comp_ratio=int(r.comp_ratio), family=r.family, fell_back=bool(r.fell_back),
                   **extra)

    @classmethod
    def of_chen(cls, p) -> ModelStats:
        """Of a :class:`~planner.chen.ChenPlan`."""
        return cls(blocks=int(p.blocks), model_recompute_cost=int(p.model_recompute_cost),
                   model_peak_bytes=int(p.model_peak_bytes), n_lower_sets=int(p.n_lower_sets),
                   comp_ratio=int(p.ratio), family="chen")

    @classmethod
    def of_milp(cls, r, ratio: int, budget_units: int, time_limit: float,
                stages_from: str = "free order") -> ModelStats:
        """Of a :class:`~planner.milp.MILPResult` solved at ``budget_units`` (DP units of
        ``ratio``); ``milp``: what HiGHS proved (the report's ``milp`` object; ``stages_from``:
        the chain its stages were fixed to, or ``"free order"``)."""
        full = r.full_model
        return cls(blocks=r.blocks, model_recompute_cost=int(r.cost),
                   model_peak_bytes=int(r.peak) * ratio, n_lower_sets=0, comp_ratio=int(ratio),
                   family="milp",
                   milp=dict(optimal=bool(r.optimal), dual_bound=r.dual_bound, stages=r.stages,
                             full_stages=full, stages_from=stages_from,
                             budget_units=int(budget_units),
                             seconds=round(r.seconds, 3), time_limit=float(time_limit),
                             variables=r.variables, constraints=r.constraints,
                             stopped=r.stopped))

    @classmethod
    def keep_everything(cls, peak_bytes: int) -> ModelStats:
        """Of the no-recomputation schedule: one block, nothing recomputed, its replayed peak."""
        return cls(blocks=1, model_recompute_cost=0, model_peak_bytes=int(peak_bytes),
                   n_lower_sets=0, comp_ratio=1, family="keep_everything")


#: The solvers' names, in the order ``--solver`` lists them.
NAMES = ("approx", "exact", "chen", "milp")


class Solver:
    """A solver on one graph: the protocol :func:`planner.api.fit` (the budget search and the
    fit-retry) asks of every solver, and what the solvers share.

    The graph is ``ag`` (:class:`~planner.activation_graph.ActivationGraph`, the planner's one
    graph type; built from ``g`` when not given) and its units views; ``g`` is kept for the
    cg-level solvers (Chen's enumeration reads it through ``ag`` too). One class per solver
    (:data:`CLASSES`): :class:`ApproxDP`, :class:`ExactDP`, :class:`ChenChain`,
    :class:`MILPSolver`; :func:`make_solver` makes the one a name says.

    The protocol: :meth:`solve` (a chain at a budget), :meth:`feasible`, and, where one pass
    finds it (:meth:`direct_min_budget`), :meth:`min_budget`; ``budget_free`` (the chain does
    not depend on the budget), :attr:`min_budget_solver` (whose chains name the smallest
    feasible budget), :meth:`options_text` and :meth:`infeasible` (the one-line errors).

    ``units``: ``"bytes"`` or ``"reference"``; ``opts``: how the engine analyses run;
    ``level``: topological levels if already known. Above
    :data:`planner.dp.scale.EXACT_LIMIT` activations, or when a window / front cap is asked
    for, the approximate family is held segment-locally.
    """

    name = "solver"
    #: Whether the chain ignores the budget (Chen's: only the units' scaling sees it); the
    #: search then neither re-fits it nor compares it with keeping everything.
    budget_free = False
    #: Whether the family may be held segment-locally with a window / front cap (the
    #: approximate DP's scale path, :mod:`planner.dp.scale`).
    scales = False

    def __init__(self, g, solver: str | None = None, strategy: str = "time",
                 units: str = "bytes", opts: EngineOptions | None = None,
                 limits: SolverLimits | None = None, *, level=None,
                 ag: ActivationGraph | None = None):
        self.g, self.solver, self.strategy, self.units = g, self.name, strategy, units
        self.ag = ag if ag is not None else ActivationGraph.from_cg(g)
        self.opts = opts if opts is not None else EngineOptions()
        self.limits = lim = limits if limits is not None else SolverLimits()
        self.max_lower_sets, self.fallback, self.level = lim.max_lower_sets, lim.fallback, level
        self.act_sum = int(self.ag.bytes.sum())
        self.milp_time_limit, self.milp_stages = lim.milp_time_limit, lim.milp_stages
        dp_window, dp_front_cap = lim.dp_window, lim.dp_front_cap
        self.engine_supersteps = 0
        self._cache = {}             # what a solver keeps across budgets (families per ratio)
        n = self.ag.n
        self.scale = self.scales and (n > scale.EXACT_LIMIT or bool(dp_window)
                                      or bool(dp_front_cap))
        self.window, self.front_cap = scale.plan_options(n, dp_window, dp_front_cap, strategy)
        if not self.scale:
            self.window = self.front_cap = None

    # ---- the protocol ------------------------------------------------------------------------
    def solve(self, budget_bytes: int):
        """(status, the :class:`planner.decision.Decision` or None, :class:`ModelStats`) at
        ``budget_bytes``."""
        raise NotImplementedError

    def feasible(self, budget_bytes: int) -> bool:
        """Whether :meth:`solve` has a plan at ``budget_bytes``, as cheaply as it can be told."""
        return self.solve(budget_bytes)[0] == "OK"

    def direct_min_budget(self) -> bool:
        """Whether :meth:`min_budget` applies (else the search bisects over :meth:`feasible`)."""
        return self._one_pass_min_budget()

    def _one_pass_min_budget(self) -> bool:
        return False

    def min_budget(self, top: int) -> int | None:
        """The smallest budget with a plan in one pass (only where :meth:`direct_min_budget`)."""
        raise NotImplementedError(f"{self.name}: no one-pass smallest budget")

    @property
    def min_budget_solver(self) -> Solver:
        """The solver whose chains name the smallest feasible budget: this one."""
        return self

    def options_text(self) -> str:
        """The options the plan was asked with, as the one-line error names them."""
        parts = [f"--solver {self.name}", f"--strategy {self.strategy}", f"--units {self.units}"]
        if self.scale:
            parts += [f"--dp-window {self.window or 0}", f"--dp-front-cap {self.front_cap or 0}"]
        return " ".join(parts)

    def infeasible(self, name: str, budget_bytes: int, baseline_peak: int,
                   smallest: int) -> InfeasibleError:
        """The error for a budget below every plan of this solver on graph ``name``;
        ``smallest``: the smallest feasible budget the search found."""
        return refuse(
            f"budget {budget_bytes:,} bytes ({format_bytes(budget_bytes)}) is infeasible for "
            f"the {self.name} solver on {name}; the smallest feasible budget is {smallest:,} "
            f"bytes ({format_bytes(smallest)}, "
            f"{100 * smallest / max(1, baseline_peak):.1f}% of the no-recomputation peak)",
            smallest)


class _DP(Solver):
    """The lower-set DP (:mod:`planner.dp`): the family built once per scaling ratio, on the
    graph's units view, and reused across budgets (the smallest-budget search solves many)."""

    def _build_family(self, dg):
        raise NotImplementedError

    def family(self, ratio: int):
        """(the graph's units view at ``ratio``, its family), built once per ratio."""
        key = ("family", ratio)
        if key not in self._cache:
            dg = self.ag.with_ratio(ratio)
            self._cache[key] = (dg, self._build_family(dg))
        return self._cache[key]

    def dp(self, budget_bytes: int, strategy: str | None = None):
        """The DP's :class:`~planner.dp.solve.DPResult` at ``budget_bytes``."""
        u = scale_units(budget_bytes, self.act_sum, self.units)
        dg, fam = self.family(u.ratio)
        strategy = strategy or self.strategy
        segmented = self._segmented(fam, dg, u, strategy)
        if segmented is not None:
            return segmented
        with current_progress().stage(f"DP ({fam.kind}, {fam.num_sets:,} states)"):
            return solve_family(fam, dg, u.budget, strategy=strategy,
                                comp_ratio=u.ratio, units=self.units, window=self.window,
                                front_cap=self.front_cap)

    def _segmented(self, fam, dg, u, strategy: str):
        """The DP cut into segments on the engine's workers where the solver has one and it
        applies (:class:`ApproxDP`), else None."""
        return None

    def solve(self, budget_bytes: int):
        r = self.dp(budget_bytes)
        decision = None if r.groups is None else Decision(r.groups)
        return r.status, decision, ModelStats.of_dp(r, scale=self.scale, segmented=r.segmented)

    def min_budget(self, top: int) -> int | None:
        """The smallest budget (bytes, at least 1) at which :meth:`solve` has a plan; None when
        even ``top`` has none — what bisecting ``solve`` over ``[1, top]`` returns, one search
        per scaling ratio instead of ~34 solves (:func:`planner.dp.min_budget.min_budget`;
        only where :meth:`direct_min_budget`).

        Why it equals the bisection: at one ratio, ``solve`` has a plan iff the budget in DP
        units is at least the pass's value ``P``, so within a ratio's window of budgets
        (:func:`~planner.units.ratio_windows`) the feasible ones are those from ``P·ratio``
        on. Across windows feasibility stays monotone: the family's chains do not depend on
        the sizes, every step peak is a sum of node sizes with non-negative integer
        coefficients, and ``⌊m/10r⌋ = ⌊⌊m/r⌋/10⌋``, so a chain's peak at ratio ``10r`` is
        at most ``⌊peak_r/10⌋``: a budget that fits at ``r`` fits any larger one at ``10r``.
        Feasibility being monotone, the bisection finds the least feasible budget (from 1
        up), and so does the first window holding one.
        """
        for first, last, ratio in ratio_windows(self.act_sum, self.units):
            if first > top:
                return None
            dg, fam = self.family(ratio)
            with current_progress().stage(f"smallest feasible budget ({fam.kind}, "
                                          f"{fam.num_sets:,} states)"):
                x = max(first, feasible_floor(fam, dg) * ratio, 1)
            if last is None or x <= last:
                return x if x <= top else None
        return None

    def feasible(self, budget_bytes: int) -> bool:
        """Whether :meth:`solve` has a plan at ``budget_bytes``.

        Without a window or front cap every strategy's search keeps each reachable state's
        least-ckpt entry, so all reach V at the same budgets; the memory-centric one keeps
        only that entry (:meth:`~planner.dp.exact_search.ExactSearch.lexmin`: on GoogLeNet's
        exact family several times cheaper to bisect than the time-centric search;
        bench/NOTES_scale.md). The scale path (whose time-centric passes may find chains the
        memory-centric pass thins away) asks :meth:`solve` itself."""
        if self.scale:
            return self.solve(budget_bytes)[0] == "OK"
        return self.dp(budget_bytes, strategy="memory").status == "OK"


class ApproxDP(_DP):
    """The approximate DP: ∅ and every ``L_v``, statistics from the engine
    (:mod:`planner.analyses.local_stats`); dense sets, or segment-local on the scale path
    (above :data:`planner.dp.scale.EXACT_LIMIT` activations or with a window / front cap)."""

    name = "approx"
    scales = True

    def _build_family(self, dg):
        capped = (self.window, self.front_cap) != (None, None)
        fam = approx_family(dg, dense=not self.scale, opts=self.opts, level=self.level,
                            left_out=self.scale and capped and self.units == "bytes")
        self.engine_supersteps += fam.supersteps
        return fam

    def _segmented(self, fam, dg, u, strategy: str):
        """From :data:`planner.dp.scale.SEGMENTED_LIMIT` activations (time-centric,
        on the scale path): the DP cut at separators, the segments walked on the engine's
        workers and their fronts composed there (:mod:`planner.dp.segmented_engine`); the
        result carries ``segmented``, what the report says of it."""
        if not self.scale:               # the common case: no import of the scale path's loop
            return None
        from planner.dp import segmented_engine as se

        if not se.applies(fam, self.ag.n, self.window, self.front_cap, strategy):
            return None
        with current_progress().stage(f"DP (segmented on the engine, {fam.num_sets:,} "
                                      f"states)"):
            r, info, steps = se.solve_result(fam, dg, u.budget, strategy, u.ratio, self.units,
                                             self.window, self.front_cap, opts=self.opts)
        self.engine_supersteps += steps
        r.segmented = info
        return r

    def _one_pass_min_budget(self) -> bool:
        """Off the scale path; on it where the capped solve widens its window up to none
        (graphs of at most :data:`planner.dp.scale.EXACT_LIMIT` activations): then it has a
        plan exactly from the unpruned DP's smallest budget (:func:`planner.dp.solve._widened`).
        A bigger graph's window stops widening, and thinned fronts can miss a chain."""
        return not self.scale or self.ag.n <= scale.EXACT_LIMIT


class ExactDP(_DP):
    """The exact DP: every lower set (past ``max_lower_sets`` an error, or the approximate
    family with ``fallback``)."""

    name = "exact"

    def _build_family(self, dg):
        with current_progress().stage("lower sets (exact family)"):
            return exact_family(dg, max_lower_sets=self.max_lower_sets, fallback=self.fallback,
                                opts=self.opts)

    def _one_pass_min_budget(self) -> bool:
        """On the approximate family (fallback) or an exact one of at most
        :data:`MIN_BUDGET_MAX_SETS` sets."""
        _, fam = self.family(next(ratio_windows(self.act_sum, self.units))[2])
        return fam.kind == "approx" or fam.num_sets <= MIN_BUDGET_MAX_SETS


class ChenChain(Solver):
    """Chen et al.'s √n chain (:mod:`planner.chen`): the budget only sets the units' ratio."""

    name = "chen"
    budget_free = True

    def solve(self, budget_bytes: int):
        from planner import chen

        with current_progress().stage("Chen's chain"):
            p = chen.solve(self.g, budget=max(1, budget_bytes), units=self.units, ag=self.ag,
                           lower_set_limit=self.max_lower_sets)
        return "OK", Decision(groups_of_chain(self.ag, p.chain)), ModelStats.of_chen(p)


class MILPSolver(Solver):
    """Checkmate's MILP in the DP's model (:mod:`planner.milp`, HiGHS within
    ``milp_time_limit`` seconds over ``milp_stages`` stages, default: the stages of the exact
    DP's chain). Its smallest feasible budget is named by the approximate DP (the MILP's
    model holds its chains; the MILP's own smallest would take a MILP per bisection step)."""

    name = "milp"

    @property
    def min_budget_solver(self) -> Solver:
        if "namer" not in self._cache:
            self._cache["namer"] = ApproxDP(self.g, "approx", "time", self.units, self.opts,
                                            level=self.level, ag=self.ag)
        return self._cache["namer"]

    def solve(self, budget_bytes: int):
        """:meth:`Solver.solve` with the MILP; no schedule within the time limit is one line.

        Without ``milp_stages`` the stages are the blocks of the DP's chain at this budget
        (the exact family, the approximate one past ``max_lower_sets``): HiGHS then decides
        what to keep, free and recompute on them, and never does worse than that chain.
        With ``milp_stages`` (or when the DP has no chain) the order is free over that many
        stages (default :data:`planner.milp.DEFAULT_SOLVER_STAGES`)."""
        from planner import milp

        limit = milp.DEFAULT_TIME_LIMIT if self.milp_time_limit is None else self.milp_time_limit
        u = scale_units(budget_bytes, self.act_sum, self.units)
        ag = self.ag
        groups, stages_from, seed = None, "free order", None
        if self.milp_stages is None:
            if "seed" not in self._cache:        # the exact DP whose chain gives the stages
                self._cache["seed"] = ExactDP(self.g, "exact", "time", self.units, self.opts,
                                              SolverLimits(self.max_lower_sets, fallback=True),
                                              level=self.level, ag=ag)
            seed = self._cache["seed"].dp(budget_bytes)
            if seed.impossible:
                seed = None
            else:
                groups = seed.groups
                stages_from = f"{seed.family} DP chain"
        dg = ag.with_ratio(u.ratio)
        # the limit is the plan's, over every MILP it solves (the fit's re-solves at lower
        # budgets share it); the seeding DP is its own stage and not in it
        spent = self._cache.get("milp_seconds", 0.0)
        with current_progress().stage(f"MILP (HiGHS, {ag.n:,} nodes)"):
            r = milp.solve(dg, u.budget, time_limit=max(0.01, limit - spent), groups=groups,
                           stages=self.milp_stages or milp.DEFAULT_SOLVER_STAGES)
        spent = self._cache["milp_seconds"] = spent + r.seconds
        if seed is not None and (r.status != "OK" or r.cost > seed.model_recompute_cost):
            # the chain's own schedule is a solution of the same model: HiGHS's incumbent at
            # the time limit (or none) is no better, so the plan is the chain's
            stats = ModelStats.of_dp(seed)
            info = ModelStats.of_milp(r, u.ratio, u.budget, limit, stages_from).milp \
                if r.status == "OK" else dict(optimal=False, dual_bound=r.dual_bound,
                                              stages=r.stages, full_stages=False,
                                              stages_from=stages_from,
                                              budget_units=int(u.budget),
                                              seconds=round(spent, 3),
                                              time_limit=float(limit), variables=r.variables,
                                              constraints=r.constraints, stopped=r.stopped)
            info["schedule"] = "the DP chain's own (HiGHS found none cheaper in time)"
            info["seconds"] = round(spent, 3)          # every MILP of this plan
            return "OK", Decision(seed.groups), dataclasses.replace(stats, family="milp",
                                                                    milp=info)
        if r.status == "TIMEOUT":
            raise HGraphError(f"milp: HiGHS found no schedule within {limit:g} s "
                              f"({r.stages} stages, {stages_from}, {r.variables:,} variables); "
                              f"raise --milp-time-limit or use --solver exact")
        if r.status != "OK":
            return r.status, None, None
        stats = ModelStats.of_milp(r, u.ratio, u.budget, limit, stages_from)
        stats.milp["schedule"] = "HiGHS's"
        stats.milp["seconds"] = round(spent, 3)
        return "OK", Decision(r.groups, r.keep, r.recompute, r.retain), stats

    def infeasible(self, name: str, budget_bytes: int, baseline_peak: int,
                   smallest: int) -> InfeasibleError:
        """A budget no schedule of the MILP's model fits (HiGHS proved it): the line names a
        budget the approximate DP's plan fits (the MILP's model holds every chain, so the
        MILP fits there too; its own smallest may be lower)."""
        from planner.milp import DEFAULT_SOLVER_STAGES

        T = min(self.ag.n, self.milp_stages or DEFAULT_SOLVER_STAGES)
        model = (f"the model with {T} stages (--milp-stages; {self.ag.n} covers every chain)"
                 if T < self.ag.n else "the model")
        return refuse(
            f"budget {budget_bytes:,} bytes ({format_bytes(budget_bytes)}) is infeasible for "
            f"the milp solver on {name} (HiGHS: no schedule of {model} fits); the approximate "
            f"DP's plan fits {smallest:,} bytes ({format_bytes(smallest)}, "
            f"{100 * smallest / max(1, baseline_peak):.1f}% of the no-recomputation peak)",
            smallest)


#: The solver class of each name (``--solver``).
CLASSES = {"approx": ApproxDP, "exact": ExactDP, "chen": ChenChain, "milp": MILPSolver}


def make_solver(g, solver: str = "approx", strategy: str = "time", units: str = "bytes",
                opts: EngineOptions | None = None, limits: SolverLimits | None = None, *,
                level=None, ag: ActivationGraph | None = None) -> Solver:
    """The solver ``solver`` names (:data:`CLASSES`) on graph ``g``; the other arguments are
    :class:`Solver`'s (``limits``: :class:`planner.options.SolverLimits`, None: its defaults).
    An unknown name is the one-line error ``--solver`` gives."""
    if solver not in CLASSES:
        raise HGraphError(f"unknown solver {solver!r}; expected one of {', '.join(NAMES)}")
    return CLASSES[solver](g, solver, strategy, units, opts, limits, level=level, ag=ag)
