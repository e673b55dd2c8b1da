"""Winograd F(4x4, 3x3) convolutions: stride-1 3x3 layers in 4x fewer multiplications.

A 3x3 convolution computes each 4x4 block of output from a 6x6 block of input. Winograd's
minimal filtering (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR'16)
does it with 36 products a block and channel pair where the direct (im2col + GEMM) convolution
does 144: with ``V = B^T d B`` the input block transformed, ``U = G g G^T`` the 3x3 kernel
transformed, ``Y = A^T (U * V) A``. Summed over input channels, the 36 elementwise products are
36 independent GEMMs, ``(blocks, c) @ (c, out)``, so the BLAS still does the work, on a quarter
of the direct convolution's FLOPs; the transforms are small GEMMs over all blocks at once.

Why here: on the CPU a direct convolution's products are NumPy's BLAS (OpenBLAS) on im2col
columns, and on a CIFAR ResNet's 64-channel 16x16 layers that product alone ran at ~120
GFLOP/s against ~150 for the same product in torch's MKL, the layer's forward ~1.8x and its
backward ~1.3x oneDNN's (``python3 bench/conv_layers_bench.py``, bench/NOTES_kernels.md).
:mod:`planner.ops` routes a convolution's backward here (input gradient: this forward of the
output gradient with the flipped, transposed kernel; weight gradient: :func:`weight_grad`),
where :func:`pays` says so. Not the forward: see Rounding.

Layout: the input is copied once, pixel-major and padded (``(images, rows, columns,
channels)``), so that a block's 36 taps are copied with inner loops of ``c`` elements; blocks
are grouped by images into tiles whose workspace stays within the caller's cap
(:func:`tile_images`). The weight gradient uses the same transforms (``dU = sum over blocks of
V^T (A gy A^T)``, then ``dg = G^T dU G``); the input gradient of a stride-1 layer is this
forward of the output gradient with the flipped, transposed kernel (the caller's job).

Rounding: F(4x4, 3x3)'s transforms have entries up to 8 and 1/24, so in float32 a result is within
~1e-5 of the largest output (tests/test_winograd.py holds a 64-channel layer within 5e-5) where the
direct product is within ~5e-7; in float64 both agree with the definition to ~1e-14. In a backward
that is float32 rounding of a gradient; in a forward it moves values across a ReLU's zero, and a
step's gradients move by percents (``bench/winograd_rounding.py`` at 78975d9: the CIFAR ResNet's,
1e-5 of their largest with the backward through Winograd, 3.8e-2 with the forward too, as under
noise of that size in float64), so the forward stays on the direct kernels. The result depends only
on the shapes and the cap (fixed tiles, fixed orders): deterministic.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x = rng.standard_normal((2, 3, 9, 7)); w = rng.standard_normal((4, 3, 3, 3))
>>> y = forward(np, x, w, pad=1, cap=1 << 20)
>>> ref = np.zeros((2, 4, 9, 7)); xp_ = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
>>> for i in range(3):
...     for j in range(3):
...         ref += np.einsum("nchw,oc->nohw", xp_[:, :, i:i + 9, j:j + 7], w[:, :, i, j])
>>> bool(np.allclose(y, ref, atol=1e-12))
True
"""

from __future__ import annotations

import numpy as np

from planner.arrays import as_strided

#: Output block side (m) and input block side (m + 2) of F(4x4, 3x3).
M, ALPHA = 4, 6
_BT = np.array([[4, 0, -5, 0, 1, 0],
                [0, -4, -4, 1, 1, 0],
                [0, 4, -4, -1, 1, 0],
                [0, -2, -1, 2, 1, 0],
                [0, 2, -1, -2, 1, 0],
                [0, 4, 0, -5, 0, 1]], dtype=np.float64)
_G = np.array([[1 / 4, 0, 0],
               [-1 / 6, -1 / 6, -1 / 6],
               [-1 / 6, 1 / 6, -1 / 6],
               [1 / 24, 1 / 12, 1 / 6],
               [1 / 24, -1 / 12, 1 / 6],
               [0, 0, 1]], dtype=np.float64)
_AT = np.array([[1, 1, 1, 1, 1, 0],
                [0, 1, -1, 2, -2, 0],
                [0, 1, 1, 4, 4, 0],
                [0, 1, -1, 8, -8, 1]], dtype=np.float64)


#: The transforms per (array module, dtype), made once.
_CACHE: dict = {}


def _matrices(xp, dtype):
    """The 2-D transforms as Kronecker products (one GEMM each over all blocks): input
    ``(36, 36)``, kernel ``(36, 9)``, output ``(16, 36)``, in ``dtype`` on ``xp``'s device."""
    key = (xp.__name__, np.dtype(dtype).str)
    got = _CACHE.get(key)
    if got is None:
        got = tuple(xp.asarray(np.kron(m, m), dtype=dtype) for m in (_BT, _G, _AT))
        _CACHE[key] = got
    return got


def blocks(ho: int, wo: int) -> tuple:
    """Block rows and columns covering a ``ho x wo`` output."""
    return -(-ho // M), -(-wo // M)


def _buffer_elements(c: int, o: int, ho: int, wo: int) -> dict:
    """Elements of each tile buffer one image takes (:class:`_Workspace` allocates ``images``
    times these): its padded slab, its blocks' taps and their transform (36 values a block and
    input channel each), the products (36 a block and output channel) and the output blocks
    (16)."""
    bh, bw = blocks(ho, wo)
    nb = bh * bw
    return {"slab": (bh * M + 2) * (bw * M + 2) * c, "taps": ALPHA * ALPHA * nb * c,
            "v": ALPHA * ALPHA * nb * c, "m": ALPHA * ALPHA * nb * o, "y": M * M * nb * o}


def _per_image_bytes(c: int, o: int, ho: int, wo: int, itemsize: int) -> int:
    """Workspace one image adds to a tile (:func:`_buffer_elements`)."""
    return sum(_buffer_elements(c, o, ho, wo).values()) * itemsize


#: Blocks a tile aims at: enough rows for the 36 GEMMs to keep BLAS's speed, few enough that a
#: tile's transforms stay in the core's cache between the copy and the GEMMs that read them.
TILE_BLOCKS = 256


def tile_images(n: int, c: int, o: int, ho: int, wo: int, itemsize: int, cap: int) -> int:
    """Images a tile takes: about :data:`TILE_BLOCKS` blocks, within ``cap`` bytes of workspace;
    0 when one image alone exceeds ``cap`` (the caller takes the direct convolution)."""
    per = _per_image_bytes(c, o, ho, wo, itemsize)
    if per > cap:
        return 0
    bh, bw = blocks(ho, wo)
    return max(1, min(n, cap // per, -(-TILE_BLOCKS // (bh * bw))))


def workspace_bytes(n: int, c: int, o: int, ho: int, wo: int, itemsize: int, cap: int) -> int:
    """Bytes a forward (or weight gradient) allocates beyond its operands and result: one
    tile's workspace (the buffers are reused by every tile)."""
    return tile_images(n, c, o, ho, wo, itemsize, cap) * _per_image_bytes(c, o, ho, wo, itemsize)


def _slab(xp, x, n0, n1, pad, bh, bw, buf):
    """Images ``[n0, n1)`` of ``x`` (NCHW) pixel-major with ``pad`` zero rows and columns
    before the map and zeros after it up to the blocks' ``bh*4 + 2`` rows and ``bw*4 + 2``
    columns, in ``buf``."""
    _, c, h, w = x.shape
    hp, wp = bh * M + 2, bw * M + 2
    slab = buf[:(n1 - n0) * hp * wp * c].reshape(n1 - n0, hp, wp, c)
    hin, win = min(h, hp - pad), min(w, wp - pad)
    slab[:, :pad] = 0
    slab[:, pad + hin:] = 0
    slab[:, pad:pad + hin, :pad] = 0
    slab[:, pad:pad + hin, pad + win:] = 0
    slab[:, pad:pad + hin, pad:pad + win] = x[n0:n1, :, :hin, :win].transpose(0, 2, 3, 1)
    return slab


def _taps(xp, slab, out):
    """The 6x6 input blocks of ``slab`` (stride 4), ``(36, blocks, c)``, copied into ``out``."""
    nb, hp, wp, c = slab.shape
    bh, bw = (hp - 2) // M, (wp - 2) // M
    e = slab.dtype.itemsize
    view = as_strided(slab, (ALPHA, ALPHA, nb, bh, bw, c),
                      (wp * c * e, c * e, hp * wp * c * e, M * wp * c * e, M * c * e, e))
    d = out[:ALPHA * ALPHA * nb * bh * bw * c].reshape(ALPHA, ALPHA, nb, bh, bw, c)
    d[...] = view
    return d.reshape(ALPHA * ALPHA, nb * bh * bw, c)


class _Workspace:
    """The tile buffers, allocated once per call for the largest tile and reused."""

    def __init__(self, xp, dtype, images, c, o, ho, wo):
        self.images = images
        for name, count in _buffer_elements(c, o, ho, wo).items():
            setattr(self, name, xp.empty(images * count, dtype=dtype))


def _tile_or_refuse(n, c, o, ho, wo, itemsize, cap, who) -> int:
    """:func:`tile_images`, or a ValueError where one image's workspace exceeds ``cap`` (the op
    table asks :func:`pays` first)."""
    images = tile_images(n, c, o, ho, wo, itemsize, cap)
    if images == 0:
        raise ValueError(f"winograd.{who}: one image's workspace exceeds the cap")
    return images


def _input_transform(xp, x, n0, n1, pad, bh, bw, ws, bt):
    """``V`` of images ``[n0, n1)``: ``(36, blocks, c)``."""
    c = x.shape[1]
    d = _taps(xp, _slab(xp, x, n0, n1, pad, bh, bw, ws.slab), ws.taps)
    v = ws.v[:d.size].reshape(ALPHA * ALPHA, -1)
    xp.matmul(bt, d.reshape(ALPHA * ALPHA, -1), out=v)
    return v.reshape(ALPHA * ALPHA, -1, c)


def forward(xp, x, w, pad: int, cap: int, out=None):
    """Stride-1 3x3 convolution of ``x`` (NCHW) with ``w`` (``(out, c, 3, 3)``), ``pad`` zeros
    each side, into ``out`` (NCHW) when given."""
    n, c, h, wd = x.shape
    o = w.shape[0]
    ho, wo = h + 2 * pad - 2, wd + 2 * pad - 2
    dtype = x.dtype
    bt, gg, at = _matrices(xp, dtype)
    bh, bw = blocks(ho, wo)
    images = _tile_or_refuse(n, c, o, ho, wo, dtype.itemsize, cap, "forward")
    u = xp.matmul(gg, xp.ascontiguousarray(w.transpose(2, 3, 1, 0)).reshape(9, c * o))
    u = u.reshape(ALPHA * ALPHA, c, o)
    y = xp.empty((n, o, ho, wo), dtype=dtype) if out is None else out
    ws = _Workspace(xp, dtype, images, c, o, ho, wo)
    for n0 in range(0, n, images):
        n1 = min(n, n0 + images)
        v = _input_transform(xp, x, n0, n1, pad, bh, bw, ws, bt)
        nblk = v.shape[1]
        m = ws.m[:ALPHA * ALPHA * nblk * o].reshape(ALPHA * ALPHA, nblk, o)
        xp.matmul(v, u, out=m)
        yb = ws.y[:M * M * nblk * o].reshape(M * M, nblk * o)
        xp.matmul(at, m.reshape(ALPHA * ALPHA, nblk * o), out=yb)
        _put_blocks(yb.reshape(M, M, n1 - n0, bh, bw, o).transpose(2, 5, 3, 0, 4, 1), y[n0:n1])
    return y


def _block_parts(ho, wo):
    """The (block rows, rows kept of the last) and (block columns, columns kept) of a ``ho x wo``
    map: whole blocks, then a partial one where the side is not a multiple of 4."""
    return [(ho // M, M, 0)] + ([(1, ho % M, ho // M)] if ho % M else []), \
        [(wo // M, M, 0)] + ([(1, wo % M, wo // M)] if wo % M else [])


def _block_views(blocks6, y):
    """Pairs of views (blocks, map) over the whole blocks and the partial last row / column of
    ``blocks6`` (``(images, o, bh, 4, bw, 4)``) and ``y`` (``(images, o, ho, wo)``), the map's
    part with its rows and columns split into blocks (always a view: axes only split)."""
    n, o, ho, wo = y.shape
    rows, cols = _block_parts(ho, wo)
    for nr, kr, br in rows:
        for nc, kc, bc in cols:
            if nr and nc:
                r0, c0 = br * M, bc * M
                yield (blocks6[:, :, br:br + nr, :kr, bc:bc + nc, :kc],
                       y[:, :, r0:r0 + nr * kr, c0:c0 + nc * kc].reshape(n, o, nr, kr, nc, kc))


def _put_blocks(blocks6, y):
    """Write ``blocks6`` (a view of the output blocks) into ``y``, dropping what lies beyond
    the map."""
    for blk, part in _block_views(blocks6, y):
        part[...] = blk


def _get_blocks(gy, dst):
    """Fill ``dst`` (a view of the gradient blocks) from ``gy``, zeros beyond the map."""
    if gy.shape[2] % M or gy.shape[3] % M:
        dst[...] = 0
    for blk, part in _block_views(dst, gy):
        blk[...] = part


def weight_grad(xp, gy, x, pad: int, cap: int, out=None):
    """Weight gradient of :func:`forward` (``(out, c, 3, 3)``): per tile, the output
    gradient's blocks transformed (``A gy A^T``, 36 values a block) and multiplied into the
    input's transformed blocks, ``dU += V^T Gt`` (36 GEMMs, ``(c, blocks) @ (blocks, out)``);
    at the end ``dg = G^T dU G``."""
    n, o, ho, wo = gy.shape
    c = x.shape[1]
    dtype = gy.dtype
    bt, gg, at = _matrices(xp, dtype)
    bh, bw = blocks(ho, wo)
    ws = _Workspace(xp, dtype, _tile_or_refuse(n, c, o, ho, wo, dtype.itemsize, cap, "weight_grad"),
                    c, o, ho, wo)
    du = xp.zeros((ALPHA * ALPHA, c, o), dtype=dtype)
    for n0 in range(0, n, ws.images):
        n1 = min(n, n0 + ws.images)
        v = _input_transform(xp, x, n0, n1, pad, bh, bw, ws, bt)
        nblk = v.shape[1]
        gb = ws.y[:M * M * nblk * o].reshape(M, M, n1 - n0, bh, bw, o)
        _get_blocks(gy[n0:n1], gb.transpose(2, 5, 3, 0, 4, 1))
        gt = ws.m[:ALPHA * ALPHA * nblk * o].reshape(ALPHA * ALPHA, nblk * o)
        xp.matmul(at.T, gb.reshape(M * M, nblk * o), out=gt)
        du += xp.matmul(v.transpose(0, 2, 1), gt.reshape(ALPHA * ALPHA, nblk, o))
    dw = xp.matmul(gg.T, du.reshape(ALPHA * ALPHA, c * o)).reshape(3, 3, c, o)
    if out is None:
        out = xp.empty((o, c, 3, 3), dtype=dtype)
    out.reshape(o, c, 3, 3)[...] = dw.transpose(3, 2, 0, 1)
    return out


#: Where the transforms pay, from per-layer A/Bs against the direct kernels (one thread,
#: ``python3 bench/winograd_ab.py``, bench/NOTES_kernels.md) and whole steps (``--model``): at
#: least this many input and output channels. At 64-512 channels the input and weight gradients
#: ran 1.2-1.5x faster through Winograd on 8x8 to 64x64 maps (two 128-channel shapes, 8x8 at
#: batch 32 and 32x32 at batch 4, 0.8-1.0x); at 16-32 channels the GEMMs are too thin for the
#: saved multiplications to outweigh the transforms' copies.
MIN_CHANNELS = 64
#: ... and output maps at least this many pixels a side (a 4x4 map is one block of 36 taps a
#: channel: 36 GEMMs of one row per image, slower than im2col's one large GEMM).
MIN_SIDE = 8


def pays(n: int, c: int, o: int, ho: int, wo: int, itemsize: int, cap: int,
         weight_grad: bool = False) -> bool:
    """Whether a stride-1 3x3 convolution from ``c`` to ``o`` channels onto ``ho x wo`` maps
    runs through these kernels: channels and map size as measured above, one image's workspace
    within ``cap``; for the weight gradient also at least ``max(c, o)`` blocks in all (its 36
    GEMMs sum over blocks: with fewer, a ``(c, o)`` product a few dozen deep runs far below
    BLAS's speed, and the transforms of the ``36 x c x o`` sums outweigh what they save)."""
    if min(c, o) < MIN_CHANNELS or min(ho, wo) < MIN_SIDE:
        return False
    bh, bw = blocks(ho, wo)
    if weight_grad and n * bh * bw < max(c, o):
        return False
    return tile_images(n, c, o, ho, wo, itemsize, cap) > 0


def forward_temp_bytes(n: int, c: int, o: int, ho: int, wo: int, itemsize: int, cap: int,
                       out_given: bool) -> int:
    """Peak bytes :func:`forward` holds beyond its operands (and ``out`` when given): the
    kernel's transposed copy beside its transform, then the transform, the result and a
    tile's workspace."""
    u = ALPHA * ALPHA * c * o * itemsize
    result = 0 if out_given else n * o * ho * wo * itemsize
    return max(9 * c * o * itemsize + u, u + result + workspace_bytes(n, c, o, ho, wo, itemsize, cap))


def weight_grad_temp_bytes(n: int, c: int, o: int, ho: int, wo: int, itemsize: int, cap: int,
                           out_given: bool) -> int:
    """Peak bytes :func:`weight_grad` holds beyond its operands (and ``out`` when given): a
    tile's workspace and the running ``dU`` beside either a tile's product or, at the end, the
    3x3 gradient and the result."""
    u = ALPHA * ALPHA * c * o * itemsize
    w = 9 * c * o * itemsize
    return workspace_bytes(n, c, o, ho, wo, itemsize, cap) + u + max(u, w + (0 if out_given else w))
