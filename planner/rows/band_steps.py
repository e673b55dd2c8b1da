"""What each step of a row plan's walk runs: the band a step reads, which band kernel it takes,
whether it writes its buffer in place — the row executor's decisions, as functions of the plan.

Why here, below both: the row executor (:mod:`planner.execute.rows_exec`) runs these decisions,
and the whole-step prediction of a row plan (:mod:`planner.rows.step`) prices the same steps
while planning (padded copies, the band kernels' temporaries), so planning never imports the
executor (``tests/test_layering.py``). The kernels they choose between are the op table's
(:mod:`planner.ops`) and the band kernels (:mod:`planner.band_kernels`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from planner import band_kernels
from planner.ops import OPS
from planner.rows import layers as L
from planner.rows import walk as walk_mod

__all__ = ["Cut", "cut", "DIRECT_BAND", "writes_band_directly", "band_attrs", "conv1x1_band",
           "conv_band", "conv_pm_band", "buffer_offset", "deferred_sums", "first_write",
           "first_writes"]


@dataclasses.dataclass
class Cut:
    """How a band of output rows ``[lo, hi)`` reads one input map."""

    r0: int          # first input row read
    r1: int          # one past the last
    top: int         # padding rows added above / below / columns each side
    bottom: int
    side: int
    crop: int        # upsample: first wanted row of the computed output


def cut(ly, i, lo, hi) -> Cut:
    kind, k, s, p, h = (int(ly.kind[i]), int(ly.k[i]), int(ly.s[i]), int(ly.p[i]), int(ly.h_in[i]))
    if kind == L.WINDOW:
        a, b = lo * s - p, (hi - 1) * s - p + k
        r0, r1 = max(0, a), min(h, b)
        return Cut(r0, r1, r0 - a, b - r1, p, 0)
    if kind == L.UPSAMPLE:
        r0, r1 = lo // s, (hi - 1) // s + 1
        return Cut(r0, r1, 0, 0, 0, lo - r0 * s)
    return Cut(lo, hi, 0, 0, 0, 0)


#: Band kernels that write their result straight into the band buffer (a strided view of it):
#: elementwise ufuncs, whose values do not depend on the output's layout. A batch norm's band
#: is normalised there too; the other kernels return an array copied in.
DIRECT_BAND = ("relu", "add", "bias")


def writes_band_directly(p, st) -> bool:
    """Whether band step ``st`` of plan ``p`` writes its band buffer without a result of its own:
    :data:`DIRECT_BAND` kernels and batch norms always; a windowed kernel that fills its output
    (convolution, max pool) when the band computes all its rows (no tail rows first: the buffer,
    contiguous, is exactly the band's output)."""
    ly, i = p.layers, st.op
    if ly.norm[i] or ly.ops[i] in DIRECT_BAND:
        return True
    lo, hi = (int(v) for v in p.phase_ranges[st.level, i, st.band])
    rows = p.walk.shapes[st.writes[0][0]][0][2]
    return bool(ly.kind[i] == L.WINDOW and OPS[ly.ops[i]].fills_out
                and int(p.phase_fresh[st.level, i, st.band]) == lo and rows == hi - lo)


def band_attrs(ly, i) -> dict:
    attrs = dict(ly.attrs[i])
    if "pad" in attrs:
        attrs["pad"] = 0           # the band is padded explicitly (rows only where the map ends)
    return attrs


def conv1x1_band(ly, i) -> bool:
    """Whether region op ``i``'s band steps run :mod:`planner.band_kernels`' 1x1
    convolution (an unpadded 1x1 convolution): its forward straight into the band buffer (a
    band's images in one GEMM where that pays), its backward's weight gradient added inside the
    GEMM and input gradient written into the buffer."""
    if ly.ops[i] != "conv2d" or int(ly.k[i]) != 1 or ly.attrs[i]["pad"] != 0:
        return False
    return True


def conv_band(p, i, phase: str, cut) -> bool:
    """Whether region op ``i``'s band step of plan ``p`` (``phase``: its walk phase, ``"bwd"``
    for its VJP) runs :mod:`planner.band_kernels`' k x k convolution (k > 1): its VJP
    where ``band_kernels.backward_pays``; its forward only in the backward's recomputations of a
    region whose forward ran whole (a batch norm's region): a region swept in bands keeps the
    whole-op kernel there too, so that the recomputed values are the forward's bits (in float32
    the ReLU masks and max-pool choices of values recomputed in another summation order moved
    a VGG-16's 128x128 width-64 float32 gradients by up to 1.5e-2 of their largest from the
    plain step's, against 6e-3 without, ``bench/rows_ab.py`` at 1f4e697); and only when the
    band's columns fit ``band_kernels.COLS_BYTES``. Where ``band_kernels.pixel_major``, every
    such VJP takes the band kernel (:func:`conv_pm_band`)."""
    ly = p.layers
    if ly.ops[i] != "conv2d" or int(ly.k[i]) == 1:
        return False
    if phase != "bwd" and not p.whole_forward[int(p.region[i])]:
        return False
    n, c, _, w = ly.in_shapes[i][0]
    shape = (n, c, cut.r1 - cut.r0 + cut.top + cut.bottom, w + 2 * cut.side)
    k, s = int(ly.k[i]), int(ly.s[i])
    if phase == "bwd" and not band_kernels.pixel_major(shape, ly.in_shapes[i][1], s) and \
            not band_kernels.backward_pays(
            ly.in_shapes[i][1], n * ((shape[2] - k) // s + 1) * ((shape[3] - k) // s + 1)):
        return False
    return band_kernels.conv_fits(shape, ly.in_shapes[i][1], s, np.dtype(ly.dtypes[i]).itemsize)


def conv_pm_band(p, i, phase: str, cut) -> bool:
    """Whether :func:`conv_band`'s band step runs the pixel-major band kernels
    (``band_kernels.conv_pm_forward`` / ``conv_pm_backward``: the band's rows read where they lie,
    no padded copy of them)."""
    if not conv_band(p, i, phase, cut):
        return False
    ly = p.layers
    n, c, _, w = ly.in_shapes[i][0]
    shape = (n, c, cut.r1 - cut.r0 + cut.top + cut.bottom, w + 2 * cut.side)
    return band_kernels.pixel_major(shape, ly.in_shapes[i][1], int(ly.s[i]), phase)


def buffer_offset(p, key) -> int:
    """First map row held by buffer ``key`` of plan ``p``'s walk (0 for whole tensors)."""
    if key[0] in walk_mod.WHOLE:
        return 0
    return int(p.phase_ranges[key[3], key[1], key[2], 0])


def deferred_sums(steps) -> set:
    """Batch norms whose bnsinks all come before their bnseeds (and that have some): the sum of
    the output gradient, which bnseed needs and which is the shift's gradient, is then taken
    once over the whole gradient ``("gw", op)`` at the first bnseed, not per band."""
    sinks, seeds = {}, {}
    for n, st in enumerate(steps):
        if st.kind == "bnsink":
            sinks[st.op] = n
        elif st.kind == "bnseed":
            seeds.setdefault(st.op, n)
    return {i for i, n in seeds.items() if i in sinks and sinks[i] < n}


def first_write(st, key) -> bool:
    """Whether step ``st`` allocates buffer ``key`` and writes it once (its first write)."""
    return key in st.allocs and sum(k == key for k, _ in st.writes) == 1


def first_writes(opdef, keys: dict, st) -> list:
    """Gradient positions of a whole op's backward step whose buffers this step allocates (its
    first write): a kernel that fills its gradients writes them there itself, instead of into an
    array of its own added afterwards -- a second copy of, say, fc6's weight gradient at the FC
    backward, the peak of a batch-1 VGG-16 row step."""
    if not opdef.fills_grads:
        return []
    vals = list(keys.values())       # an input read twice sums two gradients: added, not filled
    return [k for k, key in keys.items() if key in st.allocs and vals.count(key) == 1]
