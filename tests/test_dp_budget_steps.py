"""A front's budgets solved on one family give each budget's own plan (issue 36).

A planning session solves the DP at a dozen budgets and the fit's re-solves on one family:
known optima bound each pass (:func:`planner.dp.solve.objective_bounded`), and a plan solved
at ``X`` answers every budget between its model peak and ``X``
(:func:`planner.dp.solve._known_plan`). Both must leave each budget's plan what a fresh
family gives, chain and tie-breaks included; and the packed sort of
:func:`planner.dp.fronts.best_per_saved` must pick what the three-key sort picks.
"""

import numpy as np
import pytest

from planner.dp.fronts import best_per_saved
from planner.dp.solve import solve_family
from planner.dp_families import DPGraph, approx_family


def _graph(seed: int, n: int = 36) -> DPGraph:
    """A chain with random skip edges (one sink), FLOP-like wide costs (the general loop, not
    the table loop's buckets) and repeated sizes (ties)."""
    rng = np.random.default_rng(seed)
    src = list(range(n - 1))
    dst = list(range(1, n))
    for _ in range(n):
        u = int(rng.integers(0, n - 2))
        v = int(rng.integers(u + 2, n))
        src.append(u)
        dst.append(v)
    pairs = sorted(set(zip(src, dst)))
    m = rng.choice([64, 128, 256, 512], size=n)
    t = rng.integers(1, 2_000_000, size=n) * 7
    return DPGraph(m=m, t=t, src=np.array([p[0] for p in pairs]),
                   dst=np.array([p[1] for p in pairs]))


def _key(r):
    return r.status, None if r.groups is None else r.groups.tolist(), r.saved, r.ckpt_bytes


@pytest.mark.parametrize("seed", range(3))
def test_budgets_on_one_family_are_each_budgets_plan(seed):
    g = _graph(seed)
    total = int(g.m.sum())
    budgets = sorted({int(total * f) for f in np.linspace(0.2, 2.5, 10)})
    fresh = {b: _key(solve_family(approx_family(g), g, b)) for b in budgets}
    assert any(k[0] == "OK" for k in fresh.values())
    assert any(k[0] != "OK" for k in fresh.values())      # the range crosses the smallest
    for order in (budgets, budgets[::-1]):
        fam = approx_family(g)
        for b in order:
            assert _key(solve_family(fam, g, b)) == fresh[b], b
        # re-solves just under each plan's model peak and between budgets: from the cache
        # or a bounded pass, the same as fresh
        for b in budgets:
            r = solve_family(fam, g, b)
            if r.status == "OK":
                for x in (r.model_peak_bytes, r.model_peak_bytes - 1, (b + r.model_peak_bytes) // 2):
                    assert _key(solve_family(fam, g, x)) == _key(
                        solve_family(approx_family(g), g, x)), x


@pytest.mark.parametrize("ascending", [True, False])
def test_best_per_saved_packed_sort_is_the_three_key_sort(ascending):
    rng = np.random.default_rng(1)
    n = 5000
    ns = rng.integers(0, 10**9, size=n) // 10**4 * 10**4    # wide, with repeats
    nc = rng.integers(0, 50, size=n)                         # many equal (ns, nc)
    e = np.arange(n) * 3 if ascending else rng.permutation(n)
    got = best_per_saved(ns, nc, e)
    order = np.lexsort((e, nc, ns))
    s, c, ee = ns[order], nc[order], e[order]
    first = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    for a, b in zip(got, (s[first], c[first], ee[first])):
        assert a.tolist() == b.tolist()


@pytest.mark.parametrize("seed", range(3))
def test_exact_family_ascending_budgets_take_at_most_two_passes_each(seed, monkeypatch):
    """The exact family's time-centric solves with a ceiling (an optimum at a smaller budget)
    run one pass at the start and one at the ceiling at most (:func:`planner.dp.solve.
    _time_fronts`; the search's own deepening climbed from the start by 1, 2, 4, ... units:
    15-20 passes on FLOP costs), and each plan is still what a fresh family gives."""
    from planner.dp import exact_search
    from planner.dp_families import exact_family

    g = _graph(seed, n=30)
    total = int(g.m.sum())
    budgets = sorted({int(total * f) for f in np.linspace(0.2, 2.5, 10)})
    fresh = {b: _key(solve_family(exact_family(g), g, b)) for b in budgets}
    assert sum(k[0] == "OK" for k in fresh.values()) >= 3
    passes = []
    real = exact_search.ExactSearch.pareto
    monkeypatch.setattr(exact_search.ExactSearch, "pareto",
                        lambda self, bound: passes.append(bound) or real(self, bound))
    fam = exact_family(g)
    ceiled = 0
    for b in budgets:                       # ascending: from the first plan on, a ceiling
        had = any(k[0] == "OK" for x, k in fresh.items() if x < b)
        passes.clear()
        assert _key(solve_family(fam, g, b)) == fresh[b], b
        if had:
            ceiled += 1
            assert len(passes) <= 2, (b, passes)
        r = solve_family(fam, g, b)
        if r.status == "OK":                # a fit's re-solve under the plan's peak
            x = r.model_peak_bytes - 1
            passes.clear()
            assert _key(solve_family(fam, g, x)) == _key(solve_family(exact_family(g), g, x))
    assert ceiled >= 2
