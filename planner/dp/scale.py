"""The approximate DP at scale: two explicit, reported approximations and when they apply.

**Exactness and the two scale options.** With ``window=None`` and ``front_cap=None`` (the
default) the fronts, the chain and every model number equal the DP's
(tested on the reference graphs and synthetic ones). That DP is inherently quadratic in
*time*, though: the Pareto front of a state holds up to ~n/4 (saved, ckpt) entries on a deep
transformer at half the activation memory (measured: mean n/4, max n/2) and the feasible
source window spans a quarter of the graph, so n = 100,000 means ~10^9 front entries and far
more candidate relaxations. For such graphs :func:`plan_options` turns on two explicit,
reported approximations (``dp_window``, ``dp_front_cap`` in the plan's report):

* ``window = W``: a state is reached only from the ``W`` states just before it in the family
  order (blocks of at most ~W nodes on near-chain graphs — the optimum's blocks are a few nodes);
* ``front_cap = K``: each front keeps at most K entries — always its cheapest and its
  largest-saved one, and either entries spread over its checkpoint range or those with the
  best Lagrangian score ``saved − λ·ckpt``; :func:`planner.dp.solve.solve_family` runs a pass
  of each kind (a few λ) and keeps the best chain. Before a front is thinned, the entries
  that can no longer reach V within the window are dropped (:mod:`planner.dp.reach`; exact),
  so the K entries cover the checkpoint range that can still finish.

Which of the two costs quality (``bench/quality_bench.py``, replayed recompute against the
uncapped DP): on a synthetic transformer the window alone (8, no cap) gives the uncapped
plan's model recompute; the cap alone does not. The cap was the cause, and the reach pruning
closes most of its gap; on the larger transformer a cap of 64 still left a gap that 128
closes, hence the default of 128 (the figures: bench/NOTES_scale.md, "Figures formerly quoted
in docstrings"). The README's Measured table has the rows for both generators.

**The window widens until a plan exists** (:func:`widening`; :func:`planner.dp.solve.solve_family`
runs it). A window counts states in the family's order (by ``m(L)``), and a graph with many
sources — dropout masks, one per layer of a Hugging Face GPT-2 — puts their one-node lower sets
first, each reachable from ∅ only: at window 8 (or 32) such a family has no chain at any budget.
So a budget whose window has no plan is solved again at twice the window, and so on, up to no
window. With no window a capped front still keeps each state's least-ckpt entry, so the last
pass reaches V exactly when the unpruned DP does: below the family's smallest feasible budget
(:func:`planner.dp.min_budget.min_budget`, computed once where the family's sets fit as bits)
no window is tried, and at or above it a plan is always found. Only where that budget is
known: on a graph of more than :data:`EXACT_LIMIT` nodes held segment-locally (its sets as bits
would be n² bits) a budget below it cannot be told from one that needs a wider window, and a
pass with no window is quadratic, so there the window stays as asked.

Every chain the capped DP returns is still a chain of the approximate family whose every
transition passed the reference's peak test, so the plan is valid and the replay checks it;
only optimality (within the family) is given up.

Example::

    >>> plan_options(1000), plan_options(10_000), plan_options(10_000, window=0, front_cap=0)
    ((None, None), (8, 128), (None, None))
"""

from __future__ import annotations

import numpy as np

__all__ = ["EXACT_LIMIT", "DEFAULT_WINDOW", "DEFAULT_FRONT_CAP", "MEMORY_WINDOW",
           "MEMORY_FRONT_CAP", "LAMBDAS", "plan_options", "widening",
           "pass_lambdas", "thin", "thin_lagrange"]

#: Graphs up to this many activations run the exact approximate DP (no window, no cap): the
#: reference's own limit (MAX_N = 2500); past it the exact DP's quadratic time grows quickly
#: (timings: bench/NOTES_scale.md, "Figures formerly quoted in docstrings").
EXACT_LIMIT = 2500
#: Activations from which :func:`planner.plan`'s approximate DP runs segmented on the engine
#: (:func:`planner.dp.segmented_engine.applies`) and its schedule is made in slices
#: (:func:`planner.sliced.applies`); below it the one walk of :mod:`planner.dp.stacked` and
#: the whole emission, unchanged. Here, not in the segmented modules, so that a small plan
#: reads it without importing the scale path's loop. Op-level graphs of today's models are
#: 10^3–10^5 activations; the segmented DP is for the unrolled ones above.
SEGMENTED_LIMIT = 100_000
DEFAULT_WINDOW = 8
#: 128, not 32 or 64: with pruning, the replayed recompute gap to the uncapped DP on the
#: 4,012-node transformer was smallest with 128 (``bench/quality_bench.py``; figures in
#: bench/NOTES_scale.md); each doubling costs DP time per state.
DEFAULT_FRONT_CAP = 128
#: Memory-centric plans want blocks as large as the budget allows: a wide window, thin fronts
#: (synthetic transformer at 40 %: the exact chain at 2,000 nodes; 6 blocks at 8,000).
MEMORY_WINDOW = 4096
MEMORY_FRONT_CAP = 4
def plan_options(n: int, window=None, front_cap=None,
                 strategy: str = "time") -> tuple[int | None, int | None]:
    """``(window, front_cap)`` for an ``n``-node graph: given values win; "auto" (None) means
    exact up to :data:`EXACT_LIMIT` nodes and the strategy's defaults above it; 0 means off."""
    big = n > EXACT_LIMIT
    dw, dk = (DEFAULT_WINDOW, DEFAULT_FRONT_CAP) if strategy == "time" else \
        (MEMORY_WINDOW, MEMORY_FRONT_CAP)
    w = (dw if big else None) if window is None else (int(window) or None)
    k = (dk if big else None) if front_cap is None else (int(front_cap) or None)
    return w, k


def widening(window, num_sets: int) -> list:
    """The windows a capped solve tries in turn until one has a plan: ``window``, doubled
    while it is below the family's ``num_sets`` states, then no window (None). A window of at
    least ``num_sets`` is already no window: it is tried alone. ``[None]`` without a window.

    >>> widening(8, 340), widening(8, 10), widening(None, 340), widening(4096, 340)
    ([8, 16, 32, 64, 128, 256, None], [8, None], [None], [4096])
    """
    if window is None:
        return [None]
    out = [int(window)]
    while out[-1] * 2 < num_sets:
        out.append(out[-1] * 2)
    return out + [None] if out[-1] < num_sets else out


def thin(nc: np.ndarray, cap: int) -> np.ndarray:
    """Indices of at most ~``cap`` entries of a front (``nc`` ascending), spread over its ckpt
    range: for each of ``cap`` levels the largest entry at or below it. Levels are denser
    towards the large-ckpt (large-saved) end, where time-centric chains run (on a synthetic
    transformer they came nearer the exact recompute than evenly spaced levels;
    bench/NOTES_scale.md)."""
    x = np.linspace(0.0, 1.0, cap) ** 0.5          # denser towards the largest-saved end
    levels = int(nc[0]) + x * (int(nc[-1]) - int(nc[0]))
    idx = np.searchsorted(nc, levels, side="right") - 1
    return np.unique(np.r_[0, np.clip(idx, 0, nc.size - 1), nc.size - 1])


def thin_lagrange(ns: np.ndarray, nc: np.ndarray, cap: int, lam: float) -> np.ndarray:
    """Indices of at most ``cap`` entries of a front: ``cap/2`` with the largest Lagrangian
    score ``saved − lam·ckpt`` (additive along a chain, so the chain that is best for ``lam``
    stays in every front it passes through) and ``cap/2`` spread as :func:`thin` does (so a
    ``lam`` that checkpoints too eagerly still leaves cheaper entries to continue from)."""
    score = ns - lam * nc.astype(np.float64)
    keep = np.zeros(ns.size, bool)
    half = cap // 2
    keep[np.argpartition(-score, half - 1)[:half]] = True
    keep[thin(nc, cap - half)] = True
    return np.flatnonzero(keep)


#: Lagrange multipliers tried by a capped time-centric solve, in units of T(V)/m(V).
LAMBDAS = (0.1, 0.25, 0.6, 1.5)


def pass_lambdas(t: np.ndarray, m: np.ndarray, front_cap, strategy: str) -> list:
    """The passes of a solve with ``front_cap``: ``None`` for the :func:`thin` pass (the only
    one memory-centric or below a cap of 4), then one multiplier of :data:`LAMBDAS`
    (× T(V)/m(V)) per :func:`thin_lagrange` pass."""
    lams = [None]
    if front_cap is not None and front_cap >= 4 and strategy == "time":
        lam0 = float(t.sum()) / max(1.0, float(m.sum()))
        lams += [mult * lam0 for mult in LAMBDAS]
    return lams


