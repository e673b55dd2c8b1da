"""Measure a real training step: step peak, bytes saved for backward, time, gradients.

* peak: the allocator, one meter for every step (:func:`allocator_peak`): on CPU the
  allocator's ``[memory]`` events in ``torch.profiler`` (kernel scratch included), on CUDA
  ``torch.cuda.max_memory_allocated``; what existed before the step (parameters, buffers,
  inputs, the labels its loss reads) is not the step's memory: only what it allocates counts.
  It leaves nothing on the model. ``torch.distributed._tools.mem_tracker.MemTracker`` (tensors
  through the dispatcher, by category) is only :func:`labelled_peak`, a breakdown beside it:
  MemTracker leaves a hook dict on every parameter it saw, after which autograd may copy each
  gradient and every later step of that model peaks higher (reported ~39 MB on a
  torchvision resnet18), so
  :func:`labelled_peak` restores the parameters as it found them.
* saved bytes: unique storages packed by ``torch.autograd.graph.saved_tensors_hooks`` during
  the step, less parameters, buffers and inputs (what the forward hands the backward).
"""

from __future__ import annotations

import operator
import time

import torch

__all__ = ["measure_step", "saved_bytes", "allocator_peak", "labelled_peak", "recompute_flops",
           "step_flops", "predict_step_peak",
           "predict_saved_bytes", "grads_of", "same_grads"]


def _storage_key(t):
    return t.untyped_storage().data_ptr()


def _ref(name):
    from torch.distributed._tools.mem_tracker import _MemRefType

    return getattr(_MemRefType, name)


def _saved_counter(model, inputs) -> tuple:
    """(bytes by storage, pack hook): a saved-tensor hook that records each unique storage the
    forward hands the backward, less the model's parameters and buffers and the inputs."""
    pre = {_storage_key(t) for t in [*model.parameters(), *model.buffers(), *inputs]}
    saved = {}

    def pack(t):
        k = _storage_key(t)
        if k not in pre and k not in saved:
            saved[k] = t.untyped_storage().nbytes()
        return t

    return saved, pack


def saved_bytes(step, model, inputs) -> int:
    """Bytes the forward of one run of ``step(*inputs)`` hands its backward (saved-tensor
    hooks, which see a compiled step's saved values too), less parameters, buffers, inputs."""
    saved, pack = _saved_counter(model, inputs)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step(*inputs)
    return int(sum(saved.values()))


def measure_step(step, model, inputs) -> dict:
    """Run ``step(*inputs)`` (a training step: forward + backward) and measure its second run
    by the allocator (:func:`allocator_peak`) with the saved-tensor counter beside it.

    The first run traces and partitions (outside the measurement); gradients are reset before
    the measured run, so afterwards they are those of one step. Buffers (running statistics)
    have seen two steps.
    """
    step(*inputs)
    for p in model.parameters():
        p.grad = None
    saved, pack = _saved_counter(model, inputs)

    def counted(*xs):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            return step(*xs)

    t0 = time.perf_counter()
    peak, how = allocator_peak(counted, inputs)
    seconds = time.perf_counter() - t0
    return dict(measured_peak_bytes=int(peak), measured_saved_bytes=int(sum(saved.values())),
                step_seconds=seconds, peak_measured_by=how)


def labelled_peak(step, model, inputs) -> int:
    """MemTracker's peak of one run of ``step(*inputs)``: tensors through the dispatcher only
    (no kernel scratch), less parameters, buffers and what the step is given (a per-category
    view beside :func:`allocator_peak`, never the step's measured peak).

    MemTracker leaves hook dicts on each parameter it saw (``_backward_hooks`` and
    ``_post_accumulate_grad_hooks``, empty after its handles are removed); with a pre-hook left
    autograd may copy gradients it would have stolen, and every later step of the model peaks
    higher. Both are put back as they were (setting ``_backward_hooks`` clears autograd's
    pre-hook; the post-accumulate one, run after the gradient is stored, keeps an empty dict).
    """
    from torch.distributed._tools.mem_tracker import MemTracker

    from planner.torch.partition import replay_under

    replay_under(MemTracker)
    params = list(model.parameters())
    names = ("_backward_hooks", "_post_accumulate_grad_hooks")
    before = [[getattr(p, k) for k in names] for p in params]
    mt = MemTracker()
    # tensors that exist before the step (its inputs, the labels its loss reads) are not
    # the step's memory: registered as "other" and left out, as parameters and buffers are
    mt.track_external(model, *_given(step, inputs))
    try:
        with mt:
            step(*inputs)
    finally:
        for p, was in zip(params, before):
            for k, hooks in zip(names, was):
                if getattr(p, k) is not hooks:
                    setattr(p, k, hooks)
    snap = mt.get_tracker_snapshot("peak")[torch.device("cpu")]
    return int(snap["Total"] - sum(snap[_ref(k)] for k in ("PARAM", "BUFFER", "OTH")))


def _given(step, inputs) -> list:
    """The tensors a step reads that exist before it runs: its inputs and what its loss reads
    outside its arguments (``step.step_reads()``, labels in a closure: :func:`planner.torch.apply`
    steps say)."""
    reads = getattr(step, "step_reads", None)
    return [x for x in (*inputs, *(reads() if reads else ())) if isinstance(x, torch.Tensor)]


def allocator_peak(step, inputs) -> tuple:
    """(peak bytes, meter name) of one run of ``step(*inputs)`` at the allocator, above what was
    allocated when it started: every allocation the step makes, kernel scratch and Inductor's
    buffers included (MemTracker follows only tensors that pass the dispatcher).

    On CUDA ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``; on CPU the
    allocator's ``[memory]`` events recorded by ``torch.profiler`` (``profile_memory=True``),
    summed in time order.
    """
    if any(isinstance(x, torch.Tensor) and x.is_cuda for x in inputs):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step(*inputs)
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated() - base), "cuda.max_memory_allocated"
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step(*inputs)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
              and e.device_type() == torch.autograd.DeviceType.CPU]
    live = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return int(peak), "torch.profiler memory events (CPU allocator)"


def recompute_flops(joint, backward, ops=None) -> int:
    """FLOPs of the forward ops a partitioned backward module runs again (views are free);
    ``ops``: a predicate on the joint node, to count only those (a bench splits matmuls from
    the pointwise ops Inductor fuses).

    The backward module keeps the joint graph's node names, so a forward node's name in it
    is a recomputation (a copy for a later episode names it in ``meta["recompute_of"]``); its
    cost is :func:`planner.torch.costs.node_flops` on the joint node.
    """
    from planner.torch.costs import node_flops
    from planner.torch.model_graph import is_view

    fwd = {n.name: n for n in joint.graph.nodes
           if n.op == "call_function" and n.meta.get("partitioner_tag") == "is_forward"}
    total = 0
    for n in backward.graph.nodes:
        j = fwd.get(n.meta.get("recompute_of", n.name)) if n.op == "call_function" else None
        if (j is not None and j.target is not operator.getitem and not is_view(j)
                and (ops is None or ops(j))):
            total += node_flops(j)
    return total


def step_flops(step, inputs) -> int:
    """FLOPs of every aten op one run of ``step(*inputs)`` executes (:func:`costs.op_flops`).

    For steps that recompute in eager autograd (``torch.utils.checkpoint``, selective
    checkpointing) the recomputed FLOPs are this less the plain step's, in the same cost
    model :func:`recompute_flops` uses for partitioned graphs.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    from planner.torch.costs import _meta, op_flops

    total = [0]

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if not func.is_view:
                meta = torch.utils._pytree.tree_map_only(torch.Tensor, _meta, (args, kwargs))
                total[0] += op_flops(func, *meta, out)
            return out

    from planner.torch.partition import replay_under

    replay_under(Count)
    with Count():
        step(*inputs)
    return total[0]


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


def _storages(val) -> list:
    """(storage key, bytes) of each tensor in a node's recorded value (fake tensors share the
    storage of what they alias, so views and in-place aliases map to their base)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    if isinstance(val, torch.Tensor):
        st = val.untyped_storage()
        return [(StorageWeakRef(st).cdata, int(st.nbytes()))]
    if isinstance(val, (tuple, list)):
        return [x for v in val for x in _storages(v)]
    return []


def _replay(gm, counted: set, uncounted_storages=()) -> tuple:
    """(peak, bytes still live at the end) of running fx module ``gm`` as fx runs it.

    Memory is tracked per storage of the nodes' recorded values: a storage is allocated by
    the first node producing it and freed after the last node that reads it; the module's
    outputs stay live. Placeholders count only where their name is in ``counted``; storages in
    ``uncounted_storages`` (the step's parameters, buffers and inputs) never count.
    """
    nodes = list(gm.graph.nodes)
    size, last, start = {}, {}, {}
    # storages of uncounted inputs (parameters, buffers, data) and of views of them: never counted
    start.update((k, None) for n in nodes if n.op == "placeholder" and n.name not in counted
                 for k, _ in _storages(n.meta.get("val")))
    start.update((k, None) for k in uncounted_storages)
    for i, n in enumerate(nodes):
        if n.op == "output":
            for a in n.all_input_nodes:
                for k, _ in _storages(a.meta.get("val")):
                    last[k] = len(nodes)
            continue
        for a in n.all_input_nodes:
            for k, _ in _storages(a.meta.get("val")):
                last[k] = max(last.get(k, i), i)
        if n.op == "placeholder" and n.name not in counted:
            continue
        for k, nbytes in _storages(n.meta.get("val")):
            if k not in start:
                start[k], size[k] = (-1 if n.op == "placeholder" else i), nbytes
    live = sum(size[k] for k in size if start[k] < 0)
    peak = live
    frees = {}
    for k in size:
        frees.setdefault(last.get(k, start[k]), []).append(k)
    allocs = {}
    for k in size:
        if start[k] >= 0:
            allocs.setdefault(start[k], []).append(k)
    for i in range(len(nodes)):
        live += sum(size[k] for k in allocs.get(i, ()))
        peak = max(peak, live)
        live -= sum(size[k] for k in frees.get(i, ()))
    return peak, live


def predict_saved_bytes(forward, backward) -> int:
    """Bytes the forward hands the backward, from the partition alone (no run): the distinct
    storages of the backward's saved inputs, less the step's parameters, buffers and inputs
    (and views of them), as :func:`measure_step` counts what autograd saves."""
    inputs = {k for n in forward.graph.nodes if n.op == "placeholder"
              for k, _ in _storages(n.meta.get("val"))}
    saved = {}
    for n in backward.graph.nodes:
        if n.op == "placeholder" and not n.name.startswith(("primals_", "tangents_")):
            saved.update((k, b) for k, b in _storages(n.meta.get("val")) if k not in inputs)
    return int(sum(saved.values()))


def predict_step_peak(forward, backward) -> int:
    """The step peak a partition implies, from the tensor shapes alone (no run).

    Forward: each op allocates its output, freed after its last use; what it hands the backward
    stays. Backward: starts with those saved tensors, frees each after its last use; the
    gradients it returns live on (as ``.grad``). The loss and its gradient (autograd's
    ``ones_like``) stay live through the whole backward (:func:`_held`): torch's memory tracker
    sees them there. Parameters and inputs (the tensors the step is given, labels included)
    are not counted, as :func:`measure_step` does not count them.
    """
    fw_peak, _ = _replay(forward, set())
    inputs = {k for n in forward.graph.nodes if n.op == "placeholder"
              for k, _ in _storages(n.meta.get("val"))}
    saved = {n.name for n in backward.graph.nodes
             if n.op == "placeholder" and not n.name.startswith(("primals_", "tangents_"))}
    bw_peak, _ = _replay(backward, saved, inputs)     # saved views of parameters own nothing
    return int(max(fw_peak, bw_peak + _held(backward)))


def _held(backward) -> int:
    """Bytes live through the whole backward besides what it computes: the step's outputs
    (the loss: the caller holds it) and their gradients (the ``tangents_`` inputs: autograd's
    engine holds the root gradient until the backward ends), a gradient the size of its output.
    (The forward's other outputs, running statistics written back to buffers, are buffers.)"""
    tangents = {}
    for n in backward.graph.nodes:
        if n.op == "placeholder" and n.name.startswith("tangents_"):
            tangents.update(_storages(n.meta.get("val")))
    return 2 * int(sum(tangents.values()))
