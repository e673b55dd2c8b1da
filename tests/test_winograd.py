"""Winograd F(4x4, 3x3) kernels (planner/winograd.py, issue 26): the definition, the workspace
they promise, and where the op table routes a convolution's backward through them."""

import numpy as np
import pytest

from conftest import traced_peak
from planner import ops, winograd


def _definition(x, w, pad):
    """Stride-1 3x3 convolution (cross-correlation) straight from the definition."""
    n, c, h, wd = x.shape
    ho, wo = h + 2 * pad - 2, wd + 2 * pad - 2
    xp_ = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    y = np.zeros((n, w.shape[0], ho, wo))
    for i in range(3):
        for j in range(3):
            y += np.einsum("nchw,oc->nohw", xp_[:, :, i:i + ho, j:j + wo], w[:, :, i, j])
    return y


def _weight_grad_definition(gy, x, pad):
    ho, wo = gy.shape[2:]
    xp_ = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    dw = np.zeros((gy.shape[1], x.shape[1], 3, 3))
    for i in range(3):
        for j in range(3):
            dw[:, :, i, j] = np.einsum("nohw,nchw->oc", gy, xp_[:, :, i:i + ho, j:j + wo])
    return dw


SHAPES = [  # n, c, o, h, w, pad: whole blocks, partial blocks each side, pads 0-2, 1x1 channels
    (2, 3, 4, 8, 8, 1), (3, 5, 2, 9, 7, 1), (1, 2, 3, 13, 6, 0), (2, 4, 4, 5, 11, 2),
    (1, 1, 1, 3, 3, 0), (2, 6, 5, 16, 12, 1),
]


def _one_image_cap(n, c, o, ho, wo, itemsize):
    """The cap that leaves one image a tile."""
    return winograd.workspace_bytes(1, c, o, ho, wo, itemsize, 1 << 40)


@pytest.mark.parametrize("tiles", ["one", "per image"])
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_and_weight_gradient_match_the_definition(shape, tiles):
    n, c, o, h, wd, pad = shape
    rng = np.random.default_rng(sum(shape))
    x, w = rng.standard_normal((n, c, h, wd)), rng.standard_normal((o, c, 3, 3))
    ho, wo = h + 2 * pad - 2, wd + 2 * pad - 2
    cap = 1 << 30 if tiles == "one" else _one_image_cap(n, c, o, ho, wo, 8)
    assert winograd.tile_images(n, c, o, ho, wo, 8, cap) == (n if tiles == "one" else 1)
    y = winograd.forward(np, x, w, pad, cap)
    np.testing.assert_allclose(y, _definition(x, w, pad), rtol=1e-11, atol=1e-11)
    gy = rng.standard_normal(y.shape)
    dw = winograd.weight_grad(np, gy, x, pad, cap)
    np.testing.assert_allclose(dw, _weight_grad_definition(gy, x, pad), rtol=1e-11, atol=1e-11)


def test_a_small_cap_splits_images_and_keeps_the_result():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((5, 4, 9, 9)), rng.standard_normal((3, 4, 3, 3))
    per = winograd.workspace_bytes(1, 4, 3, 9, 9, 8, 1 << 30)
    assert winograd.tile_images(5, 4, 3, 9, 9, 8, per) == 1
    assert winograd.tile_images(5, 4, 3, 9, 9, 8, per - 1) == 0
    np.testing.assert_allclose(winograd.forward(np, x, w, 1, per), _definition(x, w, 1),
                               rtol=1e-11, atol=1e-11)
    with pytest.raises(ValueError):
        winograd.forward(np, x, w, 1, per - 1)


def test_float32_rounding_stays_near_the_direct_kernels():
    """F(4x4, 3x3) in float32: within 5e-5 of the largest output (the direct product ~5e-7)."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 64, 16, 16)), rng.standard_normal((64, 64, 3, 3))
    ref = _definition(x, w, 1)
    y = winograd.forward(np, x.astype(np.float32), w.astype(np.float32), 1, 1 << 30)
    assert y.dtype == np.float32
    assert np.abs(y - ref).max() / np.abs(ref).max() < 5e-5


@pytest.mark.parametrize("shape", [(4, 64, 64, 16, 16), (2, 64, 96, 9, 13), (3, 80, 64, 8, 8)])
@pytest.mark.parametrize("tiles", ["one", "per image"])
@pytest.mark.parametrize("out_given", [False, True])
def test_temporaries_are_what_the_kernels_allocate(shape, tiles, out_given):
    """forward_temp_bytes / weight_grad_temp_bytes against tracemalloc around the kernels
    (the same window as tests/test_step_memory.py's kernel check)."""
    n, c, o, h, wd = shape
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
    gy = rng.standard_normal((n, o, h, wd)).astype(np.float32)
    cap = 32 << 20 if tiles == "one" else _one_image_cap(n, c, o, h, wd, 4)
    assert winograd.tile_images(n, c, o, h, wd, 4, cap) == (n if tiles == "one" else 1)
    y_out = np.empty((n, o, h, wd), np.float32) if out_given else None
    dw_out = np.empty((o, c, 3, 3), np.float32) if out_given else None
    _, got = traced_peak(lambda: winograd.forward(np, x, w, 1, cap, y_out))
    pred = winograd.forward_temp_bytes(n, c, o, h, wd, 4, cap, out_given)
    assert got - 6000 <= pred <= 1.1 * got + 12000, (pred, got)
    _, got = traced_peak(lambda: winograd.weight_grad(np, gy, x, 1, cap, dw_out))
    pred = winograd.weight_grad_temp_bytes(n, c, o, h, wd, 4, cap, out_given)
    assert got - 6000 <= pred <= 1.1 * got + 12000, (pred, got)


def test_where_the_backward_takes_winograd():
    cap = ops.CONV_WORKSPACE_BYTES
    assert ops._winograd(32, 64, 64, 3, 1, 1, 16, 16, 4, cap)
    assert ops._winograd(32, 64, 64, 3, 1, 1, 16, 16, 4, cap, weight_grad=True)
    assert not ops._winograd(32, 32, 64, 3, 1, 1, 16, 16, 4, cap)          # too few channels
    assert not ops._winograd(32, 64, 64, 3, 1, 1, 4, 4, 4, cap)            # map under 8 a side
    assert not ops._winograd(32, 64, 64, 3, 2, 1, 16, 16, 4, cap)          # strided
    assert not ops._winograd(32, 64, 64, 5, 1, 2, 16, 16, 4, cap)          # 5x5
    assert not ops._winograd(32, 64, 64, 3, 1, -1, 16, 16, 4, cap)         # dx of pad 3
    assert not ops._winograd(32, 64, 64, 3, 1, 1, 16, 16, 4, 1000)         # over the cap
    assert ops._winograd(32, 128, 256, 3, 1, 1, 8, 8, 4, cap)
    # the weight gradient wants at least max(c, o) blocks; the input gradient does not
    assert ops._winograd(2, 64, 64, 3, 1, 1, 8, 8, 4, cap)
    assert not ops._winograd(2, 64, 64, 3, 1, 1, 8, 8, 4, cap, weight_grad=True)


@pytest.mark.parametrize("case", [(2, 64, 64, 8, 8, 1), (1, 64, 64, 10, 9, 1), (4, 64, 64, 18, 17, 0),
                                  (1, 64, 64, 12, 11, 2), (8, 64, 64, 16, 13, 1),
                                  (1, 64, 72, 10, 9, 1), (2, 72, 64, 9, 9, 0)])
def test_the_op_tables_backward_through_winograd_matches_the_definition(case, monkeypatch):
    """The conv2d VJP on shapes that take winograd (spied: both gradients go through it), in
    float64 against the definition; the forward stays on the direct kernels."""
    n, c, o, h, wd, pad = case
    seen = []
    for fn in ("forward", "weight_grad"):
        real = getattr(winograd, fn)

        def spy(*a, _real=real, _fn=fn, **k):
            seen.append(_fn)
            return _real(*a, **k)
        monkeypatch.setattr(winograd, fn, spy)
    rng = np.random.default_rng(sum(case))
    x, w = rng.standard_normal((n, c, h, wd)), rng.standard_normal((o, c, 3, 3))
    attrs = {"stride": 1, "pad": pad}
    y = ops.OPS["conv2d"].forward(np, [x, w], attrs)
    assert seen == []
    gy = rng.standard_normal(y.shape)
    grads = ops.OPS["conv2d"].backward(np, gy, {0: x, 1: w}, None, attrs, [x.shape, w.shape], [0, 1])
    blocks = n * -(-y.shape[2] // 4) * -(-y.shape[3] // 4)
    assert seen == (["weight_grad"] if blocks >= max(c, o) else []) + ["forward"]
    np.testing.assert_allclose(y, _definition(x, w, pad), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(grads[1], _weight_grad_definition(gy, x, pad), rtol=1e-11, atol=1e-11)
    xpad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    dxpad = np.zeros_like(xpad)
    for i in range(3):
        for j in range(3):
            dxpad[:, :, i:i + y.shape[2], j:j + y.shape[3]] += np.einsum("nohw,oc->nchw", gy, w[:, :, i, j])
    ref_dx = dxpad[:, :, pad:pad + h, pad:pad + wd]
    np.testing.assert_allclose(grads[0], ref_dx, rtol=1e-11, atol=1e-11)
