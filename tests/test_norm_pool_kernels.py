"""Batch norm's and max pool's kernels (issue 26) held to their definitions: float64 results
against the textbook formulas on maps below and above :data:`planner.ops.norm.EXPAND_PIXELS`, the
expanded per-channel operands giving the same bits as broadcast ones, and
:func:`planner.ops.kernel_temp_bytes` against tracemalloc around each kernel call."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import traced_peak
from planner import ops

BN = {"kind": "batch", "axis": 1, "eps": 1e-5}

#: (n, c, h, w) maps: a few pixels, a CIFAR-sized map, 4096 pixels (expanded), 9216 (not),
#: and a 2-D (n, c) batch norm (after a linear layer)
BN_SHAPES = [(4, 3, 2, 3), (3, 5, 16, 16), (2, 3, 64, 64), (2, 2, 96, 96), (6, 7)]


def _bn_reference(x, g, b, gy, eps):
    """Batch norm's forward and VJP from the definition, per channel (axis 1)."""
    red = tuple(i for i in range(x.ndim) if i != 1)
    shape = [1] * x.ndim
    shape[1] = -1
    m = x.size // x.shape[1]
    mean = x.mean(axis=red, keepdims=True)
    inv = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=red, keepdims=True) + eps)
    xhat = (x - mean) * inv
    y = xhat * g.reshape(shape) + b.reshape(shape)
    db = gy.sum(axis=red)
    dg = (gy * xhat).sum(axis=red)
    dx = g.reshape(shape) * inv / m * (m * gy - db.reshape(shape) - xhat * dg.reshape(shape))
    return y, dx, dg, db


def _bn_case(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2.0 + 0.7).astype(dtype)
    g = rng.standard_normal(shape[1]).astype(dtype)
    b = rng.standard_normal(shape[1]).astype(dtype)
    gy = rng.standard_normal(shape).astype(dtype)
    return x, g, b, gy


def _bn_run(x, g, b, gy, want=(0, 1, 2), into=False):
    op = ops.OPS["batch_norm"]
    y = op.forward(np, [x, g, b], BN, out=np.empty_like(x) if into else None)
    shapes = [x.shape, g.shape, b.shape]
    out = {0: np.empty_like(x)} if into and 0 in want else None
    grads = op.backward(np, gy, {0: x, 1: g}, None, BN, shapes, list(want), out=out) if out \
        else op.backward(np, gy, {0: x, 1: g}, None, BN, shapes, list(want))
    return y, grads


@pytest.mark.parametrize("shape", BN_SHAPES)
def test_batch_norm_matches_the_definition_in_float64(shape):
    x, g, b, gy = _bn_case(shape, np.float64)
    y, grads = _bn_run(x, g, b, gy)
    ry, rdx, rdg, rdb = _bn_reference(x, g, b, gy, BN["eps"])
    for got, ref in ((y, ry), (grads[0], rdx), (grads[1], rdg), (grads[2], rdb)):
        assert got.shape == ref.shape
        assert np.abs(got - ref).max() <= 1e-12 * np.abs(ref).max()


@pytest.mark.parametrize("shape", BN_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_expanded_per_channel_operands_give_the_broadcast_bits(shape, dtype, monkeypatch):
    """The same kernels with every per-channel operand broadcast (EXPAND_PIXELS 1) and with
    every one expanded over the map: bit for bit the same forward and gradients."""
    x, g, b, gy = _bn_case(shape, dtype, seed=1)
    runs = []
    for pixels in (1, 1 << 30):
        monkeypatch.setattr(ops.norm, "EXPAND_PIXELS", pixels)
        runs.append(_bn_run(x, g, b, gy, into=True))
    (y0, g0), (y1, g1) = runs
    assert np.array_equal(y0, y1)
    assert all(np.array_equal(g0[k], g1[k]) for k in (0, 1, 2))


@pytest.mark.parametrize("shape", [(8, 16, 8, 8), (4, 8, 32, 32), (2, 4, 96, 96)])
@pytest.mark.parametrize("want", [(0, 1, 2), (1, 2), (0,)])
@pytest.mark.parametrize("into", [False, True])
def test_batch_norm_temporaries_match_kernel_temp_bytes(shape, want, into):
    """kernel_temp_bytes' batch-norm entries against tracemalloc (the window of
    tests/test_step_memory.py's per-kernel check), expanded maps and not, given buffers or not,
    the input gradient wanted or not."""
    x, g, b, gy = _bn_case(shape, np.float32, seed=2)
    op = ops.OPS["batch_norm"]
    shapes = [x.shape, g.shape, b.shape]
    y_buf = np.empty_like(x) if into else None
    _, got_f = traced_peak(lambda: op.forward(np, [x, g, b], BN, out=y_buf) if into
                        else op.forward(np, [x, g, b], BN))
    pred_f = ops.kernel_temp_bytes("batch_norm", "forward", shapes, x.shape, BN, 4,
                                   into=(-1,) if into else ())
    gi = {0: np.empty_like(x)} if into and 0 in want else None
    _, got_b = traced_peak(lambda: op.backward(np, gy, {0: x, 1: g}, None, BN, shapes, list(want),
                                            out=gi) if gi
                        else op.backward(np, gy, {0: x, 1: g}, None, BN, shapes, list(want)))
    pred_b = ops.kernel_temp_bytes("batch_norm", "backward", shapes, x.shape, BN, 4, want=want,
                                   into=tuple(gi or ()))
    for pred, got in ((pred_f, got_f), (pred_b, got_b)):
        assert got - 6000 <= pred <= 1.1 * got + 12000, (shape, want, into, pred, got)
