"""The Lagrangian chain bound (planner/dp/chain_bound.py): its longest paths equal the
relaxation's over every pair (the dominance pruning loses nothing), it never passes a real
plan, and the time-centric search that uses it keeps the unpruned DP's plan."""

from __future__ import annotations

import numpy as np
import pytest

from planner.dp import chain_bound as cbm
from planner.dp import exact_search
from planner.dp.chain_bound import NEG, chain_bound
from planner.dp.exact_search import ExactSearch
from planner.dp.loop import run_dp
from planner.dp.solve import solve_family
from planner.dp_families import DPGraph, exact_family
from tests.family_oracle import random_single_sink_dag


def _case(seed: int, segments: int = 3):
    """A small Inception-like graph: segments of 2–3 parallel branches (1–2 nodes each)
    joined by one node — cuts through the branches save low-``t/m`` nodes too, which is
    where the chain bound is sharper than the knapsack."""
    rng = np.random.default_rng(seed)
    m, t, src, dst = [int(rng.integers(2, 6))], [10], [], []
    prev = 0
    for _ in range(segments):
        ends = []
        for _b in range(int(rng.integers(2, 4))):
            last = prev
            for _d in range(int(rng.integers(1, 3))):
                m.append(int(rng.integers(1, 8)))
                t.append(int(rng.choice([1, 10])))
                src.append(last)
                dst.append(len(m) - 1)
                last = len(m) - 1
            ends.append(last)
        m.append(int(rng.integers(2, 10)))
        t.append(1)
        src += ends
        dst += [len(m) - 1] * len(ends)
        prev = len(m) - 1
    return DPGraph(m=np.array(m), t=np.array(t), src=np.array(src), dst=np.array(dst))


FRACTIONS = (0.75, 0.8, 0.85, 0.9, 0.95, 1.0, 1.05)


def _all_pairs_longest(es, cb) -> np.ndarray:
    """The relaxation's longest paths over every pair ``L_k ⊊ L_l`` whose peak test passes
    at ``m(∂L_k)`` — no dominance — one state at a time (the oracle)."""
    fam, L = es.fam, es.L
    members = fam.members(es.g.n).T                      # [L, n]
    key0 = fam.m_bnd - es.two_mL
    P = np.full((cb.p.size, L), NEG, np.int64)
    P[:, es.end] = 0
    for k in range(L - 2, -1, -1):
        sup = np.flatnonzero(np.all(members[k] <= members, axis=1))
        sup = sup[(sup != k) & (key0[k] <= es.thr[sup])]
        if sup.size == 0:
            continue
        dt, dm = es.deltas(sup, np.full(sup.size, k))
        val = cb.Q * dt[None, :] - cb.p[:, None] * dm[None, :] + P[:, sup]
        val[P[:, sup] <= NEG // 2] = NEG
        P[:, k] = val.max(axis=1)
    P[P < NEG // 2] = NEG
    return P


@pytest.mark.parametrize("seed", range(10))
def test_pruned_pairs_keep_every_longest_path(seed):
    g = _case(seed, 4)
    fam = exact_family(g)
    total = int(g.m.sum())
    checked = 0
    for frac in FRACTIONS:
        es = ExactSearch(fam, g, int(frac * total))
        cb = chain_bound(es)
        if cb is None:
            continue
        assert np.array_equal(cb.P, _all_pairs_longest(es, cb)), frac
        checked += 1
    assert checked >= 2


@pytest.mark.parametrize("seed", range(10))
def test_bound_never_passes_the_optimum(seed):
    """From ∅ and from every state of the optimal chain (with the ckpt the plan holds
    there): the bound on what is left to save is at least what the plan saves after it."""
    g = _case(seed, 4)
    fam = exact_family(g)
    total = int(g.m.sum())
    checked = 0
    for frac in FRACTIONS:
        budget = int(frac * total)
        es = ExactSearch(fam, g, budget)
        cb = chain_bound(es)
        fr = run_dp(fam, g.t, g.m, budget)
        end = fam.num_sets - 1
        if cb is None or fr.ptr[end + 1] == fr.ptr[end]:
            continue
        k = int(fr.ptr[end + 1] - 1)                      # the most saved at V
        final = int(fr.s[k])
        while k >= 0:
            st, s, c = int(fr.state[k]), int(fr.s[k]), int(fr.c[k])
            if st != end:
                up = cb.saved_upper(np.array([st]), np.array([es.cap0 - c]))[0]
                assert up >= final - s, (frac, st)
                assert cb.reaches(np.array([st]), np.array([es.cap0 - c]),
                                  np.array([final - s]))[0]
                assert cb.least_cap(np.array([st]), np.array([final - s]))[0] <= es.cap0 - c
            k = int(fr.pred[k])
        checked += 1
    assert checked >= 2


def _check_plan(fam, g, budget: int) -> None:
    """The time-centric search's plan (chain, saved, ckpt) is the unpruned DP's."""
    end = fam.num_sets - 1
    fr = run_dp(fam, g.t, g.m, budget)
    r = solve_family(fam, g, budget, strategy="time")
    if fr.ptr[end + 1] == fr.ptr[end]:
        assert r.impossible, budget
        return
    k = int(fr.ptr[end + 1] - 1)
    ids, s, c = [], int(fr.s[k]), int(fr.c[k])
    while k >= 0:
        ids.append(int(fr.state[k]))
        k = int(fr.pred[k])
    assert (r.chain_ids, r.saved, r.ckpt_bytes) == (ids[::-1], s, c), budget


@pytest.mark.parametrize("seed", range(8))
def test_search_with_the_chain_bound_keeps_the_plan(seed, monkeypatch):
    """Plans, chains included, are the unpruned DP's at every budget (the search builds
    the chain bound with its knapsack)."""
    built = []
    real = cbm.chain_bound
    monkeypatch.setattr(exact_search, "chain_bound", lambda es: built.append(1) or real(es))
    g = _case(seed, 4)
    fam = exact_family(g)
    total = int(g.m.sum())
    for frac in FRACTIONS:
        _check_plan(fam, g, int(frac * total))
    assert built                                          # the bound took part somewhere


def test_prices_stay_in_int64():
    """Huge weights (bytes of a big model): the prices' scale shrinks so no sum overflows."""
    rng = np.random.default_rng(3)
    src, dst, _ = random_single_sink_dag(rng, 12, 0.3)
    g = DPGraph(m=rng.integers(1, 1 << 34, 12), t=rng.integers(1, 1 << 20, 12), src=src, dst=dst)
    es = ExactSearch(exact_family(g), g, int(g.m.sum()) // 2)
    priced = cbm._prices(es)
    assert priced is not None
    p, Q = priced
    assert Q * (int(g.t.sum()) + 1) + int(p.max()) * (int(g.m.sum()) + 1) < 1 << 60


def _random_case(seed: int, single_sink: bool) -> DPGraph:
    """Random DAGs (one sink, or several: the sink's in-edges but one dropped), some nodes
    weightless — the shapes test_dp_conformance checks the search on."""
    rng = np.random.default_rng(100 + seed)
    n = 15 + seed % 4
    src, dst, perm = random_single_sink_dag(rng, n, (0.15, 0.25, 0.4)[seed % 3])
    if not single_sink:
        sink = perm[n - 1]
        keep = dst != sink
        keep[np.flatnonzero(dst == sink)[0]] = True
        src, dst = src[keep], dst[keep]
    m = rng.integers(0, 40, n) * (rng.random(n) < 0.85)
    return DPGraph(m=m, t=rng.choice([1, 10], n), src=src, dst=dst)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("single_sink", [True, False])
def test_search_with_the_chain_bound_on_random_dags(seed, single_sink):
    """As above on random DAGs, several sinks included (on 24 seeds × both shapes × 7
    budgets: 336 solves, no plan changed)."""
    g = _random_case(seed, single_sink)
    fam = exact_family(g)
    total = int(g.m.sum())
    for frac in (0.4, 0.6, 0.8, 1.0, 1.3, 1.7, 2.2):
        _check_plan(fam, g, int(frac * total))
