"""Normalisation: batch norm and layer norm -- statistics as BLAS reductions
(:mod:`planner.ops.reductions`), per-channel operands expanded over small maps
(:data:`EXPAND_PIXELS`), the VJPs, and each kernel's temporaries beside it."""

from __future__ import annotations

import numpy as np

from planner.ops.base import KernelCall, OpDef, UFUNC_BUFSIZE, _bias_shape, _bufs, _numel
from planner.ops.flops import _fl_elementwise
from planner.ops.reductions import _kept_axis, _reduction, _stats_temp, dots, sums


def _norm_infer(s, d, a):
    x, g, b = s
    c = x[a["axis"]]
    if tuple(g) != (c,) or tuple(b) != (c,):
        raise ValueError(f"norm: scale {g} / shift {b} do not match {x} on axis {a['axis']}")
    return tuple(x), d[0]


def _norm_axes(ndim, axis):
    axis %= ndim
    return tuple(i for i in range(ndim) if i != axis), axis


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


def _batchnorm_axes_of(shape, a):
    """:func:`_batchnorm_axes` from a shape (no array)."""
    nd = len(shape)
    if a["kind"] == "batch":
        return _norm_axes(nd, a["axis"])
    axis = a["axis"] % nd
    return (axis,), axis


def _norm_bufs(shape, a, e) -> int:
    """NumPy's ufunc buffer beside a batch norm's per-channel pass: there only where the pass's
    inner loop runs fewer than :data:`UFUNC_BUFSIZE` elements: the map's pixels against a
    broadcast operand, ``c * pixels`` against an expanded one (as tracemalloc sees it,
    tests/test_norm_pool_kernels.py)."""
    axis = a["axis"] % len(shape)
    after = _numel(shape[axis + 1:])
    inner = _numel(shape[axis:]) if after == 1 or _expands(shape, axis) else after
    return _bufs(1, shape, e) if inner < UFUNC_BUFSIZE else 0


def _expanded_temp(shape, a, e) -> int:
    """A batch norm's per-channel operand expanded over the map (:func:`_per_channel`; one at
    a time)."""
    axis = a["axis"] % len(shape)
    if not _expands(shape, axis):
        return 0
    return _numel(shape[axis:]) * e


def _batchnorm_fwd_temp(c: KernelCall) -> int:
    """The statistics' reduction (:func:`~planner.ops.reductions.sums`), then the result
    beside one per-channel operand and its ufunc buffer; the per-channel vectors throughout."""
    x, a, e = c.ins[0], c.attrs, c.e
    ch = x[a["axis"] % len(x)]
    return 8 * ch * e + max(_stats_temp(x, _batchnorm_axes_of(x, a)[0], e),
                            c.res + _norm_bufs(x, a, e) + _expanded_temp(x, a, e))


def _batchnorm_bwd_temp(c: KernelCall) -> int:
    """``x - mean`` throughout; one reduction's temporaries at a time (``sums``' ones and
    partial sums; the per-channel vectors), or the input gradient beside ``x - mean`` with one
    per-channel operand and its ufunc buffer."""
    x, a, e = c.ins[0], c.attrs, c.e
    red, _ = _batchnorm_axes_of(x, a)
    ch = x[a["axis"] % len(x)]
    return (c.xs + 8 * ch * e + max(_stats_temp(x, red, e),
                                    c.held(0, c.xs) + _norm_bufs(x, a, e)
                                    + _expanded_temp(x, a, e)))


def _layernorm_fwd_temp(c: KernelCall) -> int:
    """The result, the row statistics and one ufunc buffer."""
    x = c.ins[0]
    return c.res + _stats_temp(x, _batchnorm_axes_of(x, c.attrs)[0], c.e) + _bufs(1, c.out, c.e)


def _layernorm_bwd_temp(c: KernelCall) -> int:
    """``xhat`` and ``dxhat`` (with an input gradient), the gradient where not handed one, the
    row statistics twice and the parameter gradients' reduction, one ufunc buffer."""
    x, a, e, xs = c.ins[0], c.attrs, c.e, c.xs
    red, _ = _batchnorm_axes_of(x, a)
    other = tuple(i for i in range(len(x)) if i != a["axis"] % len(x))
    extra = xs if 0 in c.want else 0
    return (xs + extra + c.held(0, xs) + 2 * _stats_temp(x, red, e) + _stats_temp(x, other, e)
            + _bufs(1, x, e))


DEFS = [
    OpDef("batch_norm", "BatchNormalization", _norm_infer, _fl_elementwise(8), _norm_fwd, _norm_bwd,
          saves_inputs=(0, 1), fills_out=True, fills_grads=True,
          forward_temp=_batchnorm_fwd_temp, backward_temp=_batchnorm_bwd_temp),
    OpDef("layer_norm", "LayerNormalization", _norm_infer, _fl_elementwise(8), _norm_fwd, _norm_bwd,
          saves_inputs=(0, 1), fills_out=True, fills_grads=True,
          forward_temp=_layernorm_fwd_temp, backward_temp=_layernorm_bwd_temp),
]
