"""Hybrid mode: the switcher's decisions, and the acceptance check on a 200k/2M power-law graph."""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from hgraph.cost_model import HybridSwitcher
from hgraph.algorithms import hybrid_comparison


from hgraph.generators import powerlaw_graph


def _row(messages, push, pull, pull_fixed=0):
    return {"messages": messages, "push_fixed": 0, "push_var": push, "pull_fixed": pull_fixed,
            "pull_var": pull}


def test_switcher_follows_the_cheaper_mode_with_a_dead_band():
    s = HybridSwitcher(start="pull")
    assert s.observe(_row(10, 120, 80, pull_fixed=5000)) == "push"
    assert s.observe(_row(12, 150, 96, pull_fixed=4900)) == "push"       # growth 1.2: push still cheaper
    assert s.observe(_row(20000, 240000, 160000, pull_fixed=5000)) == "pull"
    # Within the 10 % margin: stay.
    assert s.observe(_row(20000, 170000, 160000, pull_fixed=5000)) == "pull"
    assert s.switches == 2
    # Tiny absolute gains never switch (min_gain).
    t = HybridSwitcher(start="push")
    assert t.observe(_row(1, 300, 10)) == "push"


def test_switcher_state_round_trips():
    s = HybridSwitcher(start="pull")
    s.observe(_row(10, 120, 80, pull_fixed=5000))
    t = HybridSwitcher()
    t.restore(s.state())
    assert t.state() == s.state()


def test_hybrid_acceptance_powerlaw_sssp():
    """>= 200k vertices, >= 2M edges: the frontier grows then shrinks; hybrid switches at least
    twice and moves at most 1.05 x the bytes of the better pure mode; all results identical."""
    r = hybrid_comparison(n=200_000, m=2_000_000, tasks=4, blocks=2, seed=1)
    assert r["vertices"] >= 200_000 and r["edges"] >= 2_000_000
    assert r["identical"]
    active = [a for _, a, _ in r["trace"]]
    peak = int(np.argmax(active))
    assert 0 < peak < len(active) - 1 and active[peak] > 100 * active[0]      # grows, then shrinks
    modes = [m for m, _, _ in r["trace"]]
    assert r["switches"] >= 2 and sum(a != b for a, b in zip(modes, modes[1:])) == r["switches"]
    assert r["bytes"]["hybrid"] <= 1.05 * min(r["bytes"]["push"], r["bytes"]["pull"]), r["bytes"]
    assert r["bytes"]["push"] != r["bytes"]["pull"]


def test_powerlaw_sssp_matches_dijkstra():
    g = powerlaw_graph(20_000, 150_000, seed=2)
    from hgraph.algorithms import SSSP
    import hgraph

    source = int(np.argmax(g.out_degree))
    expected = dijkstra(csr_matrix((g.weights, (g.src, g.dst)), shape=(g.n, g.n)), indices=source)
    got = hgraph.run(SSSP(source), g, tasks=3, blocks=2, mode="hybrid").values
    np.testing.assert_array_equal(got, expected)
