"""The whole step's peak, predicted while planning: what a budget for a graph with op arguments holds.

A plan's ``peak_bytes`` counts activations and gradients as the reference does. The step the
NumPy executor (:mod:`planner.execute.executor`: lazy allocation, the ``pool`` allocator, freed
after last use) really runs holds more, and a meter outside the plan sees all of it:

* **parameters and inputs** (``parameters``, ``inputs``): built before the step, held throughout;
* the plan's **buffers**, split into ``activations``, ``gradients`` (of activations) and
  ``param_gradients`` (parameters' and inputs': the step's results, kept to its end);
* the **allocator** (``allocator``): the pool rounds each block up to its alignment and keeps
  freed blocks for reuse, a request taking the smallest free block large enough, whole; its
  reserved bytes are replayed here through the allocator's own free list
  (:class:`planner.pool.BestFit`), request for request;
* each **kernel's temporaries** (``temporaries``): im2col tiles (under the convolution workspace
  cap, ``workspace_bytes``), padded slabs, masks, statistics, NumPy's ufunc buffers, and a
  gradient a kernel returns in an array of its own before it is copied or added into the plan's
  buffer (the transient second copy while a gradient accumulates):
  :func:`planner.ops.kernel_temp_bytes`, next to the kernels;
* Python's own objects (``interpreter``): arrays' headers and table entries per buffer,
  what a kernel call creates and the free lists' growth over the steps -- the backend's, as
  its :class:`planner.backend_costs.BackendCosts` says (NumPy's measured under tracemalloc,
  :data:`planner.backend_costs.NUMPY`, which also gives the pool's alignment).

:func:`predict` replays a schedule's buffer timeline (:func:`planner.timeline.timeline`) and
returns the peak over the steps of the sum, the parts at that moment and the op at the peak;
:func:`predict_caps` does it for several convolution workspace caps from one replay (only the
temporaries depend on the cap). :func:`fit` chooses, among candidates fixed by the graph (a
ladder of activation budgets times the workspace caps), the plan whose predicted whole step
fits a budget, or names the smallest reachable one; :func:`plan` is :func:`planner.plan`'s
hook for graphs with op arguments.

Why here and not in :mod:`planner.execute`: planning prices a step through the op table
(:mod:`planner.ops`: shapes, temporaries) and the timeline; running it is the executor's, which
sits above the planner (``tests/test_layering.py``: nothing of the planner outside
``planner/execute`` imports it). :mod:`planner.execute.step_memory` keeps what needs the
executor (row plans' walks, :func:`~planner.execute.step_memory.evaluate`).

>>> from planner.execute import export, zoo, executor
>>> g = export.to_cg(zoo.build("mlp"))
>>> s = executor.plain_schedule(g)
>>> p = predict(g, s)
>>> r = executor.run(g, s)
>>> 0.9 * p.step_peak_bytes <= r.measured_step_peak_bytes <= p.step_peak_bytes
True
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hgraph.common.errors import HGraphError, InfeasibleError
from hgraph.common.formatting import format_bytes
from planner import search
from planner.backend_costs import NUMPY, BackendCosts
from planner.budget import Budget
from planner.cg import details_of
from planner.ops import CONV_WORKSPACE_BYTES, OPS, implements, kernel_temp_bytes, with_workspace
from planner.timeline import timeline
from planner.walk import PoolWalker

#: Whole-step accounting (graphs with op arguments) and the reference's (cg.txt dumps).
WHOLE_STEP, ACTIVATIONS = "whole-step", "activations"

#: The smallest convolution workspace cap :func:`fit` tries (a tile is at least one output row).
MIN_WORKSPACE_BYTES = 64 << 10

#: Parts of :attr:`StepPeak.breakdown`, in report order.
PARTS = ("parameters", "inputs", "activations", "gradients", "param_gradients", "allocator",
         "temporaries", "interpreter")



@dataclasses.dataclass
class StepPeak:
    step_peak_bytes: int
    breakdown: dict            # PARTS -> bytes at the peak moment, and "op": the op running then
    workspace_bytes: int       # the convolution workspace cap the kernels run under
    curve: np.ndarray          # int64 [steps]: predicted bytes during each schedule step

    def report(self) -> dict:
        """The report's fields (``accounting``, ``step_peak_bytes``, ``step_peak_breakdown``,
        ``workspace_bytes``)."""
        return {"accounting": WHOLE_STEP, "step_peak_bytes": int(self.step_peak_bytes),
                "step_peak_breakdown": dict(self.breakdown),
                "workspace_bytes": int(self.workspace_bytes)}


def applies(g) -> bool:
    """Whether ``g`` carries op arguments (zoo, traced, torch exports) the op table implements:
    whole-step accounting."""
    return implements(g.ops)


def leaf_bytes(g) -> tuple[int, int]:
    """(parameters, inputs): bytes of the leaves :func:`planner.execute.executor.leaves` builds
    (parameters are named by path)."""
    seen, params, inputs = set(), 0, 0
    for f in g.forward:
        d = details_of(f)
        for pos, (a, _) in enumerate(f.inputs):
            if g.is_activation[a] or a in seen:
                continue
            seen.add(a)
            nbytes = int(np.prod(d["in_shapes"][pos], dtype=np.int64)) * np.dtype(d["in_dtypes"][pos]).itemsize
            if g.var_names[a].startswith("/"):
                params += nbytes
            else:
                inputs += nbytes
    return params, inputs


class Pricer:
    """What a graph's steps cost beside their buffers, computed once per graph: the leaves'
    bytes and each kernel call's temporaries (:func:`planner.ops.kernel_temp_bytes`).

    Why: :func:`fit` prices a dozen schedules of one graph at every workspace cap, and the same
    call (a function, forward or backward, the gradients it writes or adds, under a cap) recurs
    in all of them; only a convolution's temporaries depend on the cap."""

    def __init__(self, g):
        self.g, self.nf = g, len(g.forward)
        self.leaves = leaf_bytes(g)
        self.names = [details_of(f)["op"] for f in g.forward]
        self._temps = {}

    def call(self, step):
        """(the kernel call a timeline step makes, or None for a forget; whether the workspace
        cap bears on it: a convolution's)."""
        op = step.op
        if op.kind != "compute":
            return None, False
        f = op.index
        return (f, tuple((j, acc) for j, _, acc in step.writes), step.grad_in is None), \
            self.names[f if f < self.nf else f - self.nf] == "conv2d"

    def temp(self, step, call, workspace) -> tuple[int, str]:
        """(kernel temporaries, the op's name) of timeline step ``step`` (its :meth:`call`)
        under the convolution workspace cap ``workspace`` (None: the kernels' own)."""
        if call is None:
            return 0, "forget"
        key = (call, workspace)
        if key in self._temps:
            return self._temps[key]
        f, g, nf = call[0], self.g, self.nf
        i = f if f < nf else f - nf
        d = details_of(g.forward[i])
        name = d["op"]
        opdef = OPS[name]
        attrs = with_workspace(d["attrs"], name, workspace)
        e = np.dtype(d["out_dtype"]).itemsize
        if f < nf:
            into = (-1,) if opdef.fills_out else ()
            got = kernel_temp_bytes(name, "forward", d["in_shapes"], d["out_shape"], attrs, e,
                                    into=into), f"{name} forward (function {i})"
        else:
            want = [j for j, _, _ in step.writes]
            into = [j for j, _, acc in step.writes if not acc] if opdef.fills_grads else []
            ones = 0 if step.grad_in is not None else \
                int(np.prod(d["out_shape"], dtype=np.int64)) * e
            got = ones + kernel_temp_bytes(name, "backward", d["in_shapes"], d["out_shape"],
                                           attrs, e, want=want, into=into), \
                f"{name} backward (function {nf + i})"
        self._temps[key] = got
        return got


def predict(g, schedule, *, recycle: bool = True, costs: BackendCosts = NUMPY,
            workspace: int | None = None) -> StepPeak:
    """The whole-step peak of ``schedule`` on ``g`` as :func:`planner.execute.executor.run`
    runs it on NumPy with the ``pool`` allocator (``recycle``: freed after last use;
    ``workspace``: the convolution workspace cap, None: :data:`planner.ops.CONV_WORKSPACE_BYTES`)."""
    return predict_caps(g, schedule, [workspace], recycle=recycle, costs=costs)[workspace]


def predict_caps(g, schedule, caps, *, recycle: bool = True, costs: BackendCosts = NUMPY,
                 pricer: Pricer | None = None) -> dict:
    """{cap: :func:`predict` at workspace cap ``cap``} for each of ``caps``, from one replay of
    the schedule's buffers through the pool (which no cap changes); ``pricer``: a
    :class:`Pricer` of ``g`` to share across schedules."""
    if not applies(g):
        raise HGraphError("whole-step prediction needs a graph with op arguments (zoo, traced)")
    pricer = pricer if pricer is not None else Pricer(g)
    tl = timeline(g, schedule, recycle=recycle)
    params, inputs = pricer.leaves
    walk = _Held(tl, g.is_activation, params + inputs, costs)
    base, held = walk.walk(tl.steps)
    n = len(tl.steps)
    out = {}
    calls = [pricer.call(step) for step in tl.steps]
    named = [None if conv else pricer.temp(step, call, None)
             for step, (call, conv) in zip(tl.steps, calls)]
    conv = [s for s, (_, c) in enumerate(calls) if c]
    for cap in caps:                     # only a convolution's temporaries depend on the cap
        for s in conv:
            named[s] = pricer.temp(tl.steps[s], calls[s][0], cap)
        temp = np.fromiter((t for t, _ in named), np.int64, n)
        curve = base + temp
        at = {}
        if n:
            s = int(np.argmax(curve))            # the first step at the peak
            live = int(held[s, :3].sum())
            at = {"parameters": params, "inputs": inputs, "activations": int(held[s, 0]),
                  "gradients": int(held[s, 1]), "param_gradients": int(held[s, 2]),
                  "allocator": int(held[s, 3]) - live, "temporaries": int(temp[s]),
                  "interpreter": int(base[s]) - params - inputs - int(held[s, 3]),
                  "op": named[s][1], "step": s + 1}
        peak = int(curve.max()) if n else 0
        out[cap] = StepPeak(max(peak, 0), at, CONV_WORKSPACE_BYTES if cap is None else int(cap),
                            curve)
    return out


class _Held(PoolWalker):
    """The prediction's visitor of a timeline's walk (:mod:`planner.walk`): per step, every
    part but the kernel's temporaries (``base``: leaves, the pool's reserved bytes, Python's
    objects) and the bytes live by part with the reserved ones (``held``); the temporaries
    depend on the workspace cap, the rest does not."""

    def __init__(self, tl, is_act, leaves: int, costs: BackendCosts):
        kind = (np.where(tl.grad, np.where(is_act[tl.var], 1, 2), 0) if tl.var.size
                else np.zeros(0, np.int64)).tolist()     # activation, its gradient, a param's
        super().__init__(tl.nbytes.tolist().__getitem__, kind.__getitem__, costs)
        self.leaves = leaves
        self.base = np.zeros(len(tl.steps), np.int64)
        self.held = np.zeros((len(tl.steps), 4), np.int64)

    def visit(self, s: int, step) -> None:
        self.computes += step.op.kind == "compute"
        self.base[s] = self.leaves + self.reserved + self.objects()
        self.held[s] = (*self.live_by, self.reserved)

    def finish(self, n: int):
        return self.base, self.held


# ---------------------------------------------------------------- choosing a plan that fits
def workspaces(top: int = CONV_WORKSPACE_BYTES):
    """The convolution workspace caps :func:`fit` tries, largest (fastest) first."""
    cap = int(top)
    while cap >= MIN_WORKSPACE_BYTES:
        yield cap
        cap //= 2


def smallest_step(g, schedule) -> StepPeak:
    """The lowest whole-step peak of ``schedule`` over the workspace caps."""
    return min(predict_caps(g, schedule, list(workspaces())).values(),
               key=lambda p: p.step_peak_bytes)


#: Activation budgets :func:`fit` plans at between the activations' smallest plan and keeping
#: everything (evenly spaced; each distinct schedule is a candidate).
LADDER = 8


def candidates(plan_at, g) -> list:
    """[(activation budget, plan, {workspace cap: StepPeak})]: the plans :func:`fit` chooses
    from, fixed by the graph alone (not by the budget asked): keeping everything, the
    activations' smallest plan and :data:`LADDER` plans between, each with every workspace cap
    (a cap above a step's largest im2col tile changes nothing: kept once)."""
    pricer, caps = Pricer(g), list(workspaces())
    return [(arg, p, _priced(g, p, caps, pricer)) for arg, p in _ladder(plan_at)]


def _ladder(plan_at, base=None) -> list:
    """[(activation budget, plan)]: :func:`candidates` before they are priced (``base``: the
    plan at ``"100%"`` when made already)."""
    base = base if base is not None else plan_at("100%")
    lowest, low_arg = _lowest_plan(plan_at)
    top = int(base.peak_bytes)
    bottom = int(lowest.budget_bytes if low_arg else lowest.peak_bytes)
    args = ["100%", low_arg] + sorted({int(bottom + (top - bottom) * k / (LADDER + 1))
                                       for k in range(1, LADDER + 1)}, reverse=True)
    return search.at_budgets(
        lambda arg: base if arg == "100%" else lowest if arg == low_arg else plan_at(arg), args,
        key=lambda p: p.schedule.dumps())


def _priced(g, p, caps, pricer) -> dict:
    """{workspace cap: StepPeak} of plan ``p``, a cap kept only where the step differs from
    the next larger cap's (a cap above a step's largest im2col tile changes nothing)."""
    steps, last = {}, None
    for cap, got in predict_caps(g, p.schedule, caps, pricer=pricer).items():
        if last is None or got.step_peak_bytes != last:
            steps[cap] = got
        last = got.step_peak_bytes
    return steps


def _rows(g, made, budget: Budget, strategy: str, base_steps: dict | None = None) -> tuple:
    """(:func:`fit`'s rows ``(order, activation budget, plan, StepPeak)``, the no-recomputation
    step, ``budget`` in bytes) of the ladder ``made`` (:func:`_ladder`) at ``budget``, pricing
    only the plans that can still win.

    Why: predicting a plan's step (its timeline replayed through the pool) is most of what a
    rung costs once its plan is made, and time-centric the order's first key is the plan's
    recomputation, known without the step. So the plans are priced cheapest first, and once
    a row fits, a plan recomputing more than it is never priced: no row of it could come
    first. Nothing fits: every plan has been priced (the refusal names the lowest step of
    all). Memory-centric the step comes first: every plan is priced. ``base_steps``: the
    first plan's, priced already."""
    pricer, caps = Pricer(g), list(workspaces())
    base_steps = base_steps or _priced(g, made[0][1], caps, pricer)
    base_step = base_steps[max(base_steps)]
    budget_bytes = budget.resolve(base_step.step_peak_bytes)
    rows, fits = [], None
    for n in sorted(range(len(made)), key=lambda n: made[n][1].recompute_cost
                    if strategy == "time" else 0):
        arg, p = made[n]
        if fits is not None and p.recompute_cost > fits:
            break
        for cap, st in (base_steps if n == 0 else _priced(g, p, caps, pricer)).items():
            rows.append(_row(n, arg, p, cap, st, strategy))
            if strategy == "time" and st.step_peak_bytes <= budget_bytes:
                fits = p.recompute_cost
    return rows, base_step, budget_bytes


def _row(n: int, arg, p, cap: int, st: StepPeak, strategy: str) -> tuple:
    """:func:`fit`'s row ``(order, activation budget, plan, StepPeak)`` of the ``n``-th plan of
    the ladder at workspace cap ``cap``: time-centric the least recomputation, then the
    largest cap (fastest kernels), then the lowest step; memory-centric the lowest step."""
    return ((p.recompute_cost, -cap, st.step_peak_bytes, n) if strategy == "time"
            else (st.step_peak_bytes, p.recompute_cost, -cap, n), arg, p, st)


def _keep_all_wins(plan_at, g, budget: Budget, least_cost) -> tuple:
    """(keeping everything's plan, its priced steps, the :class:`Fit` when it is
    :func:`fit`'s time-centric pick whatever the ladder holds, else None).

    Why: the ladder costs a dozen DP solves, emits and replays, and most budgets near 100 %
    end at keeping everything under a smaller workspace cap. Time-centric, a row that
    recomputes nothing comes before every row that recomputes, and every other plan of the
    ladder is planned at an activation budget below keeping everything's peak (one at or
    above it keeps everything too: the same schedule, left out). ``least_cost(b)`` is the
    DP's optimum at ``b`` (None where it is not exact or has no plan); the optimum only grows
    as the budget drops, and a plan's replayed recomputation is never below its model's. So
    when it is above 0 one below keeping everything's peak, no plan of the ladder recomputes
    nothing, and the pick is keeping everything's least row that fits, as over the ladder."""
    base = plan_at("100%")
    pricer, caps = Pricer(g), list(workspaces())
    base_steps = _priced(g, base, caps, pricer)
    base_step = base_steps[max(base_steps)]
    budget_bytes = budget.resolve(base_step.step_peak_bytes)
    rows = [_row(0, "100%", base, cap, st, "time") for cap, st in base_steps.items()]
    best = search.cheapest(rows, budget_bytes, _metered)
    if best is None or base.recompute_cost or least_cost is None \
            or not least_cost(int(base.peak_bytes) - 1):
        return base, base_steps, None
    return base, base_steps, Fit(best[1], best[2], best[3], budget_bytes, base_step)


def fit(plan_at, g, budget, *, strategy: str = "time", least_cost=None) -> "Fit":
    """The plan whose predicted whole step fits ``budget`` (a :class:`Fit`).

    ``plan_at(activation_budget)`` plans ``g``'s activations (:func:`planner.plan` with the
    reference accounting) at a budget in bytes or text; ``budget``: bytes or text as
    ``--budget`` takes it, a percentage of the no-recomputation *step*. Among
    :func:`candidates` (plan, workspace cap) whose predicted step fits, time-centric takes the
    least recomputation, then the largest cap (fastest kernels), then the lowest step;
    memory-centric the lowest step first. The candidates do not depend on the budget, so a
    lower budget never gets a higher predicted step (the choice is a minimum over a shrinking
    set). None fits: :class:`hgraph.common.errors.InfeasibleError` naming the lowest candidate
    step, the smallest reachable budget (the whole step's kind of :func:`planner.search.pick`).
    ``least_cost(activation_budget)``: the activations' DP optimum there, None where unknown
    (:func:`_keep_all_wins`: what lets keeping everything be the pick without the ladder).
    """
    b = budget if isinstance(budget, Budget) else Budget.parse(budget)
    base, base_steps = None, None
    if strategy == "time":
        base, base_steps, chosen = _keep_all_wins(plan_at, g, b, least_cost)
        if chosen is not None:
            return chosen
    made = _ladder(plan_at, base)
    rows, base_step, budget_bytes = _rows(g, made, b, strategy, base_steps)

    def refusal(smallest, _):
        return (f"budget {budget_bytes:,} bytes ({format_bytes(budget_bytes)}) is infeasible for "
                f"the whole step on {g.name}; the smallest reachable budget is {smallest:,} bytes "
                f"({format_bytes(smallest)}, "
                f"{100 * smallest / max(1, base_step.step_peak_bytes):.1f}% of the "
                f"no-recomputation step: parameters, gradients, kernel temporaries included)")

    best = search.pick(rows, budget_bytes, _metered, refusal)
    if strategy == "time":
        best = _cheaper_between(plan_at, g, made, best, budget_bytes)
    _, arg, p, st = best
    return Fit(arg, p, st, budget_bytes, base_step)


def _metered(row) -> tuple:
    """The meter of :func:`fit`'s rows ``(order, activation budget, plan, StepPeak)``: the
    predicted whole step, and the row's order."""
    return row[3].step_peak_bytes, row[0]


def _cheaper_between(plan_at, g, made, best, budget_bytes: int):
    """``best`` (a row of :func:`fit`, time-centric; ``made``: the ladder, :func:`_ladder`), or a cheaper plan planned at an
    activation budget between the ladder's steps above ``best``'s whose step fits.

    Why: the ladder's plans are a sample. Between the chosen step and the next (whose plan
    is cheaper but too big) lie plans the ladder never planned, and the step's peak is not
    monotone in the activation budget: zoo transformer at 98.5 % took a cost-18 plan where a
    cost-16 one, planned at a budget between two steps, fits. Each interval above the chosen
    step is walked down from its top: the plan at activation budget ``a`` peaks at ``P ≤ a``
    in the DP's model, and every budget in ``[P, a]`` gets a plan of the same cost (the
    optimum is monotone in the budget), so the next cheaper-or-equal plan below is the one at
    ``P − 1``. A walk stops at the interval's bottom, at a plan no cheaper than the best so
    far (lower budgets cost more), or at one that fits (the cheapest of its interval). So
    only plans cheaper than ``best`` are planned: on the zoo, none to a few."""
    from hgraph.common.errors import InfeasibleError

    caps, pricer = list(workspaces()), Pricer(g)
    floor = int(best[2].budget_bytes)
    ladder = sorted({int(q.budget_bytes): q for _, q in made
                     if int(q.budget_bytes) > floor}.items())
    n, lo = len(made), floor
    for top, q in ladder:
        while q.recompute_cost < best[0][0]:
            a = int(q.model_peak_bytes) - 1
            if a <= lo:
                break
            try:
                q = plan_at(a)
            except InfeasibleError:
                break
            if q.recompute_cost >= best[0][0]:
                break
            rows = [((q.recompute_cost, -cap, st.step_peak_bytes, n), a, q, st)
                    for cap, st in predict_caps(g, q.schedule, caps, pricer=pricer).items()]
            n += 1
            fits = search.cheapest(rows, budget_bytes, _metered)
            if fits is not None:
                best = fits
                break
        lo = top
    return best


def _lowest_plan(plan_at):
    """(the activations' plan at their smallest feasible budget, that budget)."""
    try:
        return plan_at(0), 0
    except InfeasibleError as err:
        return plan_at(int(err.min_budget_bytes)), int(err.min_budget_bytes)


@dataclasses.dataclass
class Fit:
    """What :func:`fit` chose: the activation budget it planned at, the plan, its step, the
    whole-step budget in bytes and the no-recomputation step."""

    activation_budget: object
    plan: object
    step: StepPeak
    budget_bytes: int
    baseline: StepPeak


def plan(plan_at, g, budget, *, solver: str, strategy: str, certify: str, least_cost=None):
    """:func:`planner.plan` under whole-step accounting (its hook for graphs with op arguments):
    (the chosen activations' plan, the fields whole-step accounting sets on it).

    ``plan_at(activation_budget, solver=None, certify=None)`` plans ``g``'s activations with the
    :func:`planner.plan` call's options (its one analysis of the graph and its solver, reused
    for every budget) but those given. The budget is the whole step's (:func:`fit`); Chen's
    chain ignores it, as with activations, and reports its step. The fields: ``budget``,
    ``budget_bytes`` (the whole step's) and ``step``, which puts in the report ``accounting``
    ("whole-step"), ``step_peak_bytes``, ``step_peak_breakdown``, ``workspace_bytes`` (the
    convolution workspace cap the plan runs under), ``activation_budget_bytes`` (what the
    activations were planned at) and ``step_baseline_peak_bytes`` (the no-recomputation step)."""
    if solver == "chen":
        p = plan_at(budget)
        base = predict(g, plan_at("100%", solver="approx", certify="off").schedule)
        b = budget if isinstance(budget, Budget) else Budget.parse(budget)
        chosen = Fit(p.budget_bytes, p, predict(g, p.schedule), b.resolve(base.step_peak_bytes),
                     base)
    else:
        chosen = fit(lambda a: plan_at(a, certify="off"), g, budget, strategy=strategy,
                     least_cost=least_cost)
        if certify != "off":
            chosen.plan = plan_at(chosen.activation_budget)
    p = chosen.plan
    step = {**chosen.step.report(), "activation_budget_bytes": int(p.budget_bytes),
            "step_baseline_peak_bytes": int(chosen.baseline.step_peak_bytes)}
    return p, {"budget": getattr(budget, "text", str(budget)),
               "budget_bytes": int(chosen.budget_bytes), "step": step}
