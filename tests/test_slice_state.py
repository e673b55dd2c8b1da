"""The backward entry state of a slice is a function of the chain alone
(:mod:`planner.slice_state`): at every slice start of transformer and CNN chains, the sets the
sequential sliced emitter (:func:`planner.emit.emit_pieces`' emitter) has handed over equal
what :class:`planner.slice_state.SliceStarts` computes from the chain."""

from __future__ import annotations

import numpy as np
import pytest

from planner import sliced, synth
from planner.activation_graph import ActivationGraph
from planner.emit import _Emitter
from planner.slice_state import SliceStarts
from tests.chains import random_chain


def _compare(g, ag, groups, nodes: int) -> int:
    """Walk the sequential emitter over the slices; at each backward slice start compare its
    carried state with the chain's. Returns how many starts were compared."""
    sl = sliced.slices(groups, nodes)
    st = SliceStarts.of(g, ag, groups)
    ent = st.entries(np.array([b1 for _, b1 in sl]))
    e = _Emitter(g, groups, ag, None, sliced=True)
    for b0, b1 in sl:
        e.tables(b0, b1)
        e.forward(b0, b1)
        e.take()
    keeps = np.frombuffer(bytes(e.keeps), np.uint8).astype(bool)
    for s in range(len(sl) - 1, -1, -1):
        b0, b1 = sl[s]
        e.tables(b0, b1)
        upper = ent.upper[s].tolist()
        assert sorted(e.upper) == upper, (b0, b1)
        assert sorted(v for v in e.live if groups[v] >= b1) == upper, (b0, b1)
        assert sorted(e.glive) == ent.glive[s].tolist(), (b0, b1)
        own = np.flatnonzero((groups >= b0) & (groups < b1))
        assert sorted(v for v in e.live if b0 <= groups[v] < b1) == own[keeps[own]].tolist()
        cand = np.array(sorted(set().union(*e.cand.values())), np.int64)
        ran = np.frombuffer(bytes(e.ran), np.uint8).astype(bool)
        assert np.array_equal(ran[cand], st.ran(cand, b1)), (b0, b1)
        for i in range(b1 - 1, b0 - 1, -1):
            e.recompute(i, None)
            e.backwards(i)
            e.forget(i, None)
        e.take()
    return len(sl)


@pytest.mark.parametrize("kind", ["transformer", "cnn"])
def test_entry_state_is_the_chains(kind):
    g = synth.build(layers=synth.layers_for_nodes(3000)) if kind == "transformer" else \
        synth.build_cnn(blocks=synth.cnn_blocks_for_nodes(3000))
    ag = ActivationGraph.from_cg(g)
    compared = 0
    for blocks, seed in ((ag.n // 4, 1), (ag.n // 40, 2), (ag.n // 3, 5)):
        groups = random_chain(g, ag, blocks, seed)
        for nodes in (1, 9, 300):
            compared += _compare(g, ag, groups, nodes)
    assert compared > 1000          # many starts, most with something crossing them


def test_entries_cross_only_the_cut():
    """A start's sets hold only nodes of later blocks whose interval reaches it, in node
    order, whatever order the starts are asked in."""
    g = synth.build(layers=4, heads=2)
    ag = ActivationGraph.from_cg(g)
    groups = random_chain(g, ag, 12, 3)
    st = SliceStarts.of(g, ag, groups)
    starts = np.array([7, 2, 11, 5])
    e = st.entries(starts)
    for b1, up, gl in zip(starts.tolist(), e.upper, e.glive):
        want_up = np.flatnonzero((st.upper_lo < b1) & (b1 <= groups))
        want_gl = np.flatnonzero((st.glive_lo < b1) & (b1 <= groups))
        assert up.tolist() == want_up.tolist() and gl.tolist() == want_gl.tolist()
        assert (groups[up] >= b1).all() and (groups[gl] >= b1).all()
