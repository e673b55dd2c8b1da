"""Shape ops: reshape and concat -- views and one copy, no arithmetic; their VJPs return views
of the output gradient (no temporaries)."""

from __future__ import annotations

from planner.ops.base import OpDef, _numel, no_temp
from planner.ops.flops import _fl_none


def _reshape_infer(s, d, a):
    shape = tuple(a["shape"])
    if _numel(shape) != _numel(s[0]):
        raise ValueError(f"reshape: {s[0]} -> {shape} changes the size")
    return shape, d[0]


def _reshape_fwd(xp, xs, a):
    return xs[0].reshape(tuple(a["shape"]))


def _reshape_bwd(xp, gy, sv, y, a, sh, want):
    return {0: gy.reshape(sh[0])}


def _concat_infer(s, d, a):
    axis = a["axis"] % len(s[0])
    for t in s[1:]:
        if len(t) != len(s[0]) or any(t[i] != s[0][i] for i in range(len(t)) if i != axis):
            raise ValueError(f"concat: shapes {s} do not agree off axis {axis}")
    out = list(s[0])
    out[axis] = sum(t[axis] for t in s)
    return tuple(out), d[0]


def _concat_fwd(xp, xs, a):
    return xp.concatenate(xs, axis=a["axis"])


def _concat_bwd(xp, gy, saved, y, a, in_shapes, want):
    axis = a["axis"] % gy.ndim
    out, start = {}, 0
    for pos, shape in enumerate(in_shapes):
        stop = start + shape[axis]
        if pos in want:
            index = [slice(None)] * gy.ndim
            index[axis] = slice(start, stop)
            out[pos] = gy[tuple(index)]
        start = stop
    return out


DEFS = [
    OpDef("reshape", "Reshape", _reshape_infer, _fl_none, _reshape_fwd, _reshape_bwd,
          forward_temp=no_temp),
    OpDef("concat", "Concat", _concat_infer, _fl_none, _concat_fwd, _concat_bwd),
]
