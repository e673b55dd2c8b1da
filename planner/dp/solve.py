"""Solve the DP on a family at one budget: pick the search, run it, read the plan back.

* approximate family, no scale option: the loop of :mod:`planner.dp.loop` (under 512 sets);
  from 512 sets the loop bounded by the objective (:func:`objective_bounded`), time-centric,
  and memory-centric the bounded search of :mod:`planner.dp.exact_search` as for the exact
  family (dense families up to 4,096 sets); all keep the unpruned DP's plan;
* approximate family with a window or front cap (:mod:`planner.dp.scale`): one pass with
  thinned fronts and, time-centric, one per Lagrange multiplier; the best chain wins; a window
  with no plan widens until one has (:func:`planner.dp.scale.widening`; the result's ``window``
  is the one that gave the plan);
* exact family: :class:`~planner.dp.exact_search.ExactSearch`.

Time-centric plans take V's entry with the largest ``saved`` (least recomputation),
memory-centric ones the smallest ``ckpt``. The result names the chain as family states and as
``groups`` (block index of each node), with the model's numbers in bytes.

Example::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph, approx_family
    >>> g = DPGraph(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]),
    ...             src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]))   # a diamond
    >>> r = solve_family(approx_family(g), g, 20)
    >>> r.status, r.groups.tolist(), r.model_recompute_cost, r.model_peak_bytes
    ('OK', [0, 0, 1, 1], 2, 17)
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from hgraph.common.errors import HGraphError
from planner.dp.fronts import Fronts, end_entry, has_end, path
from planner.dp.loop import run_dp
from planner.dp.scale import EXACT_LIMIT, pass_lambdas, widening
from planner.dp.subsets import groups, groups_to_chain
from planner.dp_families import approx_family

#: Bounded passes after which a time-centric approximate solve of a dense family runs the
#: plain loop (:func:`objective_bounded`).
APPROX_DEEPENING_PASSES = 3
#: How much the bound of a time-centric approximate solve grows after a failed pass (on
#: densenet doubling overshoots the optimum at tight budgets; timings: bench/NOTES_scale.md).
APPROX_DEEPENING_GROWTH = 1.5
#: Approximate families from the first size run bounded: below it the plain loop is cheaper
#: than finding a bound (unet, resnet50, googlenet); memory-centric, dense families up to the
#: second size run the bounded search (above, its inclusion matrix, L² bits, is not built).
APPROX_SEARCH_SETS = (512, 4096)
#: A time-centric solve with a known optimum at a larger budget starts its bound this fraction
#: above it (at least 2): the fit loop's re-solves move the optimum by a few units (the
#: approximate family's bounded loop and the exact family's search alike).
KNOWN_OPTIMUM_MARGIN = 16

__all__ = ["DPResult", "solve_family", "bounded_fronts", "objective_bounded",
           "recompute_lower_bound", "feasible_floor", "STRATEGIES", "UNITS"]

STRATEGIES = ("time", "memory")
UNITS = ("bytes", "reference")


@dataclass
class DPResult:
    """A solved (or impossible) DP. Memory fields are bytes (DP units × ``comp_ratio``)."""

    status: str                       # "OK" | "IMPOSSIBLE"
    family: str
    strategy: str
    units: str
    budget_bytes: int
    budget_units: int                 # the budget the DP compared against (DP units)
    comp_ratio: int                   # 1 in bytes units
    n_lower_sets: int
    forward_cost: int                 # T(V)
    chain_ids: list = field(default_factory=list)   # family states ∅ = L0, L1, …, Lk = V
    groups: np.ndarray | None = None  # block index of every node
    blocks: int = 0
    saved: int = 0
    model_recompute_cost: int = 0
    model_peak_bytes: int = 0
    ckpt_bytes: int = 0
    fell_back: bool = False
    window: int | None = None
    front_cap: int | None = None
    seconds: float = 0.0
    #: how the segmented DP made it (:func:`planner.dp.segmented_engine.solve_result`); None
    #: for a DP walked whole
    segmented: dict | None = None

    @property
    def impossible(self) -> bool:
        return self.status == "IMPOSSIBLE"

    @property
    def chain(self) -> list:
        """[L0=∅, L1, …, Lk=V], each a sorted int array of nodes (empty when IMPOSSIBLE)."""
        return [] if self.groups is None else groups_to_chain(self.groups)


def solve_family(fam, g, budget_units: int, strategy: str = "time", comp_ratio: int = 1,
                 units: str = "bytes", window: int | None = None,
                 front_cap: int | None = None, stacked: bool = True) -> DPResult:
    """The DP on ``fam`` (of the graph ``g`` in DP units) at ``budget_units``.

    ``stacked``: run a capped solve's passes together (:mod:`planner.dp.stacked`, with dead
    entries pruned) where it applies; False runs them one by one with
    :func:`~planner.dp.loop.run_dp` (no pruning; for benches and tests)."""
    if strategy not in STRATEGIES:
        raise HGraphError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    t0 = time.perf_counter()
    b = int(budget_units)
    exact = window is None and front_cap is None
    if exact and strategy == "time":
        known = _known_plan(fam, g, b)
        if known is not None:
            return known
    if exact:
        fronts = bounded_fronts(fam, g, b, strategy)
        entry = end_entry(fronts, strategy)
    else:
        fronts, entry, window = _widened(fam, g, b, strategy, window, front_cap, stacked)
    res = DPResult(status="IMPOSSIBLE", family=fam.kind, strategy=strategy, units=units,
                   budget_bytes=b * comp_ratio, budget_units=b, comp_ratio=comp_ratio,
                   n_lower_sets=fam.num_sets, forward_cost=int(g.t.sum()),
                   fell_back=fam.fell_back, window=window, front_cap=front_cap)
    if entry is not None:
        _read_plan(res, fam, fronts, entry, g.n)
    res.seconds = time.perf_counter() - t0
    if exact and strategy == "time":
        _known_plans(fam, g).append(res)
    return res


def _known_plan(fam, g, b_units: int) -> DPResult | None:
    """The time-centric plan at ``b_units`` where a solve on ``fam`` already gave it, else
    None: a copy of a plan solved at a budget ``X ≥ b_units`` whose model peak is at most
    ``b_units`` (IMPOSSIBLE where a solve at ``X ≥ b_units`` was).

    Why it is the DP's plan at ``b_units``, chain and tie-breaks included: less budget only
    removes chains. A value on a state's front at the smaller budget is on it at ``X`` too (a
    value dominated at ``X`` extends only to dominated values, transitions adding the same
    ``(dt, dm)`` to every entry of a source), so the candidates of each value are a subset of
    those at ``X``; the plan's own entries are still there, still least in ckpt per saved and
    still first to arrive; and V's most saved is the plan's, which fits. So a front's budgets
    and a fit's re-solves that fall between a plan's peak and its budget cost nothing: the
    DP's plan is a step function of the budget, and each solve gives one step of it."""
    for r in _known_plans(fam, g):
        if r.budget_units < b_units:
            continue
        peak = r.model_peak_bytes // r.comp_ratio
        if r.impossible or peak <= b_units:
            return dataclasses.replace(
                r, budget_units=b_units, budget_bytes=b_units * r.comp_ratio, seconds=0.0,
                chain_ids=list(r.chain_ids), groups=None if r.groups is None else r.groups.copy())
    return None


def _known_plans(fam, g) -> list:
    """The time-centric :class:`DPResult` of every exact solve on ``fam`` and ``g`` so far
    (kept on the family, keyed by the graph's ``t`` and ``m``, as :func:`_known_optima`)."""
    key = (g.t.tobytes(), g.m.tobytes())
    cached = fam.cache.get("time_plans")
    if cached is None or cached[0] != key:
        cached = fam.cache["time_plans"] = (key, [])
    return cached[1]


def _widened(fam, g, budget: int, strategy: str, window, front_cap, stacked: bool):
    """(fronts, V's entry or None, the window that gave it): :func:`_scale_passes` at
    ``window`` and, while it has no plan, at the wider windows of
    :func:`~planner.dp.scale.widening`, the last one none.

    Why it ends: with no window a capped front keeps each state's least-ckpt entry (the thinned
    fronts keep their cheapest), and that entry alone decides which transitions pass the peak
    test, so the last pass reaches V exactly when the unpruned DP does, at every budget from
    the family's smallest feasible one (:func:`feasible_floor`). Below that budget no window has
    a plan and none is tried past the first (none at all once the floor is known). Where the
    floor cannot be had (a big graph held segment-locally) only ``window`` is tried."""
    floor = _floor_known(fam, g)
    if floor is not None and budget < floor:
        return None, None, window
    fronts = entry = None
    floored = floor is not None or fam.sets is not None or g.n <= EXACT_LIMIT
    failed = _failed_windows(fam, g)
    for k, w in enumerate(widening(window, fam.num_sets) if floored else [window]):
        if k == 1 and budget < feasible_floor(fam, g):
            break
        if failed.get(w, -1) >= budget:          # no plan there at a budget at least this
            continue
        fronts, entry = _scale_passes(fam, g, budget, strategy, w, front_cap, stacked)
        if entry is not None:
            return fronts, entry, w
        failed[w] = max(failed.get(w, -1), budget)
    return fronts, None, window


def _failed_windows(fam, g) -> dict:
    """``{window: the largest budget (DP units) at which it had no plan}`` of the capped solves
    on ``fam`` and ``g`` so far, kept on the family (keyed by ``g.m``): :func:`_widened` does
    not try a window again at a budget no larger.

    Why that keeps every plan: whether a capped pass reaches V does not depend on the cap
    (a thinned front keeps its least-ckpt entry, which alone decides the peak test, and an
    entry the stacked walk prunes cannot reach V), so it is the windowed DP's reachability,
    and less budget only removes transitions. A fit's re-solves (a little under a budget whose
    window 8, 16 and 32 failed: a Hugging Face GPT-2's sources, issue 36) skip those passes."""
    key = g.m.tobytes()
    cached = fam.cache.get("failed_windows")
    if cached is None or cached[0] != key:
        cached = fam.cache["failed_windows"] = (key, {})
    return cached[1]


def feasible_floor(fam, g) -> int | None:
    """The smallest budget (DP units) at which the unpruned DP on ``fam`` has a plan
    (:func:`planner.dp.min_budget.min_budget`), kept on the family; computed on the family
    itself when its sets are bits, else on a dense twin of it (same sets and statistics: the
    approximate family of ``g`` from ``fam``'s) when ``g`` has at most :data:`~planner.dp.scale.EXACT_LIMIT` nodes;
    None for a bigger graph held segment-locally (its sets as bits would be n² bits)."""
    known = _floor_known(fam, g)
    if known is not None or (fam.sets is None and g.n > EXACT_LIMIT):
        return known
    from planner.dp.min_budget import min_budget

    dense = fam if fam.sets is not None else approx_family(g, stats=fam.local,
                                                            left_out=fam.left_out)
    fam.cache["floor"] = (g.m.tobytes(), int(min_budget(dense, g)))
    return fam.cache["floor"][1]


def _floor_known(fam, g) -> int | None:
    """:func:`feasible_floor` where it was computed for ``g``'s sizes already, else None."""
    cached = fam.cache.get("floor")
    return cached[1] if cached is not None and cached[0] == g.m.tobytes() else None


def _scale_passes(fam, g, budget: int, strategy: str, window, front_cap, stacked: bool):
    """With a front cap, a time-centric solve runs one pass with fronts thinned over their ckpt
    range (the only pass of a memory-centric solve) and one per multiplier of
    :data:`~planner.dp.scale.LAMBDAS` (× T(V)/m(V)), and keeps the best chain (most saved,
    then least ckpt); every pass's chains pass the peak test. Without a cap: one pass.

    With both a cap and a window of at most :data:`~planner.dp.stacked.STACKED_MAX_WINDOW`
    on the approximate family, the passes run together (:func:`~planner.dp.stacked.run_stacked`)
    unless ``stacked`` is False; that walk also drops the entries that can no longer reach V
    before it thins a front (:mod:`planner.dp.reach`), so its plans save at least as much on
    the measured graphs (``bench/quality_bench.py``) but are not the per-pass loop's."""
    from planner.dp.stacked import STACKED_MAX_WINDOW, run_stacked   # the scale path only

    lams = pass_lambdas(g.t, g.m, front_cap, strategy)
    if (stacked and front_cap is not None and window is not None and fam.node is not None
            and window <= STACKED_MAX_WINDOW):
        return run_stacked(fam, g.t, g.m, budget, window, front_cap, lams, strategy)
    fronts = run_dp(fam, g.t, g.m, budget, window=window, front_cap=front_cap)
    entry = end_entry(fronts, strategy)
    for lam in lams[1:]:
        f2 = run_dp(fam, g.t, g.m, budget, window=window, front_cap=front_cap, lam=lam)
        e2 = end_entry(f2, strategy)
        if e2 is not None and (entry is None or (f2.s[e2], -f2.c[e2]) >
                               (fronts.s[entry], -fronts.c[entry])):
            fronts, entry = f2, e2
    return fronts, entry


def _read_plan(res: DPResult, fam, fronts: Fronts, entry: int, n: int) -> None:
    entries = np.asarray(path(fronts, entry))
    st = fronts.state[entries]
    steps = fronts.c[entries[:-1]] + 2 * (fam.mL[st[1:]] - fam.mL[st[:-1]]) + fam.mAB[st[1:]]
    res.status = "OK"
    res.chain_ids = st.tolist()
    res.groups = groups(fam, res.chain_ids, n)
    res.blocks = len(res.chain_ids) - 1
    res.saved = int(fronts.s[entries[-1]])
    res.model_recompute_cost = res.forward_cost - res.saved
    res.model_peak_bytes = int(steps.max(initial=0)) * res.comp_ratio
    res.ckpt_bytes = int(fronts.c[entries[-1]]) * res.comp_ratio


def bounded_fronts(fam, g, b_units: int, strategy: str) -> Fronts:
    """The DP's fronts, as far as the chosen strategy's plan needs them.

    The exact family is searched by :class:`~planner.dp.exact_search.ExactSearch`
    (knapsack-bounded fronts for time-centric plans, one entry per state for memory-centric
    ones), and so are dense approximate families of :data:`APPROX_SEARCH_SETS` sets,
    memory-centric. Smaller approximate families run the plain loop; bigger ones, and every
    time-centric one from 512 sets, the loop bounded by :func:`objective_bounded` (cheaper
    than the search's deepening there; bench/NOTES_scale.md). All keep the unpruned
    DP's plan. A small dense family whose optima at other budgets are known (a planning
    session's next budget, a fit's re-solve: :func:`_known_optima`) runs the bounded loop too,
    time-centric: the known optima bound it tightly from the first pass, where the plain loop
    keeps every entry (on FLOP-costed PyTorch graphs, fronts of thousands of entries).
    """
    if fam.kind == "approx" and fam.num_sets < APPROX_SEARCH_SETS[0]:
        timed = strategy == "time" and fam.sets is not None
        if timed and _known_optima(fam, g):
            return objective_bounded(fam, g, b_units, strategy)
        fronts = run_dp(fam, g.t, g.m, b_units)
        if timed and has_end(fronts):
            _known_optima(fam, g)[b_units] = int(g.t.sum()) - int(
                fronts.s[end_entry(fronts, "time")])
        return fronts
    if fam.kind == "exact" or (strategy == "memory" and fam.sets is not None
                               and fam.num_sets <= APPROX_SEARCH_SETS[1]):
        from planner.dp.exact_search import ExactSearch    # small approximate DPs never load it

        search = ExactSearch(fam, g, b_units)
        if strategy == "time":
            start, ceiling = _known_bounds(fam, g, b_units) if fam.kind == "exact" else (None, None)
            fronts = _time_fronts(search, start, ceiling)
            if fam.kind == "exact" and has_end(fronts):
                _known_optima(fam, g)[b_units] = int(g.t.sum()) - int(
                    fronts.s[end_entry(fronts, "time")])
            return fronts
        upper = _approx_memory_upper(fam, g, b_units) if fam.kind == "exact" else None
        return search.memory_fronts(upper)
    return objective_bounded(fam, g, b_units, strategy)


def _time_fronts(search, start: int | None, ceiling: int | None) -> Fronts:
    """The exact search's time-centric fronts, at most two passes where a ceiling is known:
    one at ``start`` (when below the ceiling) and, if it does not reach V, one at the ceiling.

    Why: a pass whose bound is at least the optimum returns the unpruned DP's plan, and a
    ceiling (an optimum at a smaller budget) is one, so its pass reaches V. The search's own
    deepening (:meth:`~planner.dp.exact_search.ExactSearch.time_fronts`) climbs from ``start``
    by steps of 1, 2, 4, ... units; on FLOP-costed PyTorch graphs an optimum of ~10^6 a few
    per cent above ``start`` took 15-20 passes where the ceiling's one pass cost about two of
    them (``bench/NOTES_torch.md``, "Issue 36: the front's DP planning inside ``compile``").
    Without a ceiling the deepening runs as before (it also settles an impossible budget)."""
    if ceiling is None:
        return search.time_fronts(start=start)
    if start is not None and start < ceiling:
        fronts = search.time_fronts(start=start, ceiling=start)      # one pass at start
        if has_end(fronts):
            return fronts
    return search.time_fronts(start=ceiling, ceiling=ceiling)


def _approx_memory_upper(exact, g, b_units: int) -> int | None:
    """The approximate DP's memory-centric ckpt: a feasible exact-family plan's, so an upper
    bound on the exact optimum (``L_v`` sets are lower sets). ``None`` when it has no plan."""
    key = g.m.tobytes()
    cached = exact.cache.get("approx")
    if cached is None or cached[0] != key:
        try:
            fam = approx_family(g)
        except HGraphError:                # several sinks: no approximate family
            fam = None
        cached = exact.cache["approx"] = (key, fam)
    fam = cached[1]
    if fam is None:
        return None
    fronts = bounded_fronts(fam, g, b_units, "memory")
    entry = end_entry(fronts, "memory")
    return None if entry is None else int(fronts.c[entry])


def objective_bounded(fam, g, b_units: int, strategy: str) -> Fronts:
    """:func:`~planner.dp.loop.run_dp` pruned by a bound on the strategy's objective, raised
    until V is reached.

    Time-centric plans minimise the recompute, which only grows along a chain; memory-centric
    ones the checkpoint memory, likewise. A DP that drops entries above a bound ``g`` therefore
    returns the exact optimum (with the reference's tie-breaks) as soon as it reaches V at all.
    Time-centric on a dense family the first bound is twice the knapsack lower bound
    (:func:`recompute_lower_bound`: near the optimum at loose budgets, further below it at
    tight ones), raised by :data:`APPROX_DEEPENING_GROWTH` after a pass that
    fails, and after :data:`APPROX_DEEPENING_PASSES` failed passes the unpruned loop runs
    (where the budget, not the bound, keeps the fronts small: cheaper than deepening further).
    Otherwise the bound starts small and grows 4×. At the largest bound nothing is pruned, so
    an empty V front there is IMPOSSIBLE. A pass after a failed one keeps the states that one
    held exactly (``resume`` of :func:`~planner.dp.loop.run_dp`).

    Time-centric on a dense family, the optima already found on the family start the bound
    (:func:`_known_optima`): less budget never recomputes less, so an optimum at a larger
    budget is a lower bound — the bound starts a little above it (1/:data:`KNOWN_OPTIMUM_MARGIN`)
    — and one at a smaller budget an upper bound, which the bound never passes (a pass there
    reaches V; with no lower bound known the first pass is at it, and the deepening's last
    pass too, where it would otherwise drop the bound: a front's budgets, ascending, each
    one bounded pass). A plan fitted to the byte (``planner.api``) re-solves a little below the
    budget two or three times: each re-solve is then one pass near its optimum instead of the
    whole deepening again.
    """
    if strategy == "time":
        top = ceiling = int(g.t.sum())
        known = None
        if fam.sets is not None:
            bound, grow, passes = 2 * max(1, recompute_lower_bound(fam, g, b_units)), \
                APPROX_DEEPENING_GROWTH, APPROX_DEEPENING_PASSES
            known = _known_optima(fam, g)
            start, roof = _known_bounds(fam, g, b_units)
            if start is not None:
                bound = start
            if roof is not None:             # a pass bounded by it reaches V: never past it
                ceiling = roof
                bound = roof if start is None else min(bound, ceiling)
        else:
            bound, grow, passes = 16, 4, None
        done = None                  # the last failed pass, whose exact states the next keeps
        while True:
            if passes == 0:
                bound = ceiling
            fronts = run_dp(fam, g.t, g.m, b_units, max_recompute=bound if bound < top else None,
                            resume=done)
            if has_end(fronts) or bound >= top:
                if known is not None and has_end(fronts):
                    known[b_units] = top - int(fronts.s[end_entry(fronts, "time")])
                return fronts
            done = (fronts, bound)
            bound = min(ceiling, max(bound + 1, int(bound * grow)))    # ceiling ≤ top
            passes = None if passes is None else passes - 1
    top = int(g.m.sum())
    bound = 0
    while True:
        fronts = run_dp(fam, g.t, g.m, b_units, max_ckpt=bound)
        if has_end(fronts) or bound >= top:
            return fronts
        bound = min(top, max(bound * 4, top // 1024, 1))


def _known_bounds(fam, g, b_units: int) -> tuple:
    """(a bound to start from, a ceiling) on the least recompute at ``b_units`` from the
    optima already found on ``fam`` (:func:`_known_optima`; None where none bounds it): less
    budget never recomputes less, so an optimum at a larger budget is at most this one — the
    start lies a little above it (1/:data:`KNOWN_OPTIMUM_MARGIN`: a re-solve's budget is a
    little lower) — and one at a smaller budget at least it."""
    known = _known_optima(fam, g)
    floor = [r for b, r in known.items() if b >= b_units]
    roof = [r for b, r in known.items() if b <= b_units]
    start = max(floor) + max(2, max(floor) // KNOWN_OPTIMUM_MARGIN) if floor else None
    return start, (min(roof) if roof else None)


def _known_optima(fam, g) -> dict:
    """``{budget units: least recompute}`` of the time-centric solves on ``fam`` and ``g`` so
    far, kept on the family (its cache is keyed by the graph's ``t`` and ``m``)."""
    key = (g.t.tobytes(), g.m.tobytes())
    cached = fam.cache.get("time_optima")
    if cached is None or cached[0] != key:
        cached = fam.cache["time_optima"] = (key, {})
    return cached[1]


def recompute_lower_bound(fam, g, b_units: int) -> int:
    """Least recompute any plan at ``b_units`` can have: ``T − knapsack(∅, cap0)`` with the
    checkpoints' room ``cap0 = B − 2·m(sink)`` (:mod:`planner.dp.knapsack`); ``T`` when no
    checkpoint fits. (``fam``: the family it bounds; the value depends only on the graph.)"""
    from planner.dp.knapsack import checkpoint_room, root_knapsack

    T = int(g.t.sum())
    cap0 = checkpoint_room(g, b_units)
    if cap0 < 0:
        return T
    return T - root_knapsack(g, cap0)
