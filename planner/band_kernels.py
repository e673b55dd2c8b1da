"""Band kernels of the row executor (:mod:`planner.execute.rows_exec`): convolutions on a band.

A row step runs a region's convolutions once per band of 1-8 output rows. A ResNet's 1x1
convolutions are most of its convolutions, and at its deep stages a band is a few pixels per
image under a large weight (2048x512 on a 4x4 map: one row, 4 pixels). The whole-op kernel
(:data:`planner.ops.OPS`) is built for whole maps: one GEMM per image, reading the weight once
per image for a few columns; its weight gradient a per-image product, their weight-sized sum
and the caller's add into the parameter gradient (several weight-sized passes for a few dozen
multiply-adds a weight); its input gradient a zeroed array, the product copied in, then cropped
and added by the caller. Measured here (``bench/rows_profile.py resnet50 --batch 2 --width 64
--image 128`` before these kernels): the row step's 1x1 band backward at 12-22 GFLOP/s against
the plain step's 28-42. These kernels do the same products for a band:

* below :data:`MERGE_PIXELS` output pixels per image, the band's images share one GEMM
  (transposing copies of the band's input and output gradient, ``(channels, images x pixels)``,
  a few KB to a few hundred). Each output column is the same dot product as in the per-image
  GEMM: OpenBLAS's results do not depend on the other columns, so the forward and the input
  gradient are bitwise the whole-op kernel's (tests/test_band_kernels.py checks it);
* the weight gradient goes straight into the parameter's gradient buffer: written by the GEMM at
  the first band, added by it at the others (BLAS ``gemm`` with ``beta = 1`` through SciPy on
  NumPy; a product and an add elsewhere), no weight-sized temporary. One GEMM over the band's
  images and the accumulation inside BLAS round differently from per-image products summed: the
  weight gradients agree with the whole-op kernel's within float32 rounding, not bitwise;
* the input gradient is written (or added) into the band gradient buffer's rows, no zeroed
  array of its own (a strided 1x1's skipped rows are zeroed there when the step fills it).

k x k convolutions (:func:`conv_forward`, :func:`conv_backward`): one GEMM of the weight as
it is stored with the band's channel-major columns (images merged), the weight gradient added
inside BLAS likewise, the input gradient as column gradients added back per tap. Their
summation order need not be the whole-op kernel's (which picks pixel-major columns by its own
measure): rows_exec uses them for VJPs and for recomputations of regions whose forward ran
whole, never where values must be the forward's bits (:func:`planner.execute.rows_exec.conv_band`).
Where :func:`pixel_major` says so (stride 1, narrow maps, enough channels: a CIFAR ResNet's),
:func:`conv_pm_forward` / :func:`conv_pm_backward` instead: pixel-major columns read from the
band's rows where they lie in their buffer, the map's padding written into the slab they are
copied through (no padded copy of the band first), the input gradient as the transposed
convolution of the output gradient computed on the band's own rows only.

:func:`conv1x1_temp_bytes` / :func:`conv_temp_bytes` / :func:`conv_pm_temp_bytes` say what each
kernel holds beyond its inputs and the buffers it writes (:mod:`planner.rows.step` reads them;
tests/test_band_kernels.py meters them). They sit beside the op table (:mod:`planner.ops`), below
the executor, for that reason: planning a row plan's whole step prices them, and the planner
never imports the executor. ``bench/band_kernels_ab.py`` at 78975d9 times the
kernels against the whole-op kernels on bands of row plans, ``bench/rows_pm_ab.py`` at 78975d9 the
pixel-major ones against what each band step of a plan took before them.
"""

from __future__ import annotations

import numpy as np

from planner.arrays import as_strided
from planner.ops import (PIXEL_MAJOR_MAX_WIDTH, PIXEL_MAJOR_MIN_CHANNELS, UFUNC_BUFSIZE,
                         col2im_add, merged_columns, pixel_major_slab, swap01)

#: A 1x1 band convolution merges its images into one GEMM below this many output pixels per image
#: and from :data:`MERGE_WEIGHT` weight elements: there the per-image GEMMs re-read a large weight
#: for a few columns each. ``bench/band_kernels_ab.py`` at 78975d9 (one thread, 2 images): merging
#: gains up to ~45% at 4-64 pixels under 256x1024-2048x512 weights, is even at 128x512, and loses
#: under 64x256 weights (the two copies then cost more than the second read of the weight saves) and
#: at 128-256 pixels.
MERGE_PIXELS = 128
MERGE_WEIGHT = 1 << 18
#: From this many elements of the matrix it adds into, :func:`gemm_into` accumulates inside
#: BLAS (SciPy's ``gemm``, ~6 us a call more than ``matmul``): below, a product and an add are
#: faster (measured here: even at 16-32K elements, 30% faster at 128K).
BLAS_ACCUMULATE_MIN = 1 << 15


def merged(ho: int, wo: int, o: int, c: int) -> bool:
    """Whether a 1x1 band convolution with ``ho x wo`` output maps and an ``o x c`` weight
    merges its images."""
    return ho * wo < MERGE_PIXELS and o * c >= MERGE_WEIGHT


def accumulates_in_blas(xp, c) -> bool:
    """Whether :func:`gemm_into` adds into ``c`` inside BLAS (no product-sized temporary)."""
    return c.size >= BLAS_ACCUMULATE_MIN and c.flags.c_contiguous and \
        _blas_gemm(xp, c.dtype) is not None


def _images_merged(xp, a):
    """``(C, N*H*W)`` contiguous copy of an ``(N, C, H, W)`` array (any strides)."""
    n, c, h, w = a.shape
    return swap01(xp, a).reshape(c, n * h * w)


def _blas_gemm(xp, dtype):
    """SciPy's BLAS ``gemm`` for ``dtype`` on NumPy (float32 / float64), else None."""
    if xp is not np or dtype not in (np.float32, np.float64):
        return None
    from scipy.linalg import blas

    return blas.sgemm if dtype == np.float32 else blas.dgemm


def _blas_operand(m):
    """``(array, trans)`` with ``op(array) = m^T`` for a column-major BLAS call: no copy when ``m``
    is C- or F-contiguous."""
    if m.flags.c_contiguous:
        return m.T, 0
    if m.flags.f_contiguous:
        return m, 1
    return np.ascontiguousarray(m).T, 0


def gemm_into(xp, a, b, c, accumulate: bool) -> None:
    """``c = a @ b`` or, ``accumulate``, ``c += a @ b`` inside the GEMM (``beta = 1``: no
    product-sized temporary) where the backend's BLAS is reachable; ``c`` a C-contiguous matrix."""
    if not accumulate:
        xp.matmul(a, b, out=c)
        return
    if not accumulates_in_blas(xp, c):
        c += xp.matmul(a, b)
        return
    gemm = _blas_gemm(xp, c.dtype)
    # row-major c = a @ b is column-major c^T = b^T a^T
    (ba, ta), (bb, tb) = _blas_operand(b), _blas_operand(a)
    got = gemm(1.0, ba, bb, 1.0, c.T, trans_a=ta, trans_b=tb, overwrite_c=1)
    if got.ctypes.data != c.ctypes.data:         # SciPy had to copy: put the result back
        c[...] = got.T


def conv1x1_forward(xp, x, w, s: int, out) -> None:
    """A 1x1, unpadded, stride-``s`` convolution of band input ``x`` (``(N, C, H, W)``, a view)
    with weight ``w`` into ``out`` (``(N, O, Ho, Wo)``, a view of the band buffer): the images in
    one GEMM where :func:`merged`, else the whole-op kernel's per-image GEMMs (the same call:
    the same bits), straight into ``out`` when it is contiguous."""
    if s > 1:
        x = x[:, :, ::s, ::s]
    n, c, ho, wo = x.shape
    o = w.shape[0]
    w2 = w.reshape(o, c)
    if merged(ho, wo, o, c):
        y = xp.matmul(w2, _images_merged(xp, x))
        out[...] = y.reshape(o, n, ho, wo).transpose(1, 0, 2, 3)
        return
    if s > 1:                            # the subsampled input as the columns (as planner.ops)
        x = xp.ascontiguousarray(x)
    if out.flags.c_contiguous:
        xp.matmul(w2, x.reshape(n, c, ho * wo), out=out.reshape(n, o, ho * wo))
    else:
        out[...] = xp.matmul(w2, x.reshape(n, c, ho * wo)).reshape(n, o, ho, wo)


def conv1x1_backward(xp, gy, x, w, s: int, dw, dw_fill: bool, dx, dx_fill: bool) -> None:
    """Gradients of a 1x1, unpadded, stride-``s`` band convolution from its output gradient
    ``gy`` (``(N, O, Ho, Wo)``): the weight's into ``dw`` (the ``(O, C, 1, 1)`` parameter gradient
    buffer; None: not wanted), written when ``dw_fill`` else added; the input's into ``dx`` (the
    band input's rows of its gradient buffer, ``(N, C, H, W)``; None: not wanted), likewise."""
    n, o, ho, wo = gy.shape
    c = w.shape[1]
    merge = merged(ho, wo, o, c)
    gm = _images_merged(xp, gy) if merge else None
    if dw is not None:
        xs = x[:, :, ::s, ::s] if s > 1 else x
        d2 = dw.reshape(o, c)
        if merge:
            xm = _images_merged(xp, xs)
            gemm_into(xp, gm, xm.T, d2, not dw_fill)
            del xm
        else:
            g3, x3 = gy.reshape(n, o, ho * wo), xs.reshape(n, c, ho * wo)
            for i in range(n):           # per image (few): one weight-sized pass each
                gemm_into(xp, g3[i], x3[i].T, d2, not dw_fill or i > 0)
            del x3
    if dx is not None:
        w2t = w.reshape(o, c).T
        if merge:
            d = xp.matmul(w2t, gm).reshape(c, n, ho, wo).transpose(1, 0, 2, 3)
        else:
            d = xp.matmul(w2t, gy.reshape(n, o, ho * wo)).reshape(n, c, ho, wo)
        if s > 1:
            if dx_fill:
                dx[...] = 0
            dx = dx[:, :, ::s, ::s]
        if dx_fill:
            dx[...] = d
        else:
            dx += d


def conv1x1_temp_bytes(phase: str, x_shape, w_shape, s: int, itemsize: int, want=(),
                       dw_fill: bool = False, dx_fill: bool = False, x_whole: bool = True,
                       dx_whole: bool = True, out_whole: bool = True) -> int:
    """The most bytes :func:`conv1x1_forward` (``phase`` ``"forward"``) or
    :func:`conv1x1_backward` (``"backward"``: gradient positions ``want``, 0 the input's, 1 the
    weight's; ``dw_fill`` and ``dx_fill`` as passed) holds at once on NumPy beyond its inputs
    and the buffers it writes. ``x_shape``: the band input as the kernel gets it; ``x_whole`` /
    ``dx_whole`` / ``out_whole``: whether the band input / its gradient rows / the forward's
    output rows are a whole buffer, not rows cut out of a larger one (SciPy's ``gemm`` reads
    contiguous matrices only: it takes a copy of an image's rows; NumPy adds into a strided view
    through ufunc buffers)."""
    n, c, h, w = x_shape
    o = w_shape[0]
    ho, wo = (h - 1) // s + 1, (w - 1) // s + 1
    px = n * ho * wo * itemsize
    if phase == "forward":
        if merged(ho, wo, o, c):                  # the merged input, then the product beside it
            return px * (c + o)
        # a strided band's subsampled copy; the product, when not straight into ``out``
        return (px * c if s > 1 else 0) + (0 if out_whole else px * o)
    merge = merged(ho, wo, o, c)
    dw = 0
    if 1 in want:
        # the merged input, or a strided band's subsampled copy (a band's rows reshape to a view)
        dw = px * c if merge or s > 1 else 0
        adds = not dw_fill or (not merge and n > 1)
        if adds and o * c < BLAS_ACCUMULATE_MIN:
            dw += o * c * itemsize                # gemm_into's product before its add
        elif adds and not merge and s == 1 and not x_whole:
            dw += px * c // n                     # one image's rows, contiguous, for SciPy
    dx = 0
    if 0 in want:                                 # the product before it goes into the buffer
        dx = px * c
        if not dx_fill:                           # NumPy's in-place add: a buffer for the
            # target and its copy where that is strided, one for a transposed (merged) product
            bufs = (2 if s > 1 or not dx_whole else 0) + (1 if merge and n > 1 else 0)
            dx += bufs * min(UFUNC_BUFSIZE, n * c * ho * wo) * itemsize
    return (px * o if merge else 0) + max(dw, dx)


# ---------------------------------------------------------------- k x k (k > 1) convolutions
#: A k x k band convolution takes its columns in one piece, ``(c*k*k, images*pixels)``: at most
#: this many bytes of them (else the whole-op kernel's tiles run it).
COLS_BYTES = 32 << 20


def _band_cols(xp, x, k: int, s: int):
    """The im2col columns of a padded band ``x`` (``(N, C, H, W)``, explicit padding: the
    convolution is unpadded), channel-major and images merged: ``(C*k*k, N*Ho*Wo)``, one copy
    (:func:`planner.ops.merged_columns`, the whole-op kernel's merged tiles)."""
    n, c, h, w = x.shape
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    return merged_columns(x, k, s, xp.empty(c * k * k * n * ho * wo, dtype=x.dtype))


def conv_fits(x_shape, w_shape, s: int, itemsize: int) -> bool:
    """Whether a k x k band convolution's columns fit :data:`COLS_BYTES` (``x_shape``: the
    padded band)."""
    n, c, h, w = x_shape
    k = w_shape[2]
    return c * k * k * n * ((h - k) // s + 1) * ((w - k) // s + 1) * itemsize <= COLS_BYTES


#: The band backward (:func:`conv_backward`) runs where the weight is large for the band -- the
#: whole-op kernel's weight-sized products, sums and copies then cost more than the band's product
#: -- or the band is small (its per-call overhead): from :data:`BWD_WEIGHT` weight elements or up to
#: :data:`BWD_PIXELS` output pixels (all images). ``bench/band_kernels_ab.py`` at 78975d9 (one
#: thread, bands of resnet50, CIFAR resnet and VGG-16 plans; 21:33 run): 1.1-1.6x faster under
#: 147K-2.4M-element weights, as fast at 32-128 pixels, the whole-op kernel up to 1.5x faster on
#: bands of 512-4,096 pixels under 2K-37K-element weights.
BWD_WEIGHT = 1 << 16
BWD_PIXELS = 128


def backward_pays(w_shape, pixels: int) -> bool:
    """Whether a k x k band convolution's backward runs :func:`conv_backward` (``pixels``: the
    band's output pixels, all images)."""
    o, c, k, _ = w_shape
    return o * c * k * k >= BWD_WEIGHT or pixels <= BWD_PIXELS


def conv_forward(xp, x, w, s: int, out) -> None:
    """A ``k x k`` stride-``s`` convolution of a padded band ``x`` into ``out`` (a view of the
    band buffer): one GEMM of the ``(O, C*k*k)`` weight -- as it is stored, no reordered copy
    -- with the band's columns, one transposing copy into ``out``, in one call (the whole-op
    kernel's tiling and choices cost per call what a small band's product costs;
    ``bench/band_kernels_ab.py`` at 78975d9). The columns' order (channel, tap) sums each pixel's
    products in another order than a pixel-major whole-op kernel: values within rounding of it."""
    o, c, k, _ = w.shape
    n = x.shape[0]
    cols = _band_cols(xp, x, k, s)
    ho, wo = (x.shape[2] - k) // s + 1, (x.shape[3] - k) // s + 1
    y = xp.matmul(w.reshape(o, c * k * k), cols)
    del cols
    out[...] = y.reshape(o, n, ho, wo).transpose(1, 0, 2, 3)


def conv_backward(xp, gy, x, w, s: int, dw, dw_fill: bool, want_dx: bool):
    """Gradients of a ``k x k`` band convolution (``x`` the padded band, ``gy`` its output
    gradient): the weight's into ``dw`` (the parameter gradient buffer; None: not wanted),
    written when ``dw_fill`` else added inside the GEMM (:func:`gemm_into`); returns the padded
    band's input gradient (``want_dx``; else None) for the caller to crop into its rows --
    ``W^T g`` column gradients added back at their windows, one strided add per tap."""
    o, c, k, _ = w.shape
    n, _, ho, wo = gy.shape
    gm = _images_merged(xp, gy)
    if dw is not None:
        cols = _band_cols(xp, x, k, s)
        gemm_into(xp, gm, cols.T, dw.reshape(o, c * k * k), not dw_fill)
        del cols
    if not want_dx:
        return None
    dxpad = xp.zeros(x.shape, dtype=gy.dtype)
    col2im_add(xp, dxpad, xp.matmul(w.reshape(o, c * k * k).T, gm), 0, n, 0, k, s, ho, wo,
               merged=True)
    return dxpad


def conv_temp_bytes(phase: str, x_shape, w_shape, s: int, itemsize: int, want=(),
                    dw_fill: bool = False) -> int:
    """The most bytes :func:`conv_forward` / :func:`conv_backward` hold at once on NumPy beyond
    their inputs and the buffers they write (``x_shape`` the padded band; the backward's
    returned input gradient included)."""
    n, c, h, w = x_shape
    o, _, k, _ = w_shape
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    px = n * ho * wo * itemsize
    cols = px * c * k * k
    if phase == "forward":
        return cols + px * o
    dw = 0
    if 1 in want:
        dw = cols + (o * c * k * k * itemsize if not dw_fill and o * c * k * k < BLAS_ACCUMULATE_MIN
                     else 0)
    dx = 0
    if 0 in want:                        # the column gradients, the padded input gradient and
        # the ufunc buffers of a strided add of a transposed operand (three, of a tap's size)
        dx = cols + n * c * h * w * itemsize + 3 * min(UFUNC_BUFSIZE, n * c * ho * wo) * itemsize
    return px * o + max(dw, dx)


# ------------------------------------------- pixel-major k x k band convolutions (stride 1)
#: A stride-1 k x k band convolution on maps at most :data:`planner.ops.PIXEL_MAJOR_MAX_WIDTH` wide
#: with at least :data:`planner.ops.PIXEL_MAJOR_MIN_CHANNELS` input channels takes pixel-major
#: columns (:func:`conv_pm_forward`, :func:`conv_pm_backward`) from this many output pixels (all
#: images) per output channel: the channel-major columns' copy runs one inner loop per output row of
#: each channel and tap (``wo`` elements: 4-16 on a CIFAR ResNet's maps), the pixel-major one ``k *
#: channels`` elements a loop; the kernels reorder the weight on each call, which a band of a few
#: pixels under a large weight does not amortise. ``bench/rows_pm_ab.py`` at 78975d9 (one thread,
#: every such band step of a plan, against the kernel it took before): the backward 0.54-0.86x from
#: 1-2 pixels an output channel up (resnet, unet, vgg16, resnet50 ``--quick``), 0.9-1.5x below one
#: (128-channel weights on bands of 8-48 pixels).
PM_PIXELS_PER_OUT = 1
#: ... and under weights of at most this many elements: the weight-sized passes (the reordered and
#: flipped weights, the weight gradient reordered into its buffer where the channel-major kernel
#: adds it inside BLAS) outgrow the band's products. ``bench/rows_pm_ab.py`` at 78975d9 at 128x128,
#: batch 2, width 64: the backward 0.80-0.91x under 64x64x3x3 weights, 0.99-1.06x under 128x128x3x3
#: (147K elements), 1.09-1.20x under 256x128x3x3-256x256x3x3 at 2-3 pixels an output channel; the
#: U-Net's ``--quick`` 0.81-0.85x under 64x128x3x3 (74K).
PM_MAX_WEIGHT = 1 << 17
#: The forward's own gain is the shorter copy alone (the backward also drops the padded input
#: gradient and its crop): it takes the pixel-major kernel on maps up to
#: :data:`PM_FORWARD_NARROW` wide, or up to :data:`PM_FORWARD_WIDE` from
#: :data:`PM_FORWARD_PIXELS` output pixels. ``bench/rows_pm_ab.py`` at 78975d9: the CIFAR ResNet's
#: (16 images) 0.55-0.71x on 4-8 wide maps, 0.82-0.90x on 16 wide bands of 768-1,536 pixels;
#: resnet50's (2 images) 0.93x on 8 wide maps, 1.08x on 16 wide bands of 128 pixels; the U-Net's
#: 1.04-1.21x on 16 wide bands of 48-96 pixels, 0.82-1.11x on 32 wide ones.
PM_FORWARD_NARROW = 8
PM_FORWARD_WIDE = 16
PM_FORWARD_PIXELS = 512


def pixel_major(x_shape, w_shape, s: int, phase: str = "bwd") -> bool:
    """Whether a k x k band convolution of a padded band shaped ``x_shape`` runs
    :func:`conv_pm_backward` (``phase`` ``"bwd"``) / :func:`conv_pm_forward` (else)."""
    n, c, h, w = x_shape
    o, _, k, _ = w_shape
    ho, wo = h - k + 1, w - k + 1
    if not (s == 1 and k > 1 and c >= PIXEL_MAJOR_MIN_CHANNELS and wo <= PIXEL_MAJOR_MAX_WIDTH
            and n * ho * wo >= PM_PIXELS_PER_OUT * o and o * c * k * k <= PM_MAX_WEIGHT):
        return False
    return phase == "bwd" or wo <= PM_FORWARD_NARROW or (
        wo <= PM_FORWARD_WIDE and n * ho * wo >= PM_FORWARD_PIXELS)


def _pm_columns(xp, x, a: int, b: int, p: int, k: int):
    """Pixel-major columns ``(N*Ho*Wo, k*k*C)`` (taps in ``(i, j, channel)`` order, the whole-op
    kernels' :func:`planner.ops._pm_tiles` layout) of rows ``[a, b)`` of ``x`` (``(N, C, R, W)``,
    any strides), zero rows where ``[a, b)`` leaves ``[0, R)`` and ``p`` zero columns each side:
    one transposing copy into a slab (:func:`planner.ops.pixel_major_slab`), one strided copy
    out of it."""
    n, c, _, w = x.shape
    wp = w + 2 * p
    ho, wo = b - a - k + 1, wp - k + 1
    slab = pixel_major_slab(xp, x, 0, n, a, b, p, xp.empty(n * (b - a) * wp * c, dtype=x.dtype))
    e = x.dtype.itemsize
    cols = xp.empty((n, ho, wo, k, k, c), dtype=x.dtype)
    cols[...] = as_strided(slab, (n, ho, wo, k, k, c),
                           ((b - a) * wp * c * e, wp * c * e, c * e, wp * c * e, c * e, e))
    return cols.reshape(n * ho * wo, k * k * c)


def conv_pm_forward(xp, x, a: int, b: int, p: int, w, out) -> None:
    """A stride-1 ``k x k`` convolution of rows ``[a, b)`` of buffer ``x`` (the rows the band
    reads; zeros where they leave the buffer, the map's edge, and ``p`` zero columns each side)
    into ``out`` (a view of the band buffer): the pixel-major columns times the weight in their
    ``(i, j, channel)`` order, one transposing copy into ``out``."""
    o, c, k, _ = w.shape
    n = x.shape[0]
    cols = _pm_columns(xp, x, a, b, p, k)
    wmat = xp.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(o, k * k * c)
    y = xp.matmul(cols, wmat.T)
    del cols, wmat
    out[...] = y.reshape(n, out.shape[2], out.shape[3], o).transpose(0, 3, 1, 2)


def conv_pm_backward(xp, gy, x, a: int, b: int, p: int, w, dw, dw_fill: bool, dx,
                     dx_fill: bool) -> None:
    """Gradients of :func:`conv_pm_forward`'s convolution from its output gradient ``gy`` (the
    band's, ``(N, O, Ho, Wo)``): the weight's into ``dw`` (the parameter gradient buffer; None:
    not wanted), written when ``dw_fill`` else added: the output gradient as ``(O, pixels)``
    times the pixel-major columns, reordered into ``dw``'s layout; the input's into ``dx`` (the
    rows of the input's gradient buffer the band covers, ``(N, C, rows, W)``; None: not
    wanted), likewise: the transposed convolution of ``gy`` (padded by ``k - 1 - p`` columns,
    and its rows by what the band's top padding leaves) with the flipped kernel, computed on
    those rows only (no padded gradient to crop)."""
    o, c, k, _ = w.shape
    n, _, ho, wo = gy.shape
    if dw is not None:
        g2 = _images_merged(xp, gy).reshape(o, n * ho * wo)
        cols = _pm_columns(xp, x, a, b, p, k)
        part = xp.matmul(g2, cols).reshape(o, k, k, c).transpose(0, 3, 1, 2)
        del g2, cols
        if dw_fill:
            dw[...] = part
        else:
            dw += part
        del part
    if dx is not None:
        top, rows = max(0, -a), dx.shape[2]
        cols = _pm_columns(xp, gy, top - k + 1, top + rows, k - 1 - p, k)
        wf = xp.ascontiguousarray(w[:, :, ::-1, ::-1].transpose(2, 3, 0, 1)).reshape(k * k * o, c)
        d = xp.matmul(cols, wf)
        del cols, wf
        d = d.reshape(n, rows, dx.shape[3], c).transpose(0, 3, 1, 2)
        if dx_fill:
            dx[...] = d
        else:
            dx += d


def conv_pm_temp_bytes(phase: str, x_shape, w_shape, itemsize: int, pads, want=()) -> int:
    """The most bytes :func:`conv_pm_forward` / :func:`conv_pm_backward` (gradient positions
    ``want``: 0 the input's, 1 the weight's) hold at once on NumPy beyond their inputs and the
    buffers they write, filled or added alike: ``x_shape`` the band as if padded, ``(N, C, rows +
    top + bottom, W + 2 side)``, ``pads`` ``(top, bottom, side)``."""
    n, c, h, wp = x_shape
    o, _, k, _ = w_shape
    top, bottom, side = pads
    ho, wo = h - k + 1, wp - k + 1
    e = itemsize
    slab, cols, wt = n * h * wp * c * e, n * ho * wo * k * k * c * e, o * c * k * k * e
    if phase == "forward":                       # the slab beside its columns, then the
        return max(slab + cols, cols + wt + n * ho * wo * o * e)   # reordered weight, product
    dw = 0
    if 1 in want:                                # the merged output gradient beside the columns
        # and their slab, then the product (added through no ufunc buffers: same dtypes)
        dw = n * ho * wo * o * e + max(slab + cols, cols + wt)
    dx = 0
    if 0 in want:                                # the output gradient's slab and columns, then
        # the flipped kernel and the product beside the columns
        rows, w = h - top - bottom, wp - 2 * side
        gslab = n * (rows + k - 1) * (w + k - 1) * o * e
        gcols = n * rows * w * k * k * o * e
        dx = max(gslab + gcols, gcols + wt + n * rows * w * c * e)
    return max(dw, dx)
