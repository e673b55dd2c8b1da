"""The step front a PyTorch graph file carries: how ``hgraph submit plan`` budgets torch's step.

Why: a graph written by ``hgraph graph torch`` is planned for the step torch will run, not
for the planner's model of it. That step is torch's partition of the joint graph (each value
the plan does not keep is recomputed where the backward needs it), priced by replaying the
partition (:mod:`planner.torch.front`, what :func:`planner.torch.plan_for_step` picks from).
Pricing needs torch and the traced model, which ``plan`` has neither of, so ``graph torch``
prices the front once and writes it into the graph file (the first forward block's details,
key :data:`KEY`); ``plan`` picks from it here, without torch, as ``plan_for_step`` picks:

* the budget is the step's peak: bytes, a percent of the keep-everything step's (``"100%"`` is
  that step), or ``"min"``, the lowest step on the front; a step's peak is its partition's
  replayed peak plus the allocator's slack over the replay that ``graph torch`` measured
  (:func:`price`), so a budget met here is met by the allocator ``execute --torch`` meters;
* time-centric: the least recomputed FLOPs among the candidates whose step fits (ties: the
  lower step); memory-centric: the lowest step that fits;
* none fits: the budget search's refusal (:mod:`planner.search`) naming the smallest
  reachable step (exit 3 on the command line, as for every graph).

The schedule written is the chosen candidate's plan, planned again here at the activation
budget and by the solver the front planned it with (the DP is deterministic); its text must
hash to what the front recorded, so the file and the schedule never disagree silently. The
report's ``recompute_cost`` is the step's recomputed FLOPs (what ``execute --torch`` runs), the
planner model's own stays in ``model_recompute_cost``.

This module imports neither torch nor :mod:`planner.torch` (``tests/test_layering.py``): the
writer, :func:`planner.torch.step_table.table`, imports it.
"""

from __future__ import annotations

import hashlib
import json

from hgraph.common.errors import HGraphError
from hgraph.common.formatting import format_bytes
from planner import search
from planner.budget import Budget

__all__ = ["KEY", "LOWEST", "table", "applies", "schedule_hash", "price", "keep_all_peak",
           "resolve", "choose", "plan"]

#: The details key of the step front, on the graph's first forward block.
KEY = "step_front"
#: The budget that asks for the lowest step on the front.
LOWEST = "min"


def table(g) -> dict | None:
    """The step front ``g``'s file carries (``{"meter", "candidates": [...]}``), or None."""
    if not g.num_forward:
        return None
    text = g.columns.details[0]
    if not isinstance(text, dict) and f'"{KEY}"' not in text:
        return None         # the usual graph: no JSON parsed to say so
    got = (text if isinstance(text, dict) else _parse(text)).get(KEY)
    return got if isinstance(got, dict) and got.get("candidates") else None


def _parse(text: str) -> dict:
    try:
        got = json.loads(text)
    except ValueError:
        return {}
    return got if isinstance(got, dict) else {}


def applies(g) -> bool:
    """Whether ``g`` carries a step front: its budget is torch's step (:func:`plan`)."""
    return table(g) is not None


def schedule_hash(schedule) -> str:
    """The digest of a schedule's text that the front records for each candidate."""
    return hashlib.sha1(schedule.dumps().encode()).hexdigest()


def _is_lowest(budget) -> bool:
    return isinstance(budget, str) and budget.strip().lower() == LOWEST


def price(front: dict, c: dict) -> int:
    """Candidate ``c``'s step peak as the allocator will see it: its replayed peak plus the
    front's allocator slack (what the allocator measured above the replay, ``graph torch``)."""
    return int(c["step_peak"]) + int(front.get("allocator_slack", 0))


def keep_all_peak(front: dict) -> int:
    """The keep-everything step's price: what ``"100%"`` is."""
    peaks = [price(front, c) for c in front["candidates"] if c["keeps_everything"]]
    return max(peaks or [price(front, c) for c in front["candidates"]])


def resolve(front: dict, budget) -> int:
    """``budget`` (bytes, text as ``--budget`` takes it, a :class:`Budget`, or ``"min"``) as a
    step peak in bytes on ``front``."""
    if _is_lowest(budget):
        return min(price(front, c) for c in front["candidates"])
    if isinstance(budget, int):
        return int(budget)
    b = budget if isinstance(budget, Budget) else Budget.parse(budget)
    return b.resolve(keep_all_peak(front))


def choose(front: dict, budget, strategy: str = "time") -> tuple[dict, int]:
    """(the candidate picked at ``budget``, the budget in bytes), by the budget search
    (:func:`planner.search.pick`); a budget below every step: its one-line refusal naming the
    smallest (``min_budget_bytes``)."""
    target = resolve(front, budget)
    order = ((lambda c: (c["recompute_flops"], c["step_peak"])) if strategy == "time"
             else (lambda c: (c["step_peak"], c["recompute_flops"])))

    def refusal(lowest: int, _) -> str:
        return (f"step budget {target:,} bytes ({format_bytes(target)}) is below every step on "
                f"the graph's step front: the smallest reachable is {lowest:,} bytes "
                f"({format_bytes(lowest)}, {100 * lowest / max(1, keep_all_peak(front)):.1f}% of "
                f"the keep-all step; budget '{LOWEST}' asks for it)")

    return search.pick(front["candidates"], target, lambda c: (price(front, c), order(c)),
                       refusal), target


def plan(plan_at, g, budget, *, solver: str, strategy: str, certify: str, least_cost=None):
    """:func:`planner.plan`'s hook for a graph with a step front (the signature of
    :func:`planner.whole_step.plan`; ``least_cost`` is not read: the front's candidates are
    its own): (the chosen candidate's plan, the fields the step front sets on it: ``budget``,
    ``budget_bytes``, ``recompute_cost`` and ``step``)."""
    if solver not in ("approx", "exact"):
        raise HGraphError(f"{g.path or 'graph'}: --solver {solver} does not apply to a graph "
                          f"with a step front (hgraph graph torch): its candidates are the "
                          f"approx and exact DPs' plans, priced as torch runs them")
    front = table(g)
    c, target = choose(front, budget, strategy)
    p = plan_at(int(c["activation_budget"]), solver=c["solver"],
                certify="off" if certify == "off" else None)
    if schedule_hash(p.schedule) != c["schedule_sha1"]:
        raise HGraphError(f"{g.path or 'graph'}: the {c['solver']} plan at "
                          f"{int(c['activation_budget']):,} bytes is not the one its step front "
                          f"recorded (written by another version?): write the graph again with "
                          f"'hgraph graph torch'")
    step = {"accounting": "whole-step", "step_peak_bytes": price(front, c),
            "step_replayed_peak_bytes": int(c["step_peak"]),
            "step_allocator_slack_bytes": int(front.get("allocator_slack", 0)),
            "step_peak_breakdown": {"op": "torch's partition of the step",
                                    "replayed": int(c["step_peak"]),
                                    "allocator_slack": int(front.get("allocator_slack", 0))},
            "step_recompute_flops": int(c["recompute_flops"]),
            "step_baseline_peak_bytes": int(keep_all_peak(front)),
            "activation_budget_bytes": int(p.budget_bytes),
            "step_candidates": len(front["candidates"])}
    return p, {"budget": getattr(budget, "text", str(budget)), "budget_bytes": int(target),
               "recompute_cost": int(c["recompute_flops"]), "step": step}
