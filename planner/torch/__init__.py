"""PyTorch bridge: import a model's training step as a planner graph, apply a plan, measure it.

torch is an optional extra (``pip install 'hgraph[torch]'``; on CPU-only machines
``pip install torch==2.13.0`` first, see README). Everything here imports torch lazily, so the
rest of the planner works without it; :func:`require_torch` says in one line how to install it.

    >>> import torch, planner.torch as pt
    >>> model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
    >>> x, y = torch.randn(32, 8), torch.randn(32, 1)
    >>> mse = lambda out: ((out - y) ** 2).mean()    # the loss (a scalar output needs none)
    >>> tg = pt.graph(model, x, loss=mse)    # joint fwd+bwd graph, decomposed as Inductor sees it
    >>> p = pt.plan(tg, budget="100%")       # planner.plan on it: at 100% nothing is recomputed
    >>> p = pt.plan_for_step(tg, "100%")     # or: chosen by the step torch will really run
    >>> p.recompute_cost
    0
    >>> step = pt.apply(model, p, x, loss=mse)   # eager training step keeping exactly p's tensors
    >>> loss = step(x)                       # grads accumulate into model's .grad
    >>> model[0].weight.grad.shape
    torch.Size([16, 8])

``pt.compile(model, budget="60%")`` returns the model under torch.compile with hgraph as the
partitioner (``torch._inductor.config.custom_partitioner_fn``); its budget is the step's peak
(bytes, or percent of the no-recompute step's), met as :func:`plan_for_step` meets it.
``pt.execute("model.py:model", "s.txt")`` runs a model file's real training step under a
schedule file and measures it against the prediction, a :class:`TorchExecution` (what
``hgraph submit execute --torch`` prints).

Every name here loads its module on first use (:class:`TorchExecution` through the module's
``__getattr__``), so ``import planner.torch`` imports neither torch nor NumPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hgraph.common.errors import HGraphError

if TYPE_CHECKING:                       # for readers' tools; at run time, __getattr__ below
    from planner.api import Plan
    from planner.torch.execution import TorchExecution

__all__ = ["graph", "plan", "plan_for_step", "apply", "compile", "execute", "require_torch",
           "TorchExecution", "INSTALL_HINT"]

INSTALL_HINT = ("PyTorch is not installed: pip install torch==2.13.0 (CPU wheel) or "
                "pip install 'hgraph[torch]'")


def require_torch():
    """Import and return torch, or raise HGraphError with the one-line install hint."""
    try:
        import torch
    except ImportError:
        raise HGraphError(INSTALL_HINT) from None
    return torch


def graph(model, *inputs, loss=None, decompose: bool = True, costs: str = "flops",
          source: str | None = None, progress: str = "auto", measure_slack: bool = True):
    """The training step of ``model`` on ``inputs`` as a :class:`planner.torch.model_graph.TorchGraph`.

    ``measure_slack``: what the allocator measures over the replay (``tg.step_slack``: kernel
    scratch such as convolution's im2col columns, scalars no fx node holds;
    :func:`planner.torch.slack.measured_slack`), which :func:`plan_for_step` adds to every
    candidate's step peak, so percent budgets resolve against the measured keep-everything
    step and ``within_budget`` is the allocator's verdict (issue 35). It is measured the first
    time a price reads it (the keep-everything step run once on a copy of ``model`` as it is
    then, from no gradients) and kept on the graph: the capture itself costs what the trace
    costs (issue 36), and a graph never priced never runs the step. ``False``: replay only; a
    step torch cannot run twice (one that writes its input) keeps 0 and says why in
    ``tg.info["step_slack"]``.

    ``progress``: its stages on stderr (the trace, the planner's graph): ``"auto"`` (live on
    a terminal, nothing in a pipe or log), ``"bar"``, ``"plain"`` or ``"off"``; inside a job
    that tracks its stages, that job's line shows them (:func:`hgraph.common.progress.joining`)."""
    require_torch()
    from hgraph.common.progress import joining
    from planner.torch.model_graph import import_model

    with joining(progress):
        tg = import_model(model, inputs, loss=loss, decompose=decompose, costs=costs,
                          source=source)
        if measure_slack:
            from planner.torch.slack import candidate_meter

            tg.slack_by(_slack_meter(model, inputs, loss))
            tg.step_meter = candidate_meter(model, inputs, loss)
        return tg


def _slack_meter(model, inputs, loss):
    """``tg.slack_meter`` for :func:`graph`: the allocator's excess over the replay of the
    keep-everything step of ``model`` on ``inputs``, a stage of the progress that reads it."""
    def meter(tg) -> int:
        from hgraph.common.progress import current
        from planner.torch import front, slack

        with current().stage("the allocator's slack over the replay (keep-everything step)"):
            try:
                return slack.measured_slack(tg, front.keep_all(tg)[0], model, inputs, loss)
            except RuntimeError as err:     # a step that cannot run twice (writes its input)
                tg.info["step_slack"] = f"not measured: {str(err).splitlines()[0]}"
                return 0
    return meter


def plan(tg, budget="100%", **options) -> Plan:
    """:func:`planner.plan` on an imported graph (``tg.cg``): the same :class:`planner.Plan`.

    ``options`` are :func:`planner.plan`'s keywords as they are (``solver``, ``strategy`` and
    the grouped records ``engine``, ``limits``, ``certify``, ``accounting`` of
    :mod:`planner.options`): the list is the planner's to say, so it is handed on, not copied
    here (it was, 22 parameters, held equal by a test). An unknown keyword fails as it would
    on :func:`planner.plan`.
    """
    from planner.api import plan as plan_graph

    return plan_graph(tg.cg, budget, **options)


def plan_for_step(tg, budget="100%", progress: str = "auto", **plan_kwargs):
    """The plan whose training step, as torch partitions and runs it, peaks within ``budget``
    (bytes, percent of the no-recompute step's peak, or ``"min"``: the lowest reachable) with
    the least recomputation, chosen from the plan front (:mod:`planner.torch.front`); a budget
    below every plan's step peak raises :class:`hgraph.common.errors.InfeasibleError` naming the
    smallest. Its report says ``step_peak_bytes``, ``step_recompute_flops``,
    ``step_budget_bytes`` and ``within_budget`` (by the step's price: its replay plus the
    allocator's slack). On a graph from :func:`graph` the pick's own step is then run once
    and, where the allocator measures it over its price, priced at what was measured and the
    budget searched again (:func:`planner.torch.slack.checked_pick`): the plan returned
    measures within its budget.

    ``plan_kwargs`` go to :func:`planner.torch.front.front` as they are (its ``solvers``,
    ``points``, ``exact_max_lower_sets``, ``seeds``, and :func:`planner.plan`'s keywords but
    ``solver``, with ``certify`` "off" unless said): which keywords a front takes is the front's
    to say, so they are not repeated here. A budget that covers the keep-everything step
    plans that step alone; any other plans the front once and keeps it on ``tg``, partitioning
    only the plans whose bounds say they could be the pick, so the next budget on the same
    graph is picked from it at no planning cost (:func:`planner.torch.front.for_budget`). ``progress``: the stages on stderr, as
    :func:`graph` shows them."""
    from hgraph.common.progress import joining
    from planner.torch import front, slack

    with joining(progress) as stages, stages.stage(f"plan_for_step at {budget}"):
        fr = front.for_budget(tg, budget, **plan_kwargs)
        return slack.checked_pick(tg, fr, budget, front.pick).plan


def apply(model, the_plan, *inputs, loss=None):
    """A training step ``step(*inputs) -> loss`` that keeps exactly ``the_plan``'s tensors."""
    require_torch()
    from planner.torch.partition import apply_plan

    return apply_plan(model, the_plan, inputs, loss=loss)


def compile(model, budget="100%", loss=None, **plan_kwargs):  # noqa: A001 - mirrors torch.compile
    """``torch.compile(model)`` with hgraph as Inductor's partitioner at ``budget``;
    ``plan_kwargs`` are :class:`planner.torch.compiled.HGraphPartitioner`'s (``fronts``,
    ``min_cut_budgets``, ``progress``, ``whole_front``, and the planner keywords it hands the
    front, as :func:`plan_for_step` does): the partitioner says which, so they are not
    repeated here."""
    require_torch()
    from planner.torch.compiled import compile_model

    return compile_model(model, budget=budget, loss=loss, **plan_kwargs)


def execute(spec: str, schedule=None, graph=None, *, eager: bool | None = None,
            budget=None) -> TorchExecution:
    """The real training step of the model file ``spec`` (``FILE.py:FUNC``) under the schedule
    file ``schedule`` (None: keep everything), measured against its prediction and ``budget``:
    a :class:`TorchExecution` (:func:`planner.torch.execution.execute`; ``graph``: the cg.txt
    the schedule was planned on, whose capture then runs and whose step front reads the
    budget; ``eager``: which capture otherwise)."""
    require_torch()
    from planner.torch.execution import execute as execute_step

    return execute_step(spec, schedule, graph, eager=eager, budget=budget)


#: Names of :mod:`planner.torch.execution` handed out here as they are, imported on first use.
_LAZY = frozenset({"TorchExecution"})


def __getattr__(name):
    """:class:`TorchExecution` is :class:`planner.torch.execution.TorchExecution` itself,
    imported on first use (that module imports torch only when a step runs)."""
    if name in _LAZY:
        from planner.torch import execution

        value = globals()[name] = getattr(execution, name)
        return value
    raise AttributeError(f"module 'planner.torch' has no attribute {name!r}")
