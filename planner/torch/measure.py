"""Measure a real training step: step peak, bytes saved for backward, time, gradients.

* peak: allocator level. On CPU, ``torch.distributed._tools.mem_tracker.MemTracker`` (it follows
  every storage the step creates and frees); the step's peak is its peak total less what existed
  before (parameters, buffers, inputs). Where the inputs live on a CUDA device,
  ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` instead.
* saved bytes: unique storages packed by ``torch.autograd.graph.saved_tensors_hooks`` during
  the step, less parameters, buffers and inputs (what the forward hands the backward).
"""

from __future__ import annotations

import operator
import time

import torch

__all__ = ["measure_step", "recompute_flops", "grads_of", "same_grads"]


def _storage_key(t):
    return t.untyped_storage().data_ptr()


def _ref(name):
    from torch.distributed._tools.mem_tracker import _MemRefType

    return getattr(_MemRefType, name)


def measure_step(step, model, inputs) -> dict:
    """Run ``step(*inputs)`` (a training step: forward + backward) and measure its second run.

    The first run traces and partitions (outside the measurement); gradients are reset before
    the measured run, so afterwards they are those of one step. Buffers (running statistics)
    have seen two steps.
    """
    step(*inputs)
    for p in model.parameters():
        p.grad = None
    pre = {_storage_key(t) for t in [*model.parameters(), *model.buffers(), *inputs]}
    saved = {}

    def pack(t):
        k = _storage_key(t)
        if k not in pre and k not in saved:
            saved[k] = t.untyped_storage().nbytes()
        return t

    cuda = any(x.is_cuda for x in inputs)
    t0 = time.perf_counter()
    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            step(*inputs)
        torch.cuda.synchronize()
        peak, how = torch.cuda.max_memory_allocated() - base, "cuda.max_memory_allocated"
    else:
        from torch.distributed._tools.mem_tracker import MemTracker

        mt = MemTracker()
        mt.track_external(model)
        with mt, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            step(*inputs)
        snap = mt.get_tracker_snapshot("peak")[torch.device("cpu")]
        peak, how = snap["Total"] - snap[_ref("PARAM")] - snap[_ref("BUFFER")], "MemTracker"
    seconds = time.perf_counter() - t0
    return dict(measured_peak_bytes=int(peak), measured_saved_bytes=int(sum(saved.values())),
                step_seconds=seconds, peak_measured_by=how)


def recompute_flops(joint, backward) -> int:
    """FLOPs of the forward ops a partitioned backward module runs again (views are free).

    The backward module keeps the joint graph's node names, so a forward node's name in it
    is a recomputation; its cost is :func:`planner.torch.costs.node_flops` on the joint node.
    """
    from planner.torch.costs import node_flops
    from planner.torch.model_graph import is_view

    fwd = {n.name: n for n in joint.graph.nodes
           if n.op == "call_function" and n.meta.get("partitioner_tag") == "is_forward"}
    total = 0
    for n in backward.graph.nodes:
        j = fwd.get(n.name) if n.op == "call_function" else None
        if j is not None and j.target is not operator.getitem and not is_view(j):
            total += node_flops(j)
    return total


def grads_of(model) -> list:
    """Copies of the model's parameter gradients (None where a parameter got none)."""
    return [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]


def same_grads(a, b, rtol: float = 0.0) -> bool:
    """Gradients equal bitwise (``rtol=0``) or within ``rtol`` relative to the largest entry."""
    for x, y in zip(a, b):
        if (x is None) != (y is None):
            return False
        if x is None:
            continue
        if rtol == 0.0:
            if not torch.equal(x, y):
                return False
        elif (x - y).abs().max() > rtol * max(float(y.abs().max()), 1e-300):
            return False
    return len(a) == len(b)
