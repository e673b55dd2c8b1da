"""Scaled dot-product attention on packed ``qkv``: forward and VJP block by block over (batch,
head) pairs in cache-sized blocks (:data:`ATTENTION_BLOCK_BYTES`), and their temporaries."""

from __future__ import annotations

import math

import numpy as np

from planner.ops.base import KernelCall, OpDef, _bufs, _numel
from planner.ops.flops import _fl_attn


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


def _attn_fwd_temp(c: KernelCall) -> int:
    return c.res + _attention_temps(c.ins[0], c.attrs, c.e, "forward")


def _attn_bwd_temp(c: KernelCall) -> int:
    return (0 if 0 in c.into else c.xs) + _attention_temps(c.ins[0], c.attrs, c.e, "backward")


DEFS = [
    OpDef("attention", "ScaledDotProductAttention", _attn_infer, _fl_attn, _attn_fwd, _attn_bwd,
          saves_inputs=(0,), fills_out=True, fills_grads=True,
          forward_temp=_attn_fwd_temp, backward_temp=_attn_bwd_temp),
]
