"""The op table's fast kernels (issue 26) compute what the plain definitions say.

Convolution runs as tiled GEMMs over a bounded im2col workspace (per-image or merged column
layouts, a transposed convolution or a column scatter for the input gradient); these tests hold
it, in float64, to a direct einsum convolution for every path: kernel sizes 1/3/7, strides 1/2,
paddings 0-3, odd map sizes, workspace caps that force image groups and row bands. Kernels that
write into the caller's buffer (``fills_out``) give the same bits as the returned result; pooling
keeps its tie rule; the host block cache reuses memory across unmetered runs without changing a
gradient bit.
"""

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from planner import ops
from planner.execute import backend, executor, export, zoo

NP = backend.get("numpy")


def _windows(x, k, s, p):
    xpad = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    return sliding_window_view(xpad, (k, k), axis=(2, 3))[:, :, ::s, ::s], xpad.shape


def _reference(x, w, gy, s, p):
    """Forward, input and weight gradients of a convolution, straight from the definition."""
    k = w.shape[2]
    win, padded = _windows(x, k, s, p)
    y = np.einsum("ncijab,ocab->noij", win, w)
    dw = np.einsum("noij,ncijab->ocab", gy, win)
    dxpad = np.zeros(padded)
    ho, wo = y.shape[2:]
    for a in range(k):
        for b in range(k):
            dxpad[:, :, a:a + s * (ho - 1) + 1:s, b:b + s * (wo - 1) + 1:s] += \
                np.einsum("noij,oc->ncij", gy, w[:, :, a, b])
    dx = dxpad[:, :, p:p + x.shape[2], p:p + x.shape[3]]
    return y, dx, dw


CASES = [  # n, c, o, h, w, k, stride, pad
    (2, 3, 5, 9, 9, 3, 1, 1), (2, 4, 6, 8, 8, 3, 2, 1), (3, 4, 6, 8, 8, 1, 1, 0),
    (3, 4, 6, 8, 8, 1, 2, 0), (2, 3, 4, 14, 14, 7, 2, 3), (1, 2, 3, 5, 7, 3, 1, 0),
    (2, 3, 4, 9, 9, 3, 2, 0), (2, 3, 4, 9, 9, 2, 1, 0), (2, 6, 3, 7, 7, 3, 1, 2),
    (2, 3, 4, 40, 36, 3, 1, 1),                        # over MERGE_PIXELS: per-image columns
    (2, 3, 4, 48, 48, 3, 1, 1), (2, 4, 3, 48, 48, 3, 1, 1),   # over AMORTISE_PIXELS: transposes
    (2, 4, 3, 20, 20, 3, 1, 1),           # over DX_AMORTISE_PIXELS only: dx transposed conv
    # pixel-major columns (PIXEL_MAJOR_MIN_CHANNELS channels, maps up to PIXEL_MAJOR_MAX_WIDTH)
    (2, 16, 16, 16, 16, 3, 1, 1), (3, 20, 16, 17, 15, 3, 1, 1), (2, 16, 32, 9, 9, 3, 2, 1),
    (2, 16, 16, 18, 18, 3, 1, 0), (2, 16, 16, 16, 16, 5, 1, 1), (1, 16, 24, 11, 32, 3, 1, 1),
    (2, 16, 16, 20, 20, 5, 1, 2),         # and ROW_TAPS_PIXELS: one kernel row's taps a column
]


@pytest.mark.parametrize("cap", [1 << 30, 600, 1])     # one tile, image groups / bands, row by row
@pytest.mark.parametrize("case", CASES)
def test_convolution_matches_the_definition(case, cap):
    n, c, o, h, w, k, s, p = case
    rng = np.random.default_rng(sum(case))
    x, wt = rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c, k, k))
    attrs = {"stride": s, "pad": p, "workspace": cap}
    y = ops.OPS["conv2d"].forward(np, [x, wt], attrs)
    gy = rng.standard_normal(y.shape)
    ry, rdx, rdw = _reference(x, wt, gy, s, p)
    grads = ops.OPS["conv2d"].backward(np, gy, {0: x, 1: wt}, None, attrs, [x.shape, wt.shape], [0, 1])
    np.testing.assert_allclose(y, ry, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grads[0], rdx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grads[1], rdw, rtol=1e-12, atol=1e-12)
    assert grads[0].shape == x.shape and grads[1].shape == wt.shape


def test_convolution_tiles_respect_the_workspace_bound():
    shape, wshape, attrs = (4, 8, 32, 32), (8, 8, 3, 3), {"stride": 1, "pad": 1}
    per_row = 8 * 9 * 32 * 4
    for cap in (per_row, 5 * per_row, 40 * per_row, 1 << 30):
        got = ops.conv_workspace_bytes(shape, wshape, attrs, cap=cap)
        assert 0 < got <= cap or cap < per_row
    assert ops.conv_workspace_bytes(shape, (8, 8, 1, 1), {"stride": 1, "pad": 0}) == 0
    tiles = ops._conv_tiles(4, 32, 32, 72, 4, 5 * per_row)
    assert all(t[1] - t[0] == 1 and t[3] - t[2] <= 5 for t in tiles)     # bands of one image
    assert sum((t[1] - t[0]) * (t[3] - t[2]) for t in tiles) == 4 * 32


def test_convolution_cases_take_every_pixel_major_path(monkeypatch):
    """CASES reach each pixel-major kernel, with and without row taps (thresholds that move
    would otherwise leave a path untested by the definition check above)."""
    seen = set()
    for fn in ("_pm_conv", "_pm_col2im", "_pm_conv_dw"):
        real = getattr(ops.conv, fn)

        def spy(xp, *args, _real=real, _fn=fn, **kw):
            # _pm_conv(xp, x, wmat, k, s, p, cap, y): row taps from its stride and output map
            seen.add((_fn, _fn == "_pm_conv" and ops._row_taps(args[3], *args[-1].shape[2:])))
            return _real(xp, *args, **kw)
        monkeypatch.setattr(ops.conv, fn, spy)      # where the kernels call it
    for n, c, o, h, w, k, s, p in CASES:
        rng = np.random.default_rng(0)
        x, wt = rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c, k, k))
        attrs = {"stride": s, "pad": p}
        y = ops.OPS["conv2d"].forward(np, [x, wt], attrs)
        ops.OPS["conv2d"].backward(np, y, {0: x, 1: wt}, None, attrs, [x.shape, wt.shape], [0, 1])
    assert {("_pm_conv", True), ("_pm_conv", False), ("_pm_col2im", False),
            ("_pm_conv_dw", False)} <= seen


def _first_call(name, models, seed):
    """(graph, forward function, its details, input arrays, the generator) of the first ``name``
    op in the zoo ``models``: parameters and data as the executor makes them, other inputs random."""
    rng = np.random.default_rng(seed)
    for model in models:
        g = export.to_cg(zoo.build(model))
        leaf = executor.leaves(g, np, 0)
        for f in g.forward:
            d = executor._details(f)
            if d["op"] == name:
                xs = [leaf[a] if a in leaf else rng.standard_normal(sh).astype(dt)
                      for (a, _), sh, dt in zip(f.inputs, d["in_shapes"], d["in_dtypes"])]
                return g, f, d, xs, rng
    pytest.fail(f"no {name} op in the zoo models tried")


@pytest.mark.parametrize("name", sorted(n for n, d in ops.OPS.items() if d.fills_out))
def test_kernels_writing_into_out_give_the_same_bits(name):
    _, _, d, xs, _ = _first_call(name, ("mlp", "resnet", "unet", "transformer"), 0)
    want = ops.OPS[name].forward(np, xs, d["attrs"])
    out = np.full(tuple(d["out_shape"]), np.nan, dtype=d["out_dtype"])
    ops.OPS[name].forward(np, xs, d["attrs"], out=out)
    assert out.tobytes() == np.ascontiguousarray(want).tobytes()


@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 2, 1), (3, 1, 1)])
def test_max_pool_gradient_goes_to_the_first_maximum(k, s, p):
    x = np.random.default_rng(k + s).integers(0, 3, (2, 3, 8, 8)).astype(np.float64)   # many ties
    attrs = {"kernel": k, "stride": s, "pad": p}
    y = ops.OPS["max_pool"].forward(np, [x], attrs)
    gy = np.random.default_rng(1).standard_normal(y.shape)
    dx = ops.OPS["max_pool"].backward(np, gy, {0: x}, y, attrs, [x.shape], [0])[0]
    xpad = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf)
    ref = np.zeros(xpad.shape)
    for n, c, i, j in np.ndindex(y.shape):
        win = xpad[n, c, i * s:i * s + k, j * s:j * s + k]
        a, b = np.unravel_index(np.argmax(win), win.shape)                # first in row-major order
        ref[n, c, i * s + a, j * s + b] += gy[n, c, i, j]
    np.testing.assert_allclose(dx, ref[:, :, p:p + 8, p:p + 8], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("k,s", [(2, 2), (8, 8), (3, 1), (2, 3), (3, 2)])
def test_average_pool_matches_the_definition(k, s):
    x = np.random.default_rng(k * s).standard_normal((2, 3, 8, 8))
    attrs = {"kernel": k, "stride": s}
    y = ops.OPS["avg_pool"].forward(np, [x], attrs)
    win, _ = _windows(x, k, s, 0)
    np.testing.assert_allclose(y, win.mean(axis=(4, 5)), rtol=1e-7)      # 1/k^2 is a float32
    gy = np.random.default_rng(2).standard_normal(y.shape)
    dx = ops.OPS["avg_pool"].backward(np, gy, {}, y, attrs, [x.shape], [0])[0]
    ref = np.zeros(x.shape)
    for i in range(k):
        for j in range(k):
            ref[:, :, i:i + s * (y.shape[2] - 1) + 1:s, j:j + s * (y.shape[3] - 1) + 1:s] += gy / (k * k)
    np.testing.assert_allclose(dx, ref, rtol=1e-7, atol=1e-15)


def test_host_block_cache_reuses_memory_without_changing_gradients():
    g = export.to_cg(zoo.build("resnet"))
    s = executor.plain_schedule(g)
    metered = executor.run(g, s, backend=NP)
    first = executor.run(g, s, executor.RunOptions(meter=False), backend=NP)
    second = executor.run(g, s, executor.RunOptions(meter=False), backend=NP)     # draws its blocks from the cache
    assert executor.gradients_equal(metered.param_grads, first.param_grads)
    assert executor.gradients_equal(first.param_grads, second.param_grads)
    assert metered.measured_peak_bytes >= metered.tracked_peak_bytes


@pytest.mark.parametrize("name,xs_shapes,attrs", [
    ("matmul", [(2, 5, 3), (3, 4)], {}),
    ("conv2d", [(2, 3, 9, 9), (4, 3, 3, 3)], {"stride": 1, "pad": 1}),
    ("conv2d", [(2, 4, 9, 9), (3, 4, 3, 3)], {"stride": 1, "pad": 1}),    # transposed-conv dx
    ("conv2d", [(2, 3, 9, 9), (4, 3, 3, 3)], {"stride": 2, "pad": 1})])
def test_vjps_writing_into_out_give_the_same_bits(name, xs_shapes, attrs):
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(s).astype(np.float32) for s in xs_shapes]
    op = ops.OPS[name]
    assert op.fills_grads
    gy = rng.standard_normal(op.forward(np, xs, attrs).shape).astype(np.float32)
    saved = dict(enumerate(xs))
    want = op.backward(np, gy, saved, None, attrs, xs_shapes, [0, 1])
    out = {j: np.full(xs_shapes[j], np.nan, dtype=np.float32) for j in (0, 1)}
    got = op.backward(np, gy, saved, None, attrs, xs_shapes, [0, 1], out=out)
    for j in (0, 1):
        assert got[j].tobytes() == want[j].tobytes()


@pytest.mark.parametrize("xshape", [(2, 7), (2, 5, 7), (70, 7), (3, 30, 7)])    # each input-gradient path
def test_matmul_gradients_match_the_definition(xshape):
    rng = np.random.default_rng(len(xshape))
    x, w = rng.standard_normal(xshape), rng.standard_normal((7, 4))
    gy = rng.standard_normal(xshape[:-1] + (4,))
    got = ops.OPS["matmul"].backward(np, gy, {0: x, 1: w}, None, {}, [x.shape, w.shape], [0, 1])
    np.testing.assert_allclose(got[0], np.einsum("...n,kn->...k", gy, w), rtol=1e-12)
    np.testing.assert_allclose(got[1], x.reshape(-1, 7).T @ gy.reshape(-1, 4), rtol=1e-12)
    assert got[0].flags.c_contiguous


@pytest.mark.parametrize("name", sorted(n for n, d in ops.OPS.items() if d.fills_grads))
def test_every_vjp_writing_into_out_gives_the_same_bits(name):
    g, f, d, xs, rng = _first_call(name, ("mlp", "resnet", "resnet50", "unet", "transformer"), 4)
    op = ops.OPS[name]
    y = op.forward(np, xs, d["attrs"])
    gy = rng.standard_normal(y.shape).astype(y.dtype)
    shapes = [tuple(sh) for sh in d["in_shapes"]]
    want_pos = [j for j, (a, _) in enumerate(f.inputs) if g.is_activation[a] or
                g.var_names[a].startswith("/")]
    saved = {j: xs[j] for j in op.saves_inputs}
    want = op.backward(np, gy, saved, y if op.saves_output else None, d["attrs"], shapes, want_pos)
    out = {j: np.full(shapes[j], np.nan, dtype=d["in_dtypes"][j]) for j in want_pos}
    got = op.backward(np, gy, saved, y if op.saves_output else None, d["attrs"], shapes, want_pos,
                      out=out)
    for j in want_pos:
        assert np.asarray(got[j]).tobytes() == np.ascontiguousarray(want[j]).tobytes(), j
