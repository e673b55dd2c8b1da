"""Write an imported step's front into its graph: what ``plan`` needs to budget torch's step.

Why: ``hgraph submit plan`` on a graph from ``hgraph graph torch`` must plan the step the user
will run, the budget meaning what it means in :func:`planner.torch.plan_for_step` (percent of
the keep-everything step, ``"min"`` the lowest reachable), and it has neither torch nor the
traced model to partition plans with. So ``graph torch`` computes the front here, as
``plan_for_step`` does (:func:`planner.torch.front.front`: the approx and exact DPs' plans at
a spread of budgets, each partitioned and replayed), and records per candidate what
:mod:`planner.step_front` picks by and how to plan it again: the solver, the activation budget,
the schedule's digest, the replayed step peak and the recomputed FLOPs; and the allocator's
slack over the replay, measured on two of the steps (:func:`table`).
"""

from __future__ import annotations

import dataclasses
import json

from planner import cg
from planner import step_front

__all__ = ["table", "with_table"]

#: What the recorded step peaks are (the report's ``step_peak_breakdown["op"]``).
METER = "torch's partition of the step, replayed (planner.torch.measure.predict_step_peak)"


def table(tg, model, inputs, loss=None, **front_kwargs) -> dict:
    """The step front of ``tg`` (a :class:`planner.torch.model_graph.TorchGraph` of ``model``
    on ``inputs`` with ``loss``) as :mod:`planner.step_front` reads it; ``front_kwargs``:
    :func:`planner.torch.front.front`'s.

    Beside each candidate's replayed peak, the allocator's slack: the keep-everything step and
    the lowest one are run and measured by the allocator's events
    (:func:`planner.torch.slack.measured_slack`, the one measure ``pt.graph`` takes too), and
    the larger excess of measured over replayed (scalars an op allocates inside, which no fx
    node holds: 8 B on examples/torch/gpt.py) is added to every candidate's price, so that a
    budget ``plan`` meets by the price is met by the allocator."""
    from planner.torch import front, slack

    rows, cands = [], []
    base = getattr(tg, "step_slack", 0)     # a graph from pt.graph prices with its slack in
    for c in front.front(tg, **front_kwargs):
        if c.source != "plan":          # a min-cut seed has no schedule to plan again
            continue
        p = c.plan
        cands.append(c)
        rows.append({"solver": p.solver, "activation_budget": int(p.budget_bytes),
                     "schedule_sha1": step_front.schedule_hash(p.schedule),
                     "step_peak": int(c.step_peak) - base,
                     "recompute_flops": int(c.recompute_flops),
                     "keeps_everything": bool(front.keeps_everything(c))})
    measured = {}
    for name, i in (("keep_all", max(range(len(rows)), key=lambda i: (
            rows[i]["keeps_everything"], rows[i]["step_peak"]))),
                    ("lowest", min(range(len(rows)), key=lambda i: rows[i]["step_peak"]))):
        over = slack.measured_slack(tg, cands[i], model, inputs, loss)
        measured[name] = {"step_peak": rows[i]["step_peak"],
                          "allocator_peak": rows[i]["step_peak"] + over}
    excess = max(0, *(m["allocator_peak"] - m["step_peak"] for m in measured.values()))
    return {"meter": METER, "capture": "inductor" if tg.decompose else "eager",
            "allocator_slack": int(excess), "measured": measured, "candidates": rows}


def with_table(g, front_table: dict):
    """A copy of the planner graph ``g`` whose first forward block's details carry
    ``front_table`` (key :data:`planner.step_front.KEY`)."""
    fs = list(g.functions)
    details = dict(cg.details_of(fs[0]))
    details[step_front.KEY] = front_table
    fs[0] = dataclasses.replace(fs[0], details=json.dumps(details, sort_keys=True))
    return cg.ComputationalGraph(g.var_bytes, g.var_names, fs, path=g.path)
