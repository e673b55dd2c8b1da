"""The recomputation DP of Kusumoto et al. (NeurIPS'19) over a family of lower sets.

A plan is a chain ``∅ = L0 ⊊ L1 ⊊ … ⊊ Lk = V`` of lower sets of the activation graph; block
``Vi = Li \\ L(i-1)`` keeps its new boundary nodes ``∂Li ∩ Vi`` (checkpoints) in the forward pass
and recomputes the rest before its backward pass. The DP (FORMAT.md §4.3) keeps, for every lower
set, the Pareto front of ``(saved, ckpt)`` — compute saved (to maximise) against checkpoint
memory (to minimise) — and relaxes every transition ``Li ⊊ Lj`` whose peak
``ckpt + 2·(m(Lj) − m(Li)) + m(A(Lj)) + m(B(Lj))`` fits the budget. Time-centric plans take the
front entry of V with the largest ``saved`` (least recomputation), memory-centric ones the smallest.

Why it matches the reference number for number although it runs in a different order: in the
reference a front entry ``(s, c)`` of state ``j``, once dominated, never comes back, so the
entry that survives at ``(s, c)`` is the *first* arrival with exactly that value, and arrivals
come in (source id, source saved) order — the peak sort only serves its ``break``. The loop
computes each front in one vectorized step ("pull": all feasible sources of ``j`` at once) and
breaks ties the same way, by the smallest (source id, source saved).

Modules, bottom up:

* :mod:`planner.dp.fronts` — the Pareto fronts (one structure) and the front operations;
* :mod:`planner.dp.subsets` — subset tests and transition deltas, dense or segment-local sets;
* :mod:`planner.dp.scale` — the window / front-cap approximations for very big graphs;
* :mod:`planner.dp.loop` — the DP loop (every family, every set representation);
* :mod:`planner.dp.stacked` — a capped solve's passes in one walk over the states (the same
  plans as the loop run once per pass, several times faster on the scale path);
* :mod:`planner.dp.knapsack`, :mod:`planner.dp.exact_search` — the exact family's bounded search;
* :mod:`planner.dp.solve` — which search for which family, and the plan read back;
* :mod:`planner.dp.min_budget` — the smallest budget with a plan, in one pass (an infeasible
  budget's error names it).

The families themselves are :mod:`planner.dp_families`; the product calls all this through
:class:`planner.solver.Solver` (units, families per scaling ratio).
"""
