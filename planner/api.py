"""The driver API: :func:`plan` a recomputation schedule for a graph under a memory budget.

One pipeline (ARCHITECTURE.md, "One pipeline, one graph type"): read the graph →
:func:`analyse` (the activation graph, the planner's one graph type; its levels on the engine
over ``tasks`` workers; the no-recomputation baseline) → the solver's strategy object
(:data:`planner.solver.CLASSES`: the approximate / exact DP of :mod:`planner.dp`, whose
families are built on the engine's lower-set statistics and, above
``planner.dp.scale.EXACT_LIMIT`` activations, held with a reported window / front cap; Chen's
chain; the MILP) → :func:`fit`, the one owner of the budget (solve, emit the schedule with
:mod:`planner.emit`, verify it by an independent replay, :mod:`planner.simulate`, that
measures its peak and recomputation; re-solve below the budget when the replay exceeds it;
else the smallest feasible budget) → the certificate (:mod:`planner.certificate`) → the
:class:`Plan` and its report (:mod:`planner.report`). Each step is a stage of the current
progress (:func:`hgraph.common.progress.current`: a live line when the plan job runs on a terminal).

Example::

    >>> import planner
    >>> from planner import synth
    >>> engine = planner.EngineOptions(tasks=2)         # where the engine analyses run
    >>> p = planner.plan(synth.build(layers=2, heads=2), "60%", engine=engine)  # or a cg.txt path
    >>> p.peak_bytes <= p.budget_bytes, p.overhead, p.blocks
    (True, 0.625, 12)

``p.schedule.write("sch.txt")`` writes the schedule in the reference's format.

An infeasible budget raises :class:`hgraph.common.errors.InfeasibleError` whose message gives the
smallest feasible budget for that solver (``err.min_budget_bytes``). A plan is never worse than
not planning: in bytes units, when the no-recomputation schedule fits the budget, the DP solvers
keep everything (time-centric always; memory-centric when the DP's plan would not peak lower);
the reference's units (``accounting=AccountingOptions(units="reference")``) and Chen's solver
keep the reference's behaviour. The options come grouped (:mod:`planner.options`): where the
engine runs, how far a solver may go, the certificate, what the budget counts.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hgraph.common.errors import HGraphError
from hgraph.common.formatting import format_bytes
from hgraph.common.progress import current as current_progress
from planner import cg, report as report_mod, search, simulate, sliced
from planner.activation_graph import ActivationGraph
from planner.analyses.engine import EngineOptions, session as engine_session
from planner.analyses.levels import levels
from planner.budget import Budget
from planner.dp.subsets import groups_to_chain
from planner.decision import Decision
from planner.emit import emit_decision
from planner.fixed_schedules import replay_baseline
from planner.options import UNITS, AccountingOptions, CertifyOptions, SolverLimits
from planner.schedule import Schedule
from planner.solver import NAMES, ModelStats, Solver, make_solver

__all__ = ["Plan", "plan", "Planning", "Asked", "SOLVERS", "STRATEGIES", "UNITS",
           "lower_bound_bytes", "BASELINE_SCHEDULE_LIMIT"]

#: The solvers ``--solver`` names (:data:`planner.solver.NAMES`).
SOLVERS = NAMES
STRATEGIES = ("time", "memory")
#: Graphs up to this many activations get a simulated no-recomputation baseline schedule; larger
#: ones use Σ activation bytes (the reference's S, "in practice the no-recompute peak").
BASELINE_SCHEDULE_LIMIT = 3000


@dataclass(frozen=True)
class Asked:
    """What a plan was asked for: the ``solver`` and ``strategy`` that made it, the ``units``,
    the ``budget`` as given (a :class:`planner.budget.Budget` or text) and in bytes."""

    solver: str
    strategy: str
    units: str
    budget: object
    budget_bytes: int


@dataclass
class Plan:
    """A planned schedule, what its replay measured and what the solver's model said of it.

    The fields are the report's (:mod:`planner.report`), typed; ``report`` is the JSON report
    built from them (:func:`planner.report.build`) when the plan is made, a dict that jobs may
    add to (``execute``, the PyTorch front's ``step_*``). ``graph`` is the planned
    :mod:`planner.cg` graph (the report names it); ``model``: :class:`planner.solver.ModelStats`;
    ``engine``: where the analyses ran (tasks, blocks, mode, runtime, supersteps);
    ``decisions``: one dict per activation (:func:`planner.report.decisions`); ``decision``:
    the solver's :class:`planner.decision.Decision` (``groups``: its stage of every activation); ``timeline``/``baseline_timeline``: live bytes after each op of
    the plan / of the no-recomputation schedule (None when the graph is too large for one);
    ``recompute_certificate``: :class:`planner.certificate.Certificate` (a lower bound on the plan's
    recomputation and the gap to it; None with ``certify="off"``).
    """

    schedule: Schedule
    graph: object
    nodes: int
    variables: int
    depth: int
    solver: str
    strategy: str
    units: str
    budget: str
    budget_bytes: int
    peak_bytes: int
    baseline_peak_bytes: int
    baseline_kind: str
    lower_bound_bytes: int
    recompute_cost: int
    forward_cost: int
    recomputed: int
    ops: int
    seconds: float
    model: ModelStats
    engine: dict
    decisions: list
    decision: Decision
    timeline: np.ndarray
    baseline_timeline: np.ndarray | None = None
    recompute_certificate: object = None
    #: whole-step accounting (graphs with op arguments; :mod:`planner.whole_step`):
    #: ``step_peak_bytes``, ``step_peak_breakdown``, ``workspace_bytes``...; None: activations
    step: dict | None = None
    report: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        self.report = report_mod.build(self)

    @classmethod
    def from_replay(cls, a: Analysis, found: tuple, asked: Asked, *, engine: dict,
                    seconds: float, certificate=None) -> Plan:
        """The plan ``found`` (decision, model, schedule, replay: what :func:`fit` returns) of
        the analysed graph ``a``, as ``asked``; ``engine``: the report's, ``seconds``: its time."""
        decision, model, schedule, sim = found
        g, ag = a.g, a.ir
        return cls(schedule=schedule, graph=g, nodes=int(ag.n), variables=int(g.num_vars),
                   depth=int(a.depth), solver=asked.solver, strategy=asked.strategy,
                   units=asked.units, budget=getattr(asked.budget, "text", str(asked.budget)),
                   budget_bytes=int(asked.budget_bytes), peak_bytes=int(sim.peak_bytes),
                   baseline_peak_bytes=int(a.baseline_peak), baseline_kind=a.baseline_kind,
                   lower_bound_bytes=lower_bound_bytes(g),
                   recompute_cost=int(sim.recompute_cost), forward_cost=int(sim.forward_cost),
                   recomputed=int(sim.recomputed), ops=int(len(sim.timeline)),
                   seconds=float(seconds), model=model, engine=dict(engine),
                   decisions=report_mod.decisions(g, ag, decision.stage, sim), decision=decision,
                   timeline=sim.timeline, baseline_timeline=a.baseline_timeline,
                   recompute_certificate=certificate)

    @property
    def within_budget(self) -> bool:
        """Whether the replayed peak (the predicted whole step's, under whole-step accounting)
        fits the planner's budget."""
        return (self.step["step_peak_bytes"] if self.step else self.peak_bytes) <= self.budget_bytes

    @property
    def overhead(self) -> float:
        """Recomputation over the forward pass's cost."""
        return self.recompute_cost / self.forward_cost if self.forward_cost else 0.0

    @property
    def blocks(self) -> int:
        return self.model.blocks

    @property
    def model_recompute_cost(self) -> int:
        return self.model.model_recompute_cost

    @property
    def model_peak_bytes(self) -> int:
        return self.model.model_peak_bytes

    @property
    def n_lower_sets(self) -> int:
        return self.model.n_lower_sets

    @property
    def comp_ratio(self) -> int:
        return self.model.comp_ratio

    @property
    def family(self) -> str:
        return self.model.family

    @property
    def fell_back(self) -> bool:
        return self.model.fell_back

    @property
    def groups(self) -> np.ndarray:
        """The block of every activation (the decision's stages)."""
        return self.decision.stage

    @property
    def chain(self) -> list:
        """The chain's lower sets, built when asked: they take O(nodes × blocks) memory (11 GiB
        at 100k nodes), so a plan keeps only ``groups``."""
        return groups_to_chain(self.groups)


def lower_bound_bytes(g) -> int:
    """A peak no valid schedule can go below (the reference's accounting).

    The largest of: each forward function's activation inputs plus its output; each backward
    block's activation inputs plus its incoming gradient (every schedule runs every function with
    those live); and the gradients of all parameters and model inputs, which are never freed.
    """
    vb = np.asarray(g.var_bytes, dtype=np.int64)
    act = g.is_activation
    c, half = g.columns, g.num_forward
    v, grad = c.in_var, c.in_grad
    bw_out = c.out_var[c.out_ptr[half]:]
    fwd_out = g.forward_output
    sink = g.loss_mask
    fwd = c.input_sums(np.where(act[v], vb[v], 0))[:half] + vb[fwd_out]
    bwd = c.input_sums(np.where(grad, np.where(sink[v], 0, vb[v]),
                                np.where(act[v], vb[v], 0)))[half:]
    best = max(int(fwd.max(initial=0)), int(bwd.max(initial=0)))
    param_grad = np.zeros(g.num_vars, bool)
    param_grad[bw_out[~act[bw_out]]] = True
    return max(best, int(vb[param_grad].sum()))


def _load(graph_or_path, opts: EngineOptions | None = None):
    """``(graph, sharded)``: the cg graph, and the variable graph its shards left on the open
    engine session's workers (:mod:`planner.cg_shards`) where it was read in shards — a path
    of at least :data:`planner.dp.scale.SEGMENTED_LIMIT` forward blocks inside an open
    session — else None."""
    if isinstance(graph_or_path, (str, Path)):
        read = _read_sharded(graph_or_path, opts) if opts is not None else None
        return read if read is not None else (cg.read(graph_or_path), None)
    if hasattr(graph_or_path, "functions") and hasattr(graph_or_path, "var_bytes"):
        return graph_or_path, None
    raise HGraphError(f"plan() takes a cg.txt path or a planner.cg graph, "
                      f"not {type(graph_or_path).__name__}")


def _read_sharded(path, opts: EngineOptions):
    """The cg.txt read in shards by the open engine session's workers (the driver never
    holds its text; bench/NOTES_scale.md, issue 37), or None: below the scale threshold, with
    no session open for ``opts``, or where the shards' fast reader doubts the file."""
    from planner import cg_shards
    from planner.analyses.engine import current_session
    from planner.dp import scale

    head = cg_shards.header(path)
    s = current_session(opts)
    if s is None or head is None or head[1] // 2 < scale.SEGMENTED_LIMIT:
        return None
    return cg_shards.read(s, path)


def _check_choice(name, value, choices):
    if value not in choices:
        raise HGraphError(f"unknown {name} {value!r}; expected one of {', '.join(choices)}")


@dataclass
class Analysis:
    """What every later pass reads, made once by :func:`analyse`: the cg graph ``g``, its
    activation graph ``ir`` (the planner's one graph type), topological ``level`` of every
    node and ``depth``, the engine's ``supersteps``, and the no-recomputation baseline:
    ``baseline_peak`` (simulated, or Σ activation bytes past
    :data:`BASELINE_SCHEDULE_LIMIT` activations: ``baseline_kind``), its schedule and
    timeline (None then)."""

    g: object
    ir: ActivationGraph
    level: np.ndarray
    depth: int
    supersteps: int
    baseline_peak: int
    baseline_kind: str
    baseline_schedule: Schedule | None
    baseline_timeline: np.ndarray | None
    #: (solver, DP budget, check) -> what :func:`_replay` returned: a solve at a DP budget
    #: already solved on this analysis (a front's smallest budget, then its first point) is
    #: not solved again; the solver is deterministic.
    replays: dict = field(default_factory=dict, repr=False, compare=False)
    #: (a decision's stages, check) -> (schedule, replay) of :func:`_emit_and_replay`: budgets
    #: whose solves decide the same chain (most of the whole step's ladder) emit it once.
    emitted: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def act_sum(self) -> int:
        return int(self.ir.bytes.sum())


def analyse(g, opts: EngineOptions, sharded=None) -> Analysis:
    """The graph's activation graph, its levels on the engine and the baseline's peak;
    ``sharded``: the variable graph its shards left on the workers (:func:`_load`), where the
    levels then run."""
    stages = current_progress()
    ir = ActivationGraph.from_cg(g)
    with stages.stage("levels (engine)"):
        if sharded is not None:
            from planner.analyses.engine import bind_var_graph
            from planner.analyses.levels import var_levels

            level, supersteps = var_levels(sharded, ir.var, opts)
            bind_var_graph(opts, sharded, ir.var)     # the separators run on it too
        else:
            level, supersteps = levels(ir, opts=opts, with_supersteps=True)
    base_sched = base_tl = None
    if ir.n <= BASELINE_SCHEDULE_LIMIT:
        with stages.stage("baseline replay"):
            base_sched, base_sim = replay_baseline(g)
        baseline_peak, baseline_kind = base_sim.peak_bytes, "simulated"
        base_tl = base_sim.timeline
    else:
        baseline_peak, baseline_kind = int(ir.bytes.sum()), "activation_sum"
    return Analysis(g, ir, level, int(level.max(initial=-1)) + 1, supersteps, int(baseline_peak),
                    baseline_kind, base_sched, base_tl)


#: Re-solves with a tighter DP budget when the simulated peak exceeds the budget (bytes units).
FIT_TRIES = 8


def fit(a: Analysis, s: Solver, budget_bytes: int, check: bool = True):
    """(decision, model, schedule, sim): the plan of solver ``s`` whose replayed peak fits
    ``budget_bytes`` — solve, emit, verify — or the error naming the smallest budget that fits.

    The activations' kind of the budget search (:mod:`planner.search`): its candidates are
    keeping everything and the solver's chain at the budget, re-fitted (:func:`_fit`), its
    meter the replayed peak. A plan is never worse than not planning: in bytes units, when
    keeping everything fits, time-centric solvers keep everything and the others do when their
    plan would not peak lower (Chen's budget-free chain and reference units excepted: their
    first answer is the answer). Failing that, the smallest feasible budget — one pass where
    the solver has one (:meth:`Solver.direct_min_budget`), else bisection over
    :meth:`Solver.feasible` — and what its chain replays to.

    On the scale path (a window / front cap, time-centric) the candidates also hold every plan
    the solver's chains replayed to on this analysis so far (:func:`_replayed`), and the one
    of least replayed recompute that fits wins: the capped DP is not monotone in the budget (a
    thinned front can lose at budget B the chain it kept at a smaller one), so its re-solve at
    B may recompute more than a plan already found at a smaller budget, or, its re-fits
    overshooting, find none. Then a session's plans (a front's budgets) are monotone: at a
    larger budget never more recompute than at a smaller one asked before. A plan of one
    :func:`plan` call is unchanged by it (its only earlier replays are its own rejected
    re-fits); a session's depends on the budgets asked before, in order.
    """
    held = s.units == "bytes" and not s.budget_free      # the replay is held to the budget
    keep = held and a.baseline_schedule is not None      # keeping everything is a candidate
    cands = [("keep", a.baseline_peak)] if keep else []
    # time-centric, nothing beats keeping everything when it fits: no chain is solved then
    if not (keep and s.strategy == "time" and a.baseline_peak <= budget_bytes):
        found = _fit(a, s, budget_bytes, check)
        if found is not None and not held:               # reference units, Chen: the answer
            return found
        cands += [(found, found[3].peak_bytes)] if found is not None else []
        if held and s.scale and s.strategy == "time":   # the capped DP: plans found before
            cands += [(f, f[3].peak_bytes) for f in _replayed(a, s, check) if f is not found]
    best = search.cheapest(cands, budget_bytes, _fit_meter(s))
    if best is not None:
        return _keep_everything(a, check) if best[0] == "keep" else best[0]
    return _at_smallest(a, s, budget_bytes, check, keep)


def _fit_meter(s: Solver):
    """The meter of :func:`fit`'s candidates ``(found or "keep", replayed peak)``: time-centric,
    the least replayed recompute, then the lower peak; otherwise the lower peak. On a tie
    keeping everything (never worse than not planning). Off the scale path a time-centric fit
    has one candidate that can fit (keeping everything is asked first), so the two agree."""
    if s.strategy == "time":
        return lambda c: (c[1], (0 if c[0] == "keep" else c[0][3].recompute_cost, c[1],
                                 c[0] != "keep"))
    return lambda c: (c[1], (c[1], c[0] != "keep"))


def _replayed(a: Analysis, s: Solver, check: bool) -> list:
    """Every plan of solver ``s`` replayed on ``a`` (:func:`_replay`) with ``check``, in the
    order they were solved."""
    return [f for (sid, _, chk), f in a.replays.items()
            if sid == id(s) and chk == bool(check) and f is not None]


def _at_smallest(a: Analysis, s: Solver, budget_bytes: int, check: bool, keep: bool):
    """:func:`fit` when no candidate fits: the solver's chain at its smallest feasible budget
    when it fits after all, else the refusal naming the smallest budget that fits."""
    # every DP transition's peak (ckpt + 2·Δm + m(A) + m(B)) is at most 5·m(V): at that
    # budget all of them fit, so if the solver's options allow a plan at all, it is there
    top = max(5 * a.act_sum, budget_bytes + 1, 1)
    namer = s.min_budget_solver
    if namer.direct_min_budget():
        dp_min = namer.min_budget(top)
    else:
        with current_progress().stage("smallest feasible budget (bisection)"):
            dp_min = search.smallest_budget(namer.feasible,
                                            max(2 * a.act_sum, budget_bytes + 1, 1), top)
    if dp_min is None:
        raise HGraphError(
            f"no budget gives a plan with {s.options_text()} on {a.g.name}: not even "
            f"{top:,} bytes ({format_bytes(top)}), where every block fits; widen or drop the "
            f"DP window", exit_code=3)
    smallest = dp_min
    if s.units == "bytes" and not s.budget_free:
        at_min = _replay(a, namer, dp_min, check)
        if at_min[3].peak_bytes <= budget_bytes and namer is s:
            return at_min
        smallest = max(dp_min, at_min[3].peak_bytes)
        if keep:                                  # keeping everything is a plan too
            smallest = min(smallest, a.baseline_peak)
    raise s.infeasible(a.g.name, budget_bytes, a.baseline_peak, smallest)


def _fit(a: Analysis, s: Solver, budget_bytes: int, check: bool):
    """(decision, model, schedule, sim) whose *simulated* peak fits ``budget_bytes``, or None.

    The DP's model leaves out what its chain does not decide (gradients of parameters, which
    accumulate; the backward of the loss), so in exact bytes a chain at the model's limit can
    replay a little above the budget. Then the DP is re-run at a budget lowered by the excess,
    a few times at most. In the reference's units (its own accounting) and for
    Chen's budget-free chain the first answer is the answer.
    """
    dp_budget = budget_bytes
    for _ in range(FIT_TRIES):
        found = _replay(a, s, max(0, dp_budget), check)
        if found is None:
            return None
        peak = found[3].peak_bytes
        if s.units != "bytes" or s.budget_free or peak <= budget_bytes:
            return found
        lowered = _lowered(dp_budget, found[1], peak - budget_bytes)
        if a.baseline_schedule is None:
            # a large graph: the rejected plan's schedule and replay (~0.7 KB an activation)
            # are not kept while the next one is solved and emitted (bench/NOTES_scale.md)
            a.replays.pop(_replay_key(s, max(0, dp_budget), check), None)
            found = None
        dp_budget = lowered
    return None


def _lowered(dp_budget: int, model, over: int) -> int:
    """The next DP budget of :func:`_fit` after a chain replayed ``over`` bytes above the
    budget. On the scale path (the capped DP) it is lowered from the model peak the chain
    reached, not from the DP budget: a chain whose model sits below its DP budget re-solved
    to the same peak until the budget fell below it (four solves of minutes each at 10^6
    activations where two do: bench/NOTES_scale.md). Elsewhere (the exact DP, the MILP's own
    model) the DP budget is lowered by the excess, as it always was.

    >>> from types import SimpleNamespace as M
    >>> _lowered(1_000, M(on_scale_path=True, model_peak_bytes=900), 30)
    870
    >>> _lowered(1_000, M(on_scale_path=False, model_peak_bytes=900), 30)
    970
    """
    top = min(dp_budget, model.model_peak_bytes) if model.on_scale_path else dp_budget
    return top - over


def _replay_key(s: Solver, dp_budget: int, check: bool) -> tuple:
    """What a replay is kept under on the analysis (one solver, DP budget, check)."""
    return (id(s), int(dp_budget), bool(check))


def _replay(a: Analysis, s: Solver, dp_budget: int, check: bool):
    """(decision, model, schedule, sim) of the solver's chain at ``dp_budget``, or None:
    solve (a :class:`planner.decision.Decision`), emit (:func:`planner.emit.emit_decision`),
    verify (:func:`planner.simulate.replay`);
    kept on ``a`` (:attr:`Analysis.replays`) for the next ask."""
    key = _replay_key(s, dp_budget, check)
    if key not in a.replays:
        a.replays[key] = _solve_and_replay(a, s, dp_budget, check)
    return a.replays[key]


def _solve_and_replay(a: Analysis, s: Solver, dp_budget: int, check: bool):
    status, decision, model = s.solve(dp_budget)
    if status != "OK":
        return None
    return (decision, model, *_emit_and_replay(a, decision, check))


def _emit_and_replay(a: Analysis, decision: Decision, check: bool) -> tuple:
    """(schedule, replay) of ``decision``: emitted (:func:`planner.emit.emit_decision`) and
    verified (:func:`planner.simulate.replay`), both deterministic in the decision, so a
    decision made before on this analysis (kept while the graph has its baseline schedule: a
    small one) is not emitted again. A MILP decision (its own keep / recompute) is not kept."""
    key = (decision.stage.tobytes(), bool(check))
    if decision.keep is None and a.baseline_schedule is not None and key in a.emitted:
        return a.emitted[key]
    with current_progress().stage("schedule and replay"):
        if sliced.applies(a.ir.n, decision):      # the same schedule, a slice at a time
            schedule, sim = sliced.emit_and_replay(a.g, decision.stage, a.ir, check=check)
        else:
            schedule = emit_decision(a.g, decision, a.ir)
            sim = simulate.replay(a.g, schedule, check=check)
    if sim.violations:
        raise HGraphError(f"internal error: the emitted schedule fails the simulator: "
                          f"{sim.violations[0]}")
    if decision.keep is None and a.baseline_schedule is not None:
        a.emitted[key] = schedule, sim
    return schedule, sim


def _keep_everything(a: Analysis, check: bool):
    """(decision, model, schedule, sim) of the no-recomputation schedule: one block, nothing
    recomputed, every value freed after its last use."""
    sim = simulate.replay(a.g, a.baseline_schedule, check=check)
    return (Decision(np.zeros(a.ir.n, np.int64)), ModelStats.keep_everything(sim.peak_bytes),
            a.baseline_schedule, sim)


def plan(graph_or_path, budget="100%", *, solver: str = "approx", strategy: str = "time",
         engine: EngineOptions = EngineOptions(), limits: SolverLimits = SolverLimits(),
         certify: CertifyOptions | str = "on",
         accounting: AccountingOptions | str = "auto") -> Plan:
    """Plan recomputation for a graph under ``budget``; see the module docstring.

    ``budget``: bytes (int), or text as ``--budget`` takes it (``"2GB"``, ``"800MiB"``,
    ``"60%"`` of the no-recomputation peak). ``solver``: ``"approx"`` (default), ``"exact"``,
    ``"chen"`` (ignores the budget, as the reference does) or ``"milp"`` (Checkmate's MILP in
    the DP's model, :mod:`planner.milp`); ``strategy``: ``"time"`` (least recomputation) or
    ``"memory"`` (least checkpoint memory). The rest are grouped records
    (:mod:`planner.options`), each with its defaults stated there: ``engine``
    (:class:`hgraph.EngineOptions`): where the engine analyses run — the plan is the same for
    any of them, after a recovery too; ``limits`` (:class:`planner.options.SolverLimits`): how
    far a solver may go (lower sets, the approximate DP's window and front cap, the MILP's time
    and stages); ``certify`` (:class:`planner.options.CertifyOptions`, or its mode alone:
    ``"on"``, ``"lp"``, ``"off"``): the plan's lower bound on recomputation and gap;
    ``accounting`` (:class:`planner.options.AccountingOptions`, or its kind alone: ``"auto"``
    budgets the whole step of a graph with op arguments, :mod:`planner.whole_step`, and the
    activations of any other; ``"activations"``): what the budget counts, the units (bytes or
    the reference's scaled ints) and the replay's validity check.
    """
    with engine_session(engine):         # the engine stages share their workers
        return Planning(graph_or_path, solver=solver, strategy=strategy, engine=engine,
                        limits=limits, certify=certify, accounting=accounting).at(budget)


class Planning:
    """One graph and one solver, planned at as many budgets as asked (:meth:`at`), with
    :func:`plan`'s keywords (``budget`` aside: each :meth:`at` names its own).

    Why: a front of plans (the PyTorch bridge's, :func:`planner.torch.front.front`) asks one
    graph and one solver for a dozen budgets; a session analyses the graph once (levels on the
    engine, the baseline replay) and builds the solver's family once (the exact DP's lower sets,
    per scaling ratio), where a :func:`plan` per budget did both every time. Each plan is the
    one :func:`plan` returns at that budget: the solver and its family are deterministic, and
    what a solver keeps across budgets (families, known optima) only bounds searches that keep
    the unpruned DP's plan (:mod:`planner.dp.solve`).
    """

    def __init__(self, graph_or_path, *, solver: str = "approx", strategy: str = "time",
                 engine: EngineOptions = EngineOptions(), limits: SolverLimits = SolverLimits(),
                 certify: CertifyOptions | str = "on",
                 accounting: AccountingOptions | str = "auto"):
        self.t0 = time.perf_counter()
        _check_choice("solver", solver, SOLVERS)
        _check_choice("strategy", strategy, STRATEGIES)
        cert, acc = CertifyOptions.of(certify), AccountingOptions.of(accounting)
        if solver == "milp" and strategy != "time":
            raise HGraphError("the milp solver minimises recomputation (time-centric); "
                              "--strategy memory does not apply to it")
        self.engine, self.limits = engine, limits
        #: the session's settings by name, read by the solver and the plans
        self.args = dict(solver=solver, strategy=strategy, units=acc.units, check=acc.check,
                         certify=cert.mode, certify_time_limit=cert.time_limit)
        units, accounting = acc.units, acc.kind
        stages = current_progress()
        with stages.stage("reading the graph"):
            g, sharded = _load(graph_or_path, engine)
            self.g = g
        if g.num_forward == 0:
            raise HGraphError(f"{g.path or 'graph'}: no forward functions to plan")
        self.whole_step = None
        if accounting == "auto" and units == "bytes":
            from planner import step_front

            if step_front.applies(g):        # hgraph graph torch's: the budget is torch's step
                self.whole_step = step_front
        # a graph without op arguments (the reference's dumps: g.ops is None) never loads the
        # op table or its kernels: whole-step accounting is for graphs the op table can run
        if self.whole_step is None and accounting == "auto" and units == "bytes" \
                and g.ops is not None:
            from planner import whole_step

            if whole_step.applies(g):        # the budget holds the whole step
                self.whole_step = whole_step
        self.opts = opts = engine
        self.a = analyse(g, opts, sharded)                          # analyse, once
        del sharded                          # its pieces leave the workers' store
        self.solvers = {}                    # every solver made, by name (a MILP: by plan)
        self.s = self._solver(solver)

    def _solver(self, name: str, fresh: bool = False) -> Solver:
        """The session's solver ``name`` (made once), or with ``fresh`` a new one: a MILP's
        time limit is its plan's (:class:`planner.solver.MILPSolver`), so each of the
        whole-step ladder's plans gets its own, as a :func:`plan` of its own would."""
        if name in self.solvers and not fresh:
            return self.solvers[name][-1]
        args, a = self.args, self.a
        s = make_solver(self.g, name, args["strategy"], args["units"], self.opts, self.limits,
                        level=a.level, ag=a.ir)
        self.solvers.setdefault(name, []).append(s)
        return s

    def _engine(self) -> dict:
        """The report's ``engine``: where the analyses ran and their supersteps so far (the
        analysis's, and every family the session's solvers built)."""
        o = self.opts
        steps = self.a.supersteps + sum(s.engine_supersteps for made in self.solvers.values()
                                        for s in made)
        return dict(tasks=o.tasks, blocks=o.blocks, mode=o.mode, runtime=o.runtime,
                    supersteps=steps)

    def at(self, budget, keep_errors: bool = False):
        """The :class:`Plan` at ``budget`` (what :func:`plan` returns); a budget no plan fits
        raises its :class:`~hgraph.common.errors.InfeasibleError`, or with ``keep_errors``
        returns it."""
        from hgraph.common.errors import InfeasibleError
        from planner import certificate as cert_mod

        try:
            return self._at(budget, cert_mod)
        except InfeasibleError as err:
            if not keep_errors:
                raise
            return err

    def _at(self, budget, cert_mod):
        if self.whole_step is not None:      # the whole step's budget: a plan of plans
            args = self.args
            p, fields = self.whole_step.plan(
                lambda b, solver=None, certify=None: self._activations_at(b, cert_mod, solver,
                                                                         certify),
                self.g, budget, solver=args["solver"], strategy=args["strategy"],
                certify=args["certify"], least_cost=self._least_cost)
            p = dataclasses.replace(p, **fields, engine=self._engine(),
                                    seconds=time.perf_counter() - self.t0)
        else:
            p = self._activations_at(budget, cert_mod)
        self.t0 = time.perf_counter()
        return p

    def _least_cost(self, budget_bytes: int) -> int | None:
        """The least recomputation of any chain of the session's DP at ``budget_bytes`` (its
        optimum there: no plan of the activations at that budget or below recomputes less), or
        None where the DP is not exact (the scale path's window / front cap, the MILP, Chen) or
        has no plan. The whole step's search reads it (:func:`planner.whole_step.fit`)."""
        s = self._solver(self.args["solver"]) if self.args["solver"] in ("approx", "exact") \
            else None
        if s is None or s.scale or s.units != "bytes":
            return None
        status, _, model = s.solve(max(0, int(budget_bytes)))
        return int(model.model_recompute_cost) if status == "OK" else None

    def _activations_at(self, budget, cert_mod, solver: str | None = None,
                        certify: str | None = None) -> Plan:
        """The plan of the activations at ``budget`` (the reference's accounting in the
        session's units) with the session's analysis, by the session's solver or ``solver``,
        certified as the session says or as ``certify`` says."""
        args, a = self.args, self.a
        solver, certify = solver or args["solver"], certify or args["certify"]
        s = self.s if solver == args["solver"] and self.whole_step is None else \
            self._solver(solver, fresh=solver == "milp")
        strategy, units = args["strategy"], args["units"]
        certify_time_limit = args["certify_time_limit"]
        b = budget if isinstance(budget, Budget) else Budget.parse(budget)
        budget_bytes = b.resolve(a.baseline_peak)
        found = fit(a, s, budget_bytes, args["check"])              # solve, emit, verify
        model = found[1]
        cert = None
        if certify != "off":
            with current_progress().stage("certificate (lower bound)"):
                cert = cert_mod.certify(a.ir, budget_bytes, units, model, certify,
                                        **({} if certify_time_limit is None
                                           else {"time_limit": certify_time_limit}))
        return Plan.from_replay(a, found, Asked(solver, strategy, units, b, budget_bytes),
                                engine=self._engine(), seconds=time.perf_counter() - self.t0,
                                certificate=cert)
