"""The memory-centric exact search (:meth:`ExactSearch.lexmin`) against the unpruned DP.

The search settles states in bands of ``c`` (Dijkstra order), makes a state a target only
once the band's end passes ``m(∂L)`` (a lower bound on its value), drops cells whose source
value is above the target's running best and computes ``dt`` only for the pairs that reach
the least ``c``; the inclusion test reads the grid or, where the peak test leaves few
cells, one bit per cell. None of it may change the
plan: chain, saved and ckpt equal the plain pull DP's (:func:`planner.dp.loop.run_dp`, first
arrival), at every band width — one state per pass up to everything in one pass — on random
DAGs whose weights are mostly 0 and 1, so that many pairs tie on ``(c, saved)`` and the
least-source-id rule decides. The boundary lookups (``dt``/``dm``) equal the set arithmetic.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.bitsets import unpack
from planner.dp import exact_search
from planner.dp.exact_search import ExactSearch
from planner.dp.fronts import end_entry, path
from planner.dp.loop import run_dp
from planner.dp_families import DPGraph, approx_family, exact_family
from tests.family_oracle import random_single_sink_dag


def _random_dag(rng, n, p):
    """A random DAG with one sink (:func:`family_oracle.random_single_sink_dag`)."""
    return random_single_sink_dag(rng, n, p)[:2]


def _case(seed, ties=True):
    rng = np.random.default_rng(500 + seed)
    n = 12 + seed % 5
    src, dst = _random_dag(rng, n, (0.15, 0.25, 0.4)[seed % 3])
    if ties:                                        # few distinct values: ties everywhere
        m, t = rng.integers(0, 3, n), rng.integers(0, 2, n)
    else:
        m, t = rng.integers(0, 40, n), rng.choice([1, 10], n)
    return DPGraph(m=m, t=t, src=src, dst=dst)


def _plan(fronts, fam):
    """(chain ids, saved, ckpt) of V's memory-centric entry, None without one."""
    e = end_entry(fronts, "memory")
    if e is None:
        return None
    ids = [int(fronts.state[k]) for k in path(fronts, e)]
    return ids, int(fronts.s[e]), int(fronts.c[e])


def _budgets(g):
    """From infeasible to ∅ → V in one block (its peak is about 2·m(V))."""
    total = int(g.m.sum())
    return [int(f * total) for f in (0.7, 1.0, 1.15, 1.3, 1.45, 1.6, 1.75, 1.9, 2.5)]


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("family", ["exact", "approx"])
def test_bands_keep_the_plan(seed, family, monkeypatch):
    """Every band width (1: one state at a time; 10**6: one pass) gives the unpruned plan."""
    g = _case(seed, ties=seed % 3 != 2)
    fam = exact_family(g) if family == "exact" else approx_family(g)
    passes = []
    real_pass = ExactSearch._lexmin_pass
    monkeypatch.setattr(ExactSearch, "_lexmin_pass",
                        lambda self, *a: (passes.append(1), real_pass(self, *a))[1])
    checked = most = 0
    for budget in _budgets(g):
        want = _plan(run_dp(fam, g.t, g.m, budget), fam)
        for band in (1, 2, 3, 7, 10**6):
            search = ExactSearch(fam, g, budget)
            passes.clear()
            got = _plan(search.lexmin(band=band), fam)
            assert got == want, (budget, band)
            if band == 1 and want is not None and want[2] > 0:
                assert len(passes) >= 2            # ∅'s band (c = 0), then V's
                most = max(most, len(passes))
            if want is not None:                   # the approximate upper bound prunes alike
                assert _plan(search.lexmin(want[2], band=band), fam) == want
                assert _plan(search.memory_fronts(want[2] + 1), fam) == want
        checked += want is not None
    assert checked >= 2 and most >= 2              # several bands really ran


def test_ties_are_exercised(monkeypatch):
    """The tie-heavy cases do reach targets with several pairs at the same (c, saved): the
    least source id is what decides there (and the plans above still match); and the band
    passes really are many."""
    seen = []
    real_pick = ExactSearch._lexmin_pick

    def pick(rows, ns, width):
        idx = real_pick(rows, ns, width)
        top = np.full(width, -1 << 62)
        np.maximum.at(top, rows, ns)
        seen.append(int((ns == top[rows]).sum() - idx.size))   # same (c, saved), lost on id
        return idx
    monkeypatch.setattr(ExactSearch, "_lexmin_pick", staticmethod(pick))
    passes = []
    real_pass = ExactSearch._lexmin_pass
    monkeypatch.setattr(ExactSearch, "_lexmin_pass",
                        lambda self, *a: (passes.append(1), real_pass(self, *a))[1])
    most = 0
    for seed in range(4):
        g = _case(seed)
        fam = exact_family(g)
        for budget in _budgets(g):
            passes.clear()
            ExactSearch(fam, g, budget).lexmin(band=2)
            most = max(most, len(passes))
    assert sum(seen) > 0 and most >= 4


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("tables", [True, False])
def test_boundary_lookups_are_the_deltas(seed, tables, monkeypatch):
    """``delta_t``/``delta_m`` (boundary-slot lookups, through the subset-sum tables or slot
    by slot) = t, m of ``∂L_j \\ L_i`` for every inclusion pair, and agree with
    :meth:`ExactSearch.deltas`."""
    if not tables:
        monkeypatch.setattr(exact_search, "BOUNDARY_TABLE_MAX", 0)
    g = _case(seed, ties=False)
    fam = exact_family(g)
    search = ExactSearch(fam, g, int(g.m.sum()))
    bits = unpack(fam.sets, g.n)
    bnd = unpack(fam.bnd, g.n)
    sub = np.all(bits[None, :, :] <= bits[:, None, :], axis=2)      # [j, i]: L_i ⊆ L_j
    tgt, src = np.nonzero(sub)
    new = bnd[tgt] & ~bits[src]
    want_t, want_m = new @ g.t, new @ g.m
    assert np.array_equal(search.delta_t(tgt, src), want_t)
    assert np.array_equal(search.delta_m(tgt, src), want_m)
    dt, dm = search.deltas(tgt, src)
    assert np.array_equal(dt, want_t) and np.array_equal(dm, want_m)
    assert tables or search.bnodes[2] is None


def test_without_inclusion_matrix(monkeypatch):
    """Past the inclusion matrix's size cap pairs are tested on the bitsets: same plans."""
    from planner import dp_families

    monkeypatch.setattr(dp_families, "SUBSET_MATRIX_MAX_BYTES", 0)
    g = _case(4)
    fam = exact_family(g)
    assert fam.subset_matrix() is None
    for budget in _budgets(g):
        want = _plan(run_dp(fam, g.t, g.m, budget), fam)
        for band in (1, 4, 10**6):
            assert _plan(ExactSearch(fam, g, budget).lexmin(band=band), fam) == want


def test_impossible_budget_settles_what_it_reaches():
    """No plan: V is never settled and the fronts say so (the caller reports IMPOSSIBLE)."""
    g = _case(1, ties=False)
    fam = exact_family(g)
    fronts = ExactSearch(fam, g, 0).lexmin(band=2)
    assert end_entry(fronts, "memory") is None
    assert exact_search.has_end(fronts) is False


def test_both_inclusion_reads(monkeypatch):
    """The grid read and the per-cell read (few cells pass the peak test) both run, and the
    plans match the unpruned DP's either way."""
    seen = {"grid": 0, "cells": 0}
    real = ExactSearch._inclusion

    def inclusion(self, rows, live, ok):
        seen["grid" if 4 * np.count_nonzero(ok) > ok.size else "cells"] += 1
        return real(self, rows, live, ok)
    monkeypatch.setattr(ExactSearch, "_inclusion", inclusion)
    for seed in range(3):
        g = _case(seed, ties=False)
        fam = exact_family(g)
        for budget in _budgets(g):
            want = _plan(run_dp(fam, g.t, g.m, budget), fam)
            assert _plan(ExactSearch(fam, g, budget).lexmin(band=3), fam) == want
    assert seen["grid"] and seen["cells"]
