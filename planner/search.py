"""The budget search, one for every plan kind: candidates -> priced by a meter -> the cheapest
that fits, or a refusal naming the smallest reachable budget.

Why one module: the activation DP, the whole step, row plans, rows + DP and the PyTorch front
each search a budget. Each kind supplies only what is its own, in the style of Checkmate (a
strategy is ``(graph, budget) -> one result``): how to make its candidates (plans at a ladder of
budgets, band counts, partitions) and a **meter**, ``meter(candidate) -> (peak, cost)``: the
peak as the budget counts it (predicted or measured) and an order among the candidates that fit
(the cost first, then the kind's tie rule). :func:`at_budgets` makes a ladder's distinct
candidates; :func:`pick` keeps the candidates whose peak is within the budget and takes the
least cost (the first listed on a full tie); when none fits it raises the kind's one line
through :func:`refuse`, the only place an :class:`~hgraph.common.errors.InfeasibleError` is
built, with ``min_budget_bytes`` the smallest peak reached. :func:`smallest_budget` bisects for
a kind whose candidates do not reach down to its floor (the DP's smallest feasible budget
without a one-pass answer).

What a budget holds, and what ``"100%"`` is, per kind (README, "What a budget holds"):

* **activation DP** (:func:`planner.api.fit`; reference ``cg.txt`` dumps): the activations, as
  the reference counts them; 100 % is the simulated activation peak of the schedule that
  recomputes nothing (:func:`planner.fixed_schedules.replay_baseline`).
* **whole step** (:func:`planner.whole_step.fit`; graphs with op arguments): parameters,
  inputs, activations, gradients, kernel temporaries, the allocator; 100 % is the predicted
  whole step of the schedule that recomputes nothing.
* **rows, rows + DP** (:func:`planner.rows.plan.choose`, :func:`planner.rows.with_dp.choose`):
  the whole step of the row plan (:func:`planner.rows.step.predict_rows`); 100 % is the
  predicted whole step of the plain step (no bands, nothing recomputed).
* **PyTorch** (:func:`planner.torch.front.pick`): the replayed step of a partition; 100 % is
  the keep-all step. Under ``planner.torch.compile`` (:mod:`planner.torch.compiled`) the step
  measured by the allocator; 100 % is torch.compile's own default step. A graph file of
  ``hgraph graph torch`` (:func:`planner.step_front.choose`, no torch needed): the front it
  carries, each step replayed plus the allocator's slack; 100 % is the keep-all step.

>>> meter = lambda c: (c["peak"], (c["flops"], c["peak"]))
>>> cands = [{"peak": 90, "flops": 0}, {"peak": 60, "flops": 5}, {"peak": 40, "flops": 9}]
>>> pick(cands, 70, meter, lambda low, _: f"no plan fits; {low} does")["flops"]
5
>>> pick(cands, 30, meter, lambda low, _: f"no plan fits; {low} does")
Traceback (most recent call last):
...
hgraph.common.errors.InfeasibleError: no plan fits; 40 does
"""

from __future__ import annotations

from typing import Callable, Hashable, Iterable, TypeVar

from hgraph.common.errors import InfeasibleError

__all__ = ["at_budgets", "cheapest", "pick", "refuse", "smallest_budget"]

T, B = TypeVar("T"), TypeVar("B")
#: ``meter(candidate) -> (peak bytes as the budget counts them, order among those that fit)``.
Meter = Callable[[T], tuple]


def at_budgets(make: Callable[[B], T | None], budgets: Iterable[B],
               key: Callable[[T], Hashable]) -> list:
    """``[(budget, candidate)]``: a kind's candidates at a ladder of budgets, ``make(b)`` at each
    of ``budgets`` in order, leaving out a budget with no candidate (None) and a candidate
    equal by ``key`` to one made before (several budgets get the same plan: priced once)."""
    seen, out = set(), []
    for b in budgets:
        c = make(b)
        k = None if c is None else key(c)
        if c is not None and k not in seen:
            seen.add(k)
            out.append((b, c))
    return out


def cheapest(candidates: Iterable[T], budget_bytes: float, meter: Meter) -> T | None:
    """The candidate of least cost whose peak is within ``budget_bytes`` (the first listed on a
    tie), or None when none is."""
    return _cheapest([(c, *meter(c)) for c in candidates], budget_bytes)


def pick(candidates: Iterable[T], budget_bytes: float, meter: Meter,
         refusal: Callable[[int, T | None], str], reachable: Iterable[int] = ()) -> T:
    """:func:`cheapest`, or, when no candidate fits, the kind's refusal raised (:func:`refuse`):
    ``refusal(smallest, lowest)`` is its one line, given the smallest peak reached and the
    candidate reaching it (None where that is one of ``reachable``: peaks of plans the kind
    knows but does not offer, such as rows alone beside their recomputing candidates)."""
    priced = [(c, *meter(c)) for c in candidates]
    best = _cheapest(priced, budget_bytes)
    if best is not None:
        return best
    smallest, lowest = min([(peak, c) for c, peak, _ in priced] + [(r, None) for r in reachable],
                           key=lambda pc: pc[0])          # the first listed on a tie
    raise refuse(refusal(smallest, lowest), smallest)


def _cheapest(priced: list, budget_bytes: float):
    """:func:`cheapest` of ``[(candidate, peak, cost)]``."""
    fits = [(cost, i) for i, (_, peak, cost) in enumerate(priced) if peak <= budget_bytes]
    return priced[min(fits)[1]][0] if fits else None


def refuse(message: str, smallest: int) -> InfeasibleError:
    """The error for a budget below every plan a search reaches: ``message`` (one line) and
    ``min_budget_bytes``, ``smallest``, the smallest budget that fits. The one place the planner
    builds an :class:`~hgraph.common.errors.InfeasibleError` (tests/test_search.py holds it)."""
    return InfeasibleError(message, min_budget_bytes=int(smallest))


def smallest_budget(ok: Callable[[int], bool], hi: int, top: int) -> int | None:
    """Bisection: the smallest budget (bytes) with ``ok(budget)`` (``ok`` is monotone), or None
    when even ``top`` fails. ``hi`` doubles until ``ok(hi)``, never past ``top``."""
    lo = 0
    while not ok(hi):
        if hi >= top:
            return None
        lo, hi = hi, min(2 * hi, top)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi
