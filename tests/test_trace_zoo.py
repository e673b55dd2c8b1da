"""Tracer, op VJPs (against finite differences), zoo models and their cg.txt export."""

import json
import subprocess
import sys

import numpy as np
import pytest

from planner import cg
from planner.execute import export, zoo
from planner.execute.trace import Tracer
from planner.ops import OPS

RNG = np.random.default_rng(0)


def _f64(*shape):
    return RNG.standard_normal(shape)


# op name, inputs (float64 unless labels), attrs, positions to check
CASES = [
    ("matmul", [_f64(2, 3, 4), _f64(4, 5)], {}, [0, 1]),
    ("add", [_f64(3, 4), _f64(3, 4)], {}, [0, 1]),
    ("bias", [_f64(2, 3, 4, 4), _f64(3)], {"axis": 1}, [0, 1]),
    ("relu", [_f64(3, 5) + 0.05], {}, [0]),
    ("gelu", [_f64(3, 5)], {}, [0]),
    ("conv2d", [_f64(2, 3, 6, 6), _f64(4, 3, 3, 3)], {"stride": 2, "pad": 1}, [0, 1]),
    ("conv2d", [_f64(1, 2, 5, 5), _f64(3, 2, 1, 1)], {"stride": 1, "pad": 0}, [0, 1]),
    ("max_pool", [_f64(2, 2, 4, 4)], {"kernel": 2, "stride": 2, "pad": 0}, [0]),
    ("avg_pool", [_f64(2, 2, 4, 4)], {"kernel": 2, "stride": 2}, [0]),
    ("upsample", [_f64(1, 2, 3, 3)], {"factor": 2}, [0]),
    ("batch_norm", [_f64(4, 3, 2, 2), _f64(3), _f64(3)], {"kind": "batch", "axis": 1, "eps": 1e-5}, [0, 1, 2]),
    ("layer_norm", [_f64(2, 3, 6), _f64(6), _f64(6)], {"kind": "layer", "axis": -1, "eps": 1e-5}, [0, 1, 2]),
    ("softmax_cross_entropy", [_f64(4, 5), np.array([0, 3, 1, 4])], {}, [0]),
    ("reshape", [_f64(2, 6)], {"shape": [3, 4]}, [0]),
    ("concat", [_f64(2, 1, 3), _f64(2, 2, 3)], {"axis": 1}, [0, 1]),
    ("attention", [_f64(2, 3, 12)], {"heads": 2, "causal": False}, [0]),
    ("attention", [_f64(1, 4, 6)], {"heads": 1, "causal": True}, [0]),
]


@pytest.mark.parametrize("name,xs,attrs,check", CASES, ids=[c[0] for c in CASES])
def test_vjp_matches_finite_differences(name, xs, attrs, check):
    op = OPS[name]
    y = op.forward(np, xs, attrs)
    gy = RNG.standard_normal(np.shape(y))
    saved = {p: xs[p] for p in op.saves_inputs}
    grads = op.backward(np, gy, saved, y if op.saves_output else None, attrs,
                        [x.shape for x in xs], check)
    eps = 1e-6
    for pos in check:
        x = xs[pos]
        assert grads[pos].shape == x.shape
        for flat in RNG.choice(x.size, size=min(6, x.size), replace=False):
            idx = np.unravel_index(flat, x.shape)
            old = x[idx]
            x[idx] = old + eps
            up = float((op.forward(np, xs, attrs) * gy).sum())
            x[idx] = old - eps
            down = float((op.forward(np, xs, attrs) * gy).sum())
            x[idx] = old
            assert grads[pos][idx] == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-6), (name, pos)


def test_tracer_records_shapes_bytes_and_flops():
    t = Tracer()
    x = t.input((2, 3, 8, 8))
    w = t.param("conv/W", (4, 3, 3, 3))
    y = t.conv2d(x, w, stride=2, pad=1)
    assert y.shape == (2, 4, 4, 4)
    assert t.vars[y.id].nbytes == 2 * 4 * 4 * 4 * 4
    assert t.nodes[0].flops == 2 * (2 * 4 * 4 * 4) * 3 * 9
    with pytest.raises(ValueError, match="do not chain"):
        t.matmul(t.input((2, 5)), t.param("fc/W", (4, 3)))


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_zoo_exports_a_valid_training_graph(name):
    t = zoo.build(name)
    text = export.dumps(t)
    g = cg.loads(text)
    assert cg.dumps(g) == text
    assert len(g.forward) == len(t.nodes) and 10 <= len(g.forward) <= 150
    sinks = [f for f in g.forward if not any(f.outputs[0] in b.outputs for b in g.backward)]
    assert len(sinks) == 1 and g.var_bytes[sinks[0].outputs[0]] == 4          # the scalar loss
    for f, b in zip(g.forward, g.backward):
        d = json.loads(f.details)
        op = OPS[d["op"]]
        assert b.tagged("input") == [f.inputs[p][0] for p in op.saves_inputs]
        assert b.tagged("output") == (f.outputs if op.saves_output else [])
    # every activation feeds at most two functions (gradient sums stay order-independent)
    uses = np.zeros(g.num_vars, int)
    for f in g.forward:
        for a, _ in f.inputs:
            uses[a] += 1
    assert uses[g.is_activation].max() <= 2


def test_zoo_sizes_and_errors():
    small, big = zoo.build("resnet", width=4), zoo.build("resnet", width=8)
    assert small.activation_bytes() < big.activation_bytes()
    assert zoo.build("transformer", seq=8).vars[0].shape == (4, 8, 32)
    from hgraph.common.errors import HGraphError
    with pytest.raises(HGraphError, match="unknown zoo model"):
        zoo.build("vgg")
    with pytest.raises(HGraphError, match="divisible"):
        zoo.build("unet", image=10)


def test_zoo_cli_writes_cg(tmp_path):
    out = tmp_path / "cg.txt"
    r = subprocess.run([sys.executable, "-m", "jobs.cli", "graph", "zoo", "transformer", "--depth", "1",
                        "--seq", "8", "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    g = cg.read(out)
    assert cg.dumps(g) == export.dumps(zoo.build("transformer", depth=1, seq=8))
    r = subprocess.run([sys.executable, "-m", "jobs.cli", "graph", "zoo", "unet", "--image", "10",
                        "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and "divisible" in r.stderr and "Traceback" not in r.stderr
