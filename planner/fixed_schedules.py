"""Schedules that need no planning: no recomputation at all, or keep a given set of values.

They are the baseline a plan is measured against (:func:`baseline_schedule`, replayed by
:func:`replay_baseline`) and
the executor's own checks (a schedule independent of the DP), so they live below both.

Example::

    >>> from planner import synth
    >>> g = synth.build(layers=1, heads=1)
    >>> s = plain_schedule(g)
    >>> len(s.ops) == 2 * len(g.forward), checkpoint_schedule(g, keep=[]).ops[0].kind
    (True, 'compute')
"""

from __future__ import annotations

import graphlib

import numpy as np

from hgraph.common.errors import HGraphError

from planner import simulate
from planner.schedule import Op, Schedule

__all__ = ["baseline_schedule", "replay_baseline", "plain_schedule", "checkpoint_schedule", "forward_order", "loss_outputs"]


def loss_outputs(g) -> set:
    """Forward outputs whose gradient nobody produces: the loss (its gradient is ones, free);
    the set form of :attr:`planner.cg.ComputationalGraph.loss_mask`."""
    return set(np.flatnonzero(g.loss_mask).tolist())


def plain_schedule(g) -> Schedule:
    """No recomputation, no forgets: every forward in topological order, then every backward."""
    nf = len(g.forward)
    order = forward_order(g)
    ops = [Op("compute", f) for f in order]
    ops += [Op("compute", nf + f, tuple(range(len(g.backward[f].outputs)))) for f in reversed(order)]
    return Schedule(ops)


def baseline_schedule(g) -> Schedule:
    """No recomputation: every value kept through the forward pass, freed after its last use."""
    return checkpoint_schedule(g, keep=np.flatnonzero(g.is_activation))


def replay_baseline(g, check: bool = False) -> tuple[Schedule, simulate.SimResult]:
    """The no-recomputation baseline every plan is measured against: its schedule
    (:func:`baseline_schedule`) and its replay (:func:`planner.simulate.replay`)."""
    schedule = baseline_schedule(g)
    return schedule, simulate.replay(g, schedule, check=check)


def checkpoint_schedule(g, keep) -> Schedule:
    """A recomputation schedule that keeps the forward values of ``keep`` and recomputes the rest.

    Independent of the DP (it is how the executor is checked on its own): the forward pass frees
    every other value after its last forward use; each backward block first recomputes what it
    reads (recursively, from live values, parameters and inputs), runs with all its gradients,
    then frees its gradient input and every value no later backward block reads.
    """
    nf = len(g.forward)
    order = forward_order(g)
    keep = set(int(v) for v in keep)
    is_act = g.is_activation
    prod = g.producer
    last_fwd = {}
    for k, f in enumerate(order):
        for a, _ in g.forward[f].inputs:
            if is_act[a]:
                last_fwd[a] = k
    ops, live = [], set()
    for k, f in enumerate(order):
        ops.append(Op("compute", f))
        live.add(g.forward[f].outputs[0])
        for a, _ in g.forward[f].inputs:
            if is_act[a] and last_fwd[a] == k and a not in keep and a in live:
                ops.append(Op("forget", int(a), (), "forward"))
                live.discard(a)
    sinks = loss_outputs(g)

    backward = g.backward          # what each backward block reads, listed once (read 3x)
    needs = {f: [a for a, tag in backward[f].inputs if tag != "gradient" and is_act[a]]
             for f in order}.__getitem__

    remaining = {}
    for f in order:
        for a in needs(f):
            remaining[a] = remaining.get(a, 0) + 1

    touched = set(live)        # live values that may be read by no later block: all, at first

    def ensure(v):
        if v in live:
            return
        f = int(prod[v])
        for a, _ in g.forward[f].inputs:
            if is_act[a]:
                ensure(a)
        ops.append(Op("compute", f))
        live.add(v)
        touched.add(v)

    for f in reversed(order):
        for a in needs(f):
            ensure(a)
        ops.append(Op("compute", nf + f, tuple(range(len(g.backward[f].outputs)))))
        y = g.forward[f].outputs[0]
        if y not in sinks:
            ops.append(Op("forget", int(y), (), "backward"))
        for a in needs(f):
            remaining[a] -= 1
            touched.add(a)
        # every live value no later block reads is freed now, in id order; after a block only
        # the values it recomputed or read can newly be such (not the whole live set: O(n²))
        for v in sorted(touched):
            if v in live and remaining.get(v, 0) == 0:
                ops.append(Op("forget", int(v), (), "forward"))
                live.discard(v)
        touched.clear()
    return Schedule(ops)


def forward_order(g) -> list:
    deps = {f.index: {int(g.producer[a]) for a, _ in f.inputs if g.producer[a] >= 0} for f in g.forward}
    ts = graphlib.TopologicalSorter(deps)
    try:
        return [f for f in ts.static_order()]
    except graphlib.CycleError as err:
        raise HGraphError(f"the forward graph has a cycle: {err.args[1]}") from None


