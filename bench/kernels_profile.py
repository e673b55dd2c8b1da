"""Where a plain step's time goes, executor vs PyTorch eager, op by op (issue 26).

``bench/kernels_bench.py`` gives one ratio per model; this splits it. The executor's side: each
op's forward and backward kernel timed inside ``executor.run`` (the :data:`planner.ops.OPS`
entries wrapped by a timer for the run), the rest of the step (buffer timeline, allocator,
accumulating gradients) as ``(executor outside kernels)``, and what ``executor.run`` does
around the step it times (the buffer timeline, copying the gradients out to host arrays)
on its own line. Torch's side: the
same step under ``torch.profiler``, top-level events (a forward op's ``aten::`` call, a
backward's ``...Backward0`` node) summed by name. Median over ``--steps`` steps after a warm-up,
both sides in this process, one step of each in turn, one thread each unless ``--threads``.

``--device cuda``: the executor on CuPy, torch on CUDA. Each executor kernel is timed between two
device synchronisations (so a kernel's row is its device time plus its launches; the
synchronisations make the step a little slower than unprofiled), torch's events by their device
time (``ProfilerActivity.CUDA``, top-level CPU events' ``device_time_total``).

    python3 bench/kernels_profile.py resnet --batch 32 --width 64 --depth 2 --image 32
    python3 bench/kernels_profile.py vgg16 --batch 8 --image 224 --device cuda   # on a GPU
    python3 bench/kernels_profile.py transformer --batch 1 --width 512 --depth 4 --seq 512 --heads 8
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _timed_ops(acc, sync=lambda: None):
    """A copy of :data:`planner.ops.OPS` whose kernels add their wall time to ``acc[(op, dir)]``
    (``sync``: the device's synchronisation, before and after each kernel)."""
    from planner import ops

    def wrap(name, direction, fn):
        def timed(*a, **k):
            sync()
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                sync()
                acc[(name, direction)] += time.perf_counter() - t0
        return timed

    return {n: dataclasses.replace(d, forward=wrap(n, "fwd", d.forward),
                                   backward=wrap(n, "bwd", d.backward))
            for n, d in ops.OPS.items()}


def executor_profile(g, leaf, be, steps):
    """(step seconds, {(op, dir): seconds}) medians over ``steps`` plain steps."""
    import kernels_bench as kb
    from planner import ops

    step = kb.executor_step(g, leaf, be)
    step()
    saved = dict(ops.OPS)
    per, totals = collections.defaultdict(list), []
    try:
        for _ in range(steps):
            acc = collections.defaultdict(float)
            ops.OPS.update(_timed_ops(acc, be.synchronize))
            t0 = time.perf_counter()
            r = step()
            totals.append(time.perf_counter() - t0)
            ops.OPS.update(saved)
            for k, v in acc.items():
                per[k].append(v)
            yield totals[-1], acc, r.seconds
    finally:
        ops.OPS.update(saved)


def torch_profile(t, leaf, device="cpu"):
    """``one()`` -> (step seconds, {event name: seconds}) of one profiled torch step: top-level
    events' CPU time, or on CUDA their device time."""
    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile

    import kernels_bench as kb

    cuda = device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False      # float32 products, as CuPy computes
        torch.backends.cudnn.allow_tf32 = False
    host = {v: (a.get() if hasattr(a, "get") else np.asarray(a)) for v, a in leaf.items()}
    step, values = kb.torch_step(t, host, device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    kb.clear_grads(values)
    step()
    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])

    def one():
        kb.clear_grads(values)
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            step()
            sync()
            total = time.perf_counter() - t0
        acc = collections.defaultdict(float)
        for e in prof.events():
            if e.cpu_parent is None:
                spent = (getattr(e, "device_time_total", None)
                         or getattr(e, "cuda_time_total", 0) or 0) if cuda else e.cpu_time_total
                acc[e.name.replace("autograd::engine::evaluate_function: ", "")] += spent / 1e6
        return total, acc

    del torch
    return one


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    for k in ("batch", "width", "depth", "image", "seq", "heads"):
        ap.add_argument(f"--{k}", type=int, default=None)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: the executor on CuPy, torch on CUDA (device time per kernel)")
    args = ap.parse_args(argv)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var) != str(args.threads):
            os.environ[var] = str(args.threads)
            os.execv(sys.executable, [sys.executable] + sys.argv)
    sys.path.insert(0, str(ROOT / "bench"))
    import torch

    import kernels_bench as kb
    from planner.execute import backend, executor, export

    torch.set_num_threads(args.threads)
    sizes = {k: getattr(args, k) for k in ("batch", "width", "depth", "image", "seq", "heads")
             if getattr(args, k) is not None}
    t = kb.build(args.model, sizes)
    g = export.to_cg(t)
    from hgraph.common.errors import HGraphError

    try:
        be = backend.get("cupy" if args.device == "cuda" else "numpy")
    except HGraphError as err:
        print(f"kernels_profile: {err}", file=sys.stderr)
        return 2
    leaf = executor.leaves(g, be.xp, 0)
    ex = executor_profile(g, leaf, be, args.steps)
    to = torch_profile(t, leaf, args.device)
    e_tot, t_tot, e_own = [], [], []
    e_per, t_per = collections.defaultdict(list), collections.defaultdict(list)
    for _ in range(args.steps):
        total, acc, own = next(ex)
        e_tot.append(total)
        e_own.append(own)
        for k, v in acc.items():
            e_per[k].append(v)
        total, acc = to()
        t_tot.append(total)
        for k, v in acc.items():
            t_per[k].append(v)
    med = statistics.median
    e_step, t_step = med(e_tot), med(t_tot)
    e_rows = {f"{k[0]} {k[1]}": med(v) for k, v in e_per.items()}
    e_rows["(executor outside kernels)"] = med(e_own) - sum(e_rows.values())
    e_rows["(run around the step: timeline, gradients copied out)"] = e_step - med(e_own)
    t_rows = {k: med(v) for k, v in t_per.items()}
    print(f"{args.model} {sizes} {args.device}, {args.threads} thread(s), median of "
          f"{args.steps}, wall clock: "
          f"executor step {med(e_own):.4f} s ({e_step:.4f} s around executor.run), torch "
          f"{t_step:.4f} s (profiled), ratio {med(e_own) / t_step:.2f}x")
    width = max(len(k) for k in list(e_rows) + list(t_rows)) + 2
    print(f"\n{'executor':{width}} s      share")
    for k, v in sorted(e_rows.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"{k:{width}} {v:.4f}  {v / e_step:5.1%}")
    print(f"\n{'torch':{width}} s      share")
    for k, v in sorted(t_rows.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"{k:{width}} {v:.4f}  {v / t_step:5.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
