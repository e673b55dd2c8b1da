"""Window tables and reach kept across an engine session's solves (issue 37, seventh
session): a segment's tables and budget-free reach depend on its rows alone, so the workers
keep them in their stashes (planner.dp.segmented.prepare) and a re-solve at another budget
makes none — the plan the fresh solve's, in-process, on Ray, with a worker lost mid-run and
in a new session (a cache only); the limits from the kept reach are the per-budget ones."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from planner.analyses.engine import EngineOptions, session
from planner.dp import segmented as S
from planner.dp.segmented_engine import solve_on_engine
from planner.dp.stacked import WalkTrace, walk, walk_limits
from tests.conftest import RAY_TIMEOUT
from tests.segmented_setup import front_hash, setup


@pytest.mark.parametrize("kind", ["tf", "cnn"])
def test_kept_reach_gives_every_budget_limits_and_walk(kind):
    """For every segment: the limits from the prepared (budget-free) reach are the ones a
    reach pass at the budget gives, from budgets where the walk finds nothing to the whole
    m(V); the walk and its trace are the same bit for bit."""
    g, fam, cuts = setup(kind)
    M = int(g.m.sum())
    plain = S.segment_dps(fam, g, M // 2, cuts, local_tables=True)
    kept = copy.deepcopy(plain)
    S.prepare(kept)
    assert all(sg.offsets is not None and sg.tables_built for sg in kept)
    assert all(sg.offsets is None for sg in plain)
    differ = set()
    for a, b in zip(plain, kept):
        for frac in (0.05, 0.2, 0.35, 0.5, 1.0):
            a.budget = b.budget = int(frac * M)
            la, lb = walk_limits(a._input()), walk_limits(b._input())
            assert np.array_equal(la, lb), (a.index, frac)
            differ.add(int((la >= 0).sum()))
            ta, tb = WalkTrace(), WalkTrace()
            sa, ea = walk(a._input(), trace=ta)
            sb, eb = walk(b._input(), trace=tb)
            assert ta.slack == tb.slack and np.array_equal(ta.limit, tb.limit)
            assert np.array_equal(sa.pred[:sa.size], sb.pred[:sb.size])
            assert (ea is None) == (eb is None)
            if ea is not None:
                assert all(np.array_equal(x, y) for x, y in zip(ea, eb))
    assert len(differ) > 3                     # the budgets do change the limits


def test_prepare_takes_the_stash_and_refuses_other_rows():
    """A second prepare of the same rows takes the stashed arrays (no table made); a segment
    whose rows differ (another window) under the same index makes its own and replaces it."""
    g, fam, cuts = setup("tf")
    B = int(0.45 * g.m.sum())
    stash = {}
    first = S.segment_dps(fam, g, B, cuts, local_tables=True)
    S.prepare(first, stash)
    assert all(sg.tables_built for sg in first) and len(stash) == len(first)
    again = S.segment_dps(fam, g, B - 2 ** 20, cuts, local_tables=True)
    S.prepare(again, stash)
    assert not any(sg.tables_built for sg in again)
    for a, b in zip(first, again):
        assert all(x is y for x, y in zip(a._tables, b._tables)) and a.offsets is b.offsets
    other = S.segment_dps(fam, g, B, cuts, window=6, local_tables=True)
    S.prepare(other, stash)
    assert all(sg.tables_built for sg in other)
    assert all(stash[(S.TABLES_KEY, sg.index)][1] is sg._tables for sg in other)


def _engine_tables(opts, hurt=None):
    """In one engine session: each graph at B, then lower (tf: every walk reused; cnn: some
    walked again): the second run makes no tables and its plan is the fresh solve's; a new
    session makes them all again. ``hurt``: a session losing a worker mid-run, whose
    replacement makes its segments' tables for the read-back; the plan is the same."""
    for kind, (hi, lo) in (("tf", (0.45, 0.45)), ("cnn", (0.4, 0.3))):
        g, fam, cuts = setup(kind)
        M = int(g.m.sum())
        B, B2 = int(hi * M), int(lo * M) - (2 ** 20 if hi == lo else 0)
        want = front_hash(S.solve_composed(fam, g, B2, cuts))
        for o in (opts, hurt) if hurt is not None else (opts,):
            for _ in range(2):                  # a new session starts empty
                with session(o):
                    first = solve_on_engine(fam, g, B, cuts, opts=o)
                    again = solve_on_engine(fam, g, B2, cuts, opts=o)
                assert first.tables_built == first.segments, (kind, first.tables_built)
                assert front_hash(again.stitched) == want, (kind, o)
                if o is opts:
                    assert again.tables_built == 0, (kind, again.tables_built)
                    assert again.reused > 0
                else:
                    assert any("failure" in row for row in again.stats)
                    assert 0 < again.tables_built < again.segments, again.tables_built


def test_a_resolve_makes_no_tables_in_process():
    _engine_tables(EngineOptions(tasks=2, blocks=2),
                   hurt=EngineOptions(tasks=2, blocks=2, checkpoint_every=1, inject_failure=1))


def test_a_resolve_makes_no_tables_on_ray(ray_session):
    ray = dict(runtime="ray", timeout=RAY_TIMEOUT)
    _engine_tables(EngineOptions(tasks=2, blocks=2, **ray),
                   hurt=EngineOptions(tasks=2, blocks=2, checkpoint_every=1, inject_failure=1,
                                      **ray))
