"""PyTorch bridge: import a model's training step as a planner graph, apply a plan, measure it.

torch is an optional extra (``pip install 'hgraph[torch]'``; on CPU-only machines
``pip install torch==2.13.0`` first, see README). Everything here imports torch lazily, so the
rest of the planner works without it; :func:`require_torch` says in one line how to install it.

    >>> import torch, planner.torch as pt
    >>> model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
    >>> x = torch.randn(32, 8)
    >>> tg = pt.graph(model, x)              # joint fwd+bwd graph, decomposed as Inductor sees it
    >>> p = pt.plan(tg, budget="100%")       # planner.plan on it: at 100% nothing is recomputed
    >>> p = pt.plan_for_step(tg, "100%")     # or: chosen by the step torch will really run
    >>> p.recompute_cost
    0
    >>> step = pt.apply(model, p, x)         # eager training step that keeps exactly p's tensors
    >>> loss = step(x)                       # grads accumulate into model's .grad
    >>> model[0].weight.grad.shape
    torch.Size([16, 8])

``pt.compile(model, budget="60%")`` returns the model under torch.compile with hgraph as the
partitioner (``torch._inductor.config.custom_partitioner_fn``); its budget is the step's peak
(bytes, or percent of the no-recompute step's), met as :func:`plan_for_step` meets it.
"""

from __future__ import annotations

from hgraph.errors import HGraphError

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
          source: str | None = None):
    """The training step of ``model`` on ``inputs`` as a :class:`planner.torch.model_graph.TorchGraph`."""
    require_torch()
    from planner.torch.model_graph import import_model

    return import_model(model, inputs, loss=loss, decompose=decompose, costs=costs, source=source)


def plan(tg, budget="100%", **kwargs):
    """:func:`planner.plan` on an imported graph (``tg.cg``); same keywords."""
    import planner

    return planner.plan(tg.cg, budget=budget, **kwargs)


def plan_for_step(tg, budget="100%", **plan_kwargs):
    """The plan whose training step, as torch partitions and runs it, peaks within ``budget``
    (bytes, percent of the no-recompute step's peak, or ``"min"``: the lowest reachable) with
    the least recomputation, chosen from the plan front (:mod:`planner.torch.front`); a budget
    below every plan's step peak raises :class:`hgraph.errors.InfeasibleError` naming the
    smallest. Its report says ``step_peak_bytes``, ``step_recompute_flops``,
    ``step_budget_bytes`` and ``within_budget`` (by the step's replayed peak)."""
    from planner.torch import front

    return front.pick(front.front(tg, **plan_kwargs), budget).plan


def apply(model, the_plan, *inputs, loss=None):
    """A training step ``step(*inputs) -> loss`` that keeps exactly ``the_plan``'s tensors."""
    require_torch()
    from planner.torch.partition import apply_plan

    return apply_plan(model, the_plan, inputs, loss=loss)


def compile(model, budget="100%", loss=None, **plan_kwargs):  # noqa: A001 - mirrors torch.compile
    """``torch.compile(model)`` with hgraph as Inductor's partitioner at ``budget``."""
    require_torch()
    from planner.torch.compiled import compile_model

    return compile_model(model, budget=budget, loss=loss, **plan_kwargs)
