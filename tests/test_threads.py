"""planner/threads.py: jobs side by side give what one thread gives — the knapsack's tables,
the family's statistics and the plans — and a forked child gets a pool of its own."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

from planner import synth, threads
from planner.dp import exact_search, knapsack
from planner.dp.knapsack import KnapsackBound, checkpoint_room
from planner.solver import make_solver


def test_map_ordered_keeps_the_order(monkeypatch):
    monkeypatch.setenv("HGRAPH_THREADS", "2")
    assert threads.map_ordered(lambda x: -x, range(50)) == [-x for x in range(50)]
    monkeypatch.setenv("HGRAPH_THREADS", "1")
    assert threads.workers() == 1
    assert threads.map_ordered(lambda x: -x, range(3)) == [0, -1, -2]


def test_map_ordered_raises_the_jobs_error(monkeypatch):
    monkeypatch.setenv("HGRAPH_THREADS", "2")
    with pytest.raises(ZeroDivisionError):
        threads.map_ordered(lambda x: 1 // x, [2, 1, 0])


def _child_map(queue):
    queue.put(threads.map_ordered(lambda x: x + 1, range(4)))


def test_a_forked_child_gets_its_own_pool(monkeypatch):
    """The parent's pool threads do not exist in a fork; the child must not wait on them."""
    monkeypatch.setenv("HGRAPH_THREADS", "2")
    threads.map_ordered(abs, [-1, -2])                    # the parent's pool exists
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_map, args=(queue,))
    child.start()
    try:
        assert queue.get(timeout=60) == [1, 2, 3, 4]
    finally:
        child.join(timeout=60)
    assert child.exitcode == 0


def _graph():
    g = synth.build_cnn(blocks=3)
    return make_solver(g, solver="exact", strategy="time", units="reference"), g


@pytest.mark.parametrize("cells", [1 << 12, 1 << 20])
def test_knapsack_tables_are_the_same_on_any_number_of_threads(cells, monkeypatch):
    """Many blocks (small ``KNAPSACK_BLOCK_CELLS``) or one: the same tables either way."""
    solver, g = _graph()
    act = int(g.var_bytes[g.is_activation].sum())
    dg, fam = solver.family(1)
    monkeypatch.setattr(knapsack, "KNAPSACK_BLOCK_CELLS", cells)
    cap = checkpoint_room(dg, act // 3)
    tables = {}
    for n in ("1", "2", "3"):
        monkeypatch.setenv("HGRAPH_THREADS", n)
        fam.cache.pop("knapsack", None)
        kb = KnapsackBound(fam, dg, cap)
        rows = [np.concatenate([col[a:b] for a, b in zip(kb.start, kb.stop)])
                for col in (kb.cm, kb.ct, kb.item)]           # each state's row, as kept
        tables[n] = [kb.stop - kb.start, *rows, kb.g_ct, kb.g_cm, kb.g_val, kb.g_r, kb.g_pos]
        assert (kb.stop >= kb.start).all() and kb.stop.max() <= kb.cm.size
    for n in ("2", "3"):
        for k, (got, want) in enumerate(zip(tables[n], tables["1"])):
            assert np.array_equal(got, want), (n, k)


@pytest.mark.parametrize("strategy", ["time", "memory"])
def test_family_and_plans_are_the_same_on_any_number_of_threads(strategy, monkeypatch):
    """Every lexmin relaxation cut into parts (``PART_CELLS = 1``) or none: the same
    family statistics and the same plans, chains included."""
    monkeypatch.setattr(exact_search, "PART_CELLS", 1)
    g = synth.build_cnn(blocks=3)
    act = int(g.var_bytes[g.is_activation].sum())
    got = {}
    for n in ("1", "2", "3"):
        monkeypatch.setenv("HGRAPH_THREADS", n)
        solver = make_solver(g, solver="exact", strategy=strategy, units="reference")
        dg, fam = solver.family(1)
        plans = []
        for pct in (30, 50, 80):
            r = solver.dp(act * pct // 100)
            plans.append((r.status, r.model_recompute_cost, r.ckpt_bytes, r.chain_ids))
        got[n] = (plans, {f: getattr(fam, f).tobytes()
                          for f in ("size", "mL", "tL", "t_bnd", "m_bnd", "mAB", "bnd")})
    assert got["1"][0][0][0] == "OK"
    assert got["1"] == got["2"] == got["3"]
