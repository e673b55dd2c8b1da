"""planner.dp.reach without a loop per state (issue 37, seventh session): the stacked pass
(every table a column, one NumPy step per position) against the per-state double loop it
replaced, kept here as the oracle — random tables, ``ends``, states that cannot reach V
(−1), windows wider than the table, several tables of different lengths at once — and the
budget-free offsets (``reach_b = max(−1, b + R)``) against the loop at many budgets."""

from __future__ import annotations

import numpy as np
import pytest

from hgraph.common.errors import HGraphError
from planner.dp.fronts import INF
from planner.dp.reach import reach_at, reach_limits, reach_limits_many, reach_offsets


def _oracle(sub, room, dm, ends=None):
    """The replaced implementation's recurrence, a Python step per state and target."""
    L, W = sub.shape
    reach = [-1] * L
    if L == 0:
        return np.zeros(0, np.int64)
    reach[L - 1] = INF
    end = set() if ends is None else set(np.asarray(ends, np.int64).tolist())
    for i in range(L - 2, -1, -1):
        best = -1
        for d in range(1, min(W, L - 1 - i) + 1):
            k = i + d
            if not sub[k, W - d] or room[k, W - d] < 0:
                continue
            v = min(int(room[k, W - d]), reach[k] - int(dm[k, W - d]))
            best = max(best, v)
        reach[i] = INF if i in end else best
    return np.array(reach, np.int64)


def _table(rng, L, W, density=0.5, lo=-20, hi=200, dmax=60):
    sub = rng.random((L, W)) < density
    room = rng.integers(lo, hi, (L, W))
    dm = rng.integers(0, dmax, (L, W))
    ends = rng.choice(L, size=rng.integers(0, max(1, L // 7) + 1), replace=False) \
        if L and rng.random() < 0.5 else None
    return sub, room, dm, ends


@pytest.mark.parametrize("seed", range(40))
def test_one_table_is_the_loop(seed):
    rng = np.random.default_rng(seed)
    W = int(rng.choice([1, 2, 3, 8, 13]))
    L = int(rng.choice([1, 2, 3, W, W + 1, 50, 400]))        # W larger than the table too
    sub, room, dm, ends = _table(rng, L, W, density=rng.choice([0.1, 0.4, 0.9]))
    want = _oracle(sub, room, dm, ends)
    for chunk in (1, 7, 1 << 14):
        got = reach_limits(sub, room, dm, chunk=chunk, ends=ends)
        assert got.dtype == np.int64 and got.tolist() == want.tolist(), (seed, chunk)


def test_the_oracle_sees_every_kind_of_state():
    """Not vacuous: across the seeds some states cannot reach V, some are ends, some finite."""
    kinds = set()
    for seed in range(40):
        rng = np.random.default_rng(seed)
        sub, room, dm, ends = _table(rng, 300, 8, density=0.3)
        r = _oracle(sub, room, dm, ends)
        kinds |= {int(x) if x in (-1, INF) else 0 for x in r[:-1]}
    assert kinds == {-1, 0, INF}


@pytest.mark.parametrize("seed", range(12))
def test_many_tables_at_once_are_each_alone(seed):
    rng = np.random.default_rng(100 + seed)
    W = int(rng.choice([2, 8]))
    tables = [_table(rng, int(rng.integers(0, 300)), W, density=0.5) for _ in range(9)]
    tables.append(_table(rng, 1, W))
    for chunk in (5, 1 << 14):
        got = reach_limits_many(tables, chunk=chunk)
        assert len(got) == len(tables)
        for t, g in zip(tables, got):
            assert g.tolist() == _oracle(*t).tolist()


@pytest.mark.parametrize("seed", range(12))
def test_offsets_give_the_loop_at_every_budget(seed):
    """``room = b + off``: one unfloored pass of the offsets, then any budget, equals the
    loop run at that budget (budgets where most states cannot reach V, and where all can)."""
    rng = np.random.default_rng(200 + seed)
    W = 8
    tables = [_table(rng, int(rng.integers(1, 250)), W, density=0.6, lo=-300, hi=50)
              for _ in range(5)]
    R = reach_offsets(tables)
    seen = set()
    for b in (0, 1, 17, 120, 300, 10 ** 6):
        for (sub, off, dm, ends), r in zip(tables, R):
            want = _oracle(sub, off + b, dm, ends)
            assert reach_at(r, b).tolist() == want.tolist(), b
            seen |= {(b, "none" if x == -1 else "some") for x in want[:-1].tolist()
                     if x != INF}
    assert {(0, "none"), (10 ** 6, "some")} <= seen       # not vacuous at either end


def test_offsets_refuse_negative_growth():
    sub = np.ones((3, 2), bool)
    with pytest.raises(HGraphError):
        reach_offsets([(sub, np.zeros((3, 2), np.int64), -np.ones((3, 2), np.int64), None)])


def test_mixed_windows_are_refused():
    a = (np.ones((3, 2), bool), np.zeros((3, 2)), np.zeros((3, 2)), None)
    b = (np.ones((3, 4), bool), np.zeros((3, 4)), np.zeros((3, 4)), None)
    with pytest.raises(HGraphError):
        reach_limits_many([a, b])
