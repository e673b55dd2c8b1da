"""The small-graph DP paths: the loop's transition tables, its bounded source cut, the deepening
of time-centric approximate solves from the knapsack lower bound — all faster ways to the
same fronts and plans as the plain loop (tests/test_dp_conformance.py holds the plans to the
reference's; here each shortcut is held to the path it replaces)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.arrays import distinct, run_starts
from planner.dp import loop, solve
from planner.dp.loop import transition_table, run_dp
from planner.dp.solve import recompute_lower_bound, solve_family
from planner.dp.subsets import transitions
from planner.dp_families import DPGraph, approx_family
from tests.test_dp_conformance import _random_dag, _unpruned_plan


def _case(seed: int, n: int = 40):
    rng = np.random.default_rng(500 + seed)
    m, t, src, dst, _ = _random_dag(rng, n, (0.08, 0.2, 0.4)[seed % 3])
    m = rng.integers(1, 50, n) * (rng.random(n) < 0.9)
    return DPGraph(m=m, t=t, src=src, dst=dst)


def _fronts(f):
    return {k: getattr(f, k)[:f.size].tolist() for k in ("s", "c", "pred", "state")} | \
        {"ptr": f.ptr.tolist()}


@pytest.mark.parametrize("seed", range(4))
def testtransition_table_is_the_bitset_transitions(seed):
    g = _case(seed)
    fam = approx_family(g)
    sub, dt, dm = transition_table(fam, g.t, g.m)
    step = transitions(fam, g.t, g.m)
    for j in range(1, fam.num_sets):
        src, want_dt, want_dm = step(j, np.arange(j))
        assert np.flatnonzero(sub[j, :j]).tolist() == src.tolist()
        assert dt[j, src].tolist() == want_dt.tolist() and dm[j, src].tolist() == want_dm.tolist()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("scan", [True, False])
def test_loop_fronts_do_not_depend_on_the_table(seed, scan, monkeypatch):
    """The table loop (:func:`planner.dp.loop._table_loop`: capped budget, one searchsorted per
    prefix and suffix, bucketed minimum; filled buckets found by a scan or by sorting) gives
    the general loop's fronts, entry for entry."""
    g = _case(seed, n=40 + 10 * seed)
    total = int(g.m.sum())
    for kw in (dict(), dict(max_recompute=int(g.t.sum()) // 3), dict(window=5),
               dict(window=6, front_cap=4, lam=0.5), dict(max_ckpt=total // 4),
               dict(max_recompute=int(g.t.sum()) // 5, window=7)):
        for budget in (total // 2, 2 * total, 100 * total):    # 100×: past the loop's cap
            fam = approx_family(g)
            if not scan:
                monkeypatch.setattr(loop, "TABLE_LOOP_SCAN_T", 0)
            with_table = _fronts(run_dp(fam, g.t, g.m, budget, **kw))
            assert loop._table_loop(fam, g.t, g.m, budget, kw.get("window"),
                                    kw.get("front_cap"), kw.get("lam"),
                                    kw.get("max_recompute"), kw.get("max_ckpt")) is not None
            monkeypatch.undo()
            monkeypatch.setattr(loop, "TABLE_MAX_STATES", 0)
            fam = approx_family(g)
            assert _fronts(run_dp(fam, g.t, g.m, budget, **kw)) == with_table, kw
            monkeypatch.undo()


@pytest.mark.parametrize("seed", range(4))
def test_recompute_bound_keeps_each_front_s_in_bound_part(seed):
    """With ``max_recompute`` sources are cut before they are expanded: each state's front is
    exactly the unbounded front's entries whose recompute (t(L) − saved) is within the bound."""
    g = _case(seed)
    fam = approx_family(g)
    total = int(g.m.sum())
    for budget in (total, 3 * total):
        full = run_dp(fam, g.t, g.m, budget)
        for bound in (0, 3, 11, 40):
            cut = run_dp(fam, g.t, g.m, budget, max_recompute=bound)
            for j in range(fam.num_sets):
                a, b = full.ptr[j], full.ptr[j + 1]
                keep = full.s[a:b] >= fam.tL[j] - bound
                want = list(zip(full.s[a:b][keep].tolist(), full.c[a:b][keep].tolist()))
                a, b = cut.ptr[j], cut.ptr[j + 1]
                assert list(zip(cut.s[a:b].tolist(), cut.c[a:b].tolist())) == want, (j, bound)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("passes,growth", [(0, 1.5), (1, 1.5), (3, 1.5), (3, 4)])
def test_deepening_keeps_the_plan(seed, passes, growth, monkeypatch):
    """Time-centric approximate solves from 512 sets deepen the bounded loop (here at every
    size): the plan, chain included, is the unpruned loop's, infeasible budgets included."""
    monkeypatch.setattr(solve, "APPROX_SEARCH_SETS", (0, 4096))
    monkeypatch.setattr(solve, "APPROX_DEEPENING_PASSES", passes)
    monkeypatch.setattr(solve, "APPROX_DEEPENING_GROWTH", growth)
    g = _case(seed, n=30)
    fam = approx_family(g)
    total = int(g.m.sum())
    seen = set()
    # one family throughout, budgets up, down and close together: each solve starts from the
    # optima found before it (lower bounds from larger budgets, upper ones from smaller)
    for frac in (0.3, 0.5, 0.8, 1.2, 2.0, 5.0, 0.79, 0.5, 0.505, 1.19, 0.31):
        budget = int(frac * total)
        want = _unpruned_plan(fam, g, budget, "time")
        r = solve_family(fam, g, budget, strategy="time")
        if want is None:
            assert r.impossible, frac
            seen.add("impossible")
            continue
        assert (r.chain_ids, r.saved, r.ckpt_bytes) == want, frac
        assert recompute_lower_bound(fam, g, budget) <= int(g.t.sum()) - r.saved
        seen.add("ok")
    assert "ok" in seen


def test_distinct_and_run_starts():
    rng = np.random.default_rng(3)
    for size in (0, 1, 7, 1000):
        a = rng.integers(-5, 20, size)
        assert distinct(a).tolist() == np.unique(a).tolist()
        s = np.sort(a)
        starts = run_starts(s)
        assert s[starts].tolist() == np.unique(a).tolist()
        assert (np.diff(np.r_[starts, s.size]) > 0).all()


@pytest.mark.parametrize("seed", range(6))
def test_resumed_pass_is_the_fresh_pass(seed):
    """A deeper pass that resumes a failed one (``run_dp(resume=(fronts, bound))``: the states
    before the first with t(L) > bound kept, arrays reused) gives the fresh pass's fronts entry
    for entry, deeper bounds and the unbounded pass alike."""
    g = _case(seed, n=30 + 5 * seed)
    total, T = int(g.m.sum()), int(g.t.sum())
    skipped = 0
    for budget in (total // 2, total, 3 * total):
        for first, second in ((0, 3), (2, 9), (T // 4, T // 2), (T // 3, None), (5, 5)):
            fam = approx_family(g)
            done = run_dp(fam, g.t, g.m, budget, max_recompute=first)
            skipped = max(skipped, int(np.argmax(np.r_[fam.tL, T + 1] > first)))
            want = _fronts(run_dp(fam, g.t, g.m, budget, max_recompute=second))
            got = run_dp(fam, g.t, g.m, budget, max_recompute=second, resume=(done, first))
            assert got is done                                   # the arrays were reused
            assert _fronts(got) == want, (budget, first, second)
    assert skipped > 2                                           # states were kept, not redone


def test_known_optima_start_the_bound(monkeypatch):
    """A time-centric re-solve on the same family starts from the optima found before: at a
    budget already solved, or between two solved budgets with equal optima, it takes one pass
    (the first solve deepened), and its plan is the unpruned loop's."""
    monkeypatch.setattr(solve, "APPROX_SEARCH_SETS", (0, 4096))
    calls = []
    real = solve.run_dp
    monkeypatch.setattr(solve, "run_dp", lambda *a, **k: calls.append(k) or real(*a, **k))
    deepened = 0
    for seed in range(8):
        g = _case(seed, n=30)
        fam = approx_family(g)
        total = int(g.m.sum())
        for lo, hi in ((0.5, 0.52), (0.8, 0.81), (1.2, 1.25)):
            calls.clear()
            a = solve_family(fam, g, int(hi * total), strategy="time")
            deepened += len(calls) > 1
            b = solve_family(fam, g, int(lo * total), strategy="time")
            if a.impossible or b.impossible:
                continue
            calls.clear()
            again = solve_family(fam, g, int(hi * total), strategy="time")
            assert len(calls) == 1 and again.chain_ids == a.chain_ids
            if a.saved == b.saved:                          # equal optima around a budget
                calls.clear()
                mid = solve_family(fam, g, int((lo + hi) / 2 * total), strategy="time")
                assert len(calls) == 1 and mid.saved == a.saved
            want = _unpruned_plan(fam, g, int(lo * total), "time")
            assert (b.chain_ids, b.saved, b.ckpt_bytes) == want
    assert deepened                                         # some first solves took passes
