"""The time-centric exact search's bound: exact where it claims to be, admissible, plan-neutral.

* :class:`planner.dp.knapsack.KnapsackBound` equals a plain greedy fractional knapsack (Python
  fractions, exact) per (state, capacity), for every table layout (blocks of one state,
  capacities truncated at ``cap_max``), :meth:`~KnapsackBound.upper` is never below it and
  :meth:`~KnapsackBound.reaches` (grid shortcuts, exact where unsure) compares as it does.
* Admissible: at every state and every ckpt ``c`` of the unpruned DP's fronts from which V
  can still be reached, the bound the search uses never promises less than the best
  completion really saves, and ``c`` is within the ckpt ceiling ``cmax`` — checked against a
  brute-force recursion over every chain of lower sets from that state (``_best_rest``).
* Plans unchanged: :meth:`ExactSearch.time_fronts` with the lexmin pass early, late, never
  and on big fronts, and with coarse ``upper`` grids, gives the unpruned DP's plan.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np
import pytest

from planner.dp import knapsack as knapsack_mod
from planner.dp.exact_search import ExactSearch
from planner.dp.fronts import end_entry, path
from planner.dp.knapsack import KnapsackBound
from planner.dp.loop import run_dp
from planner.dp_families import DPGraph, exact_family
from tests.family_oracle import random_single_sink_dag


def _random_graph(seed: int, n: int | None = None) -> DPGraph:
    """A random single-sink DAG (node ids shuffled), some nodes weighing nothing."""
    rng = np.random.default_rng(500 + seed)
    n = n or int(rng.integers(7, 13))
    p = (0.2, 0.35, 0.5)[seed % 3]
    src, dst, _ = random_single_sink_dag(rng, n, p)
    m = rng.integers(0, 30, n) * (rng.random(n) < 0.85)
    t = rng.choice([1, 2, 5, 10], n)
    return DPGraph(m=m, t=t, src=src, dst=dst)


def _greedy(m, t, items, cap) -> int:
    """Fractional knapsack by the book: best ratio first (Fractions), floored."""
    items = sorted(items, key=lambda v: (Fraction(int(t[v]), int(m[v])) if m[v] else
                                         Fraction(10**18)), reverse=True)
    val, room = Fraction(0), Fraction(int(cap))
    for v in items:
        if m[v] <= room:
            val += int(t[v])
            room -= int(m[v])
        else:
            val += Fraction(int(t[v]), int(m[v])) * room
            break
    return int(val)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("layout", ["blocks", "one-state-blocks", "truncated"])
def test_knapsack_tables_are_the_greedy_knapsack(seed, layout, monkeypatch):
    g = _random_graph(seed)
    if layout == "one-state-blocks":
        monkeypatch.setattr(knapsack_mod, "KNAPSACK_BLOCK_CELLS", 0)
    fam = exact_family(g)
    total = int(g.m.sum())
    cap_max = total // 3 if layout == "truncated" else None
    kb = KnapsackBound(fam, g, cap_max)
    members = fam.members(g.n)
    has_succ = np.zeros(g.n, bool)
    has_succ[g.src] = True
    top = kb.cap_max
    caps = np.unique(np.r_[0, 1, top, np.linspace(0, top, 9).astype(np.int64)])
    st = np.repeat(np.arange(fam.num_sets), caps.size)
    cp = np.tile(caps, fam.num_sets)
    got, up = kb(st, cp), kb.upper(st, cp)
    for j, c, v, u in zip(st.tolist(), cp.tolist(), got.tolist(), up.tolist()):
        outside = [x for x in range(g.n) if has_succ[x] and not members[x, j]]
        assert v == _greedy(g.m, g.t, outside, c), (j, c)
        assert u >= v, (j, c)
    for shift in (-1, 0, 1):                          # the grid shortcut decides as exactly
        assert np.array_equal(kb.reaches(st, cp, got + shift), got >= got + shift)
    if layout == "truncated":
        with pytest.raises(ValueError):
            kb(np.zeros(1, np.int64), np.array([top + 1]))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("truncated", [False, True])
@pytest.mark.parametrize("grid", [1, 3, 64])
def test_least_cap_inverts_the_knapsack(seed, truncated, grid, monkeypatch):
    """``least_cap(j, r)`` is the least capacity whose knapsack reaches ``r`` (``cap_max + 1``
    where none does), and ``least_cap_lower`` never exceeds it (the search's cut of a source
    front by ckpt relies on that). Any grid."""
    monkeypatch.setattr(knapsack_mod, "UPPER_GRID", grid)
    g = _random_graph(seed)
    fam = exact_family(g)
    kb = KnapsackBound(fam, g, int(g.m.sum()) // 3 if truncated else None)
    top = kb.cap_max
    caps = np.arange(top + 1)
    for j in range(fam.num_sets):
        vals = kb(np.full(caps.size, j), caps)
        reqs = np.arange(-2, int(vals.max()) + 3)
        got = kb.least_cap(np.full(reqs.size, j), reqs)
        want = [int(np.argmax(vals >= r)) if (vals >= r).any() else top + 1 for r in reqs]
        assert got.tolist() == want, j
        low = kb.least_cap_lower(np.full(reqs.size, j), reqs)       # the grid's lower bound:
        assert np.all(low <= got), j                                 # never above, and equal
        assert np.array_equal(low == top + 1, got == top + 1), j     # where none reaches
        assert np.array_equal(low == 0, got == 0), j


def test_best_per_saved_paths_pick_the_lexsort_winners():
    """Every path of ``best_per_saved`` (lexsort, packed one-scatter buckets, two-scatter
    buckets where ``nc``·``e`` would not pack) picks the same winners as a plain lexsort:
    least ckpt, then first entry, per saved."""
    from planner.dp.fronts import best_per_saved
    rng = np.random.default_rng(3)
    for trial in range(200):
        n = int(rng.integers(1, 3000))
        key = rng.integers(0, int(rng.integers(1, 4000)), n) + int(rng.integers(0, 100))
        nc = rng.integers(0, int(rng.integers(1, 50)), n)
        if trial % 4 == 0:                                # too wide to pack with e
            nc = nc * (1 << 50)
        e = rng.permutation(n) + int(rng.integers(0, 9))
        order = np.lexsort((e, nc, key))
        first = np.flatnonzero(np.r_[True, key[order][1:] != key[order][:-1]])
        want = (key[order][first], nc[order][first], e[order][first])
        for a, b in zip(best_per_saved(key, nc, e), want):
            assert np.array_equal(a, b)


def _best_rest(fam, g, budget):
    """``best(j, c)``: the most saved any chain from ``L_j`` (ckpt ``c``) to V adds, None when
    none passes every peak test — every chain tried, by plain recursion (tiny families)."""
    sets = [frozenset(np.flatnonzero(row).tolist()) for row in fam.members(g.n).T]
    bnd = [frozenset(np.flatnonzero(row).tolist()) for row in
           np.unpackbits(fam.bnd.view(np.uint8), axis=1, bitorder="little")[:, :g.n]]
    end = fam.num_sets - 1

    @functools.lru_cache(maxsize=None)
    def best(j, c):
        if j == end:
            return 0
        out = None
        for k in range(fam.num_sets):
            if not sets[j] < sets[k]:
                continue
            if c + 2 * int(fam.mL[k] - fam.mL[j]) + int(fam.mAB[k]) > budget:
                continue
            new = bnd[k] - sets[j]
            rest = best(k, c + int(sum(g.m[v] for v in new)))
            if rest is not None:
                val = int(sum(g.t[v] for v in new)) + rest
                out = val if out is None else max(out, val)
        return out
    return best


@pytest.mark.parametrize("seed", range(8))
def test_bound_is_admissible(seed):
    """Per state and ckpt of the unpruned fronts, the knapsack the search reads (and the
    per-state ceiling ``ks_bnd`` behind its source filter) is ≥ the best completion."""
    g = _random_graph(seed, n=8 + seed % 3)
    fam = exact_family(g)
    total = int(g.m.sum())
    checked = 0
    for frac in (0.5, 0.8, 1.2, 2.0):
        budget = int(frac * total)
        search = ExactSearch(fam, g, budget)
        if search.cap0 < 0:
            continue
        kb = search._bound_tables()
        best = _best_rest(fam, g, budget)
        fr = run_dp(fam, g.t, g.m, budget)
        for j in range(fam.num_sets - 1):
            for k in range(fr.ptr[j], fr.ptr[j + 1]):
                c = int(fr.c[k])
                rest = best(j, c)
                if rest is None:
                    continue
                assert fam.m_bnd[j] <= c <= search.cmax[j] <= search.cap0, (frac, j, c)
                assert int(kb(np.array([j]), np.array([search.cap0 - c]))[0]) >= rest
                assert int(kb.upper(np.array([j]), np.array([search.cap0 - c]))[0]) >= rest
                assert search.ks_bnd[j] >= rest
                checked += 1
        opt = best(0, 0)
        if opt is not None:
            assert search.lower_bound_root() <= int(g.t.sum()) - opt
    assert checked >= 10


def _plan(fronts):
    e = end_entry(fronts, "time")
    if e is None:
        return None
    es = path(fronts, e)
    return [int(fronts.state[x]) for x in es], int(fronts.s[e]), int(fronts.c[e])


@pytest.mark.parametrize("seed", range(6))
def test_time_fronts_keep_the_plan(seed, monkeypatch):
    """Whatever the pass schedule (lexmin at once, late, never, on big fronts) and the
    ``upper`` grid, the time-centric plan is the unpruned DP's, chain and ckpt included."""
    g = _random_graph(seed, n=14 + seed % 3)
    fam = exact_family(g)
    total = int(g.m.sum())
    checked = 0
    for frac in (0.5, 0.8, 1.1, 1.5, 2.2, 4.0):
        budget = int(frac * total)
        want = _plan(run_dp(fam, g.t, g.m, budget))
        for kw, grid in ((dict(), 32), (dict(lexmin_after=1), 32), (dict(lexmin_after=None), 2),
                         (dict(lexmin_after=2), 1)):
            monkeypatch.setattr(knapsack_mod, "UPPER_GRID", grid)
            fam.cache.pop("knapsack", None)
            got = _plan(ExactSearch(fam, g, budget).time_fronts(**kw))
            assert got == want, (frac, kw, grid)
        checked += want is not None
    assert checked >= 2


def test_ckpt_ceiling_counts_each_successor_once():
    """A repeated edge names the same successor twice: the ceiling must not count it twice
    (that would drop live entries) — the plan stays the unpruned DP's."""
    g0 = _random_graph(3, n=13)
    g = DPGraph(m=g0.m, t=g0.t, src=np.r_[g0.src, g0.src[:6]], dst=np.r_[g0.dst, g0.dst[:6]])
    fam = exact_family(g)
    checked = 0
    for frac in (0.6, 0.9, 1.2, 1.6, 2.5):
        budget = int(frac * int(g.m.sum()))
        want = _plan(run_dp(fam, g.t, g.m, budget))
        search = ExactSearch(fam, g, budget)
        assert _plan(search.time_fronts()) == want, frac
        single = ExactSearch(exact_family(g0), g0, budget)
        single._bound_tables()
        assert np.array_equal(search.cmax, single.cmax)
        checked += want is not None
    assert checked >= 2


def test_ratio_order_is_the_exact_comparison_sort():
    """The knapsack's item order sorts by float t/m and re-sorts runs of equal floats with the
    exact integer comparison: the same order as sorting every pair exactly (m = 0 first, ties
    stable), with huge sizes and ratios that differ below a float's precision."""
    from functools import cmp_to_key

    from planner.dp.knapsack import _ratio_order

    def exact(m, t, items):
        def before(a, b):
            ma, mb = int(m[a]), int(m[b])
            if ma == 0 or mb == 0:
                return (mb == 0) - (ma == 0)
            return int(t[b]) * ma - int(t[a]) * mb
        return sorted(items.tolist(), key=cmp_to_key(before))

    rng = np.random.default_rng(4)
    for trial in range(2000):
        n = int(rng.integers(1, 50))
        m = rng.integers(0, 5, n) * rng.choice([1, 3, 10**9, 2**40], n)
        t = rng.integers(0, 4, n) * rng.choice([1, 3, 10**9], n)
        items = np.sort(rng.choice(n, int(rng.integers(0, n + 1)), replace=False))
        assert _ratio_order(m, t, items).tolist() == exact(m, t, items), trial
    m = np.array([10**15 + 1, 10**15, 3, 6, 0])            # 0 and 1: one float, 1 is larger
    t = np.array([10**15 + 2, 10**15 + 1, 1, 2, 0])
    assert _ratio_order(m, t, np.arange(5)).tolist() == exact(m, t, np.arange(5)) == [4, 1, 0, 2, 3]


def test_root_knapsack_is_the_tables_answer_at_the_empty_set():
    """:func:`root_knapsack` (one cumulative sum) answers what :class:`KnapsackBound` answers
    for ∅ at every capacity, past ``m(V)`` too."""
    from planner.dp.knapsack import root_knapsack

    for seed in range(40):
        g = _random_graph(900 + seed)
        fam = exact_family(g)
        kb = KnapsackBound(fam, g)
        total = int(g.m.sum())
        caps = np.unique(np.r_[0, 1, total // 3, total // 2, total - 1, total,
                               np.random.default_rng(seed).integers(0, total + 1, 8)])
        want = kb(np.zeros(caps.size, np.int64), np.minimum(caps, total)).tolist()
        assert [root_knapsack(g, int(c)) for c in caps] == want, seed
        assert root_knapsack(g, 5 * total) == want[-1]
