"""The attention and GELU kernels (issue 26) compute what the plain definitions say.

Attention runs block by block over (batch, head) pairs (:func:`planner.ops.attention._head_blocks`) on
the transposed, unnormalised softmax; these tests hold it, in float64, to the textbook
``softmax(q k^T / sqrt(dh)) v`` and its VJP written in plain NumPy (the VJP itself checked
against a central difference), for one block, several whole batches a block and runs of one
batch's heads (the last block short), causal or not, with and without the caller's buffers;
and its temporaries, under tracemalloc, to :func:`planner.ops.kernel_temp_bytes`. GELU (tanh
form) and its derivative against the formula evaluated directly.
"""

import math
import tracemalloc

import numpy as np
import pytest

from conftest import traced_peak
from planner import ops

ATTN = ops.OPS["attention"]


def _split(qkv, heads):
    b, s, d3 = qkv.shape
    d = d3 // 3
    q, k, v = (qkv[:, :, i * d:(i + 1) * d].reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)
               for i in range(3))
    return q, k, v


def _reference(qkv, gy, heads, causal):
    """(output, gradient of the packed input): the definition, all heads at once."""
    q, k, v = _split(qkv, heads)
    b, h, s, dh = q.shape
    scale = float(np.float32(1.0 / math.sqrt(dh)))      # the kernels' float32 scale
    z = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if causal:
        z = np.where(np.tri(s, dtype=bool), z, -np.inf)
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    o = np.einsum("bhij,bhjd->bhid", p, v)
    do = gy.reshape(b, s, h, dh).transpose(0, 2, 1, 3)
    dp = np.einsum("bhid,bhjd->bhij", do, v)
    ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True)) * scale
    grads = (np.einsum("bhij,bhjd->bhid", ds, k), np.einsum("bhij,bhid->bhjd", ds, q),
             np.einsum("bhij,bhid->bhjd", p, do))
    packed = np.concatenate([g.transpose(0, 2, 1, 3).reshape(b, s, h * dh) for g in grads], -1)
    return o.transpose(0, 2, 1, 3).reshape(b, s, h * dh), packed


#: (batch, seq, width, heads, block bytes as float64 heads): one block; two whole batches a
#: block (the last one short); runs of three heads (each batch's last run short); one head.
CASES = [(2, 9, 12, 3, 64), (5, 8, 16, 4, 8), (2, 7, 20, 5, 3), (2, 6, 8, 2, 1)]


def _blocks_of(monkeypatch, s, heads_per_block):
    monkeypatch.setattr(ops.attention, "ATTENTION_BLOCK_BYTES", heads_per_block * s * s * 8)


def test_the_reference_vjp_is_the_derivative():
    rng = np.random.default_rng(0)
    qkv, gy = rng.standard_normal((2, 5, 18)), rng.standard_normal((2, 5, 6))
    d = rng.standard_normal(qkv.shape)
    for causal in (False, True):
        _, grad = _reference(qkv, gy, 3, causal)
        eps = 1e-6
        fd = (np.vdot(_reference(qkv + eps * d, gy, 3, causal)[0], gy)
              - np.vdot(_reference(qkv - eps * d, gy, 3, causal)[0], gy)) / (2 * eps)
        assert abs(fd - np.vdot(grad, d)) <= 1e-7 * abs(fd)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_attention_matches_the_definition(case, causal, monkeypatch):
    b, s, d, h, per = case
    _blocks_of(monkeypatch, s, per)
    rng = np.random.default_rng(s * h)
    qkv, gy = rng.standard_normal((b, s, 3 * d)), rng.standard_normal((b, s, d))
    a = {"heads": h, "causal": causal}
    want_y, want_g = _reference(qkv, gy, h, causal)
    y = ATTN.forward(np, [qkv], a)
    out = np.full((b, s, d), np.nan)
    assert ATTN.forward(np, [qkv], a, out=out) is not None
    g = ATTN.backward(np, gy, {0: qkv}, None, a, [qkv.shape], [0])[0]
    into = np.full(qkv.shape, np.nan)
    g_into = ATTN.backward(np, gy, {0: qkv}, None, a, [qkv.shape], [0], out={0: into})[0]
    np.testing.assert_allclose(y, want_y, rtol=0, atol=1e-13 * np.abs(want_y).max())
    np.testing.assert_allclose(g, want_g, rtol=0, atol=1e-13 * np.abs(want_g).max())
    assert out.tobytes() == y.tobytes()
    assert g_into is into and into.tobytes() == g.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", [(2, 64, 96, 4, 16, True), (3, 32, 48, 4, 3, False),
                                  (2, 128, 64, 2, 1, True), (2, 40, 64, 4, 5, False)])
def test_attention_temporaries_match_the_prediction(case, dtype, monkeypatch):
    """The same window as tests/test_step_memory.py's check over the zoo's kernels, here on
    block layouts the zoo's small transformer does not reach."""
    b, s, d, h, per, causal = case
    _blocks_of(monkeypatch, s, per)
    rng = np.random.default_rng(1)
    qkv = rng.standard_normal((b, s, 3 * d)).astype(dtype)
    gy = rng.standard_normal((b, s, d)).astype(dtype)
    a = {"heads": h, "causal": causal}
    e = np.dtype(dtype).itemsize
    tracemalloc.start()
    try:
        for given in (False, True):
            out = np.empty((b, s, d), dtype) if given else None
            _, got = traced_peak(lambda: ATTN.forward(np, [qkv], a, out=out))
            pred = ops.kernel_temp_bytes("attention", "forward", [qkv.shape], (b, s, d), a, e,
                                         into=(-1,) if given else ())
            assert got - 6000 <= pred <= 1.1 * got + 12000, ("forward", given, pred, got)
            into = {0: np.empty_like(qkv)} if given else None
            _, got = traced_peak(lambda: ATTN.backward(np, gy, {0: qkv}, None, a, [qkv.shape], [0],
                                                 out=into))
            pred = ops.kernel_temp_bytes("attention", "backward", [qkv.shape], (b, s, d), a, e,
                                         want=(0,), into=(0,) if given else ())
            assert got - 6000 <= pred <= 1.1 * got + 12000, ("backward", given, pred, got)
    finally:
        tracemalloc.stop()


GELU = ops.OPS["gelu"]


def _gelu_reference(x, gy, a3=float(np.float32(3) * ops._GELU_A)):
    """GELU (tanh form) and its VJP, the formula evaluated directly with the kernels' float32
    constants (the VJP's ``3a`` rounded in float32, as the kernel has always had it)."""
    c, a = float(ops._GELU_C), float(ops._GELU_A)
    t = np.tanh(c * (x + a * x ** 3))
    dy = 0.5 * (1 + t) + 0.5 * x * (1 - t ** 2) * c * (1 + a3 * x ** 2)
    return 0.5 * x * (1 + t), gy * dy


@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("shape,block", [((3, 5, 7), 16), ((4, 6), 1 << 20), ((2, 3, 8), 48)])
def test_gelu_matches_the_definition(shape, block, contiguous, monkeypatch):
    """Blocks with a short last one, one block, blocks that divide the size; strided operands
    (one block over the arrays themselves)."""
    monkeypatch.setattr(ops.elementwise, "ELEMENTWISE_BLOCK_BYTES", block * 8)
    rng = np.random.default_rng(len(shape))
    x, gy = rng.standard_normal(shape) * 3, rng.standard_normal(shape)
    if not contiguous:
        x, gy = np.asfortranarray(x), np.asfortranarray(gy)
    want_y, want_g = _gelu_reference(x, gy)
    out = np.full(shape, np.nan) if contiguous else np.full(shape[::-1], np.nan).T
    y = GELU.forward(np, [x], {}, out=out)
    g = GELU.backward(np, gy, {0: x}, None, {}, [shape], [0])[0]
    into = np.full(shape, np.nan)
    assert GELU.backward(np, gy, {0: x}, None, {}, [shape], [0], out={0: into})[0] is into
    np.testing.assert_allclose(y, want_y, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(g, want_g, rtol=1e-13, atol=1e-14)
    assert y is out and into.tobytes() == g.tobytes()
    assert GELU.forward(np, [x], {}).tobytes() == y.tobytes()


def test_the_gelu_vjp_is_the_derivative():
    x = np.linspace(-5, 5, 101)
    eps = 1e-6
    fd = (_gelu_reference(x + eps, x)[0] - _gelu_reference(x - eps, x)[0]) / (2 * eps)
    exact = _gelu_reference(x, np.ones_like(x), a3=3 * float(ops._GELU_A))[1]
    np.testing.assert_allclose(exact, fd, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("n", [1000, 200_000])
def test_gelu_temporaries_match_the_prediction(n):
    rng = np.random.default_rng(2)
    x, gy = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    tracemalloc.start()
    try:
        for given in (False, True):
            into = {0: np.empty_like(x)} if given else None
            _, got = traced_peak(lambda: GELU.backward(np, gy, {0: x}, None, {}, [x.shape], [0],
                                                 out=into))
            pred = ops.kernel_temp_bytes("gelu", "backward", [x.shape], x.shape, {}, 4,
                                         want=(0,), into=(0,) if given else ())
            assert got - 6000 <= pred <= 1.1 * got + 12000, (given, pred, got)
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("layout", ["contiguous", "strided x", "strided out"])
def test_stacked_matmul_matches_the_definition(layout):
    """The matmul forward and input gradient on 3-D activations (one GEMM over all rows where
    the operands are contiguous, the stacked product otherwise), into ``out`` or not."""
    rng = np.random.default_rng(5)
    x, w, gy = rng.standard_normal((3, 10, 7)), rng.standard_normal((7, 4)), rng.standard_normal((3, 10, 4))
    if layout == "strided x":
        x, gy = x.transpose(1, 0, 2).copy().transpose(1, 0, 2), gy[:, ::-1].copy()[:, ::-1]
    op = ops.OPS["matmul"]
    out = np.full((3, 10, 4), np.nan) if layout != "strided out" else np.full((3, 4, 10), np.nan).transpose(0, 2, 1)
    into = np.full((3, 10, 7), np.nan) if layout != "strided out" else np.full((10, 3, 7), np.nan).transpose(1, 0, 2)
    y = op.forward(np, [x, w], {})
    assert op.forward(np, [x, w], {}, out=out) is out
    dx = op.backward(np, gy, {0: x, 1: w}, None, {}, [x.shape, w.shape], [0], out={0: into})[0]
    np.testing.assert_allclose(y, np.einsum("bik,kn->bin", x, w), rtol=1e-13)
    np.testing.assert_allclose(out, y, rtol=0, atol=0)
    assert dx is into
    np.testing.assert_allclose(dx, np.einsum("bin,kn->bik", gy, w), rtol=1e-13)
