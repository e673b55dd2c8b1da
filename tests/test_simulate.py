"""planner.simulate: the replay reproduces the reference's evaluator on every published schedule."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from conftest import data_path
from planner import cg, simulate
from planner.activation_graph import ActivationGraph
from planner.schedule import Op, Schedule

BAD = Path(__file__).parent / "badinput"


def _reference_runs():
    rows = list(csv.DictReader(open(data_path("reference", "results.csv"))))
    index = {(r["graph"], r["solver"], r["strategy"], r["budget_label"]): r for r in rows}
    for path in sorted(data_path("reference", "schedules").glob("*.txt")):
        graph, solver, strategy, label = path.stem.split("_", 3)
        yield path, index[(graph, solver, strategy, label.replace("pct", "%"))]


def test_every_reference_schedule_reproduces_its_row():
    graphs = {}
    runs = list(_reference_runs())
    assert len(runs) == 47
    for path, row in runs:
        g = graphs.setdefault(row["graph"], cg.read(data_path("graphs", f"cg_{row['graph']}.txt")))
        sched = Schedule.read(path)
        assert sched.dumps() == path.read_text()
        r = simulate.replay(g, sched)
        assert r.violations == [], (path.name, r.violations[:3])
        assert r.peak_bytes == int(row["sim_peak_bytes"]), path.name
        assert r.recompute_cost == int(row["sched_recompute_cost"]), path.name
        assert r.forward_cost == int(row["forward_cost"])
        assert r.timeline.max() == r.peak_bytes == r.timeline[r.peak_step]
        assert r.peak_act_only_bytes <= r.peak_bytes
        exact = simulate.replay(g, sched, mode="exact")
        sink = ActivationGraph.from_cg(g)
        loss_bytes = int(sink.bytes[sink.sinks].sum())
        assert r.peak_bytes <= exact.peak_bytes <= r.peak_bytes + loss_bytes


def _tiny():
    return cg.read(BAD / "tiny_valid.txt")


def _plain():
    # compute conv, relu; backward relu (reads y=3 live), conv; forget all
    return [Op("compute", 0), Op("compute", 1), Op("compute", 3, (0,)),
            Op("forget", 3, (), "forward"), Op("compute", 2, (0, 1)),
            Op("forget", 2, (), "forward"), Op("forget", 2, (), "backward")]


def test_tiny_accounting_by_hand():
    r = simulate.replay(_tiny(), Schedule(_plain()))
    # after each op: 400, 800, 800+400(grad 2), 800, 800+100+40(grads of input, W), 540, 140
    assert r.timeline.tolist() == [400, 800, 1200, 800, 940, 540, 140]
    assert r.peak_bytes == 1200 and r.peak_step == 2
    assert r.peak_act_only_bytes == 1200
    assert r.recompute_cost == 0 and r.forward_cost == 11
    assert r.violations == [] and r.ok
    # exact mode also counts the loss gradient (var 3, 400 bytes) from the loss's compute on
    e = simulate.replay(_tiny(), Schedule(_plain()), mode="exact")
    assert e.peak_bytes == 1600


def test_recompute_cost_counts_repeated_forwards():
    ops = _plain()
    ops = ops[:3] + [Op("forget", 2, (), "forward"), Op("compute", 0)] + ops[3:]
    r = simulate.replay(_tiny(), Schedule(ops))
    assert r.recompute_cost == 10 and r.recomputed == 1 and r.ok


@pytest.mark.parametrize("mutation,words", [
    (lambda ops: [ops[1]] + ops[2:], "reads var 2 (forward), which is not live"),
    (lambda ops: ops[:2] + [Op("forget", 3, (), "forward")] + ops[2:], "reads var 3"),
    (lambda ops: ops[:4] + ops[5:], "never produced"),
    (lambda ops: ops[:4] + [Op("compute", 2, (0,)), Op("compute", 2, (0, 1))] + ops[5:],
     "produced twice"),
    (lambda ops: ops + [Op("compute", 9)], "no such function"),
    (lambda ops: ops[:2] + [Op("compute", 3, (4,))] + ops[2:], "out of range"),
    (lambda ops: [ops[0], Op("compute", 2, (0, 1))] + ops[1:4] + ops[5:],
     "reads var 2 (gradient), which is not live"),
])
def test_invalid_schedules_are_reported(mutation, words):
    r = simulate.replay(_tiny(), Schedule(mutation(_plain())))
    assert any(words in v for v in r.violations), r.violations
    assert not r.ok


def test_impossible_schedule():
    r = simulate.replay(_tiny(), Schedule.loads("IMPOSSIBLE\n"))
    assert r.impossible and not r.ok and r.peak_bytes == 0


def test_schedule_reader_rejects_garbage():
    from hgraph.common.errors import InputError
    with pytest.raises(InputError, match=r"x.txt:2: expected 'compute"):
        Schedule.loads("compute 0\ncompute -1\n", "x.txt")
    with pytest.raises(InputError, match="only line"):
        Schedule.loads("compute 0\nIMPOSSIBLE\n", "x.txt")
    assert np.array_equal(Schedule.loads("forget 3 backward\n").ops[0].index, 3)
