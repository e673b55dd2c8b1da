"""The stacked capped DP (all passes in one walk) and its pruning of entries that cannot reach V.

Without pruning it gives the per-pass loop's plans entry for entry: compared against
:func:`planner.dp.loop.run_dp` run once per pass (the loop every other DP path uses), on dense
and segment-local families, for windows and caps that thin most fronts, on random graphs with
small integer weights (many Lagrangian ties, so the tie path runs). The pruning is exact where
nothing is thinned (the uncapped windowed plan), its limits are the recurrence's, and the
product's pruned plans are checked against the per-pass ones and a frozen plan summary.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from planner import synth
from planner.activation_graph import ActivationGraph
from planner.analyses.local_stats import local_stats
from planner.dp import scale
from planner.dp.fronts import INF, end_entry, path
from planner.dp.loop import run_dp
from planner.dp.solve import solve_family
from planner.dp.reach import reach_limits
from planner.dp.stacked import _batches, _limits, run_stacked
from planner.dp.subsets import transitions, window_transitions
from planner.dp_families import DPGraph, approx_family


def _synth(layers):
    ag = ActivationGraph.from_cg(synth.build(layers=layers, heads=3))
    return DPGraph(m=ag.bytes, t=ag.t, src=ag.src, dst=ag.dst)


def _per_pass_chain(fam, g, b, window, cap, lams, strategy):
    """The chain the per-pass loop gives: one :func:`run_dp` per pass, the best kept."""
    best = None
    for lam in lams:
        f = run_dp(fam, g.t, g.m, b, window=window, front_cap=cap, lam=lam)
        e = end_entry(f, strategy)
        if e is not None and (best is None or (f.s[e], -f.c[e]) >
                              (best[0].s[best[1]], -best[0].c[best[1]])):
            best = (f, e)
    return None if best is None else _chain(*best)


@pytest.mark.parametrize("dense", [True, False])
def test_stacked_without_pruning_equals_per_pass_on_synth(dense):
    g = _synth(4)
    fam = approx_family(g, stats=local_stats(g), dense=dense)
    S = int(g.m.sum())
    for window, cap in ((8, 32), (4, 4), (6, 8), (3, 2)):
        for frac in (0.3, 0.5, 0.8):
            for strategy in ("time", "memory"):
                b = int(frac * S)
                lams = scale.pass_lambdas(g.t, g.m, cap, strategy)
                got = run_stacked(fam, g.t, g.m, b, window, cap, lams, strategy, prune=False)
                assert _chain(*got) == _per_pass_chain(fam, g, b, window, cap, lams, strategy), \
                    (window, cap, frac, strategy)


def test_pruning_keeps_the_uncapped_windowed_plan():
    """With a cap no front reaches, dropping the entries that cannot reach V changes nothing:
    V's best entry is the windowed loop's (same saved, same ckpt, same chain)."""
    g = _synth(3)
    fam = approx_family(g, stats=local_stats(g), dense=False)
    S = int(g.m.sum())
    for window in (3, 8):
        for frac in (0.3, 0.5, 0.8):
            b = int(frac * S)
            f = run_dp(fam, g.t, g.m, b, window=window)
            want = _chain(f, end_entry(f, "time"))
            got = _chain(*run_stacked(fam, g.t, g.m, b, window, 4 * g.n, [None], "time"))
            assert got == want, (window, frac)


def test_reach_limits_match_a_direct_recurrence():
    g = _random_chainy(300, 7)
    fam = approx_family(g)
    W = 6
    sub, _, dm = window_transitions(fam, g.t, g.m, W)
    rng = np.random.default_rng(1)
    room = rng.integers(-3, 40, sub.shape)
    want = np.full(fam.num_sets, -1, np.int64)
    want[-1] = INF
    for i in range(fam.num_sets - 2, -1, -1):
        for k in range(i + 1, min(fam.num_sets, i + W + 1)):
            w = i - k + W
            if sub[k, w] and room[k, w] >= 0:
                want[i] = max(want[i], min(room[k, w], want[k] - dm[k, w]))
    for chunk in (1, 5, 1 << 14):
        assert reach_limits(sub, room, dm, chunk=chunk).tolist() == want.tolist()


def test_pruned_capped_plans_are_valid_and_no_worse_on_synth():
    """The pruned walk is the product's capped DP: it finds a plan where the per-pass loop
    does, its chains pass the peak test (the model peak is within budget) and, on this graph,
    save at least as much as the per-pass loop."""
    g = _synth(4)
    fam = approx_family(g, stats=local_stats(g), dense=False)
    S = int(g.m.sum())
    for frac in (0.3, 0.4, 0.5, 0.8):
        b = int(frac * S)
        for cap in (4, 8):
            a, p = (solve_family(fam, g, b, window=8, front_cap=cap, stacked=s)
                    for s in (False, True))
            assert p.status == a.status, (frac, cap)
            if p.status == "OK":
                assert p.model_peak_bytes <= b
                assert p.model_recompute_cost <= a.model_recompute_cost, (frac, cap)


def _random_chainy(n, seed):
    """A DAG with short skips and tiny integer weights: many equal Lagrangian scores."""
    rng = np.random.default_rng(seed)
    src, dst = [], []
    for v in range(1, n):
        for u in set(rng.integers(max(0, v - 6), v, size=2).tolist()):
            src.append(u)
            dst.append(v)
    for u in sorted(set(range(n - 1)) - set(src)):
        src.append(u)
        dst.append(n - 1)
    return DPGraph(m=rng.integers(0, 4, n), t=rng.integers(1, 4, n), src=np.array(src),
                   dst=np.array(dst))


def _chain(fronts, entry):
    if entry is None:
        return None
    return [(int(fronts.state[e]), int(fronts.s[e]), int(fronts.c[e])) for e in path(fronts, entry)]


@pytest.mark.parametrize("seed", range(4))
def test_stacked_equals_per_pass_with_ties(seed):
    g = _random_chainy(200, seed)
    lams = [None, 1.0, 0.5, 2.0]                 # integer weights: exact score ties
    for dense in (True, False):
        fam = approx_family(g, dense=dense)
        for frac in (0.3, 0.6):
            b = int(frac * g.m.sum())
            for window, cap in ((8, 4), (6, 8)):
                want = _per_pass_chain(fam, g, b, window, cap, lams, "time")
                got = run_stacked(fam, g.t, g.m, b, window, cap, lams, "time", prune=False)
                assert _chain(*got) == want


def test_window_transitions_match_per_state_transitions():
    g = _synth(2)
    for dense in (True, False):
        fam = approx_family(g, stats=local_stats(g), dense=dense)
        W = 7
        sub, dt, dm = window_transitions(fam, g.t, g.m, W, chunk=5)
        step = transitions(fam, g.t, g.m)
        for j in range(1, fam.num_sets):
            src = np.arange(max(0, j - W), j)
            s, a, b = step(j, src)
            cols = s - (j - W)
            assert np.array_equal(np.flatnonzero(sub[j]), np.sort(cols))
            assert np.array_equal(dt[j, cols], a) and np.array_equal(dm[j, cols], b)


def test_frozen_plan_of_a_3000_node_transformer():
    """Recorded with the per-pass loop (window 8, cap 32) before the stacked one was written
    (``python3 bench/dp_loop_bench.py --nodes 3000 --only per-pass``); the pruned stacked loop
    at the present defaults (window 8, cap 128) gives the same plan."""
    ag = ActivationGraph.from_cg(synth.build(layers=synth.layers_for_nodes(3000)))
    g = DPGraph(m=ag.bytes, t=ag.t, src=ag.src, dst=ag.dst)
    fam = approx_family(g, stats=local_stats(g), dense=False)
    window, cap = scale.plan_options(g.n)
    r = solve_family(fam, g, int(g.m.sum()) // 2, window=window, front_cap=cap)
    chain = hashlib.sha256(",".join(map(str, r.chain_ids)).encode()).hexdigest()[:16]
    assert (g.n, r.blocks, r.model_recompute_cost, r.model_peak_bytes, r.ckpt_bytes, chain) == \
        (3004, 885, 1370, 1510211584, 1505918976, "e00e70ddcdd8b851")


def test_batches_hold_no_source_of_their_own_members():
    """The loop's batches: consecutive states, at most W, none a source of another member
    (its fronts would not be final), each cut only where it must be; and the graph has
    batches of several states, so the segment path runs."""
    g = _synth(4)
    fam = approx_family(g, stats=local_stats(g), dense=False)
    W = 8
    sub, _, dm = window_transitions(fam, g.t, g.m, W)
    limit = _limits(fam.mL, fam.mAB, int(0.5 * g.m.sum()), sub, dm, True)
    bounds = _batches(limit)
    assert bounds[0] == 1 and bounds[-1] == fam.num_sets
    sizes = np.diff(bounds)
    assert sizes.min() >= 1 and sizes.max() <= W and (sizes > 1).any()
    for a, z in zip(bounds[:-1], bounds[1:]):
        for k in range(a, z):
            srcs = k - W + np.flatnonzero(limit[k] >= 0)
            assert not ((srcs >= a) & (srcs < k)).any(), (a, z, k)
        if z < fam.num_sets and z - a < W:      # cut because z reads a member's front
            srcs = z - W + np.flatnonzero(limit[z] >= 0)
            assert ((srcs >= a) & (srcs < z)).any(), (a, z)


@pytest.mark.parametrize("seed", range(2))
def test_stacked_equals_per_pass_when_the_one_key_sort_would_overflow(seed):
    """Bytes near 2^48 a node: ckpt × (passes × T(V)) is past int64, so the loop sorts by two
    keys; the plans are still the per-pass loop's."""
    g0 = _random_chainy(150, seed)
    g = DPGraph(m=g0.m * 2**48 + 1, t=g0.t, src=g0.src, dst=g0.dst)
    lams = [None, 1.0, 0.5]
    assert float(g.m.sum()) * len(lams) * float(g.t.sum()) > 2.0**63
    fam = approx_family(g)
    for frac in (0.3, 0.6):
        b = int(frac * g.m.sum())
        want = _per_pass_chain(fam, g, b, 6, 4, lams, "time")
        got = run_stacked(fam, g.t, g.m, b, 6, 4, lams, "time", prune=False)
        assert _chain(*got) == want


def test_the_walk_reports_its_position():
    """The DP's position (state of L) goes to the current progress tracker, ascending, a few
    hundred times at most, and nowhere outside a tracker."""
    from hgraph.common.progress import tracking

    class Recorder:
        def __init__(self):
            self.positions = []

        def position(self, done, total):
            self.positions.append((done, total))

        def close(self):
            pass

    g = _synth(4)
    fam = approx_family(g, stats=local_stats(g), dense=False)
    b = int(0.5 * g.m.sum())
    rec = Recorder()
    with tracking(tracker=rec):
        got = run_stacked(fam, g.t, g.m, b, 8, 8, [None, 1.0], "time")
    done = [d for d, _ in rec.positions]
    assert len(done) >= 10 and len(done) <= 201 and done == sorted(set(done))
    assert {t for _, t in rec.positions} == {fam.num_sets}
    assert 0 < done[0] and done[-1] < fam.num_sets
    n = len(rec.positions)
    assert _chain(*run_stacked(fam, g.t, g.m, b, 8, 8, [None, 1.0], "time")) == _chain(*got)
    assert len(rec.positions) == n
