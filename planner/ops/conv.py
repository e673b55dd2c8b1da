"""Convolution: the forward as tiled GEMMs over im2col columns (:mod:`planner.ops.conv_tiles`),
its input and weight gradients (transposed convolution, column scatters, pixel-major columns,
:mod:`planner.winograd` where it pays) and each kernel's temporaries beside it.

Speed (issue 26, ``bench/kernels_bench.py`` against PyTorch eager): im2col + GEMM in tiles
whose columns stay within :data:`~planner.ops.conv_tiles.CONV_WORKSPACE_BYTES` (pixel-major
columns on small maps, :func:`~planner.ops.conv_tiles._pixel_major`), the stride-1 input
gradient a transposed convolution.
"""

from __future__ import annotations

from planner import winograd
from planner.ops.base import KernelCall, OpDef, _bufs, _nb
from planner.ops.conv_tiles import (CONV_WORKSPACE_BYTES, _conv_tiles, _im2col_tiles, _merged,
                                    _out_hw, _pixel_major, _pm_temp, _pm_tiles, _row_taps,
                                    col2im_add, swap01)
from planner.ops.flops import _fl_conv


def _conv_infer(s, d, a):
    (n, c, h, w), (o, c2, kh, kw) = s
    if c != c2 or kh != kw:
        raise ValueError(f"conv2d: input {s[0]} and weight {s[1]} do not match")
    ho, wo = _out_hw(h, w, kh, a["stride"], a["pad"])
    if ho < 1 or wo < 1:
        raise ValueError(f"conv2d: input {s[0]} too small for kernel {kh}")
    return (n, o, ho, wo), d[0]


def _winograd(n, c, o, k, s, p, ho, wo, itemsize, cap, weight_grad=False) -> bool:
    """Whether a convolution's backward runs through :mod:`planner.winograd` (stride-1 3x3
    layers of at least ``winograd.MIN_CHANNELS`` channels in and out, where it was measured
    faster, on maps of ``winograd.MIN_SIDE`` and more, padded by at most 2): a
    quarter of the direct convolution's multiplications. The input gradient is a forward of
    the output gradient (``c``: the layer's output channels); the weight gradient has its own
    rule (``weight_grad``). The forward itself stays direct: F(4x4, 3x3) rounds ~20x coarser
    (~1e-5 of the largest output in float32), and in a forward that moves which values sit on
    either side of a ReLU or a max pool: the CIFAR ResNet's float32 gradients moved by up to
    3.8e-2 of their largest from the direct kernels' (1e-5 with the backward alone;
    bench/NOTES_kernels.md)."""
    return k == 3 and s == 1 and 0 <= p <= 2 and winograd.pays(n, c, o, ho, wo, itemsize, cap,
                                                               weight_grad)


def _pm_conv(xp, x, wmat, k, s, p, cap, y):
    """Convolution of ``x`` into ``y`` (NCHW) through pixel-major columns: each tile's
    ``cols @ wmat`` (``wmat``: ``(k*k*c, out)``, rows in the columns' ``(i, j, channel)``
    order; with :func:`_row_taps`, the sum over kernel rows ``i`` of row-shifted column slices
    times ``wmat``'s ``i``-th ``k*c`` rows), written into ``y`` through one transposing copy of
    the tile's product."""
    o, ho, wo = y.shape[1], y.shape[2], y.shape[3]
    kc = k * x.shape[1]
    row_taps = _row_taps(s, ho, wo)
    for n0, n1, r0, r1, cols in _pm_tiles(xp, x, k, s, p, cap, row_taps):
        nb, rows = n1 - n0, r1 - r0
        if row_taps:
            pix = rows * wo
            t = xp.matmul(cols[:, :pix], wmat[:kc])
            for i in range(1, k):
                part = xp.matmul(cols[:, i * wo:i * wo + pix], wmat[i * kc:(i + 1) * kc])
                t += part
                del part
        else:
            t = xp.matmul(cols, wmat)
        y[n0:n1, :, r0:r1] = t.reshape(nb, rows, wo, o).transpose(0, 3, 1, 2)
        del t                                # not beside the next tile's
    return y


def _workspace(a):
    return a.get("workspace", CONV_WORKSPACE_BYTES)


def _tile_grad(gy, n0, n1, r0, r1, merged, pixel_major):
    """Output gradient of one tile as the GEMMs take it: per image ``(images, o, pixels)``;
    merged, ``(images*pixels, o)`` (``pixel_major``, the weight gradient's operand) or ``(o,
    images*pixels)`` (a copy either way: the tile's images become one matrix)."""
    g = gy[n0:n1, :, r0:r1]
    nb, o, rows, wo = g.shape
    if not merged:
        return g.reshape(nb, o, rows * wo)
    if pixel_major:
        return g.transpose(0, 2, 3, 1).reshape(nb * rows * wo, o)
    return g.transpose(1, 0, 2, 3).reshape(o, nb * rows * wo)


def _conv_fwd(xp, xs, a, out=None):
    """Convolution as tiled GEMMs: each tile's columns times the ``(out, c*k*k)`` weight matrix
    (one batched matmul per tile, BLAS / cuBLAS), written into the NCHW result through one
    transposing copy of the tile's output: per image, the product is taken pixel-major,
    ``cols^T @ W^T`` (OpenBLAS ran it faster than ``W @ cols`` at 32-64 output channels, a
    U-Net decoder's, in per-layer A/Bs here); a 1x1's product goes straight into the result.
    Where :func:`_pixel_major` says so (small maps, enough channels and pixels), through
    pixel-major columns instead (:func:`_pm_conv`)."""
    x, w = xs
    o, c, k, _ = w.shape
    s, p = a["stride"], a["pad"]
    n = x.shape[0]
    ho, wo = _out_hw(x.shape[2], x.shape[3], k, s, p)
    w2 = w.reshape(o, c * k * k)
    y = xp.empty((n, o, ho, wo), dtype=x.dtype) if out is None else out
    if k == 1 and p == 0 and s > 1:          # a strided 1x1: the subsampled input is the columns
        x, s = xp.ascontiguousarray(x[:, :, ::s, ::s]), 1
    if _pixel_major(c, o, k, wo, n * ho * wo):   # weight rows in the columns' (i, j, channel) order
        wmat = xp.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(o, k * k * c)
        return _pm_conv(xp, x, wmat.T, k, s, p, _workspace(a), y)
    merged = _merged(ho, wo, k)
    for n0, n1, r0, r1, cols in _im2col_tiles(xp, x, k, s, p, _workspace(a)):
        nb, rows = n1 - n0, r1 - r0
        if merged:
            y[n0:n1, :, r0:r1] = xp.matmul(w2, cols).reshape(o, nb, rows, wo).transpose(1, 0, 2, 3)
        elif k == 1 and rows == ho:          # a 1x1's columns are its input: straight into y
            xp.matmul(w2, cols, out=y[n0:n1].reshape(nb, o, ho * wo))
        else:                                # pixel-major product, then one transposing copy
            t = xp.matmul(cols.transpose(0, 2, 1), w2.T)
            y[n0:n1, :, r0:r1] = t.transpose(0, 2, 1).reshape(nb, o, rows, wo)
            del t                            # not beside the next tile's
    return y


def _conv_fwd_temp(x, wt, s, p, e, cap, out_given) -> int:
    n, c, h, w = x
    o, _, k, _ = wt
    ho, wo = _out_hw(h, w, k, s, p)
    result = 0 if out_given else n * o * ho * wo * e
    if k == 1 and p == 0:                # no columns (a strided 1x1: its subsampled copy)
        return result + (n * c * ho * wo * e if s > 1 else 0)
    if _pixel_major(c, o, k, wo, n * ho * wo):   # the reordered weight, slab, columns, a product
        return result + o * c * k * k * e + sum(_pm_temp(x, o, k, s, p, e, cap,
                                                         _row_taps(s, ho, wo)))
    tiles = _conv_tiles(n, ho, wo, c * k * k, e, cap)
    n0, n1, r0, r1 = tiles[0]
    nb, rows = n1 - n0, r1 - r0
    ws = nb * c * k * k * rows * wo * e
    a, b = r0 * s - p, (r1 - 1) * s - p + k
    slab = 0 if p == 0 and a >= 0 and b <= h else nb * c * (b - a) * (w + 2 * p) * e
    tile_out = 0 if k == 1 and rows == ho and not _merged(ho, wo, k) else nb * o * rows * wo * e
    return result + ws + max(slab * min(len(tiles), 2), slab + tile_out)


def _conv_dx(xp, gy, w, xshape, s, p, cap, out=None):
    """Input gradient. Stride 1 with no more output than input channels (most layers), from
    :data:`DX_AMORTISE_PIXELS` pixels: a convolution of the output gradient, padded by
    ``k - 1 - p``, with the flipped, transposed kernel -- the forward's tiled GEMMs, copies
    instead of scattered adds. Otherwise (strided; widening, where that convolution's columns
    would outgrow the input's; small maps, where copying the kernel would not pay): tiled
    ``W^T @ g`` column gradients added back by :func:`col2im_add`. Where :func:`_pixel_major`
    says so, both through pixel-major columns (:func:`_pm_conv`, :func:`_pm_col2im`)."""
    n, c, h, wd = xshape
    o, _, k, _ = w.shape
    ho, wo = gy.shape[2], gy.shape[3]
    if _winograd(n, o, c, k, s, k - 1 - p, h, wd, gy.dtype.itemsize, cap):
        return winograd.forward(xp, gy, w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3), k - 1 - p, cap, out)
    if s == 1 and p <= k - 1 and o <= c and n * ho * wo >= DX_AMORTISE_PIXELS:
        if _pixel_major(o, c, k, wd, n * h * wd):   # the flipped kernel as (i, j, out) x in
            wmat = xp.ascontiguousarray(w[:, :, ::-1, ::-1].transpose(2, 3, 0, 1))
            y = xp.empty(xshape, dtype=gy.dtype) if out is None else out
            return _pm_conv(xp, gy, wmat.reshape(k * k * o, c), k, 1, k - 1 - p, cap, y)
        wt = swap01(xp, w.reshape(o, c, k * k)[:, :, ::-1]).reshape(c, o, k, k)
        return _conv_fwd(xp, [gy, wt], {"stride": 1, "pad": k - 1 - p, "workspace": cap}, out=out)
    if _pixel_major(c, o, k, wo, n * ho * wo):
        return _pm_col2im(xp, gy, w, xshape, s, p, cap, out)
    w2t = w.reshape(o, c * k * k).T
    if k == 1 and p == 0:
        dx = xp.zeros(xshape, dtype=gy.dtype)
        dx[:, :, ::s, ::s] = xp.matmul(w2t, gy.reshape(n, o, ho * wo)).reshape(n, c, ho, wo)
        return dx
    merged = _merged(ho, wo, k)
    dxpad = xp.zeros((n, c, h + 2 * p, wd + 2 * p), dtype=gy.dtype)
    for n0, n1, r0, r1 in _conv_tiles(n, ho, wo, c * k * k, gy.dtype.itemsize, cap):
        g = _tile_grad(gy, n0, n1, r0, r1, merged, pixel_major=False)
        col2im_add(xp, dxpad, xp.matmul(w2t, g), n0, n1, r0, k, s, r1 - r0, wo, merged)
    return dxpad[:, :, p:p + h, p:p + wd].copy() if p else dxpad


def _pm_col2im(xp, gy, w, xshape, s, p, cap, out=None):
    """Input gradient through pixel-major column gradients (strided or widening layers that
    :func:`_pixel_major` covers): per tile, the output gradient as ``(pixels, out)`` (one
    transposing copy) times the ``(out, k*k*c)`` weight in ``(i, j, channel)`` order, each
    tap's ``(pixels, c)`` slice added onto a pixel-major padded gradient -- inner loops of ``c``
    elements where :func:`col2im_add`'s run ``wo`` -- and one transposing copy back to NCHW."""
    n, c, h, wd = xshape
    o, _, k, _ = w.shape
    ho, wo = gy.shape[2], gy.shape[3]
    wmat = xp.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(o, k * k * c)
    dxpad = xp.zeros((n, h + 2 * p, wd + 2 * p, c), dtype=gy.dtype)
    for n0, n1, r0, r1 in _conv_tiles(n, ho, wo, c * k * k, gy.dtype.itemsize, cap):
        nb, rows = n1 - n0, r1 - r0
        g = xp.empty((nb, rows, wo, o), dtype=gy.dtype)
        g[...] = gy[n0:n1, :, r0:r1].transpose(0, 2, 3, 1)
        d6 = xp.matmul(g.reshape(nb * rows * wo, o), wmat).reshape(nb, rows, wo, k, k, c)
        del g
        for i in range(k):
            top = r0 * s + i
            for j in range(k):
                cols = slice(j, j + s * (wo - 1) + 1, s)
                dxpad[n0:n1, top:top + s * (rows - 1) + 1:s, cols] += d6[:, :, :, i, j]
        del d6
    dx = xp.empty(xshape, dtype=gy.dtype) if out is None else out
    dx[...] = dxpad[:, p:p + h, p:p + wd].transpose(0, 3, 1, 2)
    return dx


#: From this many output pixels (images x rows x columns) a convolution's backward amortises a
#: copy of its weight-sized matrices (the weight gradient's transpose, the flipped kernel of the
#: transposed convolution): below, products in the order that needs no copy (small maps, and a
#: row-centric step's bands, which call the backward once per band).
AMORTISE_PIXELS = 4096


#: The input gradient's transposed convolution pays for its flipped kernel's copy from fewer
#: pixels: in per-layer A/Bs here, 512-2,048-pixel layers (a CIFAR ResNet's 4x4-8x8 maps at
#: batch 32) ran faster than column scatters, a 98-pixel one (7x7, batch 2) slower.
DX_AMORTISE_PIXELS = 512


def _conv_dw(xp, gy, x, wshape, s, p, cap, out=None):
    """Weight gradient: the sum over tiles (and, per image, over images) of ``cols @ g^T``, a
    ``(c*k*k, out)`` matrix -- the orientation OpenBLAS runs fastest here -- transposed once at
    the end; on fewer than :data:`AMORTISE_PIXELS` pixels ``g @ cols^T`` straight in the
    ``(out, c*k*k)`` layout. Where :func:`_pixel_major` says so, :func:`_pm_conv_dw`."""
    o, c, k, _ = wshape
    n, _, ho, wo = gy.shape
    if _winograd(n, c, o, k, s, p, ho, wo, x.dtype.itemsize, cap, weight_grad=True):
        return winograd.weight_grad(xp, gy, x, p, cap, out)
    if k == 1 and p == 0 and s > 1:
        x, s = xp.ascontiguousarray(x[:, :, ::s, ::s]), 1
    if _pixel_major(c, o, k, wo, n * ho * wo):
        return _pm_conv_dw(xp, gy, x, wshape, s, p, cap, out)
    merged = _merged(ho, wo, k)
    direct = n * ho * wo < AMORTISE_PIXELS
    acc = None
    for n0, n1, r0, r1, cols in _im2col_tiles(xp, x, k, s, p, cap):
        g = _tile_grad(gy, n0, n1, r0, r1, merged, pixel_major=not direct)
        if merged:
            part = xp.matmul(g, cols.T) if direct else xp.matmul(cols, g)
        else:
            part = xp.matmul(g, cols.transpose(0, 2, 1)) if direct else \
                xp.matmul(cols, g.transpose(0, 2, 1))
            part = part.sum(axis=0) if part.shape[0] > 1 else part[0]
        acc = part if acc is None else xp.add(acc, part, out=acc)
    if direct:
        if out is None:
            return acc.reshape(wshape)
        out.reshape(o, -1)[...] = acc
        return out
    dw = swap01(xp, acc, out)
    return out if out is not None else dw.reshape(wshape)


def _pm_conv_dw(xp, gy, x, wshape, s, p, cap, out=None):
    """Weight gradient through pixel-major columns: the sum over tiles of ``g @ cols``, ``g``
    the tile's output gradient as ``(out, images*pixels)`` (a view for one image, else one copy
    of the tile's), a ``(out, k*k*c)`` matrix in the columns' ``(i, j, channel)`` order,
    reordered to ``(out, c, k, k)`` once at the end."""
    o, c, k, _ = wshape
    acc = None
    for n0, n1, r0, r1, cols in _pm_tiles(xp, x, k, s, p, cap):
        nb, rows = n1 - n0, r1 - r0
        g = gy[n0:n1, :, r0:r1]
        if nb == 1:
            g2 = g[0].reshape(o, rows * g.shape[3])
        else:
            g2 = xp.empty((o, nb, rows * g.shape[3]), dtype=gy.dtype)
            g2[...] = g.reshape(nb, o, rows * g.shape[3]).transpose(1, 0, 2)
            g2 = g2.reshape(o, -1)
        part = xp.matmul(g2, cols)
        del g2
        acc = part if acc is None else xp.add(acc, part, out=acc)
        del part
    dw = xp.empty(wshape, dtype=gy.dtype) if out is None else out.reshape(wshape)
    dw[...] = acc.reshape(o, k, k, c).transpose(0, 3, 1, 2)
    return out if out is not None else dw


def _conv_bwd(xp, gy, saved, y, a, in_shapes, want, out=None):
    x, w = saved.get(0), saved.get(1)
    s, p, cap = a["stride"], a["pad"], _workspace(a)
    into = out or {}
    grads = {}
    if 1 in want:
        grads[1] = _conv_dw(xp, gy, x, tuple(in_shapes[1]), s, p, cap, into.get(1))
    if 0 in want:
        grads[0] = _conv_dx(xp, gy, w, tuple(in_shapes[0]), s, p, cap, into.get(0))
    return grads


def _conv_dw_temp(x, wt, gy, s, p, e, cap, out_given) -> int:
    o, c, k, _ = wt
    n, _, ho, wo = gy
    if _winograd(n, c, o, k, s, p, ho, wo, e, cap, weight_grad=True):
        return winograd.weight_grad_temp_bytes(n, c, o, ho, wo, e, cap, out_given)
    wm = o * c * k * k * e
    sub = 0
    if k == 1 and p == 0 and s > 1:
        sub, s = n * c * ho * wo * e, 1
        x = (n, c, ho, wo)
    if _pixel_major(c, o, k, wo, n * ho * wo):
        # slab and columns, a tile's gradient copy (several images) and its part beside the
        # running sum; at the end the sum and its reordered copy
        work, _ = _pm_temp(x, o, k, s, p, e, cap)
        tiles = _conv_tiles(n, ho, wo, c * k * k, e, cap)
        n0, n1, r0, r1 = tiles[0]
        g = o * (n1 - n0) * (r1 - r0) * wo * e if n1 - n0 > 1 else 0
        loop = work + g + wm + (wm if len(tiles) > 1 else 0)
        return max(loop, wm + (0 if out_given else wm))
    merged = _merged(ho, wo, k)
    direct = n * ho * wo < AMORTISE_PIXELS
    if k == 1 and s == 1 and p == 0:
        tiles, ws, slab, g = [(0, n, 0, ho)], 0, 0, 0
    else:
        tiles = _conv_tiles(n, ho, wo, c * k * k, e, cap)
        n0, n1, r0, r1 = tiles[0]
        ws = (n1 - n0) * c * k * k * (r1 - r0) * wo * e
        a, b = r0 * s - p, (r1 - 1) * s - p + k
        slab = 0 if p == 0 and a >= 0 and b <= x[2] else (n1 - n0) * c * (b - a) * (x[3] + 2 * p) * e
        g = (n1 - n0) * (r1 - r0) * wo * o * e if merged else 0
    nb = tiles[0][1] - tiles[0][0]
    part = wm if merged else nb * wm + (wm if nb > 1 else 0)
    if len(tiles) == 1:
        loop = sub + ws + slab + g + part
    else:   # a new slab / tile gradient made while the last is bound; the running sum (and,
        # from the third tile, the last tile's part) beside them
        held = wm * (2 if len(tiles) > 2 else 1)
        loop = sub + ws + held + max(2 * slab + g, slab + 2 * g, slab + g + part)
    end = sub + wm + (0 if direct or out_given else wm)      # the sum, and its transposed copy
    return max(loop, end)


def _conv_dx_temp(x, wt, gy, s, p, e, cap, out_given) -> int:
    n, c, h, w = x
    o, _, k, _ = wt
    _, _, ho, wo = gy
    xs = n * c * h * w * e
    if _winograd(n, o, c, k, s, k - 1 - p, h, w, e, cap):
        return winograd.forward_temp_bytes(n, o, c, h, w, e, cap, out_given)
    if s == 1 and p <= k - 1 and o <= c and n * ho * wo >= DX_AMORTISE_PIXELS:
        if _pixel_major(o, c, k, w, n * h * w):   # the flipped kernel, then the pixel-major work
            return (o * c * k * k * e + (0 if out_given else xs)
                    + sum(_pm_temp(gy, c, k, 1, k - 1 - p, e, cap, _row_taps(1, h, w))))
        return o * c * k * k * e + _conv_fwd_temp(gy, (c, o, k, k), 1, k - 1 - p, e, cap, out_given)
    if k == 1 and p == 0:
        return xs + n * c * ho * wo * e
    pad = n * c * (h + 2 * p) * (w + 2 * p) * e
    if _pixel_major(c, o, k, wo, n * ho * wo):   # the reordered weight, the padded gradient, a
        n0, n1, r0, r1 = _conv_tiles(n, ho, wo, c * k * k, e, cap)[0]   # tile's g and columns
        pix = (n1 - n0) * (r1 - r0) * wo
        adds = _bufs(3, (n1 - n0, r1 - r0, wo, c), e)             # the taps' strided adds
        return (o * c * k * k * e + pad + max(pix * o * e + pix * k * k * c * e + adds,
                                              0 if out_given else xs))
    n0, n1, r0, r1 = _conv_tiles(n, ho, wo, c * k * k, e, cap)[0]
    cols = (n1 - n0) * c * k * k * (r1 - r0) * wo * e
    g = (n1 - n0) * o * (r1 - r0) * wo * e if _merged(ho, wo, k) else 0
    adds = _bufs(3, ((n1 - n0), c, r1 - r0, wo), e)           # col2im's strided adds
    return pad + max(2 * g, g + cols + adds, g + (xs if p else 0))


def _conv_bwd_temp(x, wt, gy, a, e, want, into) -> int:
    s, p, cap = a["stride"], a["pad"], _workspace(a)
    dw = _conv_dw_temp(x, wt, gy, s, p, e, cap, 1 in into) if 1 in want else 0
    held = 0 if 1 in into or 1 not in want else _nb(wt, e)
    dx = _conv_dx_temp(x, wt, gy, s, p, e, cap, 0 in into) if 0 in want else 0
    return max(dw, held + dx)


def _conv_fwd_call_temp(c: KernelCall) -> int:
    a = c.attrs
    return _conv_fwd_temp(c.ins[0], c.ins[1], a["stride"], a["pad"], c.e, _workspace(a),
                          -1 in c.into)


def _conv_bwd_call_temp(c: KernelCall) -> int:
    return _conv_bwd_temp(c.ins[0], c.ins[1], c.out, c.attrs, c.e, c.want, c.into)


DEFS = [
    OpDef("conv2d", "Convolution2DFunction", _conv_infer, _fl_conv, _conv_fwd, _conv_bwd,
          saves_inputs=(0, 1), fills_out=True, fills_grads=True,
          forward_temp=_conv_fwd_call_temp, backward_temp=_conv_bwd_call_temp),
]
