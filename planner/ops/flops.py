"""Forward FLOPs of each op (the op table's ``flops`` rules) and the backward's factor.

Why a module of its own: FLOPs are priced by the planner (recompute cost, row plans) without
touching a kernel; every topic module's ops take their rule from here.
"""

from __future__ import annotations

from planner.ops.base import _numel


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


def _fl_xent(s, o, a):
    return 4 * _numel(s[0])


def _fl_none(s, o, a):
    return 0


#: FLOPs of the backward relative to the forward (two matmuls per matmul, recomputed statistics...).
BACKWARD_FLOPS_FACTOR = 2
