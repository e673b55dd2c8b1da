"""hgraph graph synth: transformer-like training graphs that the reader, simulator and planner accept."""

from __future__ import annotations

import numpy as np
import pytest

import planner
from jobs.cli import main
from planner import cg, simulate, synth
from planner.activation_graph import ActivationGraph
from planner.execute.executor import plain_schedule


@pytest.mark.parametrize("layers, heads", [(1, 1), (3, 4)])
def test_structure_and_round_trip(tmp_path, layers, heads):
    g = synth.build(layers=layers, heads=heads, hidden=64, seq=16, batch=2)
    assert len(g.forward) == 4 + layers * synth.nodes_per_layer(heads)
    path = tmp_path / "cg_synth.txt"
    cg.write(g, path)
    back = cg.read(path)                       # the strict reader validates pairing and the DAG
    assert cg.dumps(back) == path.read_text()
    ag = ActivationGraph.from_cg(back)
    assert ag.sinks.size == 1                # a single loss, as the DP needs
    # backward rules of dump.py: gradient of the output first, outputs are the forward inputs
    for f, b in zip(back.forward, back.backward):
        assert b.inputs[0] == (f.outputs[0], "gradient")
        assert b.outputs == [v for v, _ in f.inputs]
        assert (("Softmax" == f.type or "GELU" == f.type)
                == ((f.outputs[0], "output") in b.inputs))
    sizes = back.var_bytes[back.activations]
    assert sizes.min() == 4 and np.all(sizes > 0)
    sim = simulate.replay(back, plain_schedule(back))
    assert sim.ok


def test_cli_writes_the_graph(tmp_path, capsys):
    out = tmp_path / "g.txt"
    assert main(["graph", "synth", "--nodes", "300", "--heads", "2", "--hidden", "32",
                 "--seq", "8", "--batch", "2", "--out", str(out)]) == 0
    g = cg.read(out)
    assert len(g.forward) >= 300
    assert len(g.forward) - synth.nodes_per_layer(2) < 300
    assert "activations" in capsys.readouterr().err


def test_bad_flags_are_errors(tmp_path):
    with pytest.raises(SystemExit) as info:
        main(["graph", "synth", "--layers", "0", "--out", str(tmp_path / "x.txt")])
    assert info.value.code == 2
    assert main(["graph", "synth", "--out", str(tmp_path / "x.txt")]) == 2


def test_planner_plans_a_synth_graph():
    g = synth.build(layers=4, heads=2, hidden=64, seq=32, batch=4)
    p = planner.plan(g, budget="50%", engine=planner.EngineOptions(tasks=2))
    assert p.peak_bytes <= p.budget_bytes and p.recompute_cost > 0
    assert simulate.replay(g, p.schedule).ok


def test_layers_for_a_hundred_thousand_nodes():
    layers = synth.layers_for_nodes(100_000)
    nodes = 4 + layers * synth.nodes_per_layer(4)
    assert 100_000 <= nodes < 100_000 + synth.nodes_per_layer(4)


@pytest.mark.parametrize("blocks, stages, dense_layers", [(1, 4, 1), (5, 3, 3)])
def test_cnn_structure_and_round_trip(tmp_path, blocks, stages, dense_layers):
    g = synth.build_cnn(blocks=blocks, stages=stages, dense_layers=dense_layers, width=16,
                        growth=8, image=32, batch=2, classes=10)
    assert len(g.forward) == synth.cnn_nodes(blocks, stages, dense_layers)
    path = tmp_path / "cg_cnn.txt"
    cg.write(g, path)
    back = cg.read(path)
    assert cg.dumps(back) == path.read_text()
    ag = ActivationGraph.from_cg(back)
    assert ag.sinks.size == 1
    for f, b in zip(back.forward, back.backward):
        assert b.inputs[0] == (f.outputs[0], "gradient")
        assert b.outputs == [v for v, _ in f.inputs]
        if f.type == "ReLU":                 # Chainer's ReLU backward reads only its output
            assert b.inputs[1:] == [(f.outputs[0], "output")]
    # branchy: Inception concats join 4 branches, the last dense concat joins dense_layers + 1
    fan_in = sorted({len(f.inputs) for f in back.forward if f.type == "Concat"})
    assert fan_in[-1] == max(4, dense_layers + 1)
    fan_out = np.bincount(ag.src, minlength=ag.n)
    assert fan_out.max() >= 4                # an Inception input feeds four branches
    # real shapes: the stem's ReLU is batch x width x image/2 x image/2 floats
    relu = next(f for f in back.forward if f.type == "ReLU")
    assert back.var_bytes[relu.outputs[0]] == 2 * 16 * 16 * 16 * 4
    assert simulate.replay(back, plain_schedule(back)).ok


def test_cnn_sizing_and_bad_sizes():
    for nodes in (1, 500, 2000, 100_000):
        blocks = synth.cnn_blocks_for_nodes(nodes)
        assert synth.cnn_nodes(blocks) >= nodes
        assert blocks == 1 or synth.cnn_nodes(blocks - 1) < nodes
    with pytest.raises(ValueError):
        synth.build_cnn(blocks=0)


def test_planner_plans_a_cnn_graph():
    g = synth.build_cnn(blocks=8, stages=4, image=64, batch=2)
    p = planner.plan(g, budget="80%", engine=planner.EngineOptions(tasks=2))     # the stem and first stage bound it at ~73%
    assert p.peak_bytes <= p.budget_bytes and p.recompute_cost > 0
    assert simulate.replay(g, p.schedule).ok
