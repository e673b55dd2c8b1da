"""torch.compile with hgraph as Inductor's partitioner, choosing plans by the step they run.

:class:`HGraphPartitioner` is a ``torch._inductor.config.custom_partitioner_fn``: it imports the
joint graph Inductor hands it (:func:`planner.torch.model_graph.from_joint`), takes the plan that
fits the budget from the plan front (:mod:`planner.torch.front`) and splits the graph by it
(:func:`planner.torch.partition.partition`). :func:`compile_model` wraps a model with it.
"""

from __future__ import annotations

import itertools
import types

import torch
import torch._inductor.custom_graph_pass  # noqa: F401  (CustomPartitionerFn)

from hgraph.common.errors import HGraphError
from planner import search
from planner.torch import capture as cap
from planner.torch import front as front_mod
from planner.torch.dynamo_cache import StepFrames
from planner.torch.model_graph import from_joint
from planner.torch.seeds import (MIN_CUT_BUDGETS, min_cut_keeps, min_cut_partition,
                                 representable, saved_names)

__all__ = ["HGraphPartitioner", "CompiledStep", "compile_model", "fresh_function",
           "TORCH_DEFAULT", "TORCH_POINT", "TRIALS", "torch_point"]

_compiles = itertools.count()
#: ``fronts`` key prefix of a graph's keep-everything plans alone (:meth:`HGraphPartitioner._keep_all`).
KEEP_ALL = "keep-all"
#: :attr:`HGraphPartitioner.trial` that splits by torch.compile's own partition (the min-cut
#: as Inductor calls it): the step percent budgets are measured against.
TORCH_DEFAULT = "torch.compile default"
#: Front candidates the first call of an input shape compiles and measures, besides
#: torch.compile's default step, before it settles (each costs Dynamo, AOTAutograd, Inductor
#: and two runs of the step).
TRIALS = 3
#: How far over the budget the first trial may reach for one of torch's own min-cut
#: partitions by the better of the replay's two calibrations (:meth:`CompiledStep._caps`): the
#: offset model's error on gpt's measured candidates (realistic bench, issue 35) was -2.2% to
#: +1.3% of the measured peak; vit's min-cut 0.6 at torch 0.6's own peak needed 1.1%.
SEED_REACH = 0.02
#: Prefix of a budget that is torch.compile's own step at an ``activation_memory_budget``:
#: ``"torch:0.4"`` asks for a step no larger than torch.compile's at 0.4, measured the same way.
TORCH_POINT = "torch:"


def torch_point(budget) -> float | None:
    """The ``activation_memory_budget`` of a ``"torch:B"`` budget (0 < B <= 1), None for any
    other budget; a malformed one is refused in one line.

    Why a budget of this kind: a user moving from ``torch.compile`` with
    ``activation_memory_budget=B`` wants a step no larger and no slower than the one torch
    runs there, and no byte count says that before both are measured: the replay ranks
    Inductor's steps only roughly (ResNet-50 at 160 px: torch's 0.4 partition replays 2.4 %
    above its measured peak, torch's default 8.5 % below, bench/NOTES_torch.md), so a budget
    in bytes at torch's peak takes whichever candidate the calibration expects to fit, often
    one recomputing more than torch's own.

    >>> torch_point("torch:0.4"), torch_point("60%"), torch_point(1000)
    (0.4, None, None)
    """
    if not (isinstance(budget, str) and budget.strip().lower().startswith(TORCH_POINT)):
        return None
    text = budget.strip()[len(TORCH_POINT):].strip()
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:
        raise HGraphError(f"bad budget {budget!r}: {TORCH_POINT}B takes torch.compile's "
                          f"activation_memory_budget B, a number in (0, 1]")
    return value


def _budget_kinds(budget) -> tuple:
    """(lowest, point, parsed) of a ``compile`` budget: ``"min"``, ``"torch:B"``'s B
    (:func:`torch_point`), else the :class:`planner.budget.Budget` (bytes or a percent); a bad
    one is refused in one line. One reading for the check before any compile and the first
    call of each shape."""
    from planner.budget import Budget

    lowest = isinstance(budget, str) and budget.strip().lower() == front_mod.LOWEST
    point = None if lowest else torch_point(budget)
    parsed = None if lowest or point is not None else Budget.parse(budget)
    return lowest, point, parsed


def fresh_function(fn):
    """``fn`` with a code object of its own. Dynamo caches compiled code per code object, and
    with modules inlined its guards accept another model of the same structure: a second
    ``torch.compile`` of the same lambda would reuse the first one's partition (its plan, its
    budget) without asking the partitioner again."""
    code = fn.__code__.replace(co_name=f"{fn.__code__.co_name}_hgraph_{next(_compiles)}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__,
                              fn.__closure__)


class HGraphPartitioner(torch._inductor.custom_graph_pass.CustomPartitionerFn):
    """Inductor's partitioner replaced by hgraph: split the joint graph by the plan that fits
    ``budget`` as the step really runs.

    ``budget``: the step's peak, in bytes or percent of the no-recompute step's peak. The plan
    is chosen on the joint graph Inductor hands over (decomposed as it will compile it) from
    the plan front (:func:`planner.torch.front.front`): the least-recompute plan whose replayed
    partition peak (``measure.predict_step_peak``: the unfused fx graph, not Inductor's step)
    fits; ``"min"``: the lowest; a budget below every plan's peak raises
    :class:`hgraph.common.errors.InfeasibleError` naming the smallest reachable one.
    ``plan_kwargs`` go to the planner; ``fronts``: a dict shared between partitioners to reuse
    the front of a graph already planned (keyed by the graph's text). ``self.plans``: the plans
    used, their reports carrying ``step_peak_bytes`` / ``step_recompute_flops``;
    ``self.parts``: (joint, forward, backward) modules of each partition (to measure them);
    ``self.seconds``: the time spent in this partitioner (planning, partitioning, replaying).
    A budget at or above the keep-everything step's peak (the default, ``"100%"``) plans
    just that step (:meth:`_keep_all`: the same choice the whole front gives, in a fraction of
    the time); ``whole_front=True`` builds the whole front anyway (a bench that
    measures every candidate).
    The front joins the plans of the joint graph as traced and of its copy with common
    subexpressions merged (as torch's min-cut first does; on a CNN the backward then reads the
    forward's batch-norm pieces, on a transformer it reads more forward values): each plan is
    partitioned on the graph it was made on. Beside the plans, the front offers torch's own
    min-cut partitions at ``min_cut_budgets`` (``activation_memory_budget`` values; empty: none),
    which Inductor's fusion can make the better choice (:mod:`planner.torch.seeds`).
    ``progress``: how planning a front (tens of seconds on a model of some size) shows on
    stderr: ``"auto"`` (a live bar on a terminal, nothing in a pipe or log), ``"bar"``,
    ``"plain"`` (a line per stage) or ``"off"``; inside a job that already tracks its stages
    (the CLI), its tracker shows them.
    """

    def __init__(self, budget="100%", fronts=None, min_cut_budgets=MIN_CUT_BUDGETS,
                 progress: str = "auto", whole_front: bool = False, **plan_kwargs):
        from hgraph.common.progress import KINDS

        if progress not in KINDS:
            raise HGraphError(f"progress must be one of {', '.join(KINDS)}, got {progress!r}")
        self.budget, self.plan_kwargs, self.plans, self.parts = budget, plan_kwargs, [], []
        self.progress = progress
        self.seconds = 0.0
        self.whole_front = whole_front
        self.min_cut_budgets = tuple(min_cut_budgets or ())
        self.fronts = {} if fronts is None else fronts
        #: What the next compile splits by (set by :class:`CompiledStep`, which verifies each
        #: by the allocator): None, the pick by the replay at :attr:`budget` (:meth:`pick`);
        #: :data:`TORCH_DEFAULT`, torch.compile's own partition; ``{key: i}``, candidate ``i``
        #: of the front of each graph ``key`` (a step Dynamo splits has several graphs; one
        #: the dict leaves out gets torch.compile's own partition).
        self.trial = None
        #: :data:`TORCH_DEFAULT` trials plan the whole front as well (a budget other than
        #: "100%" chooses among its candidates once torch's default step is measured).
        self.need_front = True
        #: graph key -> the :class:`Candidate` of torch.compile's default partition of it.
        self.defaults = {}
        #: The ``activation_memory_budget`` of torch's partitions this partitioner makes where
        #: a trial says :data:`TORCH_DEFAULT` (None: the one configured, torch.compile's default
        #: step); another value makes torch's step at that point, kept in :attr:`points`.
        self.torch_budget = None
        self.points = {}
        #: Graphs this partitioner was handed (one per Dynamo graph; a graph break makes more,
        #: a cached compile none) and their keys.
        self.calls, self.keys = 0, []
        #: Graphs partitioned by the choice made for the budget in the step accepted (all the
        #: graphs Dynamo made of it, or 0 where a cached compile reached no partitioner), and
        #: whether the budget covers the whole step (its measured peak, every graph and the
        #: code between them, was checked against it): :class:`CompiledStep` sets both.
        self.graphs_planned, self.budget_covers_step = 0, False

    def __call__(self, gm, joint_inputs, **kwargs):
        import time

        t0 = time.perf_counter()
        try:
            return self._partition(gm, joint_inputs, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0

    def _partition(self, gm, joint_inputs, **kwargs):
        from planner import cg

        n_out = kwargs["num_fwd_outputs"]
        tg = from_joint(gm, n_out, decompose=True)
        key = cg.dumps(tg.cg)
        self.calls += 1
        self.keys.append(key)
        if isinstance(self.trial, dict) and key in self.trial:
            fr, traced_gm, old_merged = self.fronts[key]
            return self._split(fr[self.trial[key]], gm, traced_gm, old_merged, n_out)
        if self.trial is not None:       # TORCH_DEFAULT, or a graph a trial leaves at it
            return self._torch_default(tg, key, gm, joint_inputs, **kwargs)
        if key not in self.fronts:       # the graph as traced, and with its subexpressions merged
            merged_gm = cap.cse(gm)
            merged = from_joint(merged_gm, n_out, decompose=True)
            if self._keep_all(tg, merged, gm, merged_gm, key, joint_inputs, **kwargs):
                key = (KEEP_ALL, key)
            else:
                self._plan_front(tg, key, gm, merged_gm, merged, joint_inputs, **kwargs)
        fr, traced_gm, old_merged = self.fronts[key]
        return self._split(self.pick(fr), gm, traced_gm, old_merged, n_out)

    def _split(self, c, gm, traced_gm, old_merged, n_out):
        """Forward and backward of candidate ``c`` on this compile's joint graph ``gm``."""
        import dataclasses

        # a front planned in another compile holds that compile's joint graph, whose values are
        # another fake mode's: split this compile's own (same node names, same graph)
        if gm is not traced_gm:
            if c.joint is traced_gm:
                c = dataclasses.replace(c, joint=gm)
            elif c.joint is old_merged:
                c = dataclasses.replace(c, joint=cap.cse(gm))
        self.plans.append(c.plan)
        fw, bw = front_mod.split(c, n_out)
        self.parts.append((c.joint, fw, bw))
        return fw, bw

    def _plan_front(self, tg, key, gm, merged_gm, merged, joint_inputs, **kwargs):
        """The whole front of graph ``key`` (its plans as traced and with subexpressions merged,
        and torch's min-cut partitions) into :attr:`fronts`, unless there."""
        if key in self.fronts:
            return
        with _progress(self.progress) as stages, stages.stage("hgraph: planning the step"):
            with stages.stage("torch's min-cut partitions"):
                seeds = min_cut_keeps(merged_gm, joint_inputs, self.min_cut_budgets, **kwargs)
            self.fronts[key] = (front_mod.union([
                front_mod.front(tg, **self.plan_kwargs),
                front_mod.front(merged, seeds=seeds, **self.plan_kwargs)]), gm, merged_gm)

    def _torch_default(self, tg, key, gm, joint_inputs, **kwargs):
        """torch.compile's own partition of ``gm`` (the min-cut as Inductor calls it, at the
        ``activation_memory_budget`` configured: torch.compile's default step, or at
        :attr:`torch_budget`), its candidate kept in :attr:`defaults` (the replay a measured
        step calibrates; :attr:`points` for another ``torch_budget``), and the whole front when
        :attr:`need_front`."""
        n_out = kwargs["num_fwd_outputs"]
        merged_gm = cap.cse(gm)
        merged = from_joint(merged_gm, n_out, decompose=True)
        if self.need_front:
            self._plan_front(tg, key, gm, merged_gm, merged, joint_inputs, **kwargs)
        point = self.torch_budget
        work, fw, bw = min_cut_partition(gm, joint_inputs, point, **kwargs)
        label = TORCH_DEFAULT if point is None else f"torch.compile {point:g}"
        c = front_mod.seeded_candidate(merged, representable(merged_gm, saved_names(bw)),
                                       label)
        (self.defaults if point is None else self.points)[key] = c
        self.plans.append(c.plan)
        self.parts.append((work, fw, bw))
        return fw, bw

    def _keep_all(self, tg, merged, gm, merged_gm, key, joint_inputs, **kwargs):
        """Plan just the keep-everything step (traced and merged graph) when the budget is at
        least its step peak, and say whether it is.

        Why this is the front's pick: a plan keeps a subset of what the keep-everything plan
        keeps, so its partition recomputes a superset and no plan recomputes less; the pick,
        the least-recompute candidate that fits, is a keep-everything plan. Where those still
        recompute something (constant fills such as an LSTM's zero initial state, outside the
        planner's model), torch's min-cut partition at ``activation_memory_budget`` 1.0 (its
        default, the one that saves the most) joins them, as it might save those. This is
        ``compile``'s default (``"100%"``): two plans and two replays (and at most one
        min-cut), not a front (tens of seconds). False when the budget is lower, or ``"min"``,
        or the partitioner must see the whole front (:attr:`whole_front`). The candidates are
        kept in ``self.fronts`` under ``(KEEP_ALL, key)``, apart from whole fronts: a later
        partitioner sharing the dict at another budget plans the whole front."""
        if self.whole_front or (isinstance(self.budget, str)
                                and self.budget.strip().lower() == front_mod.LOWEST):
            return False
        if (KEEP_ALL, key) not in self.fronts:
            fr = front_mod.union([front_mod.keep_all(tg, **self.plan_kwargs),
                                  front_mod.keep_all(merged, **self.plan_kwargs)])
            if any(c.recompute_flops for c in fr) and 1.0 in self.min_cut_budgets:
                seeds = min_cut_keeps(merged_gm, joint_inputs, (1.0,), **kwargs)
                fr = front_mod.union([fr, [front_mod.seeded_candidate(merged, keep, label)
                                           for label, keep in seeds.items()]])
            self.fronts[(KEEP_ALL, key)] = (fr, gm, merged_gm)
        fr = self.fronts[(KEEP_ALL, key)][0]
        target = front_mod.resolve_step_budget(fr, self.budget)
        return target >= max(c.step_peak for c in fr if front_mod.keeps_everything(c))

    def pick(self, fr):
        """The candidate of front ``fr`` this partitioner splits by: :func:`front.pick` at its
        budget (a bench may pick otherwise)."""
        return front_mod.pick(fr, self.budget)

    def uuid(self):
        return None             # plans depend on the budget: never reuse a cached compile


def _progress(kind: str):
    """The stage progress to report to: the running job's, else a new one of ``kind``."""
    import contextlib

    from hgraph.common.progress import current, tracking

    have = current()
    return contextlib.nullcontext(have) if have.kind != "off" else tracking(kind)


class _StepState:
    """What one run of a training step changes: the model's buffers (running statistics), the
    RNG states (dropout) and the gradients of the parameters (and of inputs that ask for one). Why: :class:`CompiledStep` runs
    candidate steps to measure them, and only the step it accepts may count (a rejected
    trial must not leave its gradients, its running statistics or its random draws behind)."""

    def __init__(self, model, inputs=()):
        # inputs that require grad get gradients too (leaves: their .grad accumulates)
        self.params = list(model.parameters()) + [
            x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad and x.is_leaf]
        self.grads = [None if p.grad is None else p.grad.detach().clone() for p in self.params]
        self.buffers = [(b, b.detach().clone()) for b in model.buffers()]
        self.rng = torch.get_rng_state()
        self.cuda_rng = (torch.cuda.get_rng_state_all()
                         if torch.cuda.is_available() and torch.cuda.is_initialized() else None)

    def restore(self):
        """The state before the step, with no gradients (a trial's run starts there, so
        every trial and torch's default are measured alike: gradients allocated in the step)."""
        with torch.no_grad():
            for b, saved in self.buffers:
                b.copy_(saved)
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        for p in self.params:
            p.grad = None

    def original(self):
        """The state before the step, gradients included (a refused budget leaves no trace)."""
        self.restore()
        for p, g in zip(self.params, self.grads):
            p.grad = g

    def accumulate(self):
        """After the accepted run: its gradients added to those the parameters held before."""
        for p, g in zip(self.params, self.grads):
            if g is not None:
                p.grad = g if p.grad is None else g + p.grad


class CompiledStep:
    """The training step :func:`compile_model` returns: ``step(*inputs) -> loss`` (forward and
    backward; gradients accumulate into the model's parameters), its partition chosen by the
    allocator on the first call with each input shape.

    Why measured: the front ranks candidates by the replay of unfused fx graphs, and Inductor
    runs another step (measured / replayed peak 0.73-3.66 on the examples, 1.6x over the
    budget on a torchvision resnet18: issue 35). So the first call of a shape

    1. compiles torch.compile's own default partition (:data:`TORCH_DEFAULT`), runs it and
       measures its peak by the allocator (:func:`planner.torch.measure.allocator_peak`):
       percent budgets are of that step, so ``"100%"`` (the default) is torch.compile's
       default step itself and never loses to it (no front is planned for it either);
    2. other budgets try up to ``trials`` candidates of the front, one at a time
       (:meth:`_next`): the least recompute among those whose replayed peak, scaled by the
       measured / replayed ratio (torch's default step's, raised to any missed candidate's),
       fits (at or above torch's default peak, only those recomputing less than it); where
       none fits, the lowest replayed; ``"min"`` the lowest replayed ones. The first trial
       may instead take one of torch's own min-cut partitions (:mod:`planner.torch.seeds`)
       that recomputes less, up to :data:`SEED_REACH` over the budget by the better of the
       ratio and a constant-offset calibration (:meth:`_caps`);
    3. accepts the first candidate measured within the budget (``"min"``: the lowest
       measured, torch's default included), else torch's default where it fits, else raises
       :class:`hgraph.common.errors.InfeasibleError` naming the smallest step measured.

    A ``"torch:B"`` budget (:func:`torch_point`) compiles and measures torch.compile's own
    step at ``activation_memory_budget`` B after its default step: that peak is the budget,
    and that step is accepted unless a candidate recomputing less measures within it.

    Trials run from the same state (:class:`_StepState`), so after the first call the
    gradients, running statistics and RNG are those of one step. The accepted plan's report
    gains ``measured_peak_bytes``, ``peak_measured_by``, ``step_budget_bytes`` (allocator
    bytes), ``torch_default_peak_bytes``, ``candidates_measured`` and ``within_budget`` by the
    measured peak. A step Dynamo splits into several graphs (graph breaks) is planned as a
    whole: the budget is shared across its graphs (:meth:`_search`), and the step measured
    is the whole step, graphs and the eager code between them; it is said in one line on
    stderr (:attr:`notes`), as is a step compiled from a cache (no graph handed to the
    partitioner: torch's earlier partition runs, unplanned). ``partitioner.graphs_planned``
    says how many graphs the accepted step partitioned, ``partitioner.budget_covers_step``
    whether the budget covers the whole step (the reports: ``graphs_in_step``,
    ``budget_covers_step``).
    """

    def __init__(self, model, budget, loss_fn, partitioner, trials: int = TRIALS):
        self.model, self.budget, self.loss_fn = model, budget, loss_fn
        self.partitioner, self.trials = partitioner, int(trials)
        self.steps, self.notes = {}, []
        #: The step's frames, whose Dynamo cache each trial empties (a cached frame's graphs
        #: would never reach the partitioner); the trials accepted, over every input shape
        #: (what a recompile of any shape splits by).
        self.frames, self.accepted = StepFrames(model, loss_fn), {}

    def _compile(self):
        model, loss_fn = self.model, self.loss_fn
        # static shapes: a new input shape recompiles, and the partitioner plans that shape
        # afresh (with symbolic sizes the joint graph carries SymInts no plan can size)
        return torch.compile(fresh_function(lambda *xs: loss_fn(model(*xs))), dynamic=False)

    def _run(self, compiled, xs):
        import torch._functorch.config as functorch_config
        import torch._inductor.config as inductor_config

        # no cache: a cached compile of the same graph would skip the partitioner
        with inductor_config.patch(custom_partitioner_fn=self.partitioner,
                                   fx_graph_cache=False), \
                functorch_config.patch(enable_autograd_cache=False), \
                torch._dynamo.config.patch(allow_rnn=True):
            try:
                out = compiled(*xs)
            except HGraphError as err:              # the loss, said in one line
                raise err.with_traceback(None) from None
            except torch._dynamo.exc.BackendCompilerFailed as err:
                inner = getattr(err, "inner_exception", None)
                if isinstance(inner, HGraphError):      # the budget, said in one line
                    raise inner.with_traceback(None) from None
                raise
        out.backward()
        return out.detach()

    def __call__(self, *xs):
        from planner.torch.partition import _signature

        sig = _signature(xs)
        if sig not in self.steps:
            self.steps[sig], out = self._first_call(xs)
            return out
        return self._run(self.steps[sig], xs)

    def _say(self, note: str):
        import sys

        self.notes.append(note)
        print(f"hgraph: {note}", file=sys.stderr)

    def _trial(self, state, xs, trial, label, cand):
        """Compile with the partitioner at ``trial``, run once from ``state`` (compiling),
        once more measured: a dict of what was made and measured."""
        from planner.torch.measure import allocator_peak

        part = self.partitioner
        part.trial, part.calls, part.keys = trial, 0, []
        n0 = len(part.plans)
        self.frames.reset()
        compiled = self._compile()
        state.restore()
        with self.frames.converting():
            self._run(compiled, xs)
        made = (part.plans[n0:], part.parts[n0:], part.calls, list(part.keys))
        del part.plans[n0:], part.parts[n0:]
        state.restore()
        box = []
        peak, how = allocator_peak(lambda *a: box.append(self._run(compiled, a)), xs)
        return dict(peak=peak, how=how, compiled=compiled, made=made, label=label, cand=cand,
                    out=box[0], trial=trial)

    @staticmethod
    def _next(left, dflt, cap, seed_cap, target, m0, lowest, fallback=True):
        """The (front index, candidate) of ``left`` to try next, or None: ``"min"``, the lowest
        replayed; else the least recompute among those whose replayed peak is at most ``cap``
        (the replayed bytes the calibration so far expects to measure within ``target``; at or
        above torch's default peak, only those recomputing less than it), and where none is
        (and torch's default does not fit either), the lowest replayed. A min-cut partition
        replayed at most ``seed_cap`` (:meth:`_caps`: the first trial's wider reach for torch's
        own partitions) that recomputes less than that choice goes first. ``fallback=False``
        (a ``"torch:B"`` budget, whose own step already fits): no lowest-replayed fallback.

        >>> from types import SimpleNamespace as C
        >>> d = C(step_peak=100, recompute_flops=0, source="min-cut")
        >>> left = [(0, C(step_peak=80, recompute_flops=5, source="plan"))]
        >>> CompiledStep._next(left, d, 70, 70, 60, 100, False)[0]
        0
        >>> CompiledStep._next(left, d, 70, 70, 60, 100, False, fallback=False) is None
        True
        """
        if not left:
            return None
        by_peak = min(left, key=lambda ic: (ic[1].step_peak, ic[1].recompute_flops))
        if lowest:
            return by_peak
        cost = (lambda ic: (ic[1].step_peak, (ic[1].recompute_flops, ic[1].step_peak)))
        ok = [ic for ic in left if m0 > target or ic[1].recompute_flops < dflt.recompute_flops]
        fit = search.cheapest(ok, cap, cost)
        if fit is None and m0 > target and fallback:
            fit = by_peak
        seed = search.cheapest([ic for ic in ok if ic[1].source == "min-cut"], seed_cap, cost)
        if seed is not None and (fit is None or cost(seed)[1] < cost(fit)[1]):
            return seed
        return fit

    @staticmethod
    def _caps(d, graphs, r, over, target, first):
        """graph key -> (cap, seed_cap): the replayed peak a candidate of each graph may have
        to be expected within ``target``, and the wider one a min-cut partition may have on the
        first trial (later trials: the same cap).

        The cap is the ratio model: measured / replayed bytes as torch's default step showed
        them (``r`` of its replay per graph; lowered by a miss, :meth:`_search`), safe on both
        sides of the replay's error (it understates small steps, Inductor's fixed buffers, and
        overstates large ones). Where the replay overstates, the bytes it overstates by are
        about constant: ``over`` (torch's default step's replay less its measured peak, lowered
        by any miss) on gpt's candidates to 2% of the measured peak, where the ratio overstates
        low steps by up to 7% (bench/NOTES_torch.md, issue 35). The ratio model then keeps
        torch's own partitions out of reach at torch's own measured peaks (gpt: min-cut 0.6's
        replay 57.2 MB measures torch 0.6's 48.2 MB, the ratio's cap 53.7 MB), so on the
        first trial a min-cut partition may be tried up to :data:`SEED_REACH` over the budget by
        the better of both models: the budget then gets torch's partition (its step as
        torch.compile runs it) where that recomputes less, at the price of one more trial when
        it misses (the miss calibrates both models for the rest). The budget is shared across
        graphs in proportion to their default replays."""
        total = sum(d[k].step_peak for k in graphs) or 1
        out = {}
        for k in graphs:
            cap = r * d[k].step_peak
            reach = (target * (1 + SEED_REACH) + over) * d[k].step_peak / total
            out[k] = (cap, max(cap * (1 + SEED_REACH), reach) if first else cap)
        return out

    @staticmethod
    def _metered(tried, lowest, point=None):
        """The meter of the compiled kind (:mod:`planner.search`) on trial ``i``: its step
        measured by the allocator; among those that fit, ``"min"`` the first lowest, any other
        budget the first trial measured within it, torch's default (``tried[0]``) last; under
        a ``"torch:B"`` budget (``point``) torch's step at B (``tried[1]``, the budget itself)
        just before it, as the candidates tried after it recompute less.

        >>> tried = [dict(peak=9), dict(peak=6), dict(peak=5), dict(peak=6)]
        >>> sorted(range(4), key=lambda i: CompiledStep._metered(tried, False, 0.4)(i)[1])
        [2, 3, 1, 0]
        """
        if lowest:
            return lambda i: (tried[i]["peak"], (tried[i]["peak"], i))
        return lambda i: (tried[i]["peak"], (i == 0, point is not None and i == 1, i))

    @staticmethod
    def _refusal(parsed, target, m0, measured, how):
        """The one line for a budget below every step measured on the first call."""
        from hgraph.common.formatting import format_bytes

        def line(small, _):
            of = (f" ({parsed.text} of torch.compile's default step, {format_bytes(m0)})"
                  if parsed is not None and parsed.is_relative else "")
            return (f"step budget {format_bytes(target)}{of} is below every step measured on the "
                    f"first call ({measured}): the smallest, {format_bytes(small)} "
                    f"({100 * small / m0:.1f}% of torch.compile's default step) by {how}; "
                    f"budget '{front_mod.LOWEST}' asks for the lowest")
        return line

    def _first_call(self, xs):
        part = self.partitioner
        lowest, point, parsed = _budget_kinds(self.budget)
        part.need_front = parsed is None or parsed.percent != 100
        part.torch_budget = None
        state = _StepState(self.model, xs)
        try:
            return self._settle(state, xs, lowest, parsed, point)
        except BaseException:
            state.original()            # a refusal, or an error in a trial: no trace left
            raise

    def _search(self, state, xs, tried, graphs, target, lowest, fewer=None):
        """Compile and measure up to :attr:`trials` choices of the front candidates of
        ``graphs`` (one per graph Dynamo made of the step), appended to ``tried``; stop at the
        first within ``target`` (not for ``"min"``).

        The budget is shared across the graphs: each gets the same fraction ``r`` of its own
        torch-default replayed peak (``target`` / torch's default measured step to begin
        with), its candidate chosen by :meth:`_next` against that share; a measured miss
        lowers ``r`` by the miss (the choice's largest share times ``target`` / measured),
        as for one graph, where this is the measured / replayed ratio seen so far; the bytes
        the replay overstates the step by (``over``, :meth:`_caps`) fall to the miss's. What
        counts is the whole step measured, graphs and the code between them together.
        ``fewer`` (graph key -> FLOPs): only candidates recomputing less are tried (a
        ``"torch:B"`` budget, whose own step, torch's at B, is measured already)."""
        part, dflt = self.partitioner, tried[0]
        m0, d = dflt["peak"], dflt["cand"]
        left = {k: [(i, c) for i, c in enumerate(part.fronts[k][0])
                    if not (c.source == "min-cut" and c.keep == d[k].keep)
                    and (fewer is None or c.recompute_flops < fewer[k])] for k in graphs}
        r = 1.0 if lowest else target / max(m0, 1)
        over = sum(d[k].step_peak for k in graphs) - m0
        for n in range(self.trials):
            pick = {}
            caps = self._caps(d, graphs, r, over, target, n == 0) if not lowest else {}
            for k in graphs:
                cap, seed_cap = caps.get(k, (0, 0))
                nxt = self._next(left[k], d[k], cap, seed_cap, target, m0, lowest,
                                 fallback=fewer is None)
                if nxt is not None:
                    left[k].remove(nxt)
                    pick[k] = nxt
            if not pick:
                break
            label = "+".join(f"{pick[k][1].plan.report.get('solver')}" if k in pick
                             else TORCH_DEFAULT for k in graphs)
            t = self._trial(state, xs, {k: i for k, (i, _) in pick.items()}, label,
                            {k: pick[k][1] if k in pick else d[k] for k in graphs})
            tried.append(t)
            if not lowest and t["peak"] <= target:
                break
            if not lowest:
                rho = max(c.step_peak / max(d[k].step_peak, 1) for k, (_, c) in pick.items())
                r = min(r, rho * target / max(t["peak"], 1))
                over = min(over, sum(c.step_peak for c in t["cand"].values()) - t["peak"])

    def _settle(self, state, xs, lowest, parsed, point=None):
        part = self.partitioner
        self.frames.reset_all()         # frames compiled before, elsewhere: converted afresh
        dflt = self._trial(state, xs, TORCH_DEFAULT, TORCH_DEFAULT, None)
        tried, m0 = [dflt], dflt["peak"]
        calls, keys = dflt["made"][2], dflt["made"][3]
        target = None if lowest or point is not None else parsed.resolve(m0)
        graphs = list(dict.fromkeys(keys))         # a graph Dynamo made twice is one key
        dflt["cand"] = {k: part.defaults[k] for k in graphs}
        fewer = None
        if point is not None:           # torch's own step at the point: the budget, measured
            part.torch_budget = point
            own = self._trial(state, xs, TORCH_DEFAULT, f"torch.compile {point:g}", None)
            own["cand"] = {k: part.points[k] for k in graphs}
            tried.append(own)
            target = own["peak"]
            fewer = {k: c.recompute_flops for k, c in own["cand"].items()}
        if calls == 0:
            self._say("torch.compile reused a compile of this step from its cache: no graph "
                      "reached the partitioner, so torch's earlier partition runs, unplanned")
        elif calls > 1:
            self._say(f"Dynamo split the step into {calls} graphs (graph breaks): "
                      + ("the budget is shared across them, each graph planned to its share "
                         "and the whole step measured" if part.need_front else
                         "each runs torch.compile's default partition, the whole step measured"))
        if calls and part.need_front:
            self._search(state, xs, tried, graphs, target, lowest, fewer)
        if lowest:
            target = min(t["peak"] for t in tried)
        chosen = tried[search.pick(range(len(tried)), target,
                                   self._metered(tried, lowest, point),
                                   self._refusal(parsed, target, m0, len(tried), dflt["how"]))]
        if chosen is dflt:              # recompiles (a new frame, the rerun below) make it
            part.torch_budget = None
        if isinstance(chosen["trial"], dict):
            self.accepted.update(chosen["trial"])
        part.trial = dict(self.accepted)      # should Dynamo recompile a step it keeps
        out = chosen["out"]
        if chosen is not tried[-1]:           # a later trial ran since: run the chosen again
            state.restore()                   # (later trials emptied its frames' cache: it
            n0 = len(part.plans)              # recompiles, by the trial accepted)
            out = self._run(chosen["compiled"], xs)
            del part.plans[n0:], part.parts[n0:]
        state.accumulate()
        plans, parts, calls, _ = chosen["made"]
        part.plans.extend(plans)
        part.parts.extend(parts)
        part.graphs_planned, part.budget_covers_step = calls, calls > 0
        for p in plans:
            for c in chosen["cand"].values():
                if p is c.plan:
                    p.report.update(step_peak_bytes=c.step_peak,
                                    step_recompute_flops=c.recompute_flops)
            p.report.update(
                graphs_in_step=calls, budget_covers_step=calls > 0,
                step_budget_bytes=int(target), measured_peak_bytes=int(chosen["peak"]),
                peak_measured_by=chosen["how"], within_budget=chosen["peak"] <= target,
                torch_default_peak_bytes=int(m0), torch_point=point,
                candidates_measured=[(t["label"], int(t["peak"])) for t in tried])
        return chosen["compiled"], out


def compile_model(model, budget="100%", loss=None, trials: int = TRIALS, **plan_kwargs):
    """``torch.compile`` of the model's training loss with hgraph as the partitioner: a
    :class:`CompiledStep` (``step(*inputs) -> loss``; the backward runs inside, grads
    accumulate into the model's parameters; ``step.partitioner.plans`` holds the plans of the
    steps accepted).

    ``budget``: the step's peak by the allocator, in bytes, percent of torch.compile's own
    default step (``"100%"``: that step), ``"torch:B"`` (torch.compile's own step at
    ``activation_memory_budget`` B, measured: the step returned is no larger and recomputes
    no more, :func:`torch_point`), or ``"min"`` (see :class:`CompiledStep`, which checks it on
    the first call; ``trials``: candidates it may compile and measure).
    The partitioner is set in ``torch._inductor.config`` for the calls that compile only.
    Recurrent layers (``nn.LSTM``/``GRU``/``RNN``) are traced into the graph (Dynamo's
    ``allow_rnn``): by default Dynamo runs them eagerly, outside any partition, so their
    activations, usually most of such a model's, would go unplanned.
    """
    _budget_kinds(budget)               # a bad budget is refused here, before any compile
    part = HGraphPartitioner(budget, **plan_kwargs)
    step = CompiledStep(model, budget, loss or cap.default_loss, part, trials)
    return step
