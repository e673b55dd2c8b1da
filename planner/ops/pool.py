"""Pooling and upsampling: max pool, average pool, nearest upsampling -- strided window passes
(no per-element Python), their VJPs and temporaries side by side."""

from __future__ import annotations

import numpy as np

from planner.arrays import as_strided as _as_strided
from planner.ops.base import KernelCall, OpDef, _bufs, _numel
from planner.ops.conv_tiles import _out_hw, _pad, _window
from planner.ops.flops import _fl_elementwise, _fl_pool


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


def _maxpool_fwd_temp(c: KernelCall) -> int:
    """The result, the padded input (with a pad) and one ufunc buffer."""
    p = c.attrs.get("pad", 0)
    n, ch, h, w = c.ins[0]
    return c.res + (n * ch * (h + 2 * p) * (w + 2 * p) * c.e if p else 0) + _bufs(1, c.out, c.e)


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


def _maxpool_bwd_temp(c: KernelCall) -> int:
    """The padded input and gradient, the two boolean masks, the last product (overlapping
    windows) or the unpadded copy, and two ufunc buffers."""
    a, e = c.attrs, c.e
    k, s, p = a["kernel"], a["stride"], a.get("pad", 0)
    n, ch, h, w = c.ins[0]
    padded = n * ch * (h + 2 * p) * (w + 2 * p) * e
    dxpad = 0 if p == 0 and 0 in c.into else padded
    last = max(c.ys if s < k else 0, c.xs if p else 0)
    return (padded if p else 0) + dxpad + 2 * _numel(c.out) + last + _bufs(2, c.out, e)


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


def _avgpool_fwd_temp(c: KernelCall) -> int:
    """The result; a global pool's sum beside it."""
    k = c.attrs["kernel"]
    return 2 * c.ys if c.ins[0][2] == k and c.ins[0][3] == k else c.ys


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


def _avgpool_bwd_temp(c: KernelCall) -> int:
    """The scaled output gradient and the input gradient."""
    return c.ys + c.xs


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


def _upsample_bwd_temp(c: KernelCall) -> int:
    """The input gradient and one ufunc buffer of the strided adds."""
    return c.xs + _bufs(1, c.ins[0], c.e)


DEFS = [
    OpDef("max_pool", "MaxPooling2D", _pool_infer, _fl_pool, _maxpool_fwd, _maxpool_bwd,
          saves_inputs=(0,), saves_output=True, fills_out=True, fills_grads=True,
          forward_temp=_maxpool_fwd_temp, backward_temp=_maxpool_bwd_temp),
    OpDef("avg_pool", "AveragePooling2D", _pool_infer, _fl_pool, _avgpool_fwd, _avgpool_bwd,
          forward_temp=_avgpool_fwd_temp, backward_temp=_avgpool_bwd_temp),
    OpDef("upsample", "Unpooling2D", _upsample_infer, _fl_elementwise(1), _upsample_fwd,
          _upsample_bwd, fills_out=True, backward_temp=_upsample_bwd_temp),
]
