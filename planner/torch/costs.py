"""Cost of each forward op of a captured graph: FLOPs (default) or measured seconds.

FLOPs come from ``torch.utils.flop_counter.FlopCounterMode`` run on meta tensors of the node's
recorded shapes. Two corrections make them usable as recomputation costs:

* ops without a formula (elementwise, reductions, normalisation pieces) count one FLOP per
  output element, so recomputing them is never free;
* CPU attention (``_scaled_dot_product_flash_attention_for_cpu``) has no formula in torch; it is
  counted as the two matmuls it does (``4 * B * H * Tq * Tk * D``).

``measured``: the node run on real random tensors of its shapes, the best of a few runs, in
nanoseconds (what ``--cost measured`` plans with).
"""

from __future__ import annotations

import time

import torch
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["node_flops", "op_flops", "node_nanoseconds", "COST_KINDS"]

COST_KINDS = ("flops", "measured")

_CPU_ATTENTION = ("_scaled_dot_product_flash_attention_for_cpu",
                  "_scaled_dot_product_fused_attention_overrideable")


def _out_numel(val) -> int:
    if isinstance(val, torch.Tensor):
        return int(val.numel())
    if isinstance(val, (tuple, list)):
        return sum(_out_numel(v) for v in val)
    return 0


def _as(device_fn, x):
    if isinstance(x, torch.fx.Node):
        val = x.meta.get("val")
        if isinstance(val, torch.Tensor):
            return device_fn(val)
        return val
    if isinstance(x, (list, tuple)):
        return type(x)(_as(device_fn, y) for y in x)
    return x


def _meta(val):
    return torch.empty_strided(val.shape, val.stride(), dtype=val.dtype, device="meta")


def _real(val):
    if val.dtype.is_floating_point:
        return torch.randn(val.shape, dtype=val.dtype)
    if val.dtype == torch.bool:
        return torch.zeros(val.shape, dtype=torch.bool)
    return torch.zeros(val.shape, dtype=val.dtype)


def _attention_flops(q, k) -> int:
    *batch, tq, d = q.shape
    tk = k.shape[-2]
    b = 1
    for s in batch:
        b *= int(s)
    return 4 * b * int(tq) * int(tk) * int(d)


def op_flops(target, args, kwargs, out) -> int:
    """FLOPs of one op call on (real or meta) tensors ``args`` (at least its output elements).

    The one cost model for every method the bench compares: the planner's blocks
    (:func:`node_flops`) and ops run eagerly under checkpointing (``measure.step_flops``).
    """
    floor = _out_numel(out)
    name = getattr(target, "__name__", str(target))
    if any(a in name for a in _CPU_ATTENTION):
        return max(floor, _attention_flops(args[0], args[1]))
    try:
        with FlopCounterMode(display=False) as counter:
            target(*args, **kwargs)
        flops = int(counter.get_total_flops())
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        flops = 0        # no meta kernel: the element count stands in
    return max(floor, flops)


#: ``node.meta`` key of a node's FLOPs (:func:`node_flops`).
FLOPS_META = "hgraph_flops"


def node_flops(node) -> int:
    """FLOPs of one call_function node (at least its output element count).

    Kept in ``node.meta`` once counted: the importer costs every forward op and each priced
    candidate its recomputed ones (:func:`planner.torch.measure.recompute_flops`), the same
    joint nodes again and again, and a count runs the op under a ``FlopCounterMode`` on meta
    tensors (about a millisecond)."""
    flops = node.meta.get(FLOPS_META)
    if flops is None:
        args = _as(_meta, node.args)
        kwargs = {k: _as(_meta, v) for k, v in node.kwargs.items()}
        flops = node.meta[FLOPS_META] = op_flops(node.target, args, kwargs,
                                                 node.meta.get("val"))
    return flops


def node_nanoseconds(node, repeats: int = 3) -> int:
    """Best of ``repeats`` wall-clock runs of the node on random inputs of its shapes (ns)."""
    args = _as(_real, node.args)
    kwargs = {k: _as(_real, v) for k, v in node.kwargs.items()}
    best = None
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        node.target(*args, **kwargs)
        dt = time.perf_counter_ns() - t0
        best = dt if best is None else min(best, dt)
    return max(1, int(best))
