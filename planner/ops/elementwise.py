"""Elementwise and linear ops: matmul, add, bias, ReLU, GELU -- kernels, VJPs and their
temporaries side by side (each op's :class:`~planner.ops.base.OpDef` at the end).

Speed (issue 26): every product goes through the backend's BLAS (``matmul`` on contiguous or
singly transposed operands); elementwise chains run in place, GELU in cache-sized blocks.
"""

from __future__ import annotations

import math

import numpy as np

from planner.ops.base import KernelCall, OpDef, _bias_shape, _bufs, _nb, _numel
from planner.ops.flops import _fl_elementwise, _fl_matmul
from planner.ops.reductions import _stats_temp, sums


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


def _matmul_fwd(xp, xs, a, out=None):
    return _rows_times(xp, xs[0], xs[1], out)


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


def _matmul_bwd_temp(c: KernelCall) -> int:
    """The input gradient (``g @ w.T``; with a handful of rows ``w @ g.T``, its transpose and
    a contiguous copy) beside the weight gradient's ``x^T @ g``."""
    out, xs = c.out, c.xs
    rows = _numel(out) // max(1, out[-1])
    g0 = 0
    if 0 in c.want:
        g0 = (0 if 0 in c.into else xs) if rows > 8 else \
            xs * (1 + (len(out) > 2) + (0 not in c.into))
    g1 = (0 if 1 in c.into else _nb(c.ins[1], c.e)) if 1 in c.want else 0
    return max(g0, c.held(0, xs) + g1)


def _relu_fwd(xp, xs, a, out=None):
    return xp.maximum(xs[0], np.float32(0), out=out)


def _relu_bwd(xp, gy, saved, y, a, in_shapes, want, out=None):
    """``gy * (y > 0)``: the comparison written as 0.0 / 1.0 into the result, then multiplied in
    place (no boolean mask beside it, one pass fewer), the same bits."""
    dx = (out or {}).get(0)
    dx = xp.empty(gy.shape, dtype=gy.dtype) if dx is None else dx
    xp.greater(y, 0, out=dx)
    dx *= gy
    return {0: dx}


def _relu_bwd_temp(c: KernelCall) -> int:
    """The gradient where not handed one, and the comparison's booleans cast through a
    buffer."""
    return c.held(0, c.ys) + _bufs(1, c.out, 1)


def _same_infer(s, d, a):
    return tuple(s[0]), d[0]


def _add_infer(s, d, a):
    if tuple(s[0]) != tuple(s[1]):
        raise ValueError(f"add: shapes {s[0]} and {s[1]} differ")
    return tuple(s[0]), d[0]


def _add_fwd(xp, xs, a, out=None):
    return xp.add(xs[0], xs[1], out=out)


def _add_bwd(xp, gy, sv, y, a, sh, want):
    return {i: gy for i in want}


def _bias_infer(s, d, a):
    axis = a["axis"] % len(s[0])
    if tuple(s[1]) != (s[0][axis],):
        raise ValueError(f"bias: {s[1]} does not match axis {axis} of {s[0]}")
    return tuple(s[0]), d[0]


def _bias_fwd(xp, xs, a, out=None):
    x, b = xs
    return xp.add(x, b.reshape(_bias_shape(x.shape, a["axis"] % x.ndim)), out=out)


def _bias_fwd_temp(c: KernelCall) -> int:
    """A broadcast add: the result and one ufunc buffer."""
    return c.res + _bufs(1, c.out, c.e)


def _bias_bwd(xp, gy, saved, y, a, in_shapes, want):
    out = {}
    if 0 in want:
        out[0] = gy
    if 1 in want:
        axis = a["axis"] % gy.ndim
        out[1] = sums(xp, gy, tuple(i for i in range(gy.ndim) if i != axis), keepdims=False)
    return out


def _bias_bwd_temp(c: KernelCall) -> int:
    """The bias gradient's reduction (:func:`~planner.ops.reductions.sums`)."""
    if 1 not in c.want:
        return 0
    nd = len(c.out)
    return _stats_temp(c.out, tuple(i for i in range(nd) if i != c.attrs["axis"] % nd), c.e)


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


def _gelu_bwd_temp(c: KernelCall) -> int:
    """Two block-sized scratch arrays (contiguous operands) and the gradient where not handed
    one."""
    return 2 * _elementwise_block(_numel(c.ins[0]), c.e) * c.e + (0 if 0 in c.into else c.xs)


DEFS = [
    OpDef("matmul", "MatMul", _matmul_infer, _fl_matmul, _matmul_fwd, _matmul_bwd,
          saves_inputs=(0, 1), fills_out=True, fills_grads=True, backward_temp=_matmul_bwd_temp),
    OpDef("add", "Add", _add_infer, _fl_elementwise(1), _add_fwd, _add_bwd, fills_out=True),
    OpDef("bias", "Bias", _bias_infer, _fl_elementwise(1), _bias_fwd, _bias_bwd, fills_out=True,
          forward_temp=_bias_fwd_temp, backward_temp=_bias_bwd_temp),
    OpDef("relu", "ReLU", _same_infer, _fl_elementwise(1), _relu_fwd, _relu_bwd,
          saves_output=True, fills_out=True, fills_grads=True, backward_temp=_relu_bwd_temp),
    OpDef("gelu", "GELU", _same_infer, _fl_elementwise(8), _gelu_fwd, _gelu_bwd, saves_inputs=(0,),
          fills_out=True, fills_grads=True, backward_temp=_gelu_bwd_temp),
]
