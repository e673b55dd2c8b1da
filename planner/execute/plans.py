"""Schedules for the executor's checks: the planner's DP at a budget, as the reference emits them.

Budgets are fractions of S, the sum of activation bytes (FORMAT.md §1.3). ``feasible_budgets``
walks a ladder of fractions from tight to loose and keeps the first ``count`` budgets the DP can
plan *with distinct schedules*, so every model gets three different recomputation schedules
whatever its shape.

>>> from planner.execute import zoo, export
>>> g = export.to_cg(zoo.build("resnet"))
>>> [f for f, _ in feasible_budgets(g, count=3)]
[0.75, 0.8, 0.85]
"""

from __future__ import annotations

from planner.emit import emit_decision
from planner.solver import make_solver

LADDER = (0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0, 1.1, 1.2, 1.4, 1.6, 2.0, 3.0)


def act_sum(g) -> int:
    return int(g.var_bytes[g.is_activation].sum())


def dp_schedule(g, fraction: float, family: str = "approx", strategy: str = "time"):
    """The DP's schedule at ``fraction`` x S bytes, or None when no plan fits."""
    solver = make_solver(g, solver=family, strategy=strategy)
    status, decision, _ = solver.solve(int(fraction * act_sum(g)))
    return None if status != "OK" else emit_decision(g, decision, solver.ag)


def feasible_budgets(g, count: int = 3, ladder=LADDER, **kwargs) -> list:
    """[(fraction, schedule)]: the first ``count`` fractions of ``ladder`` with a new DP schedule."""
    out, seen = [], set()
    for fraction in ladder:
        s = dp_schedule(g, fraction, **kwargs)
        if s is not None and s.dumps() not in seen:
            seen.add(s.dumps())
            out.append((fraction, s))
            if len(out) == count:
                break
    return out
