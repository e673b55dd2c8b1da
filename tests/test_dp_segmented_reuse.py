"""Free walks reused across the solves of an engine session (issue 37, sixth session): a walk
whose trace (planner.dp.stacked.reusable) says it holds at another budget is that budget's
walk bit for bit; the segmented DP on the engine takes it from the workers' stashes, and the
plan is the fresh solve's — after a small drop (every walk reused), a larger one (some walked
again), in-process, on Ray, with a worker lost mid-run, and in the plan job's fit."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from planner import synth
from planner.analyses.engine import EngineOptions, session
from planner.dp import scale, segmented as S
from planner.dp.segmented_engine import solve_on_engine
from planner.dp.stacked import WalkTrace, reusable, walk, walk_limits
from tests.conftest import RAY_TIMEOUT
from tests.segmented_setup import front_hash, setup


def _walked(w):
    store, last = walk(w)
    return (store.pred[:store.size].tobytes(), store.ptr.tobytes(),
            tuple(a.tobytes() for a in last) if last is not None else None)


@pytest.mark.parametrize("kind,frac", [("tf", 0.45), ("cnn", 0.4)])
def test_a_walk_the_criterion_accepts_is_the_other_budget_walk_bit_for_bit(kind, frac):
    """Every segment traced at B, then each lower budget: where :func:`reusable` says yes,
    the walk there is B's, store and end front to the byte; and it says yes to a small drop
    and no to some larger one (the test is not vacuous)."""
    g, fam, cuts = setup(kind)
    M = int(g.m.sum())
    B = int(frac * M)
    said = set()
    for seg in S.segment_dps(fam, g, B, cuts):
        w = seg._input()
        trace = WalkTrace()
        store, last = walk(w, trace=trace)
        assert np.array_equal(trace.limit, walk_limits(w))
        assert _walked(w) == (store.pred[:store.size].tobytes(), store.ptr.tobytes(),
                              tuple(a.tobytes() for a in last) if last is not None else None)
        for drop in (1, 4096, M // 100, M // 20, M // 8, M // 4, 3 * M // 10, 2 * M // 5):
            at = dataclasses.replace(w, budget=B - drop)
            ok = reusable(trace, walk_limits(at))
            said.add((drop <= 4096, ok))
            if ok:
                assert _walked(at) == _walked(w), (seg.index, drop)
        assert not reusable(trace, walk_limits(dataclasses.replace(w, budget=B + 1)))
    assert (True, True) in said and (False, False) in said, said


def _engine_reuse(opts, hurt=None):
    """In one engine session: the tf graph at B then B − 1 MB (every walk reused), the cnn
    graph at 40 % then 30 % of m(V) (some walked again); each plan the fresh one's. ``hurt``:
    the options of a second session whose runs lose a worker mid-run."""
    for kind, (hi, lo), every in (("tf", (0.45, 0.45), True), ("cnn", (0.4, 0.3), False)):
        g, fam, cuts = setup(kind)
        M = int(g.m.sum())
        B, B2 = int(hi * M), int(lo * M) - (2 ** 20 if hi == lo else 0)
        want = front_hash(S.solve_composed(fam, g, B2, cuts))
        for o in (opts, hurt) if hurt is not None else (opts,):
            with session(o):
                first = solve_on_engine(fam, g, B, cuts, opts=o)
                again = solve_on_engine(fam, g, B2, cuts, opts=o)
            assert first.reused == 0 and front_hash(first.stitched) == \
                front_hash(S.solve_composed(fam, g, B, cuts))
            if o is opts:
                assert (again.reused == again.segments) if every else \
                    (0 < again.reused < again.segments), (kind, again.reused)
            assert front_hash(again.stitched) == want, (kind, o)
            if o is hurt:
                assert any("failure" in row for row in again.stats)
            assert again.handed_over == first.handed_over or not every


def test_reused_walks_give_the_fresh_plan_in_process():
    _engine_reuse(EngineOptions(tasks=2, blocks=2),
                  hurt=EngineOptions(tasks=2, blocks=2, checkpoint_every=1, inject_failure=1))


def test_reused_walks_give_the_fresh_plan_on_ray_and_with_a_worker_lost(ray_session):
    """On Ray actors; then with a worker killed at superstep 1 of every run (the scan): its
    replacement has no stash, walks its segments again for the read-back, and the plan is
    the same."""
    ray = dict(runtime="ray", timeout=RAY_TIMEOUT)
    _engine_reuse(EngineOptions(tasks=2, blocks=2, **ray),
                  hurt=EngineOptions(tasks=2, blocks=2, checkpoint_every=1, inject_failure=1,
                                     **ray))


def test_the_fit_second_solve_reuses_every_walk(monkeypatch):
    """The plan job's fit re-solves in the plan's engine session: its second solve takes
    every free walk from the stashes (the report's engine line says how many), and the plan
    — schedule and report but the engine line and timings — is the one without a stash.

    The DP's model now counts what the replay holds beyond ``m(A) + m(B)``, so this graph's
    first chain fits (tests/test_fit_keeps.py); the re-solve is forced by each plan's first
    replay reported 1 MiB above what it measured (the excess the model once left out here
    was ~1 MB)."""
    import planner
    from planner import api, report
    from planner.dp import segmented_engine as se

    monkeypatch.setattr(scale, "SEGMENTED_LIMIT", 1000)
    cg = synth.build(layers=110, heads=4)                # ~2,600 activations
    runs = []
    solve = se.solve_on_engine
    monkeypatch.setattr(se, "solve_on_engine",
                        lambda *a, **k: (lambda r: (runs.append(r.reused), r)[1])(solve(*a, **k)))
    solve_and_replay = api._solve_and_replay

    def first_over(a, s, dp_budget, check):
        decision, model, schedule, sim = solve_and_replay(a, s, dp_budget, check)
        if len(runs) % 2:                                # a plan's first solve
            sim = dataclasses.replace(sim, peak_bytes=sim.peak_bytes + 2 ** 20)
        return decision, model, schedule, sim

    monkeypatch.setattr(api, "_solve_and_replay", first_over)

    def plan_hash():
        p = planner.plan(cg, budget="40%", certify="off", engine=planner.EngineOptions(tasks=2))
        rep = {k: v for k, v in p.report.items() if k not in ("seconds", "engine")}
        return p, hashlib.sha256(p.schedule.dumps().encode() +
                                 report.dumps(rep).encode()).hexdigest()

    p, with_stash = plan_hash()
    assert runs == [0, 64] and p.report["engine"]["walks_reused"] == 64, runs
    assert "walks_reused" not in p.report["dp_segmented"]
    free_walk = S.SegmentDP.free_walk
    monkeypatch.setattr(S.SegmentDP, "free_walk", lambda seg, cache=None: free_walk(seg, None))
    runs.clear()
    p, without = plan_hash()
    assert runs == [0, 0] and without == with_stash
