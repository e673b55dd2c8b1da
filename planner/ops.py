"""The op table: each operator's shape rule, FLOPs, forward kernel and hand-written VJP.

It sits below :mod:`planner.rows` (row geometry, FLOPs of a row plan) and
:mod:`planner.execute` (tracer, exporter, executors), which both read it and never each
other for it.

Every kernel is written against an array module ``xp`` (NumPy or CuPy), so the same code runs on
both. An op's backward reads only what its :class:`OpDef` says it saves (``saves_inputs``,
``saves_output``): the exported cg.txt tags exactly those as ``input`` / ``output``, so a planner
that keeps those values alive can always run the backward block.

All kernels are deterministic (fixed loop and reduction orders), which is what makes gradients of
a recomputation schedule bitwise identical to the plain run's.

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



@dataclasses.dataclass(frozen=True)
class OpDef:
    name: str                 # tracer / details name
    type: str                 # cg.txt FunctionType (Chainer's class names where they exist)
    infer: Callable           # (in_shapes, in_dtypes, attrs) -> (shape, dtype)
    flops: Callable           # (in_shapes, out_shape, attrs) -> forward FLOPs
    forward: Callable         # (xp, xs, attrs) -> y
    backward: Callable        # (xp, gy, saved, y, attrs, in_shapes, want) -> {pos: grad}
    saves_inputs: tuple = ()  # input positions the backward reads
    saves_output: bool = False


def _numel(shape) -> int:
    return int(math.prod(shape))


# ---------------------------------------------------------------- elementwise and linear
def _matmul_infer(s, d, a):
    x, w = s
    if len(w) != 2 or x[-1] != w[0]:
        raise ValueError(f"matmul: shapes {x} and {w} do not chain")
    return tuple(x[:-1]) + (w[1],), d[0]


def _matmul_bwd(xp, gy, saved, y, a, in_shapes, want):
    x, w = saved.get(0), saved.get(1)
    out = {}
    if 0 in want:
        out[0] = xp.matmul(gy, w.T)
    if 1 in want:
        k, n = in_shapes[1]
        out[1] = xp.matmul(x.reshape(-1, k).T, gy.reshape(-1, n))
    return out


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


def _bias_fwd(xp, xs, a):
    x, b = xs
    return x + b.reshape(_bias_shape(x.shape, a["axis"] % x.ndim))


def _bias_bwd(xp, gy, saved, y, a, in_shapes, want):
    out = {}
    if 0 in want:
        out[0] = gy.copy()
    if 1 in want:
        axis = a["axis"] % gy.ndim
        out[1] = gy.sum(axis=tuple(i for i in range(gy.ndim) if i != axis))
    return out


_GELU_C = np.float32(math.sqrt(2.0 / math.pi))
_GELU_A = np.float32(0.044715)


def _gelu_fwd(xp, xs, a):
    x = xs[0]
    t = xp.tanh(_GELU_C * (x + _GELU_A * x * x * x))
    return np.float32(0.5) * x * (np.float32(1) + t)


def _gelu_bwd(xp, gy, saved, y, a, in_shapes, want):
    x = saved[0]
    t = xp.tanh(_GELU_C * (x + _GELU_A * x * x * x))
    dt = (np.float32(1) - t * t) * _GELU_C * (np.float32(1) + np.float32(3) * _GELU_A * x * x)
    return {0: gy * (np.float32(0.5) * (np.float32(1) + t) + np.float32(0.5) * x * dt)}


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


def _pad(xp, x, p, fill=0.0):
    if p == 0:
        return x
    return xp.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), mode="constant", constant_values=fill)


def _window(xpad, i, j, s, ho, wo):
    return xpad[:, :, i:i + s * (ho - 1) + 1:s, j:j + s * (wo - 1) + 1:s]


def _im2col(xp, x, k, s, p):
    n, c, h, w = x.shape
    ho, wo = _out_hw(h, w, k, s, p)
    xpad = _pad(xp, x, p)
    cols = xp.empty((n, c, k, k, ho, wo), dtype=x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = _window(xpad, i, j, s, ho, wo)
    return cols.reshape(n, c * k * k, ho * wo), ho, wo


def _conv_fwd(xp, xs, a):
    x, w = xs
    o, k = w.shape[0], w.shape[2]
    cols, ho, wo = _im2col(xp, x, k, a["stride"], a["pad"])
    y = xp.matmul(w.reshape(o, -1), cols)
    return y.reshape(x.shape[0], o, ho, wo)


def _col2im(xp, dcols, xshape, k, s, p, ho, wo):
    n, c, h, w = xshape
    dcols = dcols.reshape(n, c, k, k, ho, wo)
    dxpad = xp.zeros((n, c, h + 2 * p, w + 2 * p), dtype=dcols.dtype)
    for i in range(k):
        for j in range(k):
            _window(dxpad, i, j, s, ho, wo)[...] += dcols[:, :, i, j]
    return dxpad[:, :, p:p + h, p:p + w].copy() if p else dxpad


def _conv_bwd(xp, gy, saved, y, a, in_shapes, want):
    x, w = saved.get(0), saved.get(1)
    n, o, ho, wo = gy.shape
    k, s, p = in_shapes[1][2], a["stride"], a["pad"]
    g = gy.reshape(n, o, ho * wo)
    out = {}
    if 1 in want:
        cols, _, _ = _im2col(xp, x, k, s, p)
        out[1] = xp.tensordot(g, cols, axes=([0, 2], [0, 2])).reshape(in_shapes[1])
    if 0 in want:
        dcols = xp.matmul(w.reshape(o, -1).T, g)
        out[0] = _col2im(xp, dcols, in_shapes[0], k, s, p, ho, wo)
    return out


def _pool_infer(s, d, a):
    n, c, h, w = s[0]
    ho, wo = _out_hw(h, w, a["kernel"], a["stride"], a.get("pad", 0))
    if ho < 1 or wo < 1:
        raise ValueError(f"pooling: input {s[0]} too small for kernel {a['kernel']}")
    return (n, c, ho, wo), d[0]


def _maxpool_fwd(xp, xs, a):
    x = xs[0]
    k, s, p = a["kernel"], a["stride"], a.get("pad", 0)
    ho, wo = _out_hw(x.shape[2], x.shape[3], k, s, p)
    xpad = _pad(xp, x, p, fill=-np.inf)
    y = _window(xpad, 0, 0, s, ho, wo).copy()
    for i in range(k):
        for j in range(k):
            if i or j:
                xp.maximum(y, _window(xpad, i, j, s, ho, wo), out=y)
    return y


def _maxpool_bwd(xp, gy, saved, y, a, in_shapes, want):
    x = saved[0]
    k, s, p = a["kernel"], a["stride"], a.get("pad", 0)
    n, c, h, w = in_shapes[0]
    ho, wo = gy.shape[2], gy.shape[3]
    xpad = _pad(xp, x, p, fill=-np.inf)
    dxpad = xp.zeros((n, c, h + 2 * p, w + 2 * p), dtype=gy.dtype)
    taken = xp.zeros(gy.shape, dtype=bool)
    for i in range(k):          # the first maximum of each window gets the gradient
        for j in range(k):
            hit = (_window(xpad, i, j, s, ho, wo) == y) & ~taken
            _window(dxpad, i, j, s, ho, wo)[...] += gy * hit
            taken |= hit
    return {0: dxpad[:, :, p:p + h, p:p + w].copy() if p else dxpad}


def _avgpool_fwd(xp, xs, a):
    x = xs[0]
    k, s = a["kernel"], a["stride"]
    ho, wo = _out_hw(x.shape[2], x.shape[3], k, s, 0)
    y = xp.zeros((x.shape[0], x.shape[1], ho, wo), dtype=x.dtype)
    for i in range(k):
        for j in range(k):
            y += _window(x, i, j, s, ho, wo)
    return y * np.float32(1.0 / (k * k))


def _avgpool_bwd(xp, gy, saved, y, a, in_shapes, want):
    k, s = a["kernel"], a["stride"]
    ho, wo = gy.shape[2], gy.shape[3]
    g = gy * np.float32(1.0 / (k * k))
    dx = xp.zeros(in_shapes[0], dtype=gy.dtype)
    for i in range(k):
        for j in range(k):
            _window(dx, i, j, s, ho, wo)[...] += g
    return {0: dx}


def _upsample_infer(s, d, a):
    n, c, h, w = s[0]
    f = a["factor"]
    return (n, c, h * f, w * f), d[0]


def _upsample_fwd(xp, xs, a):
    x, f = xs[0], a["factor"]
    n, c, h, w = x.shape
    y = xp.broadcast_to(x.reshape(n, c, h, 1, w, 1), (n, c, h, f, w, f))
    return y.reshape(n, c, h * f, w * f)


def _upsample_bwd(xp, gy, saved, y, a, in_shapes, want):
    n, c, h, w = in_shapes[0]
    f = a["factor"]
    return {0: gy.reshape(n, c, h, f, w, f).sum(axis=(3, 5))}


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


def norm_statistics(xp, x, a, reduce_axes):
    """(mean, 1 / sqrt(var + eps)) over ``reduce_axes`` (kept as size-1 axes): what normalising
    ``x`` needs; ``(x - mean) * inv`` is then the normalised value, bit for bit as the forward
    computes it (row-centric steps normalise row bands with statistics of the whole map)."""
    mean = x.mean(axis=reduce_axes, keepdims=True)
    xc = x - mean
    var = (xc * xc).mean(axis=reduce_axes, keepdims=True)
    return mean, np.float32(1) / xp.sqrt(var + np.float32(a.get("eps", 1e-5)))


def _norm_stats(xp, x, a, reduce_axes):
    mean, inv = norm_statistics(xp, x, a, reduce_axes)
    return (x - mean) * inv, inv


def _batchnorm_axes(x, a):
    # batch norm reduces over all axes but the channel axis; layer norm over the channel axis only
    if a["kind"] == "batch":
        return _norm_axes(x.ndim, a["axis"])
    axis = a["axis"] % x.ndim
    return (axis,), axis


def _norm_fwd(xp, xs, a):
    x, g, b = xs
    red, axis = _batchnorm_axes(x, a)
    xhat, _ = _norm_stats(xp, x, a, red)
    shape = _bias_shape(x.shape, axis)
    return xhat * g.reshape(shape) + b.reshape(shape)


def _norm_bwd(xp, gy, saved, y, a, in_shapes, want):
    x, g = saved[0], saved[1]
    red, axis = _batchnorm_axes(x, a)
    xhat, inv = _norm_stats(xp, x, a, red)
    other = tuple(i for i in range(x.ndim) if i != axis)
    out = {}
    if 2 in want:
        out[2] = gy.sum(axis=other)
    if 1 in want:
        out[1] = (gy * xhat).sum(axis=other)
    if 0 in want:
        m = np.float32(_numel([x.shape[i] for i in red]))
        dxhat = gy * g.reshape(_bias_shape(x.shape, axis))
        s1 = dxhat.sum(axis=red, keepdims=True)
        s2 = (dxhat * xhat).sum(axis=red, keepdims=True)
        out[0] = (inv / m) * (m * dxhat - s1 - xhat * s2)
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
            out[pos] = gy[tuple(index)].copy()
        start = stop
    return out


# ---------------------------------------------------------------- attention
def _attn_infer(s, d, a):
    b, sq, d3 = s[0]
    if d3 % 3 or (d3 // 3) % a["heads"]:
        raise ValueError(f"attention: packed qkv width {d3} not 3 x heads x head_dim")
    return (b, sq, d3 // 3), d[0]


def _attn_split(xp, qkv, heads):
    b, s, d3 = qkv.shape
    d = d3 // 3
    parts = qkv.reshape(b, s, 3, heads, d // heads).transpose(2, 0, 3, 1, 4)   # 3, B, H, S, dh
    return parts[0], parts[1], parts[2]


def _softmax(xp, z):
    z = z - z.max(axis=-1, keepdims=True)
    e = xp.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _attn_probs(xp, q, k, a):
    scale = np.float32(1.0 / math.sqrt(q.shape[-1]))
    scores = xp.matmul(q, k.transpose(0, 1, 3, 2)) * scale
    if a.get("causal"):
        s = scores.shape[-1]
        scores = xp.where(xp.tril(xp.ones((s, s), dtype=bool)), scores, np.float32(-1e30))
    return _softmax(xp, scores), scale


def _attn_fwd(xp, xs, a):
    q, k, v = _attn_split(xp, xs[0], a["heads"])
    p, _ = _attn_probs(xp, q, k, a)
    o = xp.matmul(p, v)                                   # B, H, S, dh
    b, h, s, dh = o.shape
    return o.transpose(0, 2, 1, 3).reshape(b, s, h * dh)


def _attn_bwd(xp, gy, saved, y, a, in_shapes, want):
    q, k, v = _attn_split(xp, saved[0], a["heads"])
    p, scale = _attn_probs(xp, q, k, a)
    b, h, s, dh = q.shape
    do = gy.reshape(b, s, h, dh).transpose(0, 2, 1, 3)
    dv = xp.matmul(p.transpose(0, 1, 3, 2), do)
    dp = xp.matmul(do, v.transpose(0, 1, 3, 2))
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    dq = xp.matmul(ds, k) * scale
    dk = xp.matmul(ds.transpose(0, 1, 3, 2), q) * scale
    dqkv = xp.stack([dq, dk, dv])                         # 3, B, H, S, dh
    return {0: dqkv.transpose(1, 3, 0, 2, 4).reshape(b, s, 3 * h * dh)}


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
          lambda xp, xs, a: xp.matmul(xs[0], xs[1]), _matmul_bwd, saves_inputs=(0, 1)),
    OpDef("add", "Add", _add_infer, _fl_elementwise(1),
          lambda xp, xs, a: xs[0] + xs[1],
          lambda xp, gy, sv, y, a, sh, want: {i: gy.copy() for i in want}),
    OpDef("bias", "Bias", _bias_infer, _fl_elementwise(1), _bias_fwd, _bias_bwd),
    OpDef("relu", "ReLU", _same_infer, _fl_elementwise(1),
          lambda xp, xs, a: xp.maximum(xs[0], np.float32(0)),
          lambda xp, gy, sv, y, a, sh, want: {0: gy * (y > 0)}, saves_output=True),
    OpDef("gelu", "GELU", _same_infer, _fl_elementwise(8), _gelu_fwd, _gelu_bwd, saves_inputs=(0,)),
    OpDef("conv2d", "Convolution2DFunction", _conv_infer, _fl_conv, _conv_fwd, _conv_bwd,
          saves_inputs=(0, 1)),
    OpDef("max_pool", "MaxPooling2D", _pool_infer, _fl_pool, _maxpool_fwd, _maxpool_bwd,
          saves_inputs=(0,), saves_output=True),
    OpDef("avg_pool", "AveragePooling2D", _pool_infer, _fl_pool, _avgpool_fwd, _avgpool_bwd),
    OpDef("upsample", "Unpooling2D", _upsample_infer, _fl_elementwise(1), _upsample_fwd,
          _upsample_bwd),
    OpDef("batch_norm", "BatchNormalization", _norm_infer, _fl_elementwise(8), _norm_fwd, _norm_bwd,
          saves_inputs=(0, 1)),
    OpDef("layer_norm", "LayerNormalization", _norm_infer, _fl_elementwise(8), _norm_fwd, _norm_bwd,
          saves_inputs=(0, 1)),
    OpDef("softmax_cross_entropy", "SoftmaxCrossEntropy", _xent_infer,
          lambda s, o, a: 4 * _numel(s[0]), _xent_fwd, _xent_bwd, saves_inputs=(0, 1)),
    OpDef("reshape", "Reshape", _reshape_infer, lambda s, o, a: 0,
          lambda xp, xs, a: xs[0].reshape(tuple(a["shape"])),
          lambda xp, gy, sv, y, a, sh, want: {0: gy.reshape(sh[0]).copy()}),
    OpDef("concat", "Concat", _concat_infer, lambda s, o, a: 0,
          lambda xp, xs, a: xp.concatenate(xs, axis=a["axis"]), _concat_bwd),
    OpDef("attention", "ScaledDotProductAttention", _attn_infer, _fl_attn, _attn_fwd, _attn_bwd,
          saves_inputs=(0,)),
]}

#: FLOPs of the backward relative to the forward (two matmuls per matmul, recomputed statistics...).
BACKWARD_FLOPS_FACTOR = 2
