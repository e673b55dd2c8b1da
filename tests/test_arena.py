"""Static arena plans: valid offsets, lower bound, and within 5% of it on real timelines."""

import numpy as np
import pytest

from conftest import data_path
from planner import arena, cg
from planner.execute import executor, export, plans, zoo


def test_random_instances_are_valid_and_above_the_bound():
    rng = np.random.default_rng(1)
    for _ in range(20):
        n = 60
        starts = rng.integers(0, 50, n)
        ends = starts + rng.integers(0, 20, n)
        sizes = rng.integers(1, 10_000, n)
        p = arena.plan(sizes, starts, ends, alignment=8)
        arena.check(p, starts, ends)
        assert p.arena_bytes >= p.lower_bound == arena.lower_bound(sizes, starts, ends)


def test_lower_bound_counts_half_open_lifetimes():
    assert arena.lower_bound([5, 7], [0, 1], [1, 2]) == 7          # back to back: never together
    assert arena.lower_bound([5, 7], [0, 1], [2, 2]) == 12


def test_check_catches_overlap():
    p = arena.plan([10, 10], [0, 0], [1, 1], alignment=1)
    p.offsets[:] = 0
    with pytest.raises(AssertionError, match="overlap"):
        arena.check(p, [0, 0], [1, 1])


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_zoo_arena_within_5pct(name):
    g = export.to_cg(zoo.build(name))
    for _, s in plans.feasible_budgets(g, count=3):
        for recycle in (True, False):
            tl = executor.timeline(g, s, recycle=recycle)
            p = tl.arena()
            arena.check(p, tl.start, tl.end)
            assert p.lower_bound == tl.live_peak()
            assert p.gap_pct <= 5.0, (name, recycle, p.summary())


@pytest.mark.parametrize("name", ["vgg19", "unet", "resnet50", "googlenet", "densenet"])
def test_reference_arena_within_5pct(name):
    g = cg.read(data_path("graphs", f"cg_{name}.txt"))
    from planner import chen, emit
    s = emit.emit(g, chen.solve(g).chain)
    for recycle in (False, True):
        tl = executor.timeline(g, s, recycle=recycle)
        p = tl.arena()
        assert p.gap_pct <= 5.0, (name, p.summary())


def test_conflicts_counts_overlapping_lifetimes():
    starts, ends = np.array([0, 1, 2, 5]), np.array([3, 2, 6, 6])
    brute = [int(((starts < ends[b]) & (ends > starts[b])).sum()) for b in range(4)]
    assert arena.conflicts(starts, ends).tolist() == brute


@pytest.mark.parametrize("name,sizes", [("unet", dict(depth=1, image=6)),
                                        ("transformer", dict(depth=4, seq=32, width=64))])
def test_arena_within_5pct_on_other_zoo_sizes(name, sizes):
    g = export.to_cg(zoo.build(name, **sizes))
    for _, s in plans.feasible_budgets(g, count=3):
        tl = executor.timeline(g, s)
        p = tl.arena()
        arena.check(p, tl.start, tl.end)
        assert p.gap_pct <= 5.0, p.summary()
