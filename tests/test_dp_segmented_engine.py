"""The segmented DP on the engine (planner.dp.segmented_engine): the chain is the in-process
one (:mod:`planner.dp.segmented`) for any tasks, message mode and runtime, and after a
worker is lost mid-DP (the replacement walks its segments again)."""

from __future__ import annotations

import hashlib
import pickle

import numpy as np
import pytest

from planner import synth
from planner.activation_graph import ActivationGraph
from planner.dp import scale, segmented as S
from planner.dp.segmented_engine import SegmentedDP, chain_graph, solve_on_engine

_G = {}


def _setup(kind="tf"):
    if kind not in _G:
        cg = synth.build(layers=24, heads=4) if kind == "tf" else synth.build_cnn(blocks=12)
        g = ActivationGraph.from_cg(cg)
        _G[kind] = (g, S.scale_family(g))
    return _G[kind]


def _hash(stitched):
    f = stitched.fronts
    return hashlib.sha256(f.state.tobytes() + f.s.tobytes() + f.c.tobytes()).hexdigest()


@pytest.mark.parametrize("kind,frac,mode", [("tf", 0.45, "composed"), ("tf", 0.45, "handover"),
                                            ("cnn", 0.155, "composed"),
                                            ("cnn", 0.4, "handover")])
def test_same_chain_for_any_number_of_tasks(kind, frac, mode):
    g, fam = _setup(kind)
    B = int(frac * g.m.sum())
    cuts = S.choose_cuts(fam, 6)
    one = (S.solve_composed if mode == "composed" else S.solve_handover)(fam, g, B, cuts)
    want = _hash(one)
    for tasks in (1, 2, 4):
        run = solve_on_engine(fam, g, B, cuts, mode=mode, tasks=tasks)
        assert _hash(run.stitched) == want, tasks
        assert run.supersteps == 2 * min(tasks, cuts.size - 1) - 1     # a superstep a block
        assert run.handed_over == one.handed_over
        assert (run.saved, run.ckpt) == (int(one.fronts.s[-1]), int(one.fronts.c[-1]))


def test_message_modes_give_the_same_chain():
    from planner.analyses.engine import EngineOptions

    g, fam = _setup("tf")
    B = int(0.45 * g.m.sum())
    cuts = S.choose_cuts(fam, 5)
    want = _hash(S.solve_composed(fam, g, B, cuts))
    for msg in ("push", "pull", "hybrid"):
        run = solve_on_engine(fam, g, B, cuts, opts=EngineOptions(tasks=2, blocks=2, mode=msg))
        assert _hash(run.stitched) == want, msg


def test_no_chain_reaches_the_end():
    g, fam = _setup("tf")
    cuts = S.choose_cuts(fam, 4)
    for mode in ("composed", "handover"):
        run = solve_on_engine(fam, g, int(0.05 * g.m.sum()), cuts, mode=mode, tasks=2)
        assert run.stitched is None


def test_a_replacement_worker_walks_again_and_reads_back_the_same_chain():
    """What a worker holds beyond the values is its walks; a fresh copy of each segment (as
    a replacement actor gets: no walk) reads back the same chain from the values."""
    g, fam = _setup("cnn")
    B = int(0.155 * g.m.sum())
    cuts = S.choose_cuts(fam, 6)
    for mode in ("composed", "handover"):
        segs = S.segment_dps(fam, g, B, cuts)
        run = solve_on_engine(fam, g, B, cuts, mode=mode, segs=segs, tasks=2)
        prog = SegmentedDP(segs[0].passes * segs[0].front_cap,
                           max(s.num_states for s in segs), "time", mode)
        from planner.analyses.engine import EngineOptions, run_program

        res = run_program(EngineOptions(tasks=1), prog, chain_graph(segs))
        for k, seg in enumerate(segs):
            fresh = pickle.loads(pickle.dumps(seg))
            assert fresh.walks == {}
            row = res.values[k].copy()
            prog._back(fresh, row, int(row[prog.OUT_IDX]), k == 0)
            assert np.array_equal(row, res.values[k]), (mode, k)
        assert run.stitched is not None


@pytest.mark.parametrize("mode", ["composed", "handover"])
def test_on_ray_same_chain_and_a_worker_lost_mid_dp(ray_session, mode):
    from planner.analyses.engine import EngineOptions

    g, fam = _setup("tf")
    B = int(0.45 * g.m.sum())
    cuts = S.choose_cuts(fam, 6)
    want = _hash((S.solve_composed if mode == "composed" else S.solve_handover)(fam, g, B, cuts))
    run = solve_on_engine(fam, g, B, cuts, mode=mode,
                          opts=EngineOptions(tasks=2, blocks=3, runtime="ray"))
    assert _hash(run.stitched) == want
    assert run.supersteps == 11                  # 6 blocks of one segment: 6 forward, 5 back
    # superstep 7 kills task 1 (7 % 2), whose block 3 reads its segment back in it: that
    # walk is gone with the actor, the replacement walks it again from the checkpointed values
    lost = solve_on_engine(fam, g, B, cuts, mode=mode,
                           opts=EngineOptions(tasks=2, blocks=3, runtime="ray",
                                              checkpoint_every=1, inject_failure=7))
    assert _hash(lost.stitched) == want
    assert [row["failure"]["superstep"] for row in lost.stats if "failure" in row] == [7]


def _plan_hash(p):
    from planner import report

    rep = {k: v for k, v in p.report.items() if k not in ("seconds", "engine")}
    return hashlib.sha256(p.schedule.dumps().encode() + report.dumps(rep).encode()).hexdigest()


def test_segmented_plan_is_the_same_for_1_2_4_workers_local_and_ray(monkeypatch, ray_session):
    """The whole plan (schedule and report but its timings and engine line) of a segmented
    solve is the same for 1, 2 and 4 tasks, in-process and on Ray actors, and with a worker
    lost mid-DP."""
    import planner
    from hgraph.runtime import ray_actors
    from hgraph.session import Session

    monkeypatch.setattr(scale, "SEGMENTED_LIMIT", 1000)
    cg = synth.build_cnn(blocks=synth.cnn_blocks_for_nodes(3000))     # scale path
    started, runs = [], []
    start, run = ray_actors.RayRuntime.__init__, Session.run
    monkeypatch.setattr(ray_actors.RayRuntime, "__init__",
                        lambda rt, *a, **k: (started.append(1), start(rt, *a, **k))[1])
    monkeypatch.setattr(Session, "run", lambda s, *a, **k: (runs.append(1), run(s, *a, **k))[1])
    made = []                   # window tables made in this process: how many states each
    tables = S.window_transitions
    monkeypatch.setattr(S, "window_transitions",
                        lambda fam, *a, **k: (made.append(fam.num_sets), tables(fam, *a, **k))[1])
    hashes = {}
    for tasks, runtime in ((1, "local"), (2, "local"), (4, "local"), (4, "ray")):
        runs.clear()
        made.clear()
        p = planner.plan(cg, budget="40%", certify="off",
                         engine=planner.EngineOptions(tasks=tasks, runtime=runtime))
        assert p.report["dp_segmented"]["segments"] > 1
        hashes[(tasks, runtime)] = _plan_hash(p)
        # each segment makes its own tables where it is walked (on Ray: the workers, so
        # none here); never the whole family's on the driver
        states = p.report["n_lower_sets"]
        assert (made == []) if runtime == "ray" else (made and max(made) < states), made
    assert len(set(hashes.values())) == 1, hashes
    # the same plan as the segments' tables sliced from the whole family's (as before the
    # segments made their own)
    whole = S.segment_dps
    monkeypatch.setattr(S, "segment_dps",
                        lambda *a, **k: whole(*a, **dict(k, local_tables=False)))
    p = planner.plan(cg, budget="40%", certify="off",
                     engine=planner.EngineOptions(tasks=2, runtime="local"))
    assert _plan_hash(p) == hashes[(1, "local")]
    monkeypatch.setattr(S, "segment_dps", whole)
    # the plan's engine stages (levels, separators, statistics' two runs, the DP) ran on one
    # session: its actors started once
    assert len(runs) >= 5 and len(started) == 1, (len(runs), len(started))
    # a worker killed at superstep 1 of every engine run — in the DP's scan, the actor that
    # walked the second block's segments in superstep 0 — changes nothing
    hurt = planner.EngineOptions(tasks=2, runtime="ray", checkpoint_every=1, inject_failure=1)
    p = planner.plan(cg, budget="40%", certify="off", engine=hurt)
    assert _plan_hash(p) == hashes[(1, "local")]


def test_plan_above_the_limit_is_segmented_and_says_so(monkeypatch):
    """``planner.plan`` from :data:`SEGMENTED_LIMIT` activations: the DP runs segmented on the
    engine, the report says so (segments, the composed front's cost), the schedule replays
    clean within the budget; below the limit the report has no ``dp_segmented`` and the plan
    is the one walk's."""
    import planner
    from planner.report import approximations_text

    cg = synth.build(layers=110, heads=4)                  # ~2,600 activations: scale path
    below = planner.plan(cg, budget="50%", certify="off", engine=planner.EngineOptions(tasks=2))
    assert "dp_segmented" not in below.report and below.report["dp_exact"] is False
    assert approximations_text(below.report).startswith("window 8, front cap 128;")
    monkeypatch.setattr(scale, "SEGMENTED_LIMIT", 1000)
    p = planner.plan(cg, budget="50%", certify="off", engine=planner.EngineOptions(tasks=2))
    seg = p.report["dp_segmented"]
    assert seg["segments"] == S.DEFAULT_SEGMENTS and seg["mode"] == "composed"
    assert seg["composed_recompute_cost"] == p.report["model_recompute_cost"]
    assert p.peak_bytes <= p.budget_bytes and p.within_budget
    # the composed plan is not the one walk's, but near it (measured: bench/NOTES_scale.md)
    assert p.recompute_cost <= 1.05 * below.recompute_cost
    assert "segmented: 64 segments" in approximations_text(p.report)


def test_the_wait_on_the_walks_grows_with_a_worker_share():
    """Superstep 0 walks every segment a worker holds: the wait on it scales with the states
    of the most loaded worker, never below the engine's own, and no limit stays none."""
    import hgraph
    from planner.dp.segmented_engine import WALK_SECONDS_PER_STATE, _walk_timeout

    class Seg:
        def __init__(self, n):
            self.num_states = n

    big = [Seg(15_000)] * 64                      # 960,000 states over 4 workers
    assert _walk_timeout(hgraph.EngineOptions(tasks=4), big).timeout == \
        WALK_SECONDS_PER_STATE * 240_000
    assert _walk_timeout(hgraph.EngineOptions(tasks=4), [Seg(100)] * 3).timeout == 600.0
    assert _walk_timeout(hgraph.EngineOptions(timeout=None), big).timeout is None
