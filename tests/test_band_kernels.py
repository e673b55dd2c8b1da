"""planner/band_kernels.py: the row executor's 1x1 band convolutions against the
whole-op kernel (bitwise forward and input gradient, the weight gradient within rounding),
their fill / add semantics into the caller's buffers, their temporaries under tracemalloc, and a
row step that takes the merged path (issue 26)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import traced_peak
from planner import band_kernels as bk
from planner.execute import executor, export, rows_exec, zoo
from planner.rows.step import predict_rows
from planner.ops import OPS
from planner.rows import plan as rows_plan

CONV = OPS["conv2d"]


def _band(rng, dtype, n, c, rows, w, extra=2):
    """A band input: rows ``[1, 1 + rows)`` cut out of a larger buffer (a strided view)."""
    buf = rng.standard_normal((n, c, rows + extra, w)).astype(dtype)
    return buf[:, :, 1:1 + rows]


CASES = [(2, 8, 3, 5, 16, 1), (2, 8, 3, 5, 16, 2), (1, 16, 1, 4, 8, 1), (3, 4, 5, 7, 6, 2)]


@pytest.mark.parametrize("merge", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n,c,rows,w,o,s", CASES)
def test_forward_is_the_whole_op_kernel_bit_for_bit(monkeypatch, merge, dtype, n, c, rows, w, o, s):
    monkeypatch.setattr(bk, "MERGE_WEIGHT", 0 if merge else 1 << 60)   # merged at small weights
    rng = np.random.default_rng(1)
    x = _band(rng, dtype, n, c, rows, w)
    wt = rng.standard_normal((o, c, 1, 1)).astype(dtype)
    ref = CONV.forward(np, [x, wt], {"stride": s, "pad": 0})
    buf = np.full((n, o, ref.shape[2] + 1, ref.shape[3]), np.nan, dtype=dtype)
    bk.conv1x1_forward(np, x, wt, s, buf[:, :, 1:])          # a view: tail rows before it
    assert np.array_equal(buf[:, :, 1:], ref) and np.isnan(buf[:, :, 0]).all()
    out = np.empty_like(ref)
    bk.conv1x1_forward(np, x, wt, s, out)                    # a whole buffer
    assert np.array_equal(out, ref)


@pytest.mark.parametrize("merge", [True, False])
@pytest.mark.parametrize("n,c,rows,w,o,s", CASES)
def test_backward_fills_or_adds_the_whole_op_gradients(monkeypatch, merge, n, c, rows, w, o, s):
    monkeypatch.setattr(bk, "MERGE_WEIGHT", 0 if merge else 1 << 60)
    rng = np.random.default_rng(2)
    x = _band(rng, np.float64, n, c, rows, w)
    wt = rng.standard_normal((o, c, 1, 1))
    ho, wo = (rows - 1) // s + 1, (w - 1) // s + 1
    gy = rng.standard_normal((n, o, ho, wo))
    ref = CONV.backward(np, gy, {0: x, 1: wt}, None, {"stride": s, "pad": 0},
                        [x.shape, wt.shape], [0, 1])
    for fill in (True, False):
        dw0, dx0 = rng.standard_normal(wt.shape), rng.standard_normal(x.shape)
        dw, dx = dw0.copy(), dx0.copy()
        bk.conv1x1_backward(np, gy, x, wt, s, dw, fill, dx, fill)
        want_dw, want_dx = (ref[1], ref[0]) if fill else (dw0 + ref[1], dx0 + ref[0])
        assert np.allclose(dw, want_dw, rtol=1e-12, atol=1e-12)
        assert np.array_equal(dx, want_dx)                 # the same products, the same adds
    dw = np.zeros(wt.shape)
    bk.conv1x1_backward(np, gy, x, wt, s, dw, True, None, False)   # the input's not wanted
    assert np.allclose(dw, ref[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("size", [16 * 4, 16 * 4096])
def test_gemm_into_adds_inside_blas_from_its_size(size):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((16, 8)), rng.standard_normal((size // 16, 8)).T   # b: F-order
    c0 = rng.standard_normal((16, size // 16))
    c = c0.copy()
    assert bk.accumulates_in_blas(np, c) == (size >= bk.BLAS_ACCUMULATE_MIN)
    bk.gemm_into(np, a, b, c, accumulate=True)
    assert np.allclose(c, c0 + a @ b, rtol=1e-13, atol=1e-13)
    bk.gemm_into(np, a, b, c, accumulate=False)
    assert np.array_equal(c, np.matmul(a, b))


@pytest.mark.parametrize("merge", [True, False])
@pytest.mark.parametrize("whole", [True, False])
@pytest.mark.parametrize("fill", [True, False])
@pytest.mark.parametrize("n,c,o,s", [(2, 64, 128, 1), (2, 256, 256, 1), (1, 128, 512, 2)])
def test_temporaries_are_what_the_plan_counts(monkeypatch, merge, whole, fill, n, c, o, s):
    monkeypatch.setattr(bk, "MERGE_WEIGHT", 0 if merge else 1 << 60)
    rng = np.random.default_rng(4)
    rows, w = 4, 8
    x = rng.standard_normal((n, c, rows, w)).astype(np.float32) if whole else \
        _band(rng, np.float32, n, c, rows, w)
    wt = rng.standard_normal((o, c, 1, 1)).astype(np.float32)
    ho, wo = (rows - 1) // s + 1, (w - 1) // s + 1
    gy = rng.standard_normal((n, o, ho, wo)).astype(np.float32)
    y = np.empty((n, o, ho, wo), np.float32)
    dw, dx = np.zeros(wt.shape, np.float32), np.zeros(x.shape, np.float32)
    ytail = np.empty((n, o, ho + 1, wo), np.float32)[:, :, 1:]
    cases = [("forward", (), lambda: bk.conv1x1_forward(np, x, wt, s, y)),
             ("forward", "tail", lambda: bk.conv1x1_forward(np, x, wt, s, ytail))]
    for want in ((0, 1), (1,), (0,)):
        cases.append(("backward", want, lambda want=want: bk.conv1x1_backward(
            np, gy, x, wt, s, dw if 1 in want else None, fill, dx if 0 in want else None, fill)))
    for phase, want, fn in cases:
        fn()                                                   # BLAS / SciPy set up
        _, got = traced_peak(fn)
        pred = bk.conv1x1_temp_bytes(phase, x.shape, wt.shape, s, 4, want, dw_fill=fill,
                                     dx_fill=fill, x_whole=whole, dx_whole=True,
                                     out_whole=want != "tail")
        # never below what was allocated by more than a call's Python objects (ufunc iterators),
        # as tests/test_step_memory's kernel check, and not far above
        assert got - 6000 <= pred <= 1.1 * got + 6000, (phase, want, pred, got)


def test_a_row_step_through_the_merged_kernels(monkeypatch):
    """With every 1x1 band merged: the loss of the plain step, its gradients within rounding,
    and the whole step's peak within the prediction's window (tests/test_step_memory)."""
    monkeypatch.setattr(bk, "MERGE_WEIGHT", 0)
    g = export.to_cg(zoo.build("resnet50", width=4, image=64, batch=2, dtype="float64"))
    ref = executor.run(g, executor.plain_schedule(g), executor.RunOptions(recycle=False))
    p = rows_plan.plan(g, 4, "share")
    prog = rows_exec._program(g, p)
    methods = {c.fn.__name__ for c in prog}
    assert {"_band1x1", "_bandbwd1x1"} <= methods
    r = rows_exec.run(g, p)
    assert r.loss == ref.loss
    assert rows_exec.relative_error(r.param_grads, ref.param_grads) <= 1e-12
    g32 = export.to_cg(zoo.build("resnet50", width=4, image=64, batch=2))
    p32 = rows_plan.plan(g32, 4, "overlap")
    pred = predict_rows(g32, p32)
    got = rows_exec.run(g32, p32).measured_step_peak_bytes
    assert 0.9 <= got / pred.step_peak_bytes <= 1.0, (got, pred.step_peak_bytes)


KXK = [(2, 8, 6, 7, 16, 3, 1), (2, 8, 7, 9, 4, 3, 2), (1, 3, 9, 12, 8, 7, 2), (3, 16, 3, 4, 8, 3, 1)]


@pytest.mark.parametrize("n,c,h,w,o,k,s", KXK)
def test_kxk_band_convolution_is_the_whole_op_kernels_within_rounding(n, c, h, w, o, k, s):
    """conv_forward / conv_backward on a padded band (a strided view) against planner.ops'
    kernels (float64: rounding only); the weight gradient written or added in its buffer."""
    rng = np.random.default_rng(5)
    x = _band(rng, np.float64, n, c, h, w)
    wt = rng.standard_normal((o, c, k, k))
    a = {"stride": s, "pad": 0}
    ref = CONV.forward(np, [x, wt], a)
    out = np.full((n, o, ref.shape[2] + 1, ref.shape[3]), np.nan)
    bk.conv_forward(np, x, wt, s, out[:, :, 1:])
    assert np.allclose(out[:, :, 1:], ref, rtol=1e-12, atol=1e-12) and np.isnan(out[:, :, 0]).all()
    gy = rng.standard_normal(ref.shape)
    g = CONV.backward(np, gy, {0: x, 1: wt}, None, a, [x.shape, wt.shape], [0, 1])
    for fill in (True, False):
        dw0 = rng.standard_normal(wt.shape)
        dw = dw0.copy()
        dx = bk.conv_backward(np, gy, x, wt, s, dw, fill, True)
        assert np.allclose(dw, g[1] if fill else dw0 + g[1], rtol=1e-12, atol=1e-12)
        assert dx.shape == x.shape and np.allclose(dx, g[0], rtol=1e-12, atol=1e-12)
    assert bk.conv_backward(np, gy, x, wt, s, None, False, False) is None


@pytest.mark.parametrize("fill", [True, False])
@pytest.mark.parametrize("n,c,h,w,o,k,s", KXK + [(2, 128, 4, 10, 256, 3, 1)])
def test_kxk_temporaries_are_what_the_plan_counts(fill, n, c, h, w, o, k, s):
    rng = np.random.default_rng(6)
    x = _band(rng, np.float32, n, c, h, w)
    wt = rng.standard_normal((o, c, k, k)).astype(np.float32)
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    gy = rng.standard_normal((n, o, ho, wo)).astype(np.float32)
    out = np.empty((n, o, ho, wo), np.float32)
    dw = np.zeros(wt.shape, np.float32)
    cases = [("forward", (), lambda: bk.conv_forward(np, x, wt, s, out))]
    for want in ((0, 1), (1,), (0,)):
        cases.append(("backward", want, lambda want=want: bk.conv_backward(
            np, gy, x, wt, s, dw if 1 in want else None, fill, 0 in want)))
    for phase, want, fn in cases:
        fn()
        _, got = traced_peak(fn)
        pred = bk.conv_temp_bytes(phase, x.shape, wt.shape, s, 4, want, dw_fill=fill)
        assert got - 6000 <= pred <= 1.1 * got + 6000, (phase, want, pred, got)


def test_row_steps_take_the_kxk_forward_only_where_the_forward_ran_whole():
    """VGG-16 (no batch norm: its regions sweep the forward in bands) keeps the whole-op kernel
    in its recomputations too (their values are then its forward's bits); ResNet-50 (batch
    norm: whole forwards) recomputes through the band kernel. Both: the plain step's loss, its
    gradients within rounding."""
    for name, kernel in (("vgg16", False), ("resnet50", True)):
        g = export.to_cg(zoo.build(name, dtype="float64"))
        p = rows_plan.plan(g, 4, "share")
        prog = rows_exec._program(g, p)
        ly = p.layers
        got = {(c.fn.__name__, c.st.phase) for c in prog
               if ly.ops[c.st.op] == "conv2d" and c.st.kind == "band"}
        assert (("_bandconv", "r") in got) == kernel and ("_bandconv", "b") not in got, got
        ref = executor.run(g, executor.plain_schedule(g), executor.RunOptions(recycle=False))
        r = rows_exec.run(g, p)
        assert r.loss == ref.loss
        assert rows_exec.relative_error(r.param_grads, ref.param_grads) <= 1e-12


class _OtherArrayModule:
    """NumPy under another name: the kernels' non-NumPy branches (CuPy's on a GPU: per-tap column
    copies, products and adds outside SciPy's BLAS) run on the CPU."""

    def __getattr__(self, name):
        return getattr(np, name)


def test_the_branches_for_other_array_modules_compute_the_same():
    xq = _OtherArrayModule()
    rng = np.random.default_rng(7)
    x = _band(rng, np.float64, 2, 8, 7, 9)
    wt = rng.standard_normal((6, 8, 3, 3))
    for s in (1, 2):
        ho, wo = (7 - 3) // s + 1, (9 - 3) // s + 1
        a, b = np.empty((2, 6, ho, wo)), np.empty((2, 6, ho, wo))
        bk.conv_forward(np, x, wt, s, a)
        bk.conv_forward(xq, x, wt, s, b)
        assert np.array_equal(a, b)
        gy = rng.standard_normal((2, 6, ho, wo))
        dw0 = rng.standard_normal(wt.shape)
        dwa, dwb = dw0.copy(), dw0.copy()
        dxa = bk.conv_backward(np, gy, x, wt, s, dwa, False, True)
        dxb = bk.conv_backward(xq, gy, x, wt, s, dwb, False, True)
        assert np.array_equal(dxa, dxb) and np.allclose(dwa, dwb, rtol=1e-13, atol=1e-13)
    w1 = rng.standard_normal((512, 512, 1, 1))            # merged, and added inside BLAS on NumPy
    x1 = rng.standard_normal((2, 512, 2, 4))
    gy1 = rng.standard_normal((2, 512, 2, 4))
    ya, yb = np.empty_like(gy1), np.empty_like(gy1)
    bk.conv1x1_forward(np, x1, w1, 1, ya)
    bk.conv1x1_forward(xq, x1, w1, 1, yb)
    assert np.array_equal(ya, yb)
    dwa, dwb = np.ones(w1.shape), np.ones(w1.shape)
    dxa, dxb = np.ones(x1.shape), np.ones(x1.shape)
    bk.conv1x1_backward(np, gy1, x1, w1, 1, dwa, False, dxa, False)
    bk.conv1x1_backward(xq, gy1, x1, w1, 1, dwb, False, dxb, False)
    assert np.array_equal(dxa, dxb) and np.allclose(dwa, dwb, rtol=1e-12, atol=1e-12)


#: (images, channels, buffer rows, columns, output channels, k, side padding, band rows [a, b)):
#: rows past the buffer's top / bottom are the map's padding; rows inside it a strided view.
PM = [(2, 16, 8, 6, 8, 3, 1, -1, 4), (2, 16, 8, 6, 8, 3, 1, 3, 8), (3, 16, 9, 5, 4, 3, 1, 2, 7),
      (2, 16, 6, 7, 16, 5, 2, -2, 6), (1, 24, 3, 4, 8, 3, 1, -1, 4)]


def _pm_case(rng, dtype, n, c, r, w, o, k, p, a, b):
    """A buffer of ``r`` rows (a strided view), a weight, and the band's rows padded explicitly
    (what the whole-op kernels take) with its padding ``(top, bottom, side)``."""
    buf = _band(rng, dtype, n, c, r, w)
    wt = rng.standard_normal((o, c, k, k)).astype(dtype)
    top, bottom = max(0, -a), max(0, b - r)
    padded = rows_exec.pad_map(np, buf[:, :, max(a, 0):min(b, r)], top, bottom, p)
    return buf, wt, padded, (top, bottom, p)


@pytest.mark.parametrize("n,c,r,w,o,k,p,a,b", PM)
def test_pixel_major_band_convolution_is_the_whole_op_kernels_within_rounding(n, c, r, w, o, k, p,
                                                                              a, b):
    """conv_pm_forward / conv_pm_backward on rows of a buffer (zero rows past its ends) against
    planner.ops' kernels on the explicitly padded band (float64: rounding only): the forward into
    a view of its buffer, the weight gradient written or added, the input gradient written or
    added into the band's rows of a larger buffer, the rows beside them untouched."""
    rng = np.random.default_rng(8)
    buf, wt, padded, (top, bottom, side) = _pm_case(rng, np.float64, n, c, r, w, o, k, p, a, b)
    assert bk.pixel_major(padded.shape, wt.shape, 1) and not bk.pixel_major(padded.shape, wt.shape, 2)
    attrs = {"stride": 1, "pad": 0}
    ref = CONV.forward(np, [padded, wt], attrs)
    out = np.full((n, o, ref.shape[2] + 1, ref.shape[3]), np.nan)
    bk.conv_pm_forward(np, buf, a, b, p, wt, out[:, :, 1:])
    assert np.allclose(out[:, :, 1:], ref, rtol=1e-12, atol=1e-12) and np.isnan(out[:, :, 0]).all()
    gy = rng.standard_normal(ref.shape)
    g = CONV.backward(np, gy, {0: padded, 1: wt}, None, attrs, [padded.shape, wt.shape], [0, 1])
    gx = g[0][:, :, top:padded.shape[2] - bottom, p:p + w]
    for fill in (True, False):
        dw0 = rng.standard_normal(wt.shape)
        dxbuf = rng.standard_normal((n, c, gx.shape[2] + 2, w))
        dx0 = dxbuf.copy()
        dw = dw0.copy()
        bk.conv_pm_backward(np, gy, buf, a, b, p, wt, dw, fill, dxbuf[:, :, 1:-1], fill)
        assert np.allclose(dw, g[1] if fill else dw0 + g[1], rtol=1e-12, atol=1e-12)
        want = gx if fill else dx0[:, :, 1:-1] + gx
        assert np.allclose(dxbuf[:, :, 1:-1], want, rtol=1e-12, atol=1e-12)
        assert np.array_equal(dxbuf[:, :, [0, -1]], dx0[:, :, [0, -1]])
    dw = np.zeros(wt.shape)
    bk.conv_pm_backward(np, gy, buf, a, b, p, wt, dw, True, None, False)   # the input's not wanted
    assert np.allclose(dw, g[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fill", [True, False])
@pytest.mark.parametrize("n,c,r,w,o,k,p,a,b", PM + [(16, 64, 4, 4, 64, 3, 1, 1, 5)])
def test_pixel_major_temporaries_are_what_the_plan_counts(fill, n, c, r, w, o, k, p, a, b):
    rng = np.random.default_rng(9)
    buf, wt, padded, pads = _pm_case(rng, np.float32, n, c, r, w, o, k, p, a, b)
    ho, wo = padded.shape[2] - k + 1, padded.shape[3] - k + 1
    gy = rng.standard_normal((n, o, ho, wo)).astype(np.float32)
    out = np.empty((n, o, ho + 1, wo), np.float32)[:, :, 1:]
    dw = np.zeros(wt.shape, np.float32)
    dx = np.zeros((n, c, padded.shape[2] - pads[0] - pads[1] + 1, w), np.float32)[:, :, 1:]
    cases = [("forward", (), lambda: bk.conv_pm_forward(np, buf, a, b, p, wt, out))]
    for want in ((0, 1), (1,), (0,)):
        cases.append(("backward", want, lambda want=want: bk.conv_pm_backward(
            np, gy, buf, a, b, p, wt, dw if 1 in want else None, fill, dx if 0 in want else None,
            fill)))
    for phase, want, fn in cases:
        fn()
        _, got = traced_peak(fn)
        pred = bk.conv_pm_temp_bytes(phase, padded.shape, wt.shape, 4, pads, want)
        assert got - 6000 <= pred <= 1.1 * got + 6000, (phase, want, pred, got)


def test_the_cifar_resnets_row_step_through_the_pixel_major_kernels():
    """The CIFAR ResNet's 3x3 bands (16-64 channels, 4-16 wide maps) take the pixel-major band
    kernels in their recomputations and VJPs (the stem's 3 channels do not): the plain step's
    loss, its gradients within rounding (float64), and the float32 step's peak within the
    prediction's window (tests/test_step_memory)."""
    for policy in ("share", "overlap"):
        g = export.to_cg(zoo.build("resnet", width=16, image=32, batch=16, dtype="float64"))
        p = rows_plan.plan(g, 4, policy)
        prog = rows_exec._program(g, p)
        ly = p.layers
        got = {(c.fn.__name__, ly.in_shapes[c.st.op][0][1]) for c in prog
               if ly.ops[c.st.op] == "conv2d" and c.st.kind in ("band", "bandbwd")}
        assert {("_bandpm", 16), ("_bandpm", 64), ("_bandbwdpm", 16), ("_bandbwdpm", 64)} <= got
        assert not {m for m, c in got if c == 3} & {"_bandpm", "_bandbwdpm"}
        ref = executor.run(g, executor.plain_schedule(g), executor.RunOptions(recycle=False))
        r = rows_exec.run(g, p)
        assert r.loss == ref.loss
        assert rows_exec.relative_error(r.param_grads, ref.param_grads) <= 1e-12
        g32 = export.to_cg(zoo.build("resnet", width=16, image=32, batch=16))
        p32 = rows_plan.plan(g32, 4, policy)
        pred = predict_rows(g32, p32)
        got = rows_exec.run(g32, p32).measured_step_peak_bytes
        assert 0.9 <= got / pred.step_peak_bytes <= 1.0, (got, pred.step_peak_bytes)


def test_the_pixel_major_kernels_on_another_array_module():
    xq = _OtherArrayModule()
    rng = np.random.default_rng(10)
    buf, wt, padded, _ = _pm_case(rng, np.float64, *PM[0])
    a, b, p = PM[0][-2], PM[0][-1], PM[0][6]
    ho, wo = padded.shape[2] - 2, padded.shape[3] - 2
    ya, yb = np.empty((2, 8, ho, wo)), np.empty((2, 8, ho, wo))
    bk.conv_pm_forward(np, buf, a, b, p, wt, ya)
    bk.conv_pm_forward(xq, buf, a, b, p, wt, yb)
    assert np.array_equal(ya, yb)
    gy = rng.standard_normal(ya.shape)
    dwa, dwb = np.ones(wt.shape), np.ones(wt.shape)
    rows = padded.shape[2] - max(0, -a) - max(0, b - PM[0][2])
    dxa, dxb = np.ones((2, 16, rows, 6)), np.ones((2, 16, rows, 6))
    bk.conv_pm_backward(np, gy, buf, a, b, p, wt, dwa, False, dxa, False)
    bk.conv_pm_backward(xq, gy, buf, a, b, p, wt, dwb, False, dxb, False)
    assert np.array_equal(dxa, dxb) and np.array_equal(dwa, dwb)


def test_pixel_major_takes_the_bands_its_thresholds_name():
    """band_kernels.pixel_major: stride 1, >= 16 channels, maps <= 32 wide, >= 1 pixel an output
    channel, weights <= PM_MAX_WEIGHT; the forward only on maps <= 8 wide or <= 16 wide from 512
    pixels (bench/rows_pm_ab.py at 78975d9)."""
    pm = bk.pixel_major
    assert pm((16, 64, 3, 6), (64, 64, 3, 3), 1, "r") and pm((16, 16, 6, 18), (16, 16, 3, 3), 1, "r")
    assert pm((2, 16, 6, 18), (16, 16, 3, 3), 1) and not pm((2, 16, 6, 18), (16, 16, 3, 3), 1, "r")
    assert pm((2, 64, 10, 34), (64, 64, 3, 3), 1) and not pm((2, 64, 10, 34), (64, 64, 3, 3), 1, "r")
    assert not pm((16, 64, 3, 6), (64, 64, 3, 3), 2)               # strided
    assert not pm((2, 64, 3, 6), (64, 64, 3, 3), 1)                # 8 pixels under 64 outputs
    assert not pm((2, 128, 6, 18), (128, 128, 3, 3), 1)            # a 147K-element weight
    assert not pm((16, 3, 10, 34), (16, 3, 3, 3), 1)               # 3 channels
    assert not pm((2, 16, 6, 66), (16, 16, 3, 3), 1)               # 64 wide
