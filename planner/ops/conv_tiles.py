"""A convolution's memory layout: output geometry, padding, the tiles its im2col columns are
cut into (within :data:`CONV_WORKSPACE_BYTES`), the column and slab copies (channel-major and
pixel-major), the column gradients' scatter back, and the bytes those buffers take.

Why apart from :mod:`planner.ops.conv`: the layout is shared -- the whole-op kernels, their
temporaries, the pooling kernels (padding, windows) and the row executor's band convolutions
(:mod:`planner.band_kernels`) all cut and copy the same way, so a tile's shape, and the
gradients' reduction order, depend on the shapes alone.
"""

from __future__ import annotations

from planner.arrays import as_strided as _as_strided


def _out_hw(h, w, k, s, p):
    return (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1


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
