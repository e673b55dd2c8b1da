"""Sums over axes as BLAS products: a norm's statistics and a bias's gradient, and the bytes
they hold (:func:`_stats_temp`).

Why beside neither: both :mod:`planner.ops.elementwise` (the bias's VJP) and
:mod:`planner.ops.norm` reduce per channel or per row, and so does the row executor
(:mod:`planner.execute.rows_exec` reads :func:`sums` and :func:`dots`).
"""

from __future__ import annotations

from planner.ops.base import _bias_shape, _numel


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
