"""A certificate for every plan: a lower bound on its recomputation, and the gap to it.

Why: "recompute 43 at budget B" says nothing about whether 43 is good. The bound is on the
optimum of :mod:`planner.milp`'s model (Checkmate's per-stage recompute / keep decisions in
the DP's memory and cost model, FORMAT.md §4.2): no schedule of that model — every chain of
lower sets the DPs search among them — recomputes less at the budget. So it bounds the plan's
``model_recompute_cost``, and ``gap = (model_recompute_cost − bound) / model_recompute_cost``
(0 when the plan recomputes nothing). The simulated ``recompute_cost`` is never below the
model's for the emitted chains (it adds the ReLU/MaxPool exception, FORMAT.md §4.7).

The bound is the largest of these, each valid on its own:

* ``zero``: 0, when the plan recomputes nothing (nothing to certify, gap 0);
* ``knapsack`` (always; O(n log n)): the first backward stage still has every node to do
  (``L = V``) and its block holds a sink, so its memory is at least ``Σ_v m_v s_v + m(sink)``
  with ``s_v = 1`` for the values resident then (``S[0, v]`` of the model). A value not
  resident then is computed again later (its own stage needs it, and only a recomputation
  brings a freed value back), so the cost is at least ``Σ_v t_v (1 − s_v)``. Minimising that
  over ``s ∈ [0, 1]^n`` with ``Σ m_v s_v ≤ budget − min m(sink)`` is a fractional knapsack
  (greedy by ``t/m``) whose value, rounded up (costs are integers), no schedule beats;
* ``lp`` (``--certify lp``): the optimum of the model's LP relaxation over all ``n`` stages
  (every schedule of the model is a point of it), rounded up; only when HiGHS proves it
  optimal within the time limit, and only up to :data:`LP_MAX_CELLS` stage × node cells
  (bigger models do not finish in minutes; bench/NOTES_certificate.md, "Figures formerly
  quoted in the code"); skipped or cut short, :attr:`Certificate.notes` says so, and the
  table with it;
* ``milp``: HiGHS's dual bound when the plan came from ``--solver milp`` over all ``n``
  stages at a budget no lower than the one certified.

Bounds are computed at ``max(budget, the plan's model peak)`` in the plan's units (Chen's
chain ignores the budget; the DPs' plans fit it), so each is a bound for the plan itself.

Example::

    >>> import numpy as np
    >>> knapsack_bound(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]), sink_m=1, budget=6)
    2
    >>> knapsack_bound(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]), sink_m=1, budget=10)
    0
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from planner.options import CERTIFY_MODES

__all__ = ["Certificate", "certify", "knapsack_bound", "sink_size", "MODES", "LP_AUTO_NODES",
           "LP_MAX_CELLS", "DEFAULT_TIME_LIMIT"]

#: ``--certify``: ``on`` (knapsack; the LP up to :data:`LP_AUTO_NODES` activations), ``lp``
#: (the LP relaxation too, up to :data:`LP_MAX_CELLS`, within the time limit), ``off``.
MODES = CERTIFY_MODES
#: Graphs up to this many activations get the LP relaxation with ``--certify on``. 0: the
#: LP costs far more than the plan even on tiny graphs (bench/NOTES_certificate.md, the
#: timing section), and on the reference graphs it is never above the knapsack bound where
#: it finishes; ``--certify lp`` asks for it.
LP_AUTO_NODES = 0
#: Largest model (stages × activations) the LP relaxation is tried on.
LP_MAX_CELLS = 40_000
#: Seconds the LP relaxation may take (``--certify-time-limit``); past it the other bounds
#: stand.
DEFAULT_TIME_LIMIT = 30.0


@dataclass(frozen=True)
class Certificate:
    """A plan's certificate (the report's ``recompute_lower_bound``, ``gap``, ``certificate``).

    ``bound``: no schedule of the model recomputes less (cost units); ``gap``: ``(cost −
    bound) / cost`` of the plan's model cost ``cost`` (0 at cost 0); ``method``: which bound
    is the largest (``zero``, ``knapsack``, ``lp``, ``milp``); ``bounds``: every bound
    computed, by method (``lp`` None when the relaxation did not finish in time);
    ``budget_units``: the budget certified (DP units of ``comp_ratio``); ``seconds``;
    ``notes``: what was skipped or cut short."""

    bound: int
    gap: float
    cost: int
    method: str
    bounds: dict
    budget_units: int
    comp_ratio: int
    seconds: float
    notes: tuple = ()

    def report(self) -> dict:
        """The report's ``certificate`` object (no timing: a plan's report is the same on
        every run but ``seconds``; :attr:`seconds` is on the Python object). ``notes``: what
        was skipped or cut short (the LP over its size limit or its time limit), so that a
        missing bound is never silent."""
        return {"method": self.method, "bounds": dict(self.bounds), "cost": self.cost,
                "budget_units": self.budget_units, "comp_ratio": self.comp_ratio,
                **({"notes": list(self.notes)} if self.notes else {})}


def knapsack_bound(m, t, sink_m: int, budget: int) -> int:
    """The knapsack bound of the module docstring: ``Σ t`` less the most ``t`` a fractional
    knapsack of capacity ``budget − sink_m`` holds (by ``t/m``, zero-size items free), up."""
    m = np.asarray(m, np.int64)
    t = np.asarray(t, np.int64)
    total = int(t.sum())
    cap = int(budget) - int(sink_m)
    if cap < 0:
        return total
    free = m <= 0
    held = float(t[free].sum())
    mm, tt = m[~free], t[~free]
    order = np.lexsort((mm, -(tt / mm)))            # best t per byte first
    mm, tt = mm[order], tt[order]
    room = np.cumsum(mm)
    whole = int(np.searchsorted(room, cap, side="right"))
    held += float(tt[:whole].sum())
    if whole < mm.size:
        left = cap - (int(room[whole - 1]) if whole else 0)
        held += float(tt[whole]) * left / float(mm[whole])
    return max(0, total - int(math.floor(held + 1e-9)))


def certify(ag, budget_bytes: int, units: str, model, mode: str = "on",
            time_limit: float = DEFAULT_TIME_LIMIT) -> Certificate | None:
    """The certificate of a plan whose model quantities are ``model`` (a
    :class:`planner.solver.ModelStats`) on the activation graph ``ag`` at ``budget_bytes``
    (None when ``mode`` is ``off``)."""
    if mode not in MODES:
        raise ValueError(f"unknown certify mode {mode!r}; expected one of {', '.join(MODES)}")
    if mode == "off":
        return None
    from planner.units import scale_units

    t0 = time.perf_counter()
    u = scale_units(budget_bytes, int(ag.bytes.sum()), units)
    cost = int(model.model_recompute_cost)
    budget = max(u.budget, -(-int(model.model_peak_bytes) // u.ratio))
    if cost == 0:
        return Certificate(0, 0.0, 0, "zero", {"zero": 0}, budget, u.ratio,
                           time.perf_counter() - t0)
    dg = ag.with_ratio(u.ratio)                 # the DP's units view
    m = dg.m
    bounds = {"knapsack": knapsack_bound(m, ag.t, sink_size(m, ag.src), budget)}
    notes = []
    if mode == "lp" or ag.n <= LP_AUTO_NODES:
        if ag.n * ag.n > LP_MAX_CELLS:
            notes.append(f"lp bound skipped: {ag.n:,} activations > {math.isqrt(LP_MAX_CELLS):,} "
                         f"(LP_MAX_CELLS: {LP_MAX_CELLS:,} stage x activation cells)")
        else:
            from planner import milp

            lp = milp.relaxation(dg, budget, time_limit=time_limit)
            bounds["lp"] = (max(0, math.ceil(lp.bound - 1e-6)) if lp.status == "OK" else None)
            if lp.status == "TIMEOUT":
                notes.append(f"lp bound: time limit {time_limit:g} s hit"
                             + (" before HiGHS returned (stopped)" if lp.stopped == "killed"
                                else ""))
    info = model.milp
    if (info and info.get("full_stages") and info.get("dual_bound") is not None
            and info.get("budget_units", -1) >= budget and model.comp_ratio == u.ratio):
        bounds["milp"] = max(0, math.ceil(info["dual_bound"] - 1e-6))
    method = max((k for k in bounds if bounds[k] is not None), key=lambda k: (bounds[k], k))
    bound = int(bounds[method])
    return Certificate(bound, (cost - bound) / cost, cost, method, bounds, budget, u.ratio,
                       time.perf_counter() - t0, tuple(notes))


def sink_size(m, src) -> int:
    """``min m(sink)`` of the knapsack bound: the smallest sink's memory (a sink: no edge
    leaves it; 0 without one). The first backward stage's block is a non-empty set closed
    under successors, so it holds a sink, whose value and gradient both count."""
    m = np.asarray(m, np.int64)
    sinks = np.bincount(np.asarray(src, np.int64), minlength=m.size) == 0
    return int(m[sinks].min()) if sinks.any() else 0
