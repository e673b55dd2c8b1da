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
from planner.torch import capture as cap
from planner.torch import front as front_mod
from planner.torch.model_graph import from_joint
from planner.torch.seeds import MIN_CUT_BUDGETS, min_cut_keeps

__all__ = ["HGraphPartitioner", "compile_model", "fresh_function"]

_compiles = itertools.count()
#: ``fronts`` key prefix of a graph's keep-everything plans alone (:meth:`HGraphPartitioner._keep_all`).
KEEP_ALL = "keep-all"


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

    def __call__(self, gm, joint_inputs, **kwargs):
        import time

        t0 = time.perf_counter()
        try:
            return self._partition(gm, joint_inputs, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0

    def _partition(self, gm, joint_inputs, **kwargs):
        import dataclasses

        from planner import cg

        n_out = kwargs["num_fwd_outputs"]
        tg = from_joint(gm, n_out, decompose=True)
        key = cg.dumps(tg.cg)
        if key not in self.fronts:       # the graph as traced, and with its subexpressions merged
            with _progress(self.progress) as stages, stages.stage("hgraph: planning the step"):
                merged_gm = cap.cse(gm)
                merged = from_joint(merged_gm, n_out, decompose=True)
                if self._keep_all(tg, merged, gm, merged_gm, key, joint_inputs, **kwargs):
                    key = (KEEP_ALL, key)
                else:
                    with stages.stage("torch's min-cut partitions"):
                        seeds = min_cut_keeps(merged_gm, joint_inputs, self.min_cut_budgets,
                                              **kwargs)
                    self.fronts[key] = (front_mod.union([
                        front_mod.front(tg, **self.plan_kwargs),
                        front_mod.front(merged, seeds=seeds, **self.plan_kwargs)]),
                        gm, merged_gm)
        fr, traced_gm, old_merged = self.fronts[key]
        c = self.pick(fr)
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


def compile_model(model, budget="100%", loss=None, **plan_kwargs):
    """``torch.compile`` of the model's training loss with hgraph as the partitioner.

    ``budget``: the step's peak in bytes or percent of the no-recompute step's (see
    :class:`HGraphPartitioner`).

    Returns ``step(*inputs) -> loss`` (the backward runs inside, grads accumulate into the
    model's parameters); ``step.partitioner.plans`` holds the plans made. The partitioner is
    set in ``torch._inductor.config`` for the first call (compilation) only. Recurrent layers
    (``nn.LSTM``/``GRU``/``RNN``) are traced into the graph (Dynamo's ``allow_rnn``): by
    default Dynamo runs them eagerly, outside any partition, so their activations, usually
    most of such a model's, would go unplanned.
    """
    import torch._inductor.config as inductor_config

    part = HGraphPartitioner(budget, **plan_kwargs)
    loss_fn = loss or cap.default_loss
    # static shapes: a new input shape recompiles, and the partitioner plans that shape afresh
    # (with symbolic sizes the joint graph carries SymInts no plan can size)
    compiled = torch.compile(fresh_function(lambda *xs: loss_fn(model(*xs))), dynamic=False)

    import torch._functorch.config as functorch_config

    def run(*xs):
        # no cache: a cached compile of the same graph would skip the partitioner
        with inductor_config.patch(custom_partitioner_fn=part, fx_graph_cache=False), \
                functorch_config.patch(enable_autograd_cache=False), \
                torch._dynamo.config.patch(allow_rnn=True):
            try:
                out = compiled(*xs)
            except torch._dynamo.exc.BackendCompilerFailed as err:
                inner = getattr(err, "inner_exception", None)
                if isinstance(inner, HGraphError):      # the budget, said in one line
                    raise inner from None
                raise
        out.backward()
        return out.detach()

    run.partitioner = part
    return run
