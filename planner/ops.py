"""The op table: each operator's shape rule, FLOPs, forward kernel and hand-written VJP.

It sits below :mod:`planner.rows` (row geometry, FLOPs of a row plan) and
:mod:`planner.execute` (tracer, exporter, executors), which both read it and never each
other for it.

Every kernel is written against an array module ``xp`` (NumPy or CuPy), so the same code runs on
both. An op's backward reads only what its :class:`OpDef` says it saves (``saves_inputs``,
``saves_output``): the exported cg.txt tags exactly those as ``input`` / ``output``, so a planner
that keeps those values alive can always run the backward block.

All kernels are deterministic (fixed loop and reduction orders; tiles fixed by the shapes), which
is what makes gradients of a recomputation schedule bitwise identical to the plain run's.

Speed (issue 26; ``bench/kernels_bench.py`` against PyTorch eager): every product goes through
the backend's BLAS (``matmul`` on contiguous or singly transposed operands); convolution is
im2col + GEMM in tiles whose columns stay within :data:`CONV_WORKSPACE_BYTES` (pixel-major
columns on small maps, :func:`_pixel_major`), its stride-1 input gradient a transposed
convolution; per-channel statistics are matrix-vector products with ones; elementwise chains run in place in one temporary; kernels with ``fills_out`` /
``fills_grads`` write into the caller's buffer. No per-element Python anywhere.

>>> import numpy as np
>>> x = np.array([[-1.0, 2.0]], dtype=np.float32)
>>> OPS["relu"].forward(np, [x], {})
array([[0., 2.]], dtype=float32)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from planner import winograd
from planner.arrays import as_strided as _as_strided


@dataclasses.dataclass(frozen=True)
class OpDef:
    name: str                 # tracer / details name
    type: str                 # cg.txt FunctionType (Chainer's class names where they exist)
    infer: Callable           # (in_shapes, in_dtypes, attrs) -> (shape, dtype)
    flops: Callable           # (in_shapes, out_shape, attrs) -> forward FLOPs
    forward: Callable         # (xp, xs, attrs) -> y
    backward: Callable        # (xp, gy, saved, y, attrs, in_shapes, want) -> {pos: grad}; a grad
                              # may be a view of gy (callers copy or add it into their buffers)
    saves_inputs: tuple = ()  # input positions the backward reads
    saves_output: bool = False
    fills_out: bool = False   # forward takes ``out=`` (an array of the result's shape and dtype,
                              # not aliasing an input) and writes the result there
    fills_grads: bool = False  # backward takes ``out={pos: array}`` likewise for (some of) the
                              # gradients it returns (it returns those arrays)


def _numel(shape) -> int:
    return int(math.prod(shape))


# ---------------------------------------------------------------- elementwise and linear
def _matmul_infer(s, d, a):
    x, w = s
    if len(w) != 2 or x[-1] != w[0]:
        raise ValueError(f"matmul: shapes {x} and {w} do not chain")
    return tuple(x[:-1]) + (w[1],), d[0]


def _rows_times(xp, x, m, out=None):
    """``x @ m`` with ``x``'s leading axes as one: a single GEMM of all the rows (NumPy runs a
    stacked ``matmul`` as one GEMM per leading index, slower on a transformer's (batch, seq,
    width) activations: bench/NOTES_kernels.md), where ``x`` and ``out`` are C-contiguous
    (their 2-D views are then views); else the stacked product."""
    if x.ndim <= 2 or not x.flags.c_contiguous or (out is not None and not out.flags.c_contiguous):
        return xp.matmul(x, m, out=out)
    y = xp.matmul(x.reshape(-1, x.shape[-1]), m,
                  out=None if out is None else out.reshape(-1, m.shape[-1]))
    return y.reshape(x.shape[:-1] + (m.shape[-1],)) if out is None else out


def _matmul_bwd(xp, gy, saved, y, a, in_shapes, want, out=None):
    x, w = saved.get(0), saved.get(1)
    into = out or {}
    grads = {}
    if 0 in want:
        grads[0] = _times_transposed(xp, gy, w, into.get(0))
    if 1 in want:
        k, n = in_shapes[1]
        grads[1] = xp.matmul(x.reshape(-1, k).T, gy.reshape(-1, n), out=into.get(1))
    return grads


def _times_transposed(xp, g, w, out=None):
    """``g @ w.T`` (a matmul's input gradient), ``w`` read transposed in place by BLAS (a copy of
    the weight first cost more than it saved: ``bench/kernels_ab.py mlp --base 5ded723`` with the
    issue's mlp sizes, bench/NOTES_kernels.md); with a handful of rows (a
    classifier at batch 2) the product is ``w @ g.T``, a matrix-vector-like GEMM on ``w`` as
    stored."""
    rows = g.size // g.shape[-1]
    if rows > 8:
        return _rows_times(xp, g, w.T, out)
    y = xp.matmul(w, g.reshape(rows, g.shape[-1]).T).T.reshape(g.shape[:-1] + (w.shape[0],))
    if out is None:
        return xp.ascontiguousarray(y)
    out[...] = y
    return out


def _relu_bwd(xp, gy, saved, y, a, in_shapes, want, out=None):
    """``gy * (y > 0)``: the comparison written as 0.0 / 1.0 into the result, then multiplied in
    place (no boolean mask beside it, one pass fewer), the same bits."""
    dx = (out or {}).get(0)
    dx = xp.empty(gy.shape, dtype=gy.dtype) if dx is None else dx
    xp.greater(y, 0, out=dx)
    dx *= gy
    return {0: dx}


def _same_infer(s, d, a):
    return tuple(s[0]), d[0]


def _add_infer(s, d, a):
    if tuple(s[0]) != tuple(s[1]):
        raise ValueError(f"add: shapes {s[0]} and {s[1]} differ")
    return tuple(s[0]), d[0]


def _bias_shape(xshape, axis):
    shape = [1] * len(xshape)
    shape[axis] = xshape[axis]
    return tuple(shape)


def _bias_infer(s, d, a):
    axis = a["axis"] % len(s[0])
    if tuple(s[1]) != (s[0][axis],):
        raise ValueError(f"bias: {s[1]} does not match axis {axis} of {s[0]}")
    return tuple(s[0]), d[0]


def _bias_fwd(xp, xs, a, out=None):
    x, b = xs
    return xp.add(x, b.reshape(_bias_shape(x.shape, a["axis"] % x.ndim)), out=out)


def _bias_bwd(xp, gy, saved, y, a, in_shapes, want):
    out = {}
    if 0 in want:
        out[0] = gy
    if 1 in want:
        axis = a["axis"] % gy.ndim
        out[1] = sums(xp, gy, tuple(i for i in range(gy.ndim) if i != axis), keepdims=False)
    return out


_GELU_C = np.float32(math.sqrt(2.0 / math.pi))
_GELU_A = np.float32(0.044715)

#: Elementwise chains of many passes (GELU and its VJP) run over blocks of this many bytes of
#: their input, so that every pass reads and writes a core's L2 cache instead of streaming the
#: whole array (16 MiB: a transformer's MLP at batch 4, seq 512, width 2048) through memory each
#: time (bench/NOTES_kernels.md, "Attention and GELU in cache-sized blocks").
ELEMENTWISE_BLOCK_BYTES = 256 << 10


def _elementwise_blocks(*arrays):
    """(the arrays as flat views, elements in the largest block, the blocks as slices, a
    generator): cache-sized (:data:`ELEMENTWISE_BLOCK_BYTES`) when every array is C-contiguous,
    else the arrays themselves in one block (a flat view of a strided array would be a copy)."""
    n = arrays[0].size
    if not all(a.flags.c_contiguous for a in arrays):
        return list(arrays), n, iter([Ellipsis])
    step = max(1, _elementwise_block(n, arrays[0].dtype.itemsize))
    return ([a.reshape(-1) for a in arrays], step,
            (slice(i, min(n, i + step)) for i in range(0, n, step)))


def _elementwise_block(n, itemsize) -> int:
    """Elements in the largest of :func:`_elementwise_blocks`' blocks over ``n`` contiguous
    elements."""
    return min(n, max(1, ELEMENTWISE_BLOCK_BYTES // itemsize))


def _gelu_tanh(xp, x, out, x2=None):
    """``tanh(c * (x + a x^3))`` into ``out`` (in-place steps: each a pass over ``x``'s size);
    ``x2``: ``x * x`` where the caller has it."""
    t = xp.multiply(x, x, out=out) if x2 is None else xp.multiply(x2, _GELU_A, out=out)
    if x2 is None:
        t *= _GELU_A
    t += np.float32(1)
    t *= x
    t *= _GELU_C
    return xp.tanh(t, out=t)


def _gelu_fwd(xp, xs, a, out=None):
    """``0.5 x (1 + t)``, ``t`` = :func:`_gelu_tanh`, block by block in the output's own
    memory (:func:`_elementwise_blocks`)."""
    x = xs[0]
    y = xp.empty(x.shape, dtype=x.dtype) if out is None else out
    (xf, yf), _, blocks = _elementwise_blocks(x, y)
    for i in blocks:
        yb = _gelu_tanh(xp, xf[i], yf[i])
        yb += np.float32(1)
        yb *= xf[i]
        yb *= np.float32(0.5)
    return y


def _gelu_bwd(xp, gy, saved, y, a, in_shapes, want, out=None):
    """``gy * (0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2))`` with ``t`` the forward's tanh,
    factored as ``gy (1 + t) (0.5 + x (0.5 c + 1.5 a c x^2) (1 - t))`` (``1 - t^2 = (1 - t)
    (1 + t)``: 13 passes instead of 18), block by block through two block-sized scratch arrays.
    The constants are the float32 ones the formula always used, multiplied in ``x``'s dtype."""
    x = saved[0]
    into = (out or {}).get(0)
    dx = xp.empty(x.shape, dtype=x.dtype) if into is None else into
    (xf, gf, df), n, blocks = _elementwise_blocks(x, gy, dx)
    f = x.dtype.type
    c0, c2 = f(0.5) * f(_GELU_C), f(0.5) * f(np.float32(3) * _GELU_A) * f(_GELU_C)
    ubuf, tbuf = xp.empty(n, dtype=x.dtype), xp.empty(n, dtype=x.dtype)
    for i in blocks:
        xb = xf[i]
        u = xp.multiply(xb, xb, out=ubuf[:xb.size].reshape(xb.shape))
        t = _gelu_tanh(xp, xb, tbuf[:xb.size].reshape(xb.shape), u)
        u *= c2
        u += c0
        u *= xb
        xp.subtract(f(1), t, out=t)                    # 1 - t
        u *= t
        u += f(0.5)
        xp.subtract(f(2), t, out=t)                    # 1 + t
        u *= t
        xp.multiply(u, gf[i], out=df[i])
    return {0: dx}


# ---------------------------------------------------------------- convolution and pooling
def _out_hw(h, w, k, s, p):
    return (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1


def _conv_infer(s, d, a):
    (n, c, h, w), (o, c2, kh, kw) = s
    if c != c2 or kh != kw:
        raise ValueError(f"conv2d: input {s[0]} and weight {s[1]} do not match")
    ho, wo = _out_hw(h, w, kh, a["stride"], a["pad"])
    if ho < 1 or wo < 1:
        raise ValueError(f"conv2d: input {s[0]} too small for kernel {kh}")
    return (n, o, ho, wo), d[0]


def pad_map(xp, x, top, bottom, side, fill=0.0):
    """``x`` (N, C, H, W) with ``top`` / ``bottom`` rows and ``side`` columns each side of
    ``fill`` around it: one copy of ``x`` and writes of the border only (``xp.pad`` is several
    times slower on small maps; row-centric steps pad every band)."""
    n, c, h, w = x.shape
    out = xp.empty((n, c, h + top + bottom, w + 2 * side), dtype=x.dtype)
    out[:, :, :top] = fill
    out[:, :, top + h:] = fill
    out[:, :, top:top + h, :side] = fill
    out[:, :, top:top + h, side + w:] = fill
    out[:, :, top:top + h, side:side + w] = x
    return out


def _pad(xp, x, p, fill=0.0):
    return x if p == 0 else pad_map(xp, x, p, p, p, fill)


def _window(xpad, i, j, s, ho, wo):
    return xpad[:, :, i:i + s * (ho - 1) + 1:s, j:j + s * (wo - 1) + 1:s]


#: Cap on a convolution kernel's workspace: the im2col columns of one tile (a group of images,
#: or a band of output rows of one image when a single image's columns exceed it). The kernels
#: allocate at most this (plus one padded input slab per tile) beyond their inputs and results,
#: whatever the layer's size; :func:`conv_workspace_bytes` says how much a layer takes, for a plan
#: that counts kernel temporaries. ``attrs["workspace"]`` overrides it for one op.
CONV_WORKSPACE_BYTES = 32 << 20


#: Output pixels a convolution tile aims at: as many images as make up this many pixels, or a
#: band of rows of one image. A tile's columns then stay in the core's cache from their copy to
#: the GEMM that reads them (2,304 B a pixel at 64 channels, 3x3: ~2 MiB), and its GEMMs keep
#: BLAS's speed (whole 32 MiB tiles ran slower at 32-224 px maps in A/Bs here;
#: ``bench/kernels_ab.py`` measures a model's step either way).
TILE_PIXELS = 1024


def _conv_tiles(n, ho, wo, k_cols, itemsize, cap):
    """``(n0, n1, r0, r1)`` tiles of a convolution's output: images ``[n0, n1)``, rows
    ``[r0, r1)``, each tile's im2col columns (``k_cols`` per output pixel) within ``cap`` bytes
    (a single output row is the smallest tile) and about :data:`TILE_PIXELS` output pixels.
    Fixed by the shapes alone, so a step's reduction order, and its gradients, do not depend on
    anything else."""
    per_row = max(1, k_cols * wo * itemsize)
    if per_row * ho <= cap and ho * wo <= TILE_PIXELS:
        return _Tiles(n, ho, max(1, min(cap // (per_row * ho), TILE_PIXELS // (ho * wo))), False)
    return _Tiles(n, ho, max(1, min(cap // per_row, -(-TILE_PIXELS // wo))), True)


class _Tiles:
    """The tiles of :func:`_conv_tiles`, made one at a time (a list of a large layer's hundreds of
    band tuples would be memory no plan counts): ``step`` images a tile, or, with ``bands``,
    ``step`` rows of one image."""

    __slots__ = ("n", "ho", "step", "bands")

    def __init__(self, n, ho, step, bands):
        self.n, self.ho, self.step, self.bands = n, ho, step, bands

    def __len__(self):
        return self.n * -(-self.ho // self.step) if self.bands else -(-self.n // self.step)

    def __iter__(self):
        n, ho, step = self.n, self.ho, self.step
        if self.bands:
            for i in range(n):
                for r in range(0, ho, step):
                    yield i, i + 1, r, min(ho, r + step)
        else:
            for a in range(0, n, step):
                yield a, min(n, a + step), 0, ho

    def __getitem__(self, i):
        if i != 0:
            raise IndexError("only the first tile is indexed; iterate for the others")
        return next(iter(self))


def conv_workspace_bytes(in_shape, w_shape, attrs, itemsize=4, cap=None) -> int:
    """Bytes of the largest im2col tile the convolution kernels allocate for this layer
    (forward and weight gradient; the input gradient's tile has ``out_channels / in_channels``
    times as many columns). 0 for a 1x1, stride-1, unpadded convolution (no columns); a strided
    1x1 copies its subsampled input instead (not tiled)."""
    n, c, h, w = in_shape
    k, s, p = w_shape[2], attrs["stride"], attrs["pad"]
    ho, wo = _out_hw(h, w, k, s, p)
    if k == 1 and p == 0:
        return 0 if s == 1 else n * c * ho * wo * itemsize
    cap = attrs.get("workspace", CONV_WORKSPACE_BYTES) if cap is None else cap
    n0, n1, r0, r1 = _conv_tiles(n, ho, wo, c * k * k, itemsize, cap)[0]
    return (n1 - n0) * c * k * k * (r1 - r0) * wo * itemsize


def _slab(xp, x, n0, n1, a, b, p):
    """Input rows ``[a, b)`` of images ``[n0, n1)`` (``a`` may be negative, ``b`` past the end),
    zero-padded where they leave the map and by ``p`` columns each side: a view when nothing is
    padded, else a copy of the slab only (never of the whole input)."""
    h = x.shape[2]
    if p == 0 and a >= 0 and b <= h:
        return x[n0:n1, :, a:b]
    slab = xp.zeros((n1 - n0, x.shape[1], b - a, x.shape[3] + 2 * p), dtype=x.dtype)
    ra, rb = max(a, 0), min(b, h)
    slab[:, :, ra - a:rb - a, p:p + x.shape[3]] = x[n0:n1, :, ra:rb]
    return slab


#: Below this many output pixels per image, a tile's images share one GEMM (columns laid out
#: ``(c*k*k, images*pixels)``): per-image GEMMs of small maps run below BLAS speed (measured
#: here: 8x8 maps gain, 16x16 lose, from the transposing copies the merged layout needs).
MERGE_PIXELS = 256


def _merged(ho, wo, k) -> bool:
    """Whether a ``k x k`` convolution with ``ho x wo`` output maps uses the merged column
    layout (never a 1x1: its per-image columns are the input itself, no copy)."""
    return k > 1 and ho * wo < MERGE_PIXELS


def merged_columns(x, k, s, out):
    """The windows of an unpadded ``x`` (``(N, C, H, W)``, any strides) as channel-major,
    images-merged columns, ``(C*k*k, N*Ho*Wo)``, copied into ``out`` (that many elements) in
    one strided copy (NumPy or CuPy): the layout of a merged tile (:func:`_im2col_tiles`) and of
    the row executor's band convolutions (:mod:`planner.band_kernels`)."""
    n, c, h, w = x.shape
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    sn, sc, sh, sw = x.strides
    out.reshape(c, k, k, n, ho, wo)[...] = _as_strided(x, (c, k, k, n, ho, wo),
                                                       (sc, sh, sw, sn, sh * s, sw * s))
    return out.reshape(c * k * k, n * ho * wo)


def _im2col_tiles(xp, x, k, s, p, cap):
    """Yield ``(n0, n1, r0, r1, cols)`` over :func:`_conv_tiles`: ``cols`` holds the input
    windows of output rows ``[r0, r1)`` of images ``[n0, n1)``, ``(images, c*k*k, rows*wo)``,
    or ``(c*k*k, images*rows*wo)`` when :func:`_merged`; one workspace serves every tile (each
    tile is consumed before the next is built). A 1x1, stride-1, unpadded convolution needs no
    columns in the per-image layout: ``cols`` is then a view of ``x``."""
    n, c, h, w = x.shape
    ho, wo = _out_hw(h, w, k, s, p)
    merged = _merged(ho, wo, k)
    if k == 1 and s == 1 and p == 0:
        yield 0, n, 0, ho, x.reshape(n, c, h * w)
        return
    tiles = _conv_tiles(n, ho, wo, c * k * k, x.dtype.itemsize, cap)
    n0, n1, r0, r1 = tiles[0]
    ws = xp.empty((n1 - n0) * c * k * k * (r1 - r0) * wo, dtype=x.dtype)
    for n0, n1, r0, r1 in tiles:
        nb, rows = n1 - n0, r1 - r0
        slab = _slab(xp, x, n0, n1, r0 * s - p, (r1 - 1) * s - p + k, p)
        sn, sc, sh, sw = slab.strides
        size = nb * c * k * k * rows * wo
        if merged:
            yield n0, n1, r0, r1, merged_columns(slab, k, s, ws[:size])
        else:
            windows = _as_strided(slab, (nb, c, k, k, rows, wo), (sn, sc, sh, sw, sh * s, sw * s))
            ws[:size].reshape(nb, c, k, k, rows, wo)[...] = windows
            yield n0, n1, r0, r1, ws[:size].reshape(nb, c * k * k, rows * wo)


#: Convolutions whose output maps are at most this wide, on at least
#: :data:`PIXEL_MAJOR_MIN_CHANNELS` input channels, take their columns pixel-major (below).
#: The channel-major columns' copy runs one inner loop per output row of each channel and tap
#: (``wo`` elements: 4-16 on a CIFAR ResNet's maps), which NumPy's per-loop overhead dominates;
#: the pixel-major copy runs ``k * channels`` contiguous elements a loop. On wider maps the two
#: copies cost about the same (``bench/kernels_ab.py`` measures a model's step either way).
PIXEL_MAJOR_MAX_WIDTH = 32
PIXEL_MAJOR_MIN_CHANNELS = 16
#: ... and with at least this many output pixels (images x rows x columns) per output channel:
#: the pixel-major kernels reorder the weight on every call (``(out, k, k, c)``), which a
#: row-centric step's bands of a few pixels at batch 1-2 do not amortise (slower than the
#: channel-major kernels there in per-layer A/Bs, not kept).
PIXEL_MAJOR_PIXELS_PER_OUT = 2


def _pixel_major(c, o, k, wo, pixels) -> bool:
    """Whether a ``k x k`` convolution from ``c`` to ``o`` channels with ``wo``-wide output
    maps, ``pixels`` output pixels in all, takes its columns pixel-major (:func:`_pm_tiles`)."""
    return (k > 1 and c >= PIXEL_MAJOR_MIN_CHANNELS and wo <= PIXEL_MAJOR_MAX_WIDTH
            and pixels >= PIXEL_MAJOR_PIXELS_PER_OUT * o)


def pixel_major_slab(xp, x, n0, n1, a, b, p, buf):
    """Input rows ``[a, b)`` of images ``[n0, n1)`` pixel-major, ``(images, rows, columns +
    2p, channels)``, in ``buf`` (one buffer serves every tile): zeros where the rows leave the
    map and in the ``p`` columns each side, one transposing copy of the rows inside."""
    n, c, h, w = x.shape
    nb, wp = n1 - n0, w + 2 * p
    slab = buf[:nb * (b - a) * wp * c].reshape(nb, b - a, wp, c)
    ra, rb = max(a, 0), max(min(b, h), max(a, 0))
    if ra > a:
        slab[:, :ra - a] = 0
    if rb < b:
        slab[:, rb - a:] = 0
    if p:
        slab[:, ra - a:rb - a, :p] = 0
        slab[:, ra - a:rb - a, p + w:] = 0
    slab[:, ra - a:rb - a, p:p + w] = x[n0:n1, :, ra:rb].transpose(0, 2, 3, 1)
    return slab


#: Stride-1 convolutions with pixel-major columns whose output maps have at least this many
#: pixels copy only one kernel row's taps into their columns (``k * c`` a pixel, a third of the
#: copy at 3x3) and sum ``k`` GEMMs over row-shifted slices of them: per image, output row ``r``'s
#: taps of kernel row ``i`` are the columns of input row ``r + i``. On smaller maps the k
#: products of a few dozen rows each run below one product's speed.
ROW_TAPS_PIXELS = 256


def _row_taps(s, ho, wo) -> bool:
    """Whether :func:`_pm_conv` takes one kernel row's taps a column (:data:`ROW_TAPS_PIXELS`)."""
    return s == 1 and ho * wo >= ROW_TAPS_PIXELS


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


def _pm_tiles(xp, x, k, s, p, cap, row_taps=False):
    """Yield ``(n0, n1, r0, r1, cols)`` over :func:`_conv_tiles` (the same tiles as
    :func:`_im2col_tiles`): ``cols`` ``(images*rows*wo, k*k*c)``, one output pixel a row, its
    taps in ``(i, j, channel)`` order -- so that a pixel's ``j`` taps of a kernel row are ``k *
    c`` contiguous elements of the pixel-major slab, copied in one inner loop. With
    ``row_taps`` (stride 1), ``(images, (rows + k - 1) * wo, k*c)``: the ``j`` taps of every
    input row the tile reads (:data:`ROW_TAPS_PIXELS`). One slab buffer and one column workspace
    serve every tile."""
    n, c, h, w = x.shape
    ho, wo = _out_hw(h, w, k, s, p)
    tiles = _conv_tiles(n, ho, wo, c * k * k, x.dtype.itemsize, cap)
    n0, n1, r0, r1 = tiles[0]
    wp = w + 2 * p
    rows_in = (r1 - r0 - 1) * s + k
    per_row = (rows_in if row_taps else (r1 - r0) * k) * wo * k * c
    ws = xp.empty((n1 - n0) * per_row, dtype=x.dtype)
    buf = xp.empty((n1 - n0) * rows_in * wp * c, dtype=x.dtype)
    e = x.dtype.itemsize
    for n0, n1, r0, r1 in tiles:
        nb, rows = n1 - n0, r1 - r0
        a, b = r0 * s - p, (r1 - 1) * s - p + k
        slab = pixel_major_slab(xp, x, n0, n1, a, b, p, buf)
        if row_taps:
            windows = _as_strided(slab, (nb, b - a, wo, k * c),
                                  ((b - a) * wp * c * e, wp * c * e, c * e, e))
            size = nb * (b - a) * wo * k * c
            ws[:size].reshape(nb, b - a, wo, k * c)[...] = windows
            yield n0, n1, r0, r1, ws[:size].reshape(nb, (b - a) * wo, k * c)
            continue
        strides = ((b - a) * wp * c * e, s * wp * c * e, s * c * e, wp * c * e, c * e, e)
        windows = _as_strided(slab, (nb, rows, wo, k, k, c), strides)
        size = nb * rows * wo * k * k * c
        ws[:size].reshape(nb, rows, wo, k, k, c)[...] = windows
        yield n0, n1, r0, r1, ws[:size].reshape(nb * rows * wo, k * k * c)


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


def col2im_add(xp, dxpad, dcols, n0, n1, r0, k, s, ho_t, wo, merged):
    """Add a tile's column gradients (the layout of :func:`_im2col_tiles`) back onto the padded
    input gradient at the windows they came from (one strided add per kernel tap)."""
    nb, c = n1 - n0, dxpad.shape[1]
    if merged:
        d6 = dcols.reshape(c, k, k, nb, ho_t, wo).transpose(3, 0, 1, 2, 4, 5)
    else:
        d6 = dcols.reshape(nb, c, k, k, ho_t, wo)
    for i in range(k):
        for j in range(k):
            top = r0 * s + i
            dxpad[n0:n1, :, top:top + s * (ho_t - 1) + 1:s, j:j + s * (wo - 1) + 1:s] += d6[:, :, i, j]


def swap01(xp, a, out=None):
    """``a`` with its first two axes swapped, as a contiguous copy made block by block (64 or 32
    rows of ``a`` at a time): NumPy's one-call copy of a large transposed matrix runs ~5-10x
    slower (no cache blocking; a 512x4608 weight gradient: ~38 ms against ~4 ms here)."""
    shape = (a.shape[1], a.shape[0]) + tuple(a.shape[2:])
    out = xp.empty(shape, dtype=a.dtype) if out is None else out.reshape(shape)
    block = 64 if a[0].nbytes <= 4096 else 32
    for i in range(0, a.shape[0], block):
        out[:, i:i + block] = a[i:i + block].swapaxes(0, 1)
    return out


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


def _pool_infer(s, d, a):
    n, c, h, w = s[0]
    ho, wo = _out_hw(h, w, a["kernel"], a["stride"], a.get("pad", 0))
    if ho < 1 or wo < 1:
        raise ValueError(f"pooling: input {s[0]} too small for kernel {a['kernel']}")
    return (n, c, ho, wo), d[0]


def _maxpool_fwd(xp, xs, a, out=None):
    x = xs[0]
    k, s, p = a["kernel"], a["stride"], a.get("pad", 0)
    ho, wo = _out_hw(x.shape[2], x.shape[3], k, s, p)
    xpad = _pad(xp, x, p, fill=-np.inf)
    if out is None:
        y = _window(xpad, 0, 0, s, ho, wo).copy()
    else:
        y = out
        y[...] = _window(xpad, 0, 0, s, ho, wo)
    for i in range(k):
        for j in range(k):
            if i or j:
                xp.maximum(y, _window(xpad, i, j, s, ho, wo), out=y)
    return y


def _maxpool_bwd(xp, gy, saved, y, a, in_shapes, want, out=None):
    x = saved[0]
    k, s, p = a["kernel"], a["stride"], a.get("pad", 0)
    n, c, h, w = in_shapes[0]
    ho, wo = gy.shape[2], gy.shape[3]
    xpad = _pad(xp, x, p, fill=-np.inf)
    into = (out or {}).get(0) if p == 0 else None
    # windows that tile the map exactly (stride = kernel, no padding, no rows or columns left
    # over) write every input element once: no zero fill
    tiled = s == k and p == 0 and h == ho * k and w == wo * k
    if into is not None and not tiled:
        into[...] = 0
    if into is None:
        shape = (n, c, h + 2 * p, w + 2 * p)
        dxpad = xp.empty(shape, dtype=gy.dtype) if tiled else xp.zeros(shape, dtype=gy.dtype)
    else:
        dxpad = into
    left = xp.empty(gy.shape, dtype=bool)      # windows whose maximum is not yet found
    hit = xp.empty(gy.shape, dtype=bool)
    last = k * k - 1
    for t in range(k * k):      # the first maximum of each window gets the gradient
        i, j = divmod(t, k)
        if t == 0:
            xp.equal(_window(xpad, i, j, s, ho, wo), y, out=hit)
            xp.logical_not(hit, out=left)
        elif t < last:
            xp.equal(_window(xpad, i, j, s, ho, wo), y, out=hit)
            hit &= left
            left ^= hit
        else:                   # the last tap holds the maximum of every window left
            xp.equal(_window(xpad, i, j, s, ho, wo), y, out=hit)
            hit &= left
        target = _window(dxpad, i, j, s, ho, wo)
        if s >= k:              # disjoint windows: each input element is written once
            xp.multiply(gy, hit, out=target)
        else:
            target += gy * hit
    return {0: dxpad[:, :, p:p + h, p:p + w].copy() if p else dxpad}


def _avgpool_fwd(xp, xs, a):
    x = xs[0]
    k, s = a["kernel"], a["stride"]
    if x.shape[2] == k and x.shape[3] == k:        # a global pool: one contiguous reduction per map
        n, c = x.shape[:2]
        return (x.reshape(n, c, k * k).sum(axis=2) * np.float32(1.0 / (k * k))).reshape(n, c, 1, 1)
    ho, wo = _out_hw(x.shape[2], x.shape[3], k, s, 0)
    y = _window(x, 0, 0, s, ho, wo).copy()
    for i in range(k):
        for j in range(k):
            if i or j:
                y += _window(x, i, j, s, ho, wo)
    y *= np.float32(1.0 / (k * k))
    return y


def _taps(x, k, s, ho, wo):
    """``(n, c, ho, wo, k, k)`` view of the ``k x k`` windows of ``x`` at stride ``s`` (writable
    when the windows are disjoint, ``s >= k``)."""
    sn, sc, sh, sw = x.strides
    return _as_strided(x, (x.shape[0], x.shape[1], ho, wo, k, k), (sn, sc, sh * s, sw * s, sh, sw))


def _avgpool_bwd(xp, gy, saved, y, a, in_shapes, want):
    k, s = a["kernel"], a["stride"]
    n, c, h, w = in_shapes[0]
    ho, wo = gy.shape[2], gy.shape[3]
    g = gy * np.float32(1.0 / (k * k))
    if s >= k:         # disjoint windows (a global pool too): one broadcast write, no adds
        covered = s == k and ho * k == h and wo * k == w
        dx = (xp.empty if covered else xp.zeros)(in_shapes[0], dtype=gy.dtype)
        _taps(dx, k, s, ho, wo)[...] = g[:, :, :, :, None, None]
        return {0: dx}
    dx = xp.zeros(in_shapes[0], dtype=gy.dtype)
    for i in range(k):
        for j in range(k):
            _window(dx, i, j, s, ho, wo)[...] += g
    return {0: dx}


def _upsample_infer(s, d, a):
    n, c, h, w = s[0]
    f = a["factor"]
    return (n, c, h * f, w * f), d[0]


def _upsample_fwd(xp, xs, a, out=None):
    x, f = xs[0], a["factor"]
    n, c, h, w = x.shape
    y = xp.empty((n, c, h * f, w * f), dtype=x.dtype) if out is None else out
    y6 = y.reshape(n, c, h, f, w, f)
    for i in range(f):          # f * f strided copies of whole rows of x (a broadcast copy runs
        for j in range(f):      # an inner loop of f elements, slower; copying y's own rows
            y6[:, :, :, i, :, j] = x    # would go through NumPy's overlap temporary)
    return y


def _upsample_bwd(xp, gy, saved, y, a, in_shapes, want):
    """Sum of each ``f x f`` block: ``f * f`` strided adds (a reduction over two short,
    non-contiguous axes is many times slower in NumPy)."""
    f = a["factor"]
    dx = gy[:, :, 0::f, 0::f].copy()
    for i in range(f):
        for j in range(f):
            if i or j:
                dx += gy[:, :, i::f, j::f]
    return {0: dx}


# ---------------------------------------------------------------- normalisation
def _norm_infer(s, d, a):
    x, g, b = s
    c = x[a["axis"]]
    if tuple(g) != (c,) or tuple(b) != (c,):
        raise ValueError(f"norm: scale {g} / shift {b} do not match {x} on axis {a['axis']}")
    return tuple(x), d[0]


def _norm_axes(ndim, axis):
    axis %= ndim
    return tuple(i for i in range(ndim) if i != axis), axis


def _reduction(x, reduce_axes):
    """How :func:`sums` / :func:`dots` reduce ``x``: ``("channel", (before, c, after))`` over
    every axis but one, ``("rows", (rows, d))`` over the last axis only, else ``None``."""
    nd = x.ndim
    reduce_axes = tuple(i % nd for i in reduce_axes)
    kept = [i for i in range(nd) if i not in reduce_axes]
    if len(kept) == 1 and nd >= 2:
        axis = kept[0]
        return "channel", (_numel(x.shape[:axis]), x.shape[axis], _numel(x.shape[axis + 1:]))
    if reduce_axes == (nd - 1,):
        return "rows", (_numel(x.shape[:-1]), x.shape[-1])
    return None


def _kept_axis(ndim, reduce_axes) -> int:
    """The one axis a per-channel reduction (:func:`_reduction`'s ``"channel"``) keeps."""
    red = tuple(i % ndim for i in reduce_axes)
    return [i for i in range(ndim) if i not in red][0]


def sums(xp, x, reduce_axes, keepdims=True):
    """Sum of ``x`` over ``reduce_axes``: a norm's statistics and a bias's gradient. Per channel
    (every axis but one) or per row (the last axis) it is a matrix-vector product with ones
    (BLAS / cuBLAS, at memory speed); a strided ``sum`` is several times slower in NumPy."""
    how = _reduction(x, reduce_axes)
    if how is None:
        return x.sum(axis=reduce_axes, keepdims=keepdims)
    kind, dims = how
    if kind == "rows":
        out = xp.matmul(x.reshape(dims), xp.ones(dims[1], dtype=x.dtype))
        return out.reshape(x.shape[:-1] + (1,)) if keepdims else out.reshape(x.shape[:-1])
    before, c, after = dims
    x3 = x.reshape(dims)
    per = xp.matmul(x3, xp.ones(after, dtype=x.dtype)) if after > 1 else x3[:, :, 0]
    out = xp.matmul(xp.ones(before, dtype=x.dtype), per) if before > 1 else per[0]
    if not keepdims:
        return out
    return out.reshape(_bias_shape(x.shape, _kept_axis(x.ndim, reduce_axes)))


def dots(xp, a, b, reduce_axes, keepdims=True):
    """Sum of ``a * b`` over ``reduce_axes`` without the product's temporary (einsum), for
    the two reductions :func:`sums` handles; else through the product."""
    how = _reduction(a, reduce_axes)
    if how is None:
        return (a * b).sum(axis=reduce_axes, keepdims=keepdims)
    kind, dims = how
    if kind == "rows":
        out = xp.einsum("ij,ij->i", a.reshape(dims), b.reshape(dims))
        return out.reshape(a.shape[:-1] + (1,)) if keepdims else out.reshape(a.shape[:-1])
    out = xp.einsum("ijk,ijk->j", a.reshape(dims), b.reshape(dims))
    if not keepdims:
        return out
    return out.reshape(_bias_shape(a.shape, _kept_axis(a.ndim, reduce_axes)))


#: A per-channel operand of a norm's elementwise pass is expanded over the map (one ``(c, h, w)``
#: copy, ``1 / batch`` of the pass's array) when a map has fewer pixels than this: NumPy then runs
#: the pass in inner loops of ``c*h*w`` elements instead of ``h*w`` (4-64 on a CIFAR ResNet's maps,
#: where the loops' overhead made a broadcast pass several times slower than a plain one). Larger
#: maps gain too: up to 4096 pixels a pass against the expanded operand ran 0.45-1.0 of the
#: broadcast pass's time, from 8192 pixels 1.45-1.8x (NumPy 2.4, one thread;
#: ``bench/per_channel_sweep.py`` at 78975d9, bench/NOTES_kernels.md). The same arithmetic per
#: element, so the same bits.
EXPAND_PIXELS = 8192


def _expands(shape, axis) -> bool:
    """Whether :func:`_per_channel` expands a per-channel operand over ``shape``."""
    after = _numel(shape[axis + 1:])
    return 1 < after < EXPAND_PIXELS and _numel(shape[:axis]) > 1


def _per_channel(xp, v, shape, axis):
    """``v`` (shaped ``_bias_shape(shape, axis)``) as the operand of an elementwise pass over
    an array of ``shape``: expanded over the axes after ``axis`` where :func:`_expands`."""
    if not _expands(shape, axis):
        return v
    return xp.ascontiguousarray(xp.broadcast_to(v, (1,) * axis + tuple(shape[axis:])))


def _centered(xp, x, a, reduce_axes, out=None):
    """(x - mean, mean, 1 / sqrt(var + eps)) over ``reduce_axes``: the one computation of a
    norm's statistics (forward, backward, and :func:`norm_statistics`); ``x - mean`` goes to
    ``out`` when given; a per-channel mean is subtracted through :func:`_per_channel` (the
    same bits)."""
    m = _numel([x.shape[i] for i in reduce_axes])
    mean = sums(xp, x, reduce_axes) / m
    how = _reduction(x, reduce_axes)
    if how is not None and how[0] == "channel":        # batch norm: a (1, c, 1, 1) mean
        mean_op = _per_channel(xp, mean, x.shape, _kept_axis(x.ndim, reduce_axes))
    else:
        mean_op = mean
    xc = xp.subtract(x, mean_op, out=out)
    del mean_op                                        # an expanded copy goes before var
    var = dots(xp, xc, xc, reduce_axes) / m
    inv = np.float32(1) / xp.sqrt(var + np.float32(a.get("eps", 1e-5)))
    return xc, mean, inv


def norm_statistics(xp, x, a, reduce_axes):
    """(mean, 1 / sqrt(var + eps)) over ``reduce_axes`` (kept as size-1 axes): what normalising
    ``x`` needs; ``(x - mean) * inv`` is then the normalised value, bit for bit as the forward
    computes it (row-centric steps normalise row bands with statistics of the whole map)."""
    _, mean, inv = _centered(xp, x, a, reduce_axes)
    return mean, inv


def _batchnorm_axes(x, a):
    # batch norm reduces over all axes but the channel axis; layer norm over the channel axis only
    if a["kind"] == "batch":
        return _norm_axes(x.ndim, a["axis"])
    axis = a["axis"] % x.ndim
    return (axis,), axis


def norm_forward(xp, xs, a, out=None):
    """``(y, mean, inv)``: the norm's result (:func:`_norm_fwd`) and the statistics it
    normalised with (as :func:`norm_statistics` gives them) -- a row-centric step keeps a
    region's batch-norm statistics from its whole forward without a second pass over ``x``."""
    x, g, b = xs
    red, axis = _batchnorm_axes(x, a)
    y, mean, inv = _centered(xp, x, a, red, out)
    shape = _bias_shape(x.shape, axis)
    if red == _norm_axes(x.ndim, axis)[0]:         # batch norm: (1, c, 1, 1) operands
        y *= _per_channel(xp, inv, x.shape, axis)
        y *= _per_channel(xp, g.reshape(shape), x.shape, axis)
        y += _per_channel(xp, b.reshape(shape), x.shape, axis)
        return y, mean, inv
    y *= inv
    y *= g.reshape(shape)
    y += b.reshape(shape)
    return y, mean, inv


def _norm_fwd(xp, xs, a, out=None):
    """``(x - mean) * inv * gamma + beta``, evaluated in that order in place (the same bits as
    the row-centric band kernel's expression)."""
    return norm_forward(xp, xs, a, out)[0]


def _batchnorm_bwd(xp, gy, x, g, a, red, axis, want, into):
    """Batch norm's VJP in nine passes over the map: the statistics (mean, ``x - mean``, its
    squares' sum), the two sums of ``gy`` (plain and times ``x - mean``), then ``dx = gy *
    gamma * inv + (x - mean) * kx + k0`` with per-channel ``kx``, ``k0`` folded from those sums
    (``gamma * inv * (gy - sum(gy) / m - xhat * sum(gy * xhat) / m)`` rearranged); per-channel
    operands through :func:`_per_channel`."""
    xc, _, inv = _centered(xp, x, a, red)
    m = _numel([x.shape[i] for i in red])
    inv1 = inv.reshape(-1)
    gsum = sums(xp, gy, red, keepdims=False)
    gxsum = dots(xp, gy, xc, red, keepdims=False) * inv1     # the sum of gy * xhat
    out = {}
    if 2 in want:
        out[2] = gsum
    if 1 in want:
        out[1] = gxsum
    if 0 in want:
        shape = _bias_shape(x.shape, axis)
        ginv = g * inv1
        xc *= _per_channel(xp, (ginv * inv1 * (gxsum / -m)).reshape(shape), x.shape, axis)
        xc += _per_channel(xp, (ginv * (gsum / -m)).reshape(shape), x.shape, axis)
        dx = xp.multiply(gy, _per_channel(xp, ginv.reshape(shape), x.shape, axis),
                         out=into.get(0))
        dx += xc
        out[0] = dx
    return out


def _norm_bwd(xp, gy, saved, y, a, in_shapes, want, out=None):
    x, g = saved[0], saved[1]
    red, axis = _batchnorm_axes(x, a)
    if red == _norm_axes(x.ndim, axis)[0]:
        return _batchnorm_bwd(xp, gy, x, g, a, red, axis, want, out or {})
    # layer norm: statistics per row (over ``axis``), parameter gradients over the other axes
    xhat, _, inv = _centered(xp, x, a, red)
    xhat *= inv
    other = tuple(i for i in range(x.ndim) if i != axis)
    m = _numel([x.shape[i] for i in red])
    into = out or {}
    out = {}
    if 2 in want:
        out[2] = sums(xp, gy, other, keepdims=False)
    if 1 in want:
        out[1] = dots(xp, gy, xhat, other, keepdims=False)
    if 0 in want:
        dxhat = gy * g.reshape(_bias_shape(x.shape, axis))
        s1 = sums(xp, dxhat, red) / m
        s2 = dots(xp, dxhat, xhat, red) / m
        dx = xhat
        dx *= s2
        dx += s1
        xp.subtract(dxhat, dx, out=dx)
        out[0] = xp.multiply(dx, inv, out=into.get(0))
    return out


# ---------------------------------------------------------------- loss
def _xent_infer(s, d, a):
    logits, labels = s
    if len(logits) != 2 or tuple(labels) != (logits[0],):
        raise ValueError(f"softmax_cross_entropy: logits {logits}, labels {labels}")
    return (), d[0]


def _xent_parts(xp, logits):
    z = logits - logits.max(axis=1, keepdims=True)
    lse = xp.log(xp.exp(z).sum(axis=1, keepdims=True))
    return z, lse


def _xent_fwd(xp, xs, a):
    logits, labels = xs
    z, lse = _xent_parts(xp, logits)
    rows = xp.arange(logits.shape[0])
    return (lse[:, 0] - z[rows, labels]).mean().astype(logits.dtype)


def _xent_bwd(xp, gy, saved, y, a, in_shapes, want):
    logits, labels = saved[0], saved[1]
    out = {}
    if 0 in want:
        z, lse = _xent_parts(xp, logits)
        p = xp.exp(z - lse)
        p[xp.arange(logits.shape[0]), labels] -= np.float32(1)
        out[0] = p * (gy / np.float32(logits.shape[0])).astype(p.dtype)
    if 1 in want:
        out[1] = xp.zeros(in_shapes[1], dtype=labels.dtype)   # labels are not differentiable
    return out


# ---------------------------------------------------------------- shape ops
def _reshape_infer(s, d, a):
    shape = tuple(a["shape"])
    if _numel(shape) != _numel(s[0]):
        raise ValueError(f"reshape: {s[0]} -> {shape} changes the size")
    return shape, d[0]


def _concat_infer(s, d, a):
    axis = a["axis"] % len(s[0])
    for t in s[1:]:
        if len(t) != len(s[0]) or any(t[i] != s[0][i] for i in range(len(t)) if i != axis):
            raise ValueError(f"concat: shapes {s} do not agree off axis {axis}")
    out = list(s[0])
    out[axis] = sum(t[axis] for t in s)
    return tuple(out), d[0]


def _concat_bwd(xp, gy, saved, y, a, in_shapes, want):
    axis = a["axis"] % gy.ndim
    out, start = {}, 0
    for pos, shape in enumerate(in_shapes):
        stop = start + shape[axis]
        if pos in want:
            index = [slice(None)] * gy.ndim
            index[axis] = slice(start, stop)
            out[pos] = gy[tuple(index)]
        start = stop
    return out


# ---------------------------------------------------------------- attention
def _attn_infer(s, d, a):
    b, sq, d3 = s[0]
    if d3 % 3 or (d3 // 3) % a["heads"]:
        raise ValueError(f"attention: packed qkv width {d3} not 3 x heads x head_dim")
    return (b, sq, d3 // 3), d[0]


#: The attention kernels take the (batch, head) pairs in blocks of at most this many bytes of
#: scores (at least one head): a (512 x 512) float32 head is 1 MiB, so the forward's one and the
#: backward's two (seq x seq) buffers stay in a core's L2 cache through the softmax's passes and
#: the products that read them, where all heads at once (32 MiB at batch 4, 8 heads, seq 512)
#: streamed each pass through memory (bench/NOTES_kernels.md, "Attention and GELU in cache-sized
#: blocks"). The same blocks on every backend, fixed by the shapes: the temporaries the plan
#: counts (:func:`_attention_temps`) and the reduction orders do not depend on the machine.
ATTENTION_BLOCK_BYTES = 1 << 20


def _head_blocks(b, h, s, itemsize):
    """(heads in the largest block, the blocks as (batch slice, head slice), a generator):
    whole batches of heads when a block holds ``h`` heads or more, else runs of one batch's
    heads."""
    per = max(1, min(b * h, ATTENTION_BLOCK_BYTES // (s * s * itemsize)))
    if per >= h:
        nb = per // h
        return nb * h, ((slice(i, min(b, i + nb)), slice(0, h)) for i in range(0, b, nb))
    return per, ((slice(i, i + 1), slice(j, min(h, j + per)))
                 for i in range(b) for j in range(0, h, per))


def _block(buf, shape):
    """The first ``shape``'s worth of the flat buffer ``buf``, shaped (a block's scratch)."""
    return buf[:_numel(shape)].reshape(shape)


def _t(x):
    """A block's last two axes swapped (a view)."""
    return x.transpose(0, 1, 3, 2)


def _attn_split(xp, qkv, heads):
    b, s, d3 = qkv.shape
    d = d3 // 3
    parts = qkv.reshape(b, s, 3, heads, d // heads).transpose(2, 0, 3, 1, 4)   # 3, B, H, S, dh
    return parts[0], parts[1], parts[2]


def _attn_setup(xp, q, a):
    """What every block of the forward and backward shares: the scale (float32, as the
    kernels always used, so float64 runs keep their values), the blocks, a row of ones (row
    sums as BLAS products) and the causal mask (None without one)."""
    b, h, s, dh = q.shape
    per, blocks = _head_blocks(b, h, s, q.dtype.itemsize)
    mask = None
    if a.get("causal"):    # keys x queries: 0 where key <= query, -1e30 above (exp gives 0)
        mask = xp.where(xp.tri(s, dtype=bool).T, q.dtype.type(0), q.dtype.type(-1e30))
    return np.float32(1.0 / math.sqrt(dh)), per, blocks, xp.ones(s, dtype=q.dtype), mask


def _softmax_(xp, st, ones, mask=None):
    """The unnormalised softmax of one block's transposed scores ``st`` (keys x queries), in
    place: ``exp(st - max)`` per query (column), and each query's sum ``l`` (returned). The
    transposed layout makes a query's statistics a row: the max reduces along rows and the
    shift broadcasts a row over rows, both passes over contiguous rows (NumPy runs them faster
    than the column reduction and broadcast of the scores' own layout); the sum is a product
    with ones. The division by ``l`` is left to the caller, on (seq x head_dim) values instead
    of (seq x seq)."""
    if mask is not None:
        st += mask
    st -= st.max(axis=-2, keepdims=True)
    xp.exp(st, out=st)
    return xp.matmul(ones, st)


def _attn_fwd(xp, xs, a, out=None):
    """``softmax(q k^T * scale) v`` block by block (:func:`_head_blocks`): per block the scores
    transposed (``k (q * scale)^T``), their unnormalised softmax ``E`` with the query sums ``l``
    (:func:`_softmax_`), then ``(E^T v) / l`` straight into the (B, S, H, dh) output."""
    q, k, v = _attn_split(xp, xs[0], a["heads"])
    b, h, s, dh = q.shape
    scale, per, blocks, ones, mask = _attn_setup(xp, q, a)
    y = xp.empty((b, s, h, dh), dtype=q.dtype) if out is None else out.reshape(b, s, h, dh)
    yt = y.transpose(0, 2, 1, 3)
    sbuf = xp.empty(per * s * s, dtype=q.dtype)
    qbuf = xp.empty(per * s * dh, dtype=q.dtype)
    for bs, hs in blocks:
        qs = xp.multiply(q[bs, hs], scale, out=_block(qbuf, q[bs, hs].shape))
        e = xp.matmul(k[bs, hs], _t(qs), out=_block(sbuf, qs.shape[:3] + (s,)))
        l = _softmax_(xp, e, ones, mask)
        o = xp.matmul(_t(e), v[bs, hs], out=yt[bs, hs])
        o /= l[..., None]
    return y.reshape(b, s, h * dh)


def _attn_bwd(xp, gy, saved, y, a, in_shapes, want, out=None):
    """The VJP of ``softmax(q k^T * scale) v``, block by block like the forward, from the
    recomputed unnormalised ``E`` (keys x queries) and query sums ``l`` (P = E / l, never
    formed): with ``dO' = dO / l`` per query, ``dv = E dO'``, ``dP'^T = v dO'^T`` (``dP / l``),
    and softmax's VJP ``dS = P (dP - rowsum(P dP))`` as ``T - E c`` with ``T = E dP'`` (= P dP)
    and ``c = rowsum(T) / l``; ``dq = dS (k * scale)``, ``dk = dS^T (q * scale)``. The three
    gradients go straight into the packed ``(B, S, 3, H, dh)`` layout of the input."""
    q, k, v = _attn_split(xp, saved[0], a["heads"])
    b, h, s, dh = q.shape
    scale, per, blocks, ones, mask = _attn_setup(xp, q, a)
    do = gy.reshape(b, s, h, dh).transpose(0, 2, 1, 3)
    into = (out or {}).get(0)
    dqkv = xp.empty((b, s, 3, h, dh), dtype=q.dtype) if into is None else into.reshape(b, s, 3, h, dh)
    dq, dk, dv = (dqkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))   # B, H, S, dh views
    ebuf, dbuf = (xp.empty(per * s * s, dtype=q.dtype) for _ in range(2))
    qbuf, obuf = (xp.empty(per * s * dh, dtype=q.dtype) for _ in range(2))
    for bs, hs in blocks:
        shape = q[bs, hs].shape
        qs = xp.multiply(q[bs, hs], scale, out=_block(qbuf, shape))
        e = xp.matmul(k[bs, hs], _t(qs), out=_block(ebuf, shape[:3] + (s,)))
        l = _softmax_(xp, e, ones, mask)
        dos = xp.divide(do[bs, hs], l[..., None], out=_block(obuf, shape))
        xp.matmul(e, dos, out=dv[bs, hs])
        dst = xp.matmul(v[bs, hs], _t(dos), out=_block(dbuf, shape[:3] + (s,)))
        dst *= e                                                  # T^T
        c = xp.matmul(ones, dst)
        c /= l
        e *= c[..., None, :]
        dst -= e                                                  # dS^T
        ks = xp.multiply(k[bs, hs], scale, out=_block(obuf, shape))   # dO' is spent: its buffer
        xp.matmul(_t(dst), ks, out=dq[bs, hs])
        xp.matmul(dst, qs, out=dk[bs, hs])
    return {0: dqkv.reshape(b, s, 3 * h * dh) if into is None else into}


# ---------------------------------------------------------------- FLOPs
def _fl_elementwise(k):
    return lambda s, o, a: k * _numel(o)


def _fl_matmul(s, o, a):
    return 2 * _numel(o) * s[0][-1]


def _fl_conv(s, o, a):
    _, c, kh, kw = s[1]
    return 2 * _numel(o) * c * kh * kw


def _fl_pool(s, o, a):
    return _numel(o) * a["kernel"] ** 2


def _fl_attn(s, o, a):
    b, sq, d = o
    return 4 * b * sq * sq * d + 5 * b * a["heads"] * sq * sq


OPS: dict[str, OpDef] = {op.name: op for op in [
    OpDef("matmul", "MatMul", _matmul_infer, _fl_matmul,
          lambda xp, xs, a, out=None: _rows_times(xp, xs[0], xs[1], out), _matmul_bwd,
          saves_inputs=(0, 1), fills_out=True, fills_grads=True),
    OpDef("add", "Add", _add_infer, _fl_elementwise(1),
          lambda xp, xs, a, out=None: xp.add(xs[0], xs[1], out=out),
          lambda xp, gy, sv, y, a, sh, want: {i: gy for i in want}, fills_out=True),
    OpDef("bias", "Bias", _bias_infer, _fl_elementwise(1), _bias_fwd, _bias_bwd, fills_out=True),
    OpDef("relu", "ReLU", _same_infer, _fl_elementwise(1),
          lambda xp, xs, a, out=None: xp.maximum(xs[0], np.float32(0), out=out),
          _relu_bwd,
          saves_output=True, fills_out=True, fills_grads=True),
    OpDef("gelu", "GELU", _same_infer, _fl_elementwise(8), _gelu_fwd, _gelu_bwd, saves_inputs=(0,),
          fills_out=True, fills_grads=True),
    OpDef("conv2d", "Convolution2DFunction", _conv_infer, _fl_conv, _conv_fwd, _conv_bwd,
          saves_inputs=(0, 1), fills_out=True, fills_grads=True),
    OpDef("max_pool", "MaxPooling2D", _pool_infer, _fl_pool, _maxpool_fwd, _maxpool_bwd,
          saves_inputs=(0,), saves_output=True, fills_out=True, fills_grads=True),
    OpDef("avg_pool", "AveragePooling2D", _pool_infer, _fl_pool, _avgpool_fwd, _avgpool_bwd),
    OpDef("upsample", "Unpooling2D", _upsample_infer, _fl_elementwise(1), _upsample_fwd,
          _upsample_bwd, fills_out=True),
    OpDef("batch_norm", "BatchNormalization", _norm_infer, _fl_elementwise(8), _norm_fwd, _norm_bwd,
          saves_inputs=(0, 1), fills_out=True, fills_grads=True),
    OpDef("layer_norm", "LayerNormalization", _norm_infer, _fl_elementwise(8), _norm_fwd, _norm_bwd,
          saves_inputs=(0, 1), fills_out=True, fills_grads=True),
    OpDef("softmax_cross_entropy", "SoftmaxCrossEntropy", _xent_infer,
          lambda s, o, a: 4 * _numel(s[0]), _xent_fwd, _xent_bwd, saves_inputs=(0, 1)),
    OpDef("reshape", "Reshape", _reshape_infer, lambda s, o, a: 0,
          lambda xp, xs, a: xs[0].reshape(tuple(a["shape"])),
          lambda xp, gy, sv, y, a, sh, want: {0: gy.reshape(sh[0])}),
    OpDef("concat", "Concat", _concat_infer, lambda s, o, a: 0,
          lambda xp, xs, a: xp.concatenate(xs, axis=a["axis"]), _concat_bwd),
    OpDef("attention", "ScaledDotProductAttention", _attn_infer, _fl_attn, _attn_fwd, _attn_bwd,
          saves_inputs=(0,), fills_out=True, fills_grads=True),
]}

#: FLOPs of the backward relative to the forward (two matmuls per matmul, recomputed statistics...).
BACKWARD_FLOPS_FACTOR = 2


# ---------------------------------------------------------------- kernel temporaries (issue 23)
# What each kernel above allocates beyond its inputs and the buffers it is handed (``out=``),
# for a plan that predicts a whole step's peak (planner.whole_step, planner.rows.step). Each
# figure is the most the kernel holds at once (its returned arrays included, unless written into ``out``),
# read off the kernel's code: change a kernel's temporaries, change its entry here
# (tests/test_step_memory.py compares both under tracemalloc).
def _nb(shape, itemsize) -> int:
    return _numel(shape) * itemsize


#: NumPy's ufunc buffer, in elements (``np.getbufsize()``): a ufunc that broadcasts, casts or
#: walks strided operands copies them through buffers of at most this many elements each.
UFUNC_BUFSIZE = 8192


def implements(ops) -> bool:
    """Whether ``ops`` (op names, or None: a graph without op arguments) are all in the op
    table: what a graph needs to run on real kernels and to have its whole step budgeted."""
    return ops is not None and all(op in OPS for op in set(ops))


def with_workspace(attrs: dict, op: str, workspace: int | None) -> dict:
    """``attrs`` with the convolution workspace cap ``workspace`` (None: the kernels' own,
    :data:`CONV_WORKSPACE_BYTES`): the cap a whole-step plan chose."""
    if workspace is None or op != "conv2d":
        return attrs
    return {**attrs, "workspace": int(workspace)}


def _bufs(count, shape, itemsize) -> int:
    """``count`` ufunc buffers for operands of ``shape`` (smaller arrays get smaller buffers)."""
    return count * min(UFUNC_BUFSIZE, _numel(shape)) * itemsize


def _stats_temp(shape, reduce_axes, e) -> int:
    """:func:`_centered`'s small arrays (``sums``' ones and partial sums, mean, var, inv)."""
    nd = len(shape)
    red = tuple(i % nd for i in reduce_axes)
    kept = [i for i in range(nd) if i not in red]
    if len(kept) == 1 and nd >= 2:
        ax = kept[0]
        before, c, after = _numel(shape[:ax]), shape[ax], _numel(shape[ax + 1:])
        return e * (after + before + (before * c if after > 1 else 0) + 8 * c)
    return e * (shape[-1] + 8 * (_numel(shape) // max(1, shape[-1])))


def _pm_temp(x, o, k, s, p, e, cap, row_taps=False) -> tuple:
    """(slab buffer and column workspace, the tile products held at once) bytes of
    :func:`_pm_tiles` / :func:`_pm_conv` on input ``x`` with ``o`` output channels (a
    ``(images*pixels, o)`` product, two with ``row_taps``: the sum and a kernel row's part; the
    weight gradient's ``(o, k*k*c)`` parts are counted by its caller)."""
    n, c, h, w = x
    ho, wo = _out_hw(h, w, k, s, p)
    n0, n1, r0, r1 = _conv_tiles(n, ho, wo, c * k * k, e, cap)[0]
    nb, rows = n1 - n0, r1 - r0
    rows_in = (rows - 1) * s + k
    cols = nb * (rows_in if row_taps else rows * k) * wo * k * c * e
    work = cols + nb * rows_in * (w + 2 * p) * c * e
    return work, nb * rows * wo * o * e * (2 if row_taps else 1)


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


def _attention_temps(x, attrs, e: int, phase: str) -> int:
    """Bytes of the attention kernels' scratch on packed ``x`` (batch, seq, 3*d), results
    aside: per block (:func:`_head_blocks`) of ``per`` heads the (seq x seq) buffers (forward
    one, backward two) and the (seq x head_dim) ones (forward the scaled q; backward the scaled
    q, and dO scaled, whose buffer then takes the scaled k), a row of ones, the causal mask's floats, and the most held at once of the
    per-query statistics (forward the sums and the max, backward also ``c``) and the ufunc
    buffers of the broadcast passes: the shift by the max on a (seq x seq) block, the divisions
    by the sums on strided (seq x head_dim) blocks (forward three buffers, the output in
    place; backward two, dO into its scratch)."""
    b, sq, d3 = x
    hds = attrs["heads"]
    dh = d3 // 3 // hds
    per, _ = _head_blocks(b, hds, sq, e)
    stat, shift = per * sq * e, _bufs(1, (per, sq, sq), e)
    if phase == "forward":
        fixed = per * sq * (sq + dh) * e
        transient = max(2 * stat + shift, stat + _bufs(3, (per, sq, dh), e))
    else:
        fixed = per * sq * (2 * sq + 2 * dh) * e
        transient = max(3 * stat + shift, 2 * stat + _bufs(2, (per, sq, dh), e))
    mask = sq * sq * e if attrs.get("causal") else 0
    return fixed + sq * e + mask + transient


def kernel_temp_bytes(name, phase, in_shapes, out_shape, attrs, itemsize=4, want=(),
                      into=()) -> int:
    """The most bytes kernel ``name`` (``phase`` ``"forward"`` or ``"backward"``) holds at once
    beyond its inputs and the buffers it is handed: ``into`` names those (forward: ``-1`` when
    it is given ``out=``; backward: the gradient positions given ``out={pos: ...}``); ``want``:
    the gradient positions asked for. Results the kernel returns in arrays of its own count
    (the caller copies them into its buffers); Python objects and NumPy's ufunc buffers do not.

    >>> kernel_temp_bytes("relu", "backward", [(8, 16)], (8, 16), {}, want=(0,), into=(0,))
    128
    """
    e = int(itemsize)
    ins = [tuple(s) for s in in_shapes]
    out = tuple(out_shape)
    ys, xs = _nb(out, e), _nb(ins[0], e) if ins else 0
    given = -1 in into
    res = 0 if given else ys
    if phase == "forward":
        if name == "conv2d":
            return _conv_fwd_temp(ins[0], ins[1], attrs["stride"], attrs["pad"], e,
                                  _workspace(attrs), given)
        if name == "max_pool":
            p = attrs.get("pad", 0)
            n, c, h, w = ins[0]
            return res + (n * c * (h + 2 * p) * (w + 2 * p) * e if p else 0) + _bufs(1, out, e)
        if name == "avg_pool":
            return 2 * ys if ins[0][2] == attrs["kernel"] and ins[0][3] == attrs["kernel"] else ys
        if name == "batch_norm":
            # the statistics' reduction (:func:`sums`), then the result beside one per-channel
            # operand and its ufunc buffer; the per-channel vectors throughout
            c = ins[0][attrs["axis"] % len(ins[0])]
            return 8 * c * e + max(_stats_temp(ins[0], _batchnorm_axes_of(ins[0], attrs)[0], e),
                                   res + _norm_bufs(ins[0], attrs, e)
                                   + _expanded_temp(name, ins[0], attrs, e))
        if name == "layer_norm":
            return res + _stats_temp(ins[0], _batchnorm_axes_of(ins[0], attrs)[0], e) + \
                _bufs(1, out, e)
        if name == "softmax_cross_entropy":
            n = ins[0][0]
            return 2 * xs + 8 * n * e + 8 * n
        if name == "attention":
            return res + _attention_temps(ins[0], attrs, e, phase)
        if name == "reshape":
            return 0
        if name == "bias":      # a broadcast add
            return res + _bufs(1, out, e)
        return res               # matmul, add, relu, gelu, upsample, concat
    # backward
    into = set(into)
    want = set(want)
    if name == "conv2d":
        return _conv_bwd_temp(ins[0], ins[1], out, attrs, e, want, into)
    if name == "matmul":
        x, w = ins
        rows = _numel(out) // max(1, out[-1])
        g0 = 0
        if 0 in want:
            r0 = 0 if 0 in into else xs
            if rows > 8:
                g0 = r0
            else:
                g0 = xs * (1 + (len(out) > 2) + (0 not in into))
        held0 = 0 if 0 in into or 0 not in want else xs
        g1 = (0 if 1 in into else _nb(w, e)) if 1 in want else 0
        return max(g0, held0 + g1)
    if name == "relu":          # the comparison's booleans, cast through a buffer
        return (0 if 0 in into or 0 not in want else ys) + _bufs(1, out, 1)
    if name == "gelu":          # two block-sized scratch arrays (contiguous operands)
        return 2 * _elementwise_block(_numel(ins[0]), e) * e + (0 if 0 in into else xs)
    if name == "bias":
        return (_stats_temp(out, tuple(i for i in range(len(out))
                                       if i != attrs["axis"] % len(out)), e) if 1 in want else 0)
    if name == "max_pool":
        k, s, p = attrs["kernel"], attrs["stride"], attrs.get("pad", 0)
        n, c, h, w = ins[0]
        padded = n * c * (h + 2 * p) * (w + 2 * p) * e
        dxpad = 0 if p == 0 and 0 in into else padded
        last = max(ys if s < k else 0, xs if p else 0)
        return (padded if p else 0) + dxpad + 2 * _numel(out) + last + _bufs(2, out, e)
    if name == "avg_pool":
        return ys + xs
    if name == "upsample":
        return xs + _bufs(1, ins[0], e)
    if name == "batch_norm":
        # x - mean throughout; one reduction's temporaries at a time (:func:`sums`' ones and
        # partial sums; the per-channel vectors), or the input gradient beside x - mean with
        # one per-channel operand and its ufunc buffer
        red, _ = _batchnorm_axes_of(ins[0], attrs)
        dx = 0 if 0 in into or 0 not in want else xs
        c = ins[0][attrs["axis"] % len(ins[0])]
        return (xs + 8 * c * e + max(_stats_temp(ins[0], red, e),
                                     dx + _norm_bufs(ins[0], attrs, e)
                                     + _expanded_temp(name, ins[0], attrs, e)))
    if name == "layer_norm":
        red, _ = _batchnorm_axes_of(ins[0], attrs)
        other = tuple(i for i in range(len(ins[0])) if i != attrs["axis"] % len(ins[0]))
        extra = xs if 0 in want else 0
        return (xs + extra + (0 if 0 in into or 0 not in want else xs)
                + 2 * _stats_temp(ins[0], red, e) + _stats_temp(ins[0], other, e)
                + _bufs(1, ins[0], e))
    if name == "softmax_cross_entropy":
        n = ins[0][0]
        return 3 * xs + 8 * n * e + 8 * n
    if name == "attention":
        return (0 if 0 in into else xs) + _attention_temps(ins[0], attrs, e, phase)
    return 0                     # add, reshape, concat: views of the output gradient


def _expanded_temp(name, shape, a, e) -> int:
    """A batch norm's per-channel operand expanded over the map (:func:`_per_channel`; one at
    a time)."""
    axis = a["axis"] % len(shape)
    if name != "batch_norm" or not _expands(shape, axis):
        return 0
    return _numel(shape[axis:]) * e


def _norm_bufs(shape, a, e) -> int:
    """NumPy's ufunc buffer beside a batch norm's per-channel pass: there only where the pass's
    inner loop runs fewer than :data:`UFUNC_BUFSIZE` elements: the map's pixels against a
    broadcast operand, ``c * pixels`` against an expanded one (as tracemalloc sees it,
    tests/test_norm_pool_kernels.py)."""
    axis = a["axis"] % len(shape)
    after = _numel(shape[axis + 1:])
    inner = _numel(shape[axis:]) if after == 1 or _expands(shape, axis) else after
    return _bufs(1, shape, e) if inner < UFUNC_BUFSIZE else 0


def _batchnorm_axes_of(shape, a):
    """:func:`_batchnorm_axes` from a shape (no array)."""
    nd = len(shape)
    if a["kind"] == "batch":
        return _norm_axes(nd, a["axis"])
    axis = a["axis"] % nd
    return (axis,), axis
