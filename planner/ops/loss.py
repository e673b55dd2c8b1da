"""The loss: softmax cross-entropy over integer labels, its VJP and temporaries."""

from __future__ import annotations

import numpy as np

from planner.ops.base import KernelCall, OpDef
from planner.ops.flops import _fl_xent


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


def _xent_fwd_temp(c: KernelCall) -> int:
    """The shifted logits and their exponentials, the per-row statistics and the row indices."""
    n = c.ins[0][0]
    return 2 * c.xs + 8 * n * c.e + 8 * n


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


def _xent_bwd_temp(c: KernelCall) -> int:
    """The forward's arrays again, and the probabilities' gradient."""
    n = c.ins[0][0]
    return 3 * c.xs + 8 * n * c.e + 8 * n


DEFS = [
    OpDef("softmax_cross_entropy", "SoftmaxCrossEntropy", _xent_infer, _fl_xent, _xent_fwd,
          _xent_bwd, saves_inputs=(0, 1), forward_temp=_xent_fwd_temp,
          backward_temp=_xent_bwd_temp),
]
