"""The plans of an imported training step, judged by the step each one really runs.

The planner's schedule decides which forward values the backward gets (:func:`kept_vars`);
torch then runs its own partition of the joint graph: each saved tensor lives until its last
backward use, each value not saved is recomputed once where the backward first needs it. The
planner's peak is a model of that step; the partition's liveness replay
(:func:`planner.torch.measure.predict_step_peak`, within 0.1% of the measured peak) and the
FLOPs of the ops the backward module runs again (:func:`planner.torch.measure.recompute_flops`)
are the step itself. So a target step peak is met by planning at a spread of budgets (with each
solver asked for), partitioning each distinct kept set, and taking the least-recompute one whose
replayed peak fits: :func:`front` builds the Pareto front, :func:`choose` picks from it.

    >>> import torch, planner.torch as pt
    >>> torch.manual_seed(0) and None
    >>> model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
    ...                             torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    >>> tg = pt.graph(model, torch.randn(8, 16), loss=lambda out: out.mean())
    >>> fr = front(tg)                              # step peak ascending, recompute descending
    >>> [a.step_peak < b.step_peak and a.recompute_flops > b.recompute_flops
    ...  for a, b in zip(fr, fr[1:])] == [True] * (len(fr) - 1)
    True
    >>> best = choose(fr, fr[-1].step_peak)         # the no-recompute peak: nothing recomputed
    >>> best.recompute_flops
    0
    >>> choose(fr, fr[0].step_peak) is fr[0]        # the lowest peak reachable
    True
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from hgraph.common.progress import current as current_progress
from planner import search
from planner.options import SolverLimits
from planner.torch import measure
from planner.torch.partition import graphs_only, keep_names, partition

__all__ = ["Candidate", "front", "for_budget", "covers", "keep_all", "keeps_everything", "choose", "measured_candidate",
           "seeded_candidate", "split", "union", "resolve_step_budget",
           "pick", "scale_limits", "POINTS", "SOLVERS", "EXACT_MAX_LOWER_SETS", "CAPPED_FROM",
           "LOWEST"]

#: Budgets planned per solver, spread evenly from the smallest feasible to keep-everything.
POINTS = 12
#: Solvers asked: the exact lower-set DP finds cheap pointwise recomputations the approximate
#: one misses; both are fast on imported models (tens of activations once folded).
SOLVERS = ("approx", "exact")
#: Graphs of more activations than this plan the approximate DP on its scale path
#: (:mod:`planner.dp.scale`: a window of :data:`~planner.dp.scale.DEFAULT_WINDOW` states, widened
#: until a plan exists, and fronts capped at :data:`~planner.dp.scale.DEFAULT_FRONT_CAP`
#: entries), unless the caller's ``limits`` name a window or cap (0: off). The unpruned DP is
#: O(L²F) a pass (F, a front's entries, grows with L on FLOP costs): cubic in the depth; the
#: capped one is linear. A count, not a clock, from measurement (bench/NOTES_torch.md, "Issue
#: 36: the capped DP on the torch front"; ``bench/torch_plan_speed.py scale --against-exact``):
#: on examples/torch/gpt.py-shaped models the capped front's pick at 90 % was the exact one's
#: at 116, 168 and 220 activations, for 1.2x less CPU at the first two and 2.0x at 220; the
#: examples/torch models (at most 177 activations: lstm) keep the exact DP's plans.
CAPPED_FROM = 200
#: The exact DP is asked only on graphs with at most this many lower sets (resnet: 258, gpt:
#: 95). A U-Net's skip connections give 13,321, and the front plans each solver at
#: :data:`POINTS` budgets, so past the limit the front keeps the approximate solver's plans
#: instead of spending minutes of a ``torch.compile`` on the exact ones. A count, not a
#: clock: the same graph gets the same front on any machine.
EXACT_MAX_LOWER_SETS = 2_000


@dataclass(frozen=True)
class Candidate:
    """One plan as torch runs it: the fx node names saved, the replayed step peak (bytes), the
    recomputed FLOPs, the planner's plan (its schedule, budget, report) and the joint graph
    it partitions."""

    keep: frozenset
    step_peak: int
    recompute_flops: int
    plan: object
    joint: object = None
    #: ``"plan"``: a planner plan, whose recompute episodes the backward follows;
    #: ``"min-cut"``: torch's min-cut partition (:mod:`planner.torch.seeds`), each value not
    #: saved recomputed once where the backward first needs it, as torch's own partition does.
    source: str = "plan"


def split(c: Candidate, num_fwd_outputs: int, joint=None):
    """(forward, backward) modules of candidate ``c`` on ``joint`` (default: its own)."""
    plan = c.plan if c.source == "plan" else None
    return partition(c.joint if joint is None else joint, num_fwd_outputs, c.keep, plan=plan)


def measured_candidate(tg, the_plan) -> Candidate:
    """The plan partitioned on ``tg.joint``: its kept names, replayed peak, recomputed FLOPs."""
    keep = frozenset(keep_names(the_plan.graph, the_plan.schedule))
    return _measured(Candidate(keep, 0, 0, the_plan, tg.joint), tg.num_fwd_outputs,
                     getattr(tg, "step_slack", 0))


def seeded_candidate(tg, keep, label: str) -> Candidate:
    """The keep set ``keep`` (fx node names of ``tg.joint``, chosen outside the planner: a
    min-cut partition) partitioned on ``tg.joint``; its plan is the planner model's view of it
    (:func:`planner.torch.seeds.keep_plan`, solver ``label``)."""
    from planner.torch.seeds import keep_plan

    c = Candidate(frozenset(keep), 0, 0, keep_plan(tg, keep, label), tg.joint, source="min-cut")
    return _measured(c, tg.num_fwd_outputs, getattr(tg, "step_slack", 0))


def _measured(c: Candidate, num_fwd_outputs: int, slack: int = 0) -> Candidate:
    """``c`` with its partition's replayed step peak plus ``slack`` (the graph's allocator
    slack, :func:`planner.torch.slack.measured_slack`) and recomputed FLOPs.

    Pricing reads the partition's graphs only, so they are built without their Python code
    (:func:`planner.torch.partition.graphs_only`); the candidate picked is split again, for
    real, by whoever runs it
    (:func:`split`)."""
    with graphs_only():
        fw, bw = split(c, num_fwd_outputs)
    return dataclasses.replace(c, step_peak=measure.predict_step_peak(fw, bw) + int(slack),
                               recompute_flops=measure.recompute_flops(c.joint, bw))


def front(tg, solvers=SOLVERS, points: int = POINTS,
          exact_max_lower_sets: int = EXACT_MAX_LOWER_SETS, seeds=None, **plan_kwargs) -> list:
    """The Pareto front (step peak ascending, recompute FLOPs descending) of ``tg``'s plans.

    ``tg``: a :class:`planner.torch.model_graph.TorchGraph`; ``plan_kwargs`` go to
    :func:`planner.plan` (``solver`` excepted: ``solvers`` lists them). The exact solver is
    skipped on graphs with more than ``exact_max_lower_sets`` lower sets
    (:data:`EXACT_MAX_LOWER_SETS`). ``seeds``: label -> keep set (fx names of ``tg.joint``)
    of partitions chosen elsewhere (:func:`planner.torch.seeds.min_cut_keeps`), offered beside
    the plans (:func:`union` says how the two meet). Deterministic: the same budgets, solvers,
    seeds and graph give the same front.

    Computed once per graph and arguments: the front is kept on ``tg`` (``tg.fronts``), so
    every later budget is a point picked from it at no cost (each call gets its own copies of
    the plans, whose reports :func:`pick` writes to). Per solver, the graph is analysed and
    the solver's family built once for all its budgets (:func:`planner.api.plans`), and a kept
    set met before is not partitioned again. The candidates are priced when the list is first
    read (:class:`_LazyFront`), or, read by :func:`union` first, only those that can be on
    the union's front.
    """
    key = _front_key(solvers, points, exact_max_lower_sets, seeds, plan_kwargs)
    cache = getattr(tg, "fronts", None)
    if cache is not None and key is not None and key in cache:
        return _LazyFront(cache[key])
    fr = _front(tg, solvers, points, exact_max_lower_sets, seeds, plan_kwargs)
    if cache is not None and key is not None:
        cache[key] = fr.pricing
    return fr


def _front_key(solvers, points, exact_max_lower_sets, seeds, plan_kwargs):
    """What a front depends on besides the graph, hashable (None: an argument that is not)."""
    try:
        key = (tuple(solvers), int(points), int(exact_max_lower_sets),
               tuple(sorted((str(k), frozenset(v)) for k, v in (seeds or {}).items())),
               tuple(sorted(plan_kwargs.items())))
        hash(key)
    except TypeError:
        return None
    return key


def _copies(fr: list) -> list:
    """The candidates of ``fr`` with plans of their own (a shallow copy and a fresh report)."""
    import copy

    out = []
    for c in fr:
        p = copy.copy(c.plan)
        p.report = dict(c.plan.report)
        out.append(dataclasses.replace(c, plan=p))
    return out


def _front(tg, solvers, points, exact_max_lower_sets, seeds, plan_kwargs) -> list:
    """The front of ``tg``'s plans and ``seeds``, planned now and priced when first read
    (:class:`_LazyFront`)."""
    plans = [p for _, fresh in _planned(tg, solvers, points, exact_max_lower_sets, plan_kwargs)
             for p in fresh]
    return _LazyFront(_Pricing(tg, plans, seeds))


class _Pricing:
    """One graph's front before pricing: the plans the DP made and the seeds (label -> keep
    set), each priced (partitioned and replayed: :func:`measured_candidate`,
    :func:`seeded_candidate`) once, when asked. Entries are the plans in planning order, then
    the seeds whose keep set no plan keeps (the min-cut partition of a plan's keep set is that
    plan's): :func:`union`'s order."""

    def __init__(self, tg, plans, seeds):
        self.tg, self.plans = tg, plans
        self.keeps = [frozenset(keep_names(p.graph, p.schedule)) for p in plans]
        seen = set(self.keeps)
        self.seeds = [(label, frozenset(keep)) for label, keep in (seeds or {}).items()
                      if frozenset(keep) not in seen]
        self.priced, self._bounds, self._whole = {}, None, None

    def __len__(self) -> int:
        return len(self.plans) + len(self.seeds)

    def is_plan(self, i: int) -> bool:
        return i < len(self.plans)

    def price(self, i: int) -> Candidate:
        """Entry ``i`` partitioned and replayed (once)."""
        if i not in self.priced:
            n = len(self.plans)
            self.priced[i] = (measured_candidate(self.tg, self.plans[i]) if i < n else
                              seeded_candidate(self.tg, self.seeds[i - n][1],
                                               self.seeds[i - n][0]))
        return self.priced[i]

    def bounds(self, i: int) -> tuple:
        """(step peak, recomputed FLOPs) plan ``i``'s price is at least
        (:class:`planner.torch.bounds.JointIndex` on the graph's joint; the replay's, without
        the graph's allocator slack, which only adds to the price)."""
        if self._bounds is None:
            from planner.torch.bounds import JointIndex

            index = JointIndex(self.tg.joint, self.tg.num_fwd_outputs)
            self._bounds = [index.bounds(k) for k in self.keeps]
        return self._bounds[i]

    def whole(self) -> list:
        """The front with every entry priced (:func:`union`)."""
        if self._whole is None:
            stages, n = current_progress(), len(self.plans)
            with stages.stage(f"step front: pricing {n} plans"):
                for i in range(n):
                    stages.position(i, n)
                    self.price(i)
            with stages.stage("step front: min-cut partitions"):
                for i in range(n, len(self)):
                    self.price(i)
            self._whole = union([[self.price(i) for i in range(len(self))]])
        return self._whole


class _LazyFront(list):
    """:func:`front`'s answer: the list of the front's candidates, priced in full the first
    time anything reads it (:meth:`_read`), so to every reader it is the whole front.

    Why lazy: ``compile`` plans two fronts of each graph (as traced, and with subexpressions
    merged) and keeps their :func:`union`; a plan of one that a plan of the other dominates is
    dropped there, and pricing it (a partition into fx modules and a replay) is most of a
    front's pricing. :func:`union` reads an unread front's plans unpriced instead and prices only
    those that bounds cannot rule out (:func:`_union_pricing`), giving the same candidates."""

    def __init__(self, pricing: _Pricing):
        super().__init__()
        self.pricing, self.read = pricing, False

    def _read(self) -> list:
        if not self.read:
            self.read = True
            list.extend(self, _copies(self.pricing.whole()))
        return self

    def __reduce_ex__(self, protocol):
        return list, (list(self._read()),)


def _reading(name: str):
    method = getattr(list, name)

    def read_first(self, *args, **kwargs):      # another front as an argument is read too
        args = [a._read() if isinstance(a, _LazyFront) else a for a in args]
        return method(self._read(), *args, **kwargs)

    read_first.__name__ = name
    return read_first


for _name in ("__iter__", "__len__", "__getitem__", "__contains__", "__reversed__", "__eq__",
              "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__add__", "__mul__",
              "__rmul__", "__iadd__", "__imul__", "__setitem__", "__delitem__", "__repr__",
              "__sizeof__", "append", "extend", "insert", "pop", "remove", "index", "count",
              "copy", "reverse", "sort", "clear"):
    setattr(_LazyFront, _name, _reading(_name))
_LazyFront.__radd__ = lambda self, other: list(other) + list(self._read())
_LazyFront.__hash__ = None


def _planned(tg, solvers, points, exact_max_lower_sets, plan_kwargs) -> list:
    """(solver, its plans) per solver the front asks: the plans at :data:`POINTS` budgets from
    the smallest that fits to keep-everything, each kept set once (the first plan met that
    keeps it), unpriced; a solver whose lower sets are too many is left out."""
    from hgraph.common.errors import InfeasibleError
    from planner.api import Planning
    from planner.lower_sets import TooManyLowerSets

    # the front plans at many budgets and keeps few plans: no lower bound for each
    plan_kwargs = {"certify": "off", **plan_kwargs}
    g = tg.cg
    plan_kwargs["limits"] = scale_limits(int(g.num_forward), plan_kwargs.get("limits"))
    stages = current_progress()
    sessions = []               # (keywords, Planning): one per solver and its options

    def session(kwargs):
        for kw, s in sessions:
            if kw == kwargs:
                return s
        sessions.append((kwargs, Planning(g, **kwargs)))
        return sessions[-1][1]

    with stages.stage("step front: the keep-everything plan"):
        top = int(session(dict(plan_kwargs, solver="approx")).at("100%").peak_bytes)
    seen, out = set(), []
    for solver in solvers:
        kwargs = dict(plan_kwargs, solver=solver)
        if solver == "exact":
            limits = kwargs.get("limits")
            kwargs["limits"] = dataclasses.replace(
                limits or SolverLimits(), max_lower_sets=min(
                    exact_max_lower_sets,
                    limits.max_lower_sets if limits else exact_max_lower_sets))
        with stages.stage(f"step front: {solver} plans"):
            try:
                planning = session(kwargs)
                # budget 1 fits no plan but a trivial graph's: the smallest budget that fits
                first = planning.at(1, keep_errors=True)
                lo = (int(first.min_budget_bytes) if isinstance(first, InfeasibleError)
                      else int(first.peak_bytes))
                budgets = np.unique(np.linspace(min(lo, top), top, points).astype(np.int64))
                got = []
                for k, b in enumerate(budgets):
                    stages.position(k, len(budgets))
                    got.append(planning.at(int(b)))
            except TooManyLowerSets:
                continue
        fresh = []
        for p in got:
            keep = frozenset(keep_names(g, p.schedule))
            if keep not in seen:
                seen.add(keep)
                fresh.append(p)
        out.append((solver, fresh))
    return out


def scale_limits(activations: int, limits: SolverLimits | None) -> SolverLimits:
    """``limits`` (default: :class:`~planner.options.SolverLimits`'s) with the approximate DP's
    scale path on (its default window and front cap) for a graph of more than
    :data:`CAPPED_FROM` activations, where the caller named neither a window nor a cap.

    >>> scale_limits(CAPPED_FROM + 1, None).dp_window, scale_limits(CAPPED_FROM, None).dp_window
    (8, None)
    >>> scale_limits(10_000, SolverLimits(dp_window=0, dp_front_cap=0)).dp_window   # asked: exact
    0
    """
    from planner.dp.scale import DEFAULT_FRONT_CAP, DEFAULT_WINDOW

    limits = limits or SolverLimits()
    if activations <= CAPPED_FROM or limits.dp_window is not None \
            or limits.dp_front_cap is not None:
        return limits
    return dataclasses.replace(limits, dp_window=DEFAULT_WINDOW, dp_front_cap=DEFAULT_FRONT_CAP)


def keep_all(tg, **plan_kwargs) -> list:
    """The front's keep-everything point alone: the plan at ``"100%"`` (which
    :func:`planner.plan` answers by keeping everything, as :func:`front`'s last point),
    partitioned and replayed."""
    import planner

    plan_kwargs = {"certify": "off", **plan_kwargs}
    return [measured_candidate(tg, planner.plan(tg.cg, budget="100%", **plan_kwargs))]


#: :func:`front`'s own keywords (the others are the planner's).
FRONT_KEYWORDS = ("solvers", "points", "exact_max_lower_sets", "seeds")


def for_budget(tg, budget, **kwargs) -> list:
    """The candidates :func:`pick` needs at ``budget``: the keep-everything point alone
    (:func:`keep_all`: one plan, one partition) when the budget covers its step peak
    (:func:`covers`), else the front's plans priced as the pick needs them (:class:`_Shortlist`:
    every plan planned, only those whose bounds say they could win partitioned; kept on ``tg``
    for the next budget), or the whole front where it is computed already or seeds join.

    Why the keep-everything point is then the whole front's pick: a plan keeps a subset of
    what the keep-everything plan keeps, so its partition recomputes a superset, and every
    recomputed op costs at least its output's element count
    (:func:`planner.torch.costs.op_flops`): no candidate recomputes fewer FLOPs, and one
    recomputing as many recomputes the same ops. Only where the front's first solver is the
    one :func:`keep_all` plans with (the approximate DP: :func:`union` keeps the first of equal
    points) and no seeds join (a min-cut partition is never dropped from a front).
    ``kwargs``: :func:`front`'s.
    """
    solvers = kwargs.get("solvers", SOLVERS)
    planned = _front_key(solvers, kwargs.get("points", POINTS),
                         kwargs.get("exact_max_lower_sets", EXACT_MAX_LOWER_SETS),
                         kwargs.get("seeds"),
                         {k: v for k, v in kwargs.items() if k not in FRONT_KEYWORDS})
    if planned is not None and planned in getattr(tg, "fronts", {}):
        return front(tg, **kwargs)                 # computed already: picked from, not planned
    if (not kwargs.get("seeds") and tuple(solvers)[:1] == ("approx",)
            and not _below_keep_all(budget)):
        with current_progress().stage("step front: the keep-everything plan"):
            fr = keep_all(tg, **{k: v for k, v in kwargs.items() if k not in FRONT_KEYWORDS})
        if covers(fr, budget):
            return fr
    if kwargs.get("seeds") or planned is None or getattr(tg, "fronts", None) is None:
        return front(tg, **kwargs)
    return _shortlist(tg, planned, kwargs).front(budget)


def _shortlist(tg, key, kwargs) -> _Shortlist:
    """The front's plans for ``tg`` with their bounds, kept on ``tg.fronts`` (apart from whole
    fronts) so a later budget prices only what it adds."""
    at = ("shortlist", key)
    if at not in tg.fronts:
        with current_progress().stage("step front: plans"):
            plans = [p for _, fresh in _planned(
                tg, kwargs.get("solvers", SOLVERS), kwargs.get("points", POINTS),
                kwargs.get("exact_max_lower_sets", EXACT_MAX_LOWER_SETS),
                {k: v for k, v in kwargs.items() if k not in FRONT_KEYWORDS})
                for p in fresh]
        tg.fronts[at] = _Shortlist(tg, plans)
    return tg.fronts[at]


class _Shortlist:
    """A front's plans priced lazily: each plan has lower bounds on its step peak and
    recomputed FLOPs from the joint graph (:mod:`planner.torch.bounds`, no partition built),
    and is partitioned and replayed (:func:`measured_candidate`) only when a budget's pick
    could be it, or could change with its price. :meth:`front` returns the candidates priced
    for a budget: :func:`pick` on them gives what it gives on the whole :func:`front` (same
    candidate, target and refusal; the method says why), for the price of a few partitions
    where the whole front partitions every plan."""

    def __init__(self, tg, plans):
        from planner.torch.bounds import JointIndex

        self.tg, self.plans = tg, plans
        index = JointIndex(tg.joint, tg.num_fwd_outputs)
        keeps = [frozenset(keep_names(p.graph, p.schedule)) for p in plans]
        got = np.array([index.bounds(k) for k in keeps], dtype=np.int64).reshape(-1, 2)
        self.peak_lb, self.flops_lb = got[:, 0], got[:, 1]
        self.priced = {}            # plan index -> Candidate

    def price(self, i: int) -> Candidate:
        """Plan ``i`` partitioned and replayed (once)."""
        if i not in self.priced:
            with current_progress().stage(f"step front: pricing plan {i + 1} of "
                                          f"{len(self.plans)}"):
                self.priced[i] = measured_candidate(self.tg, self.plans[i])
        return self.priced[i]

    def _price_below(self, peak: int, flops: int) -> None:
        """Price every plan whose bounds are at most (``peak``, ``flops``): any that could be
        at most that in both."""
        for i in np.flatnonzero((self.peak_lb <= peak) & (self.flops_lb <= flops)):
            self.price(int(i))

    def _lowest(self) -> int:
        """The least step peak of all the plans, pricing plans by their peak bound until no
        bound is below the least price found (a plan bounded at it can only tie)."""
        best = min((c.step_peak for c in self.priced.values()), default=None)
        for i in np.argsort(self.peak_lb, kind="stable"):
            if best is not None and self.peak_lb[i] >= best:
                break
            peak = self.price(int(i)).step_peak
            best = peak if best is None else min(best, peak)
        return best

    def front(self, budget) -> list:
        """Candidates on which :func:`pick` at ``budget`` gives what the whole front gives.

        Why: (1) the percent reference is the step peak of the keep-everything plans that
        :func:`union` keeps; each is priced, and so is every plan that could drop it (one with
        a peak and FLOPs at most its own), so the same ones are kept. (2) ``"min"``, and a
        refusal's smallest peak, are the least step peak of all: plans are priced by their
        peak bound until none can be lower. (3) :func:`choose`'s pick is the fitting plan of
        least (FLOPs, peak, order) over all plans (a plan :func:`union` drops is matched by
        one it keeps that fits and is no worse); plans are priced in order of their FLOPs
        bound, skipping those whose peak bound is over the target, until the bound passes
        the best FLOPs found: none after can be better.
        """
        everything = [i for i, p in enumerate(self.plans) if p.recompute_cost == 0]
        for i in everything:
            c = self.price(i)
            self._price_below(c.step_peak, c.recompute_flops)
        if not any(keeps_everything(c) for c in self._union()):
            for i in range(len(self.plans)):          # resolve_step_budget's fallbacks
                self.price(i)
            return self._union()
        target = (self._lowest() if _is_lowest(budget)
                  else resolve_step_budget(self._union(), budget))
        best = None
        for i in np.lexsort((np.arange(len(self.plans)), self.flops_lb)):
            if best is not None and self.flops_lb[i] > best[0]:
                break
            if self.peak_lb[i] > target:
                continue
            c = self.price(int(i))
            key = (c.recompute_flops, c.step_peak, int(i))
            if c.step_peak <= target and (best is None or key < best):
                best = key
        if best is None:
            self._lowest()                               # pick names it in the refusal
        return self._union()

    def _union(self) -> list:
        """:func:`union` of the priced plans (in the order they were planned), own copies."""
        return _copies(union([[self.priced[i] for i in sorted(self.priced)]]))


def _is_lowest(budget) -> bool:
    """Whether ``budget`` is :data:`LOWEST` (``"min"``), which :func:`resolve_step_budget`
    answers from the least step peak of all plans."""
    return isinstance(budget, str) and budget.strip().lower() == LOWEST


def _below_keep_all(budget) -> bool:
    """``"min"`` or a percentage under 100: below the keep-everything step by definition
    (:func:`resolve_step_budget`), so :func:`for_budget` need not plan that step to know."""
    from planner.budget import Budget

    if _is_lowest(budget):
        return True
    b = budget if isinstance(budget, Budget) else Budget.parse(budget)
    return b.percent is not None and b.percent < 100


def covers(fr: list, budget) -> bool:
    """Whether ``budget`` (resolved on ``fr``, :func:`resolve_step_budget`) is at least the
    step peak of every keep-everything plan on ``fr`` (:func:`keeps_everything`): then one of
    them is the pick (:func:`for_budget` says why)."""
    peaks = [c.step_peak for c in fr if keeps_everything(c)]
    return bool(peaks) and resolve_step_budget(fr, budget) >= max(peaks)


def union(fronts: list) -> list:
    """The candidates of ``fronts`` by step peak (ties to the one listed first): the Pareto
    front (step peak ascending, recompute FLOPs strictly descending) of the planner's plans,
    and every distinct min-cut partition (:attr:`Candidate.source`).

    The replay runs a partition's fx graphs unfused; under Inductor a min-cut partition it
    ranks below a plan, or below another min-cut partition, can be the lower one by the
    allocator (torch chose it pricing Inductor's fusion: resnet at
    ``activation_memory_budget`` 1.0, bench/NOTES_torch.md). So the replay drops plans only;
    the few min-cut partitions (one per distinct budget's set) all stay. A front of plans alone
    is strictly monotone.
    """
    if any(isinstance(fr, _LazyFront) and not fr.read for fr in fronts):
        return _union_pricing(fronts)
    found = [c for fr in fronts for c in fr]
    order = sorted(range(len(found)), key=lambda i: (found[i].step_peak,
                                                     found[i].recompute_flops, i))
    best, out, seen = None, [], set()
    for c in (found[i] for i in order):
        if c.source != "plan":
            if c.keep not in seen:
                seen.add(c.keep)
                out.append(c)
        elif best is None or c.recompute_flops < best:
            out.append(c)
            best = c.recompute_flops
    return out


def _union_pricing(fronts: list) -> list:
    """:func:`union` of ``fronts``, where an unread :class:`_LazyFront` is priced only as far
    as the union needs: the same candidates, in the same order.

    Why the same: the union of fronts is the union of their entries listed one after the other
    (a front is the union of its own entries, and a plan one front drops is dropped by an
    earlier entry of the same front, with a recompute at most its own). A plan is dropped when
    a plan before it in (step peak, FLOPs, position) order recomputes at most as much. So a
    plan whose lower bounds (:meth:`_Pricing.bounds`) are at least a priced plan's step peak
    and FLOPs, strictly in one of them or listed after it, is dropped, priced or not, and is
    not priced. Min-cut partitions are never dropped by a plan (:func:`union`), so all are
    priced. Plans are tried by ascending bound, so the ones that drop others are priced first.
    """
    entries = []
    for fr in fronts:
        lazy = isinstance(fr, _LazyFront) and not fr.read
        entries += ([(fr.pricing, i) for i in range(len(fr.pricing))] if lazy
                    else [(None, c) for c in fr])
    stages = current_progress()
    priced, pending = {}, []
    with stages.stage("step front: min-cut partitions"):
        for k, (pricing, i) in enumerate(entries):
            if pricing is None:
                priced[k] = i
            elif not pricing.is_plan(i):
                priced[k] = _copies([pricing.price(i)])[0]
    with stages.stage("step front: bounds"):
        pending = [(*pricing.bounds(i), k) for k, (pricing, i) in enumerate(entries)
                   if pricing is not None and pricing.is_plan(i)]
    plans = [(c.step_peak, c.recompute_flops, k) for k, c in priced.items() if c.source == "plan"]
    with stages.stage(f"step front: pricing the plans of {len(pending)} that can be on it"):
        for n, (peak, flops, k) in enumerate(sorted(pending)):
            stages.position(n, len(pending))
            if any(p <= peak and f <= flops and (p < peak or f < flops or j < k)
                   for p, f, j in plans):
                continue
            pricing, i = entries[k]
            priced[k] = c = _copies([pricing.price(i)])[0]
            plans.append((c.step_peak, c.recompute_flops, k))
    return union([[priced[k] for k in sorted(priced)]])


#: The budget that asks for the lowest step peak the front reaches.
LOWEST = "min"


def resolve_step_budget(fr: list, budget) -> int:
    """A budget (bytes, ``"60%"``, ``"2MB"``, or :data:`LOWEST`) as a step peak in bytes;
    percent of the keep-all step's replayed peak (the highest among the plans that keep
    everything, :func:`keeps_everything`: the last point of a front of plans)."""
    from planner.budget import Budget

    if _is_lowest(budget):
        return min(c.step_peak for c in fr)
    keep_all = ([c.step_peak for c in fr if keeps_everything(c)]
                or [c.step_peak for c in fr if c.recompute_flops == 0]
                or [c.step_peak for c in fr])
    return Budget.parse(budget).resolve(max(keep_all))


def keeps_everything(c: Candidate) -> bool:
    """A plan that recomputes nothing in the planner's model (its partition may still
    recompute constant fills the model does not hold, such as an LSTM's zero initial state)."""
    return c.source == "plan" and c.plan.recompute_cost == 0


def choose(fr: list, step_peak: int) -> Candidate:
    """The least-recompute candidate whose replayed peak is at most ``step_peak`` (the lowest
    peak on the front where none fits)."""
    best = search.cheapest(fr, step_peak, _metered)
    return fr[0] if best is None else best


def _metered(c: Candidate) -> tuple:
    """The meter of the torch kind (:mod:`planner.search`): the replayed step's peak, and the
    order among those that fit: least recompute, then the lower step."""
    return c.step_peak, (c.recompute_flops, c.step_peak)


def pick(fr: list, budget) -> Candidate:
    """:func:`choose` for ``budget`` (bytes, percent, or ``"min"``: :func:`resolve_step_budget`),
    by the one budget search (:func:`planner.search.pick`); the plan's report gains ``step_peak_bytes``, ``step_recompute_flops``, ``step_budget_bytes``
    and sets ``within_budget`` by the step's replayed peak against that budget.

    A budget below every plan's step peak raises :class:`hgraph.common.errors.InfeasibleError` (one
    line naming the smallest reachable step peak, ``err.min_budget_bytes``): a budget is a
    promise, never silently raised.
    """
    from hgraph.common.formatting import format_bytes

    target = resolve_step_budget(fr, budget)

    def refusal(lowest, _):
        top = resolve_step_budget(fr, "100%")
        return (f"step budget {format_bytes(target)} is below the smallest step peak hgraph "
                f"reaches, {format_bytes(lowest)} ({100 * lowest / top:.1f}% of the keep-all "
                f"step; budget '{LOWEST}' asks for it)")

    c = search.pick(fr, target, _metered, refusal)
    c.plan.report.update(step_peak_bytes=c.step_peak, step_recompute_flops=c.recompute_flops,
                         step_budget_bytes=target, within_budget=c.step_peak <= target)
    return c
