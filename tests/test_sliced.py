"""The schedule stage in slices (:mod:`planner.sliced`, issue 37): the sliced emission's
schedule is byte for byte the whole emission's (``emit_groups`` with the hoisting) and its
replay's figures are the whole replay's, on transformer and CNN graphs of 2k-20k activations,
for slices from a block or two up (where most forgets' anchors are in another piece) to the
default; and ``planner.plan`` uses it from the segmented DP's size."""

from __future__ import annotations

import numpy as np
import pytest

from planner import simulate, sliced, synth
from planner.activation_graph import ActivationGraph
from planner.emit import emit_groups
from tests.chains import random_chain


def _same(g, ag, groups, nodes: int) -> None:
    whole = emit_groups(g, groups, ag)
    want = simulate.replay(g, whole)
    got_s, got = sliced.emit_and_replay(g, groups, ag, nodes=nodes)
    assert got_s.dumps() == whole.dumps()
    assert len(got_s) == len(whole)
    for field in ("peak_bytes", "peak_step", "peak_act_only_bytes", "recompute_cost",
                  "forward_cost", "param_bytes", "violations"):
        assert getattr(got, field) == getattr(want, field), field
    assert np.array_equal(got.computes, want.computes)
    assert np.array_equal(got.timeline, want.timeline)


@pytest.mark.parametrize("kind,nodes", [("transformer", 2000), ("cnn", 2000),
                                        ("transformer", 20000), ("cnn", 20000)])
def test_sliced_schedule_is_the_whole_one(kind, nodes):
    g = synth.build(layers=synth.layers_for_nodes(nodes)) if kind == "transformer" else \
        synth.build_cnn(blocks=synth.cnn_blocks_for_nodes(nodes))
    ag = ActivationGraph.from_cg(g)
    small = nodes <= 2000
    for blocks, seed in ((ag.n // 4, 1), (ag.n // 40, 2)) if small else ((ag.n // 5, 3),):
        groups = random_chain(g, ag, blocks, seed)
        for slice_nodes in ((1, 7, 300) if small else (40, 4096)):
            _same(g, ag, groups, slice_nodes)


def test_slices_cover_the_blocks_in_order():
    groups = np.repeat(np.arange(6), [5, 1, 1, 9, 2, 2])
    assert sliced.slices(groups, 6) == [(0, 2), (2, 3), (3, 4), (4, 6)]
    assert sliced.slices(groups, 100) == [(0, 6)]
    assert sliced.slices(groups, 1) == [(i, i + 1) for i in range(6)]


def test_plan_makes_its_schedule_in_slices_from_the_segmented_size(monkeypatch, tmp_path):
    """From :data:`SEGMENTED_LIMIT` activations ``planner.plan``'s schedule is a file made in
    slices, the same text and report figures as the whole emission of its chain."""
    import planner
    from planner.dp import scale
    from planner.schedule import ScheduleFile

    monkeypatch.setattr(scale, "SEGMENTED_LIMIT", 1000)
    monkeypatch.setattr(sliced, "SLICE_NODES", 64)
    g = synth.build(layers=90, heads=4)
    p = planner.plan(g, budget="50%", certify="off", engine=planner.EngineOptions(tasks=2))
    assert isinstance(p.schedule, ScheduleFile)
    ag = ActivationGraph.from_cg(g)
    whole = emit_groups(g, p.groups, ag)
    want = simulate.replay(g, whole)
    assert p.schedule.dumps() == whole.dumps()
    assert (p.peak_bytes, p.recompute_cost, p.ops) == \
        (want.peak_bytes, want.recompute_cost, len(whole))
    out = tmp_path / "s.txt"
    p.schedule.write(out)
    assert out.read_text() == whole.dumps()


def test_hoisting_in_pieces_is_the_whole_hoisting():
    """Any cut of an op list into pieces, each hoisted alone with the last-touch lines handed
    on and the forgets anchored earlier put back by the merge, is the whole hoisting — with
    forgets anchored in other pieces (a CNN's chain cut at random) and forgets with no anchor
    at all (a gradient freed before anything made it: the front)."""
    import io

    from planner.emit import hoist_forgets
    from planner.schedule import Op, columns_ops

    g = synth.build_cnn(blocks=synth.cnn_blocks_for_nodes(2000))
    ag = ActivationGraph.from_cg(g)
    ops = emit_groups(g, random_chain(g, ag, ag.n // 4, 1), ag, optimize=False).ops
    params = np.flatnonzero(~g.is_activation)[:3].tolist()
    ops = [Op("forget", params[0], (), "backward")] + ops
    ops.insert(len(ops) // 2, Op("forget", params[1], (), "backward"))
    cuts = np.sort(np.random.default_rng(5).choice(len(ops), 40, replace=False)).tolist()
    spool = io.BytesIO()
    moved, total = sliced._spool(g, (ops[lo:hi] for lo, hi in zip([0, *cuts], [*cuts, len(ops)])),
                                 spool)
    assert total == len(ops) and (moved[0] >= 0).sum() > 10 and (moved[0] < 0).sum() >= 1
    spool.seek(0)
    merged = sliced._Merged(g, None, moved, total, None)
    got = [op for cols in merged._columns(spool) for op in columns_ops(*cols)]
    assert got == hoist_forgets(g, ops) and all(type(op) is Op for op in got)
