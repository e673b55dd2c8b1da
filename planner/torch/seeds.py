"""torch's own min-cut partitions as candidates on hgraph's front.

Why: under ``torch.compile`` the step is Inductor's, whose fused kernels the front's fx replay
cannot see (measured / replayed step peak 0.73-3.66 on the bench models,
bench/NOTES_torch.md). Torch's min-cut partitioner chooses what to save with that fusion in
view (it prices the recomputation of fusible pointwise ops as free, and saves max-pool's int8
offsets rather than its int64 indices), so at its own ``activation_memory_budget`` points its
partition can beat every plan of the lower-set DP by the allocator, although the replay ranks
it below them. Offering those partitions as candidates beside the DP's plans makes hgraph's
front contain torch's points: a budget then gets the better of the two, never less.

A min-cut partition becomes a keep set hgraph's own :func:`planner.torch.partition.partition`
can split by (:func:`representable`: a saved view as its base, a backward op the min-cut moved
into the forward as the forward values it reads), and a plan of the planner's model that keeps
the same values (:func:`keep_plan`: ``fixed_schedules.checkpoint_schedule``), so the
candidate reports like every other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

import numpy as np

__all__ = ["MIN_CUT_BUDGETS", "min_cut_partition", "saved_names", "min_cut_saved",
           "representable", "base_of", "keep_plan", "min_cut_keeps", "shared_solves"]

#: ``activation_memory_budget`` values at which the min-cut's partition is offered. Torch's
#: grid in steps of 0.2 (1.0 is its default; 0.2-0.8 the points the realistic bench and
#: issue 35 compare against), so that each of torch's points is a candidate and hgraph's front
#: contains it: at torch's own measured peak the first call can take the step torch runs
#: there (:meth:`planner.torch.compiled.CompiledStep._caps`). torch's partition moves
#: non-monotonically between them (gpt: 0.4 measures above 0.6), so 0.4 is not implied by its
#: neighbours. Also 0.5 and 0.65, partitions ``compile`` chose on the compile-time bench
#: (mobilenet 80%, hf-vit 80%). Seven, as before: 0.1 and 0.35 left (on gpt's front both
#: replay above a plan or partition recomputing less, min-cut 0.1 at 5.4 GFLOPs beside a plan
#: at 2.4, and neither was ever chosen), since each costs one min-cut solve on every front.
MIN_CUT_BUDGETS = (0.2, 0.4, 0.5, 0.6, 0.65, 0.8, 1.0)


def _tag(n):
    return n.meta.get("partitioner_tag", "")


def _base(n):
    """The node view ``n`` aliases, through chains of views (``n`` itself when no view)."""
    from planner.torch.model_graph import is_view, view_source

    while n.op == "call_function" and is_view(n):
        n = view_source(n)
    return n


def base_of(joint, name) -> str:
    """The fx node a view (``view``, ``permute``, a ``split``'s getitem ...) of ``joint``
    aliases, through chains of views; ``name`` itself when it is no view (or no node)."""
    n = next((m for m in joint.graph.nodes if m.name == name), None)
    return name if n is None else _base(n).name


def representable(joint, names) -> frozenset:
    """``names`` (fx nodes of ``joint``) as values hgraph's partition can save: a view as its
    base, a backward-tagged op the min-cut moved into the forward (layer norm's ``rsqrt / D``,
    ReLU's ``le`` mask) as the forward values it is computed from."""
    by_name = {n.name: n for n in joint.graph.nodes}
    out, stack = set(), [_base(by_name[n]) for n in names if n in by_name]
    while stack:
        n = stack.pop()
        if n.name in out or n.name.startswith("tangents"):
            continue
        if _tag(n) == "is_backward":
            stack.extend(_base(a) for a in n.all_input_nodes)
        else:
            out.add(n.name)
    return frozenset(out)


def min_cut_partition(joint, joint_inputs, budget: float | None = None, **kwargs) -> tuple:
    """(joint as partitioned, forward, backward) of torch's min-cut partitioner on a copy of
    ``joint`` at ``activation_memory_budget`` = ``budget`` (None: the configured one, 1.0 unless
    the user set it: ``torch.compile``'s default partition itself). ``kwargs``: what Inductor
    passes a partitioner, ``num_fwd_outputs`` included. ``joint`` is left as it is: the min-cut
    rewrites the graph it is given (dead code, subexpressions), so it gets a copy, returned
    first (the node names of the forward and backward are its)."""
    import torch
    import torch._functorch.config as functorch_config
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    work = torch.fx.GraphModule(joint, _graph_copy(joint.graph))
    patch = {} if budget is None else dict(activation_memory_budget=float(budget))
    with functorch_config.patch(**patch):
        fw, bw = min_cut_rematerialization_partition(work, joint_inputs, **kwargs)
    return work, fw, bw


def saved_names(backward) -> list:
    """Names of the values a partition's backward module receives from its forward."""
    return [n.name for n in backward.graph.nodes
            if n.op == "placeholder" and not n.name.startswith("tangents")]


def min_cut_saved(joint, joint_inputs, budget: float, **kwargs) -> list:
    """Names of the values torch's min-cut partitioner saves for the backward of ``joint`` at
    ``activation_memory_budget`` = ``budget`` (:func:`min_cut_partition`)."""
    return saved_names(min_cut_partition(joint, joint_inputs, budget, **kwargs)[2])


def _graph_copy(graph):
    import torch

    g = torch.fx.Graph()
    out = g.graph_copy(graph, {})
    g.output(out)
    return g


def keep_plan(tg, names, label: str):
    """A :class:`planner.api.Plan` of ``tg``'s planner graph that keeps the planner vars among
    ``names`` and recomputes the rest (``fixed_schedules.checkpoint_schedule``), reported as
    solver ``label``: what the planner's model says of a keep set chosen elsewhere."""
    from planner import simulate
    from planner.activation_graph import ActivationGraph
    from planner.api import Analysis, Asked, Plan
    from planner.decision import Decision
    from planner.fixed_schedules import checkpoint_schedule
    from planner.solver import ModelStats

    t0 = time.perf_counter()
    g = tg.cg
    var = {name: i for i, name in enumerate(tg.var_node)}
    keep = sorted(var[n] for n in names if n in var)
    schedule = checkpoint_schedule(g, keep)
    sim = simulate.replay(g, schedule, check=True)
    ag = ActivationGraph.from_cg(g)
    model = dataclasses.replace(ModelStats.keep_everything(sim.peak_bytes),
                                model_recompute_cost=int(sim.recompute_cost), family=label)
    peak = int(sim.peak_bytes)
    a = Analysis(g, ag, level=None, depth=0, supersteps=0, baseline_peak=peak,
                 baseline_kind="simulated", baseline_schedule=None, baseline_timeline=None)
    return Plan.from_replay(
        a, (Decision(np.zeros(ag.n, np.int64)), model, schedule, sim),
        Asked(solver=label, strategy="time", units="bytes", budget=label, budget_bytes=peak),
        engine=dict(tasks=1, blocks=1, mode="local", runtime="local", supersteps=0),
        seconds=time.perf_counter() - t0)


def min_cut_keeps(joint, joint_inputs, budgets=MIN_CUT_BUDGETS, **kwargs) -> dict:
    """label -> keep set (:func:`representable`) of the min-cut's partition of ``joint`` at each
    of ``budgets``, distinct sets only (the first budget giving a set names it). The budgets
    share torch's min-cut solves (:func:`shared_solves`), and the partitions are graphs only
    (:func:`planner.torch.partition.graphs_only`: only the names the backward receives are
    read, and torch's partitioner generates each module's Python code eight times a budget)."""
    from planner.torch.partition import graphs_only

    out, seen = {}, set()
    with shared_solves(), graphs_only():
        for b in budgets:
            keep = representable(joint, min_cut_saved(joint, joint_inputs, b, **kwargs))
            if keep not in seen:
                seen.add(keep)
                out[f"min-cut {b:g}"] = keep
    return out


@contextlib.contextmanager
def shared_solves():
    """torch's min-cut solves (``partitioners.solve_min_cut``) made once per graph, options and
    nodes not banned, for every partition made inside.

    Why: below ``activation_memory_budget`` 1.0 torch's partitioner solves up to four min-cuts
    (its default options, two more aggressive ones, then one with the knapsack's choice not
    banned); only the last depends on the budget. The seeds partition copies of one joint graph
    at seven budgets, so the first three are the same solves each time (same graph, same
    classification, same options): solved once, they are handed to the later budgets as the
    nodes of that budget's own copy, by name. A solve is a function of the graph (its nodes,
    targets, inputs and the partitioner's tags), the options and the nodes not banned, which
    the key holds; it changes nothing in the graph."""
    import torch._functorch.partitioners as parts
    from torch.utils._ordered_set import OrderedSet

    real, memo = parts.solve_min_cut, {}

    def solve(joint_graph, node_info, min_cut_options, dont_ban=None):
        key = (_graph_key(joint_graph), dataclasses.astuple(min_cut_options),
               frozenset(n.name for n in (dont_ban or ())))
        if key not in memo:
            saved, banned = real(joint_graph, node_info, min_cut_options, dont_ban)
            memo[key] = ([n.name for n in saved], [n.name for n in banned])
        by_name = {n.name: n for n in joint_graph.nodes}
        saved, banned = memo[key]
        return [by_name[n] for n in saved], OrderedSet(by_name[n] for n in banned)

    parts.solve_min_cut = solve
    try:
        yield
    finally:
        parts.solve_min_cut = real


def _graph_key(graph) -> tuple:
    """What a min-cut solve reads of ``graph`` besides the values' metadata: each node's name,
    op, target, inputs, tag and distance from the backward (set by the partitioner)."""
    return tuple((n.name, n.op, str(n.target), tuple(a.name for a in n.all_input_nodes),
                  n.meta.get("partitioner_tag", ""), getattr(n, "dist_from_bw", None))
                 for n in graph.nodes)
