"""Executor kernels vs PyTorch eager: the plain training step of every zoo model (issue 26).

For each zoo model (:mod:`planner.execute.zoo`) at the chosen sizes, two sides run the same
training step (forward + backward, no recomputation) on the same device, dtype, shapes,
parameter values and thread count:

* **executor**: ``planner.execute.executor.run`` of the plain schedule
  (``executor.plain_schedule``; pool allocator, buffers freed after their last use: what
  ``hgraph submit execute --model NAME`` runs by default), with the NumPy backend on CPU and
  CuPy on a CUDA device;
* **torch**: PyTorch eager on the same graph, translated op by op from the executor's trace
  (:func:`torch_forward`: each traced op of :mod:`planner.ops` mapped to its torch function,
  conv -> ``F.conv2d``, matmul, ``F.batch_norm`` / ``F.layer_norm`` in training mode,
  ``F.scaled_dot_product_attention``, ``F.cross_entropy``...), parameters and inputs equal to
  the executor's initialisers (``executor.leaves``, the same seed). Like the executor's plain
  step it computes the gradient of the float input too; labels are int64 for
  ``F.cross_entropy`` (converted before the timer).

Both sides' loss and parameter gradients are compared (the largest relative difference, each
gradient relative to its largest entry): this checks the translation as much as the kernels.

Timing: the step only (parameters, inputs, the schedule and the torch translation are built
before the timer; the executor's ``leaves`` are prebuilt and handed to it), one warm-up step,
median of 5 (``--steps``); ``--clock cpu`` times the process's CPU time instead of wall time
(on a machine other jobs share, the steps' own work: a side loses no time slices, though
other jobs still share its caches and memory bandwidth). Each side runs in its own subprocess with
``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` = ``--threads`` (default:
the cores this process may use) and ``torch.set_num_threads`` the same (threadpoolctl is not
installed here). The executor's step is timed by its ``run`` (``RunResult.seconds`` /
``cpu_seconds``): the kernels and what the run does between them (the allocator, gradient
accumulation), not building the parameters before it nor copying the parameter gradients out
to fresh host arrays after it (torch's stay in ``.grad``; that copy is the run's interface, a
device-to-host transfer on CuPy; ``bench/kernels_profile.py`` shows its share, large for
VGG-16's classifier: bench/NOTES_kernels.md). Timed
steps run unmetered, so their pool reuses the previous step's host blocks
(``allocator.HOST_CACHE``, as a training loop would) instead of faulting fresh pages in.

Peaks, by a meter independent of the executor's own accounting, in a separate (untimed) step:
``tracemalloc`` around the NumPy step (NumPy reports its data allocations to it; what the step
allocates above what existed when it started, kernel temporaries included), and the CPU
allocator's memory events in ``torch.profiler`` for torch
(``planner.torch.measure.allocator_peak``). Both count the gradients the step creates and
neither counts parameters or inputs. On CUDA: the executor's device peak (every CuPy byte of the
step through the allocator hook, ``RunResult.device_peak_bytes``) against
``torch.cuda.max_memory_allocated``; TF32 is turned off in torch so both sides compute in float32.

Output: a markdown table (printed, written to ``--out``, default ``out/kernels_bench/table.md``)
and the raw figures beside it (``results.json``), both written atomically.

    python3 bench/kernels_bench.py --quick                        # small sizes, a few minutes
    python3 bench/kernels_bench.py --quick --threads 1 --interleave   # the two sides step in turn
    python3 bench/kernels_bench.py --threads 1 --interleave --clock cpu   # CPU time (shared machine)
    python3 bench/kernels_bench.py --plans --quick --threads 1    # plan steps vs the plain step
    python3 bench/kernels_bench.py --models vgg16 --image 128 --batch 2
    python3 bench/kernels_bench.py                                # the issue's sizes: long on CPU
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The issue's sizes ("realistic": VGG-16 and ResNet-50 as the papers' networks at 224x224, the
#: transformer at sequence 512). On a 2-core CPU VGG-16 and ResNet-50 take minutes per model.
SIZES = {
    "mlp": dict(batch=128, width=1024, depth=4, image=28),
    "resnet": dict(batch=32, width=64, depth=2, image=32),
    "unet": dict(batch=4, width=32, depth=3, image=128),
    "transformer": dict(batch=4, width=512, depth=4, seq=512, heads=8),
    "vgg16": dict(batch=8, width=64, depth=3, image=224),
    "resnet50": dict(batch=8, width=64, depth=6, image=224),
}
#: ``--quick``: the same networks, narrower and smaller, so the whole table takes minutes.
QUICK = {
    "mlp": dict(batch=64, width=512, depth=4, image=28),
    "resnet": dict(batch=16, width=16, depth=2, image=32),
    "unet": dict(batch=2, width=16, depth=3, image=64),
    "transformer": dict(batch=4, width=128, depth=2, seq=128, heads=4),
    "vgg16": dict(batch=2, width=16, depth=3, image=64),
    "resnet50": dict(batch=2, width=16, depth=6, image=64),
}
#: The translation test's sizes (tests/test_kernels_bench.py): the zoo's own small defaults.
TINY = {name: {} for name in SIZES}
STEPS = 5


# ---------------------------------------------------------------- the translation
def _norm(xs, a):
    import torch.nn.functional as F

    x, g, b = xs
    axis = a["axis"] % x.ndim
    if a["kind"] == "batch" and axis == 1:
        return F.batch_norm(x, None, None, g, b, training=True, eps=a.get("eps", 1e-5))
    if a["kind"] == "layer" and axis == x.ndim - 1:
        return F.layer_norm(x, (x.shape[-1],), g, b, eps=a.get("eps", 1e-5))
    raise NotImplementedError(f"{a['kind']} norm over axis {a['axis']} has no torch translation here")


def _bias(xs, a):
    x, b = xs
    shape = [1] * x.ndim
    shape[a["axis"] % x.ndim] = -1
    return x + b.reshape(shape)


def _attention(xs, a):
    import torch.nn.functional as F

    qkv = xs[0]
    b, s, d3 = qkv.shape
    h, d = a["heads"], d3 // 3
    q, k, v = qkv.reshape(b, s, 3, h, d // h).permute(2, 0, 3, 1, 4).unbind(0)   # B, H, S, dh
    o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(a.get("causal")))
    return o.transpose(1, 2).reshape(b, s, d)


def torch_ops() -> dict:
    """op name (:data:`planner.ops.OPS`) -> ``f(inputs, attrs)``, its PyTorch eager equivalent."""
    import torch
    import torch.nn.functional as F

    return {
        "matmul": lambda xs, a: torch.matmul(xs[0], xs[1]),
        "add": lambda xs, a: xs[0] + xs[1],
        "bias": _bias,
        "relu": lambda xs, a: F.relu(xs[0]),
        "gelu": lambda xs, a: F.gelu(xs[0], approximate="tanh"),      # planner.ops' tanh form
        "conv2d": lambda xs, a: F.conv2d(xs[0], xs[1], stride=a["stride"], padding=a["pad"]),
        "max_pool": lambda xs, a: F.max_pool2d(xs[0], a["kernel"], a["stride"], a.get("pad", 0)),
        "avg_pool": lambda xs, a: F.avg_pool2d(xs[0], a["kernel"], a["stride"]),
        "upsample": lambda xs, a: F.interpolate(xs[0], scale_factor=a["factor"], mode="nearest"),
        "batch_norm": _norm,
        "layer_norm": _norm,
        "softmax_cross_entropy": lambda xs, a: F.cross_entropy(xs[0], xs[1]),
        "reshape": lambda xs, a: xs[0].reshape(tuple(a["shape"])),
        "concat": lambda xs, a: torch.cat(list(xs), dim=a["axis"]),
        "attention": _attention,
    }


def torch_forward(t):
    """``forward(values) -> loss`` running tracer ``t``'s ops in torch; ``values`` maps the var ids
    of parameters and inputs to tensors. Each value is dropped after its last use, as an eager
    module's locals are (autograd keeps what its backward saves)."""
    table = torch_ops()
    missing = sorted({n.op for n in t.nodes} - set(table))
    if missing:
        raise NotImplementedError(f"no torch translation for op(s) {', '.join(missing)}")
    last = {}
    for n in t.nodes:
        for v in n.inputs:
            last[v] = n.index
    plan = [(table[n.op], n.inputs, n.attrs, n.output,
             [v for v in dict.fromkeys(n.inputs) if last[v] == n.index and t.vars[v].kind == "activation"])
            for n in t.nodes]
    loss_id = t.loss

    def forward(values):
        env = dict(values)
        for fn, ins, attrs, out, drop in plan:
            env[out] = fn([env[v] for v in ins], attrs)
            for v in drop:
                del env[v]
        return env[loss_id]

    return forward


def torch_leaves(t, leaf: dict, device: str = "cpu") -> dict:
    """The executor's parameters and inputs (var id -> NumPy array) as torch tensors: parameters
    and float inputs require gradients (the executor's plain step computes both), integer
    labels become int64 (``F.cross_entropy``)."""
    import numpy as np
    import torch

    out = {}
    for v, arr in leaf.items():
        a = np.asarray(arr)
        if np.issubdtype(a.dtype, np.integer):
            out[v] = torch.from_numpy(a.astype(np.int64)).to(device)
        else:
            out[v] = torch.from_numpy(a.copy()).to(device).requires_grad_(True)
    return out


def torch_step(t, leaf: dict, device: str = "cpu"):
    """(step, values): ``step()`` runs one training step (forward, ``loss.backward()``) and returns
    the loss; gradients land in ``values[v].grad``. Call :func:`clear_grads` between steps."""
    forward = torch_forward(t)
    values = torch_leaves(t, leaf, device)

    def step(*_):
        loss = forward(values)
        loss.backward()
        return loss.detach()

    return step, values


def clear_grads(values: dict) -> None:
    for x in values.values():
        x.grad = None


# ---------------------------------------------------------------- the executor's side
class _Prebuilt:
    """Hand ``executor.run`` prebuilt parameters and inputs: its ``_run_real`` calls the module's
    ``leaves(g, xp, seed)``, replaced here for the duration by a lookup of the arrays built before
    the timer (the same arrays ``leaves`` would build; the step's kernels are untouched)."""

    def __init__(self, g, leaf):
        self.g, self.leaf = g, leaf

    def __enter__(self):
        from planner.execute import executor

        self._orig = executor.leaves

        def leaves(g, xp, seed=0):
            if g is not self.g:
                return self._orig(g, xp, seed)
            return dict(self.leaf)

        executor.leaves = leaves
        return self

    def __exit__(self, *exc):
        from planner.execute import executor

        executor.leaves = self._orig
        return False


def build(name: str, sizes: dict, dtype: str = "float32"):
    from planner.execute import zoo

    return zoo.build(name, dtype=dtype, **sizes)


def executor_step(g, leaf: dict, backend):
    """``step()`` -> ``RunResult``: one plain step of ``g`` through ``executor.run``."""
    from planner.execute import executor

    schedule = executor.plain_schedule(g)

    def step(meter: bool = False):
        # timed runs go without the executor's independent meter (tracemalloc slows Python-level
        # work); one metered run gives the peak
        with _Prebuilt(g, leaf):
            r = executor.run(g, schedule, executor.RunOptions(allocator="pool", meter=meter),
                             backend=backend)
        backend.synchronize()
        return r

    return step


def grad_gaps(t, exec_loss, exec_grads: dict, torch_loss, values: dict) -> dict:
    """Loss and parameter-gradient differences, relative: |a - b| / |b| for the loss, for each
    gradient its largest |a - b| over its largest |b|; the max over the parameters."""
    import numpy as np

    worst, where = 0.0, None
    for v, ge in exec_grads.items():
        gt = values[v].grad
        if gt is None:
            raise AssertionError(f"torch gave no gradient for {t.vars[v].name}")
        gt = gt.detach().cpu().double().numpy()
        ge = np.asarray(ge, dtype=np.float64)
        if ge.shape != gt.shape:
            raise AssertionError(f"{t.vars[v].name}: gradient shapes {ge.shape} vs {gt.shape}")
        gap = float(np.abs(ge - gt).max() / max(float(np.abs(gt).max()), 1e-30))
        if gap >= worst:
            worst, where = gap, t.vars[v].name
    params = {v.id for v in t.params}
    if set(exec_grads) != params:
        raise AssertionError(f"executor gradients for {len(exec_grads)} of {len(params)} parameters")
    tl = float(torch_loss)
    return {"loss_executor": float(exec_loss), "loss_torch": tl,
            "loss_rel_diff": abs(float(exec_loss) - tl) / max(abs(tl), 1e-30),
            "grad_rel_diff": worst, "grad_worst_param": where, "params": len(params)}


def compare(name: str, sizes: dict | None = None, dtype: str = "float32", seed: int = 0) -> dict:
    """One untimed plain step of zoo model ``name`` on each side, in this process (NumPy, CPU):
    :func:`grad_gaps` of the two. The translation's correctness check (the test's entry)."""
    from planner.execute import backend, executor, export

    t = build(name, sizes or {}, dtype)
    g = export.to_cg(t)
    be = backend.get("numpy")
    leaf = executor.leaves(g, be.xp, seed)
    r = executor_step(g, leaf, be)()
    step, values = torch_step(t, leaf)
    loss = step()
    return grad_gaps(t, r.loss, r.param_grads, loss, values)


# ---------------------------------------------------------------- workers (one per side)
#: ``--clock``: wall time, or the process's CPU time (all its threads), which on a shared machine
#: leaves out the time slices other jobs took (single-threaded sides: their steps' own work).
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _timed(fn, steps: int, before=None, clock: str = "wall", own=None):
    """``steps`` timings of ``fn()``; ``own(result, clock)``, where given, says the call's time
    itself (the executor's run times its step inside, without building parameters before it or
    copying gradients out after it)."""
    now = CLOCKS[clock]
    times = []
    for _ in range(steps):
        if before:
            before()
        t0 = now()
        out = fn()
        times.append(now() - t0 if own is None else own(out, clock))
    return times, out


def _run_time(r, clock: str) -> float:
    """The executor's step time as its ``run`` measured it (``RunResult.seconds`` / ``cpu_seconds``)."""
    return r.seconds if clock == "wall" else r.cpu_seconds


def _executor_side(spec: dict):
    """(step, finish) of the executor's side: ``step()`` one timed plain step (unmetered);
    ``finish(times)`` one metered step for the peak, its gradients saved for the torch side,
    and the side's figures."""
    import numpy as np

    from planner.execute import backend, executor, export

    t = build(spec["model"], spec["sizes"], spec["dtype"])
    g = export.to_cg(t)
    be = backend.get("cupy" if spec["device"] == "cuda" else "numpy")
    leaf = executor.leaves(g, be.xp, spec["seed"])
    step = executor_step(g, leaf, be)

    def finish(times):
        r = step(meter=True)            # the executor's independent meter: tracemalloc / CuPy pool
        folder = Path(spec["dir"])
        for v, arr in r.param_grads.items():
            np.save(folder / f"{v}.npy", arr)
        return {"seconds": statistics.median(times), "times": times,
                "peak_bytes": int(r.measured_peak_bytes), "peak_meter": r.meter,
                "tracked_peak_bytes": int(r.tracked_peak_bytes), "loss": r.loss,
                "backend": be.name, "device": be.device, "forward_flops": int(t.forward_flops)}

    return step, finish


def _torch_side(spec: dict):
    """(step, before, finish) of PyTorch's side: ``before()`` clears the gradients (untimed),
    ``step()`` one timed training step, ``finish(times)`` the allocator peak and the gradient
    gaps against the executor's saved gradients (``spec["exec_loss"]`` set by then)."""
    import numpy as np
    import torch

    from planner.execute import executor, export
    from planner.torch.measure import allocator_peak

    torch.set_num_threads(spec["threads"])
    cuda = spec["device"] == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False      # float32 products, as CuPy computes
        torch.backends.cudnn.allow_tf32 = False
    t = build(spec["model"], spec["sizes"], spec["dtype"])
    g = export.to_cg(t)
    leaf = executor.leaves(g, np, spec["seed"])           # the executor's initialisers, on host
    step, values = torch_step(t, leaf, spec["device"])
    del leaf
    last = {}

    def run():
        last["loss"] = step()
        if cuda:
            torch.cuda.synchronize()
        return last["loss"]

    def finish(times):
        clear_grads(values)
        peak, meter = allocator_peak(lambda *_: run(), list(values.values()))
        folder = Path(spec["dir"])
        exec_grads = {v.id: np.load(folder / f"{v.id}.npy", mmap_mode="r") for v in t.params}
        gaps = grad_gaps(t, spec["exec_loss"], exec_grads, last["loss"], values)
        return {"seconds": statistics.median(times), "times": times, "peak_bytes": int(peak),
                "peak_meter": meter, "threads": torch.get_num_threads(), "torch": torch.__version__,
                **gaps}

    return run, lambda: clear_grads(values), finish


def worker_executor(spec: dict) -> dict:
    step, finish = _executor_side(spec)
    step()                                                   # warm-up
    times, _ = _timed(step, spec["steps"], clock=spec.get("clock", "wall"), own=_run_time)
    return finish(times)


def worker_torch(spec: dict) -> dict:
    step, before, finish = _torch_side(spec)
    before()
    step()                                                   # warm-up
    times, _ = _timed(step, spec["steps"], before=before, clock=spec.get("clock", "wall"))
    return finish(times)


def worker_both(spec: dict) -> dict:
    """``--interleave``: both sides in this one process, one step of each in turn (same thread
    settings), so that a load change on a shared machine hits both sides alike."""
    e_step, e_finish = _executor_side(spec)
    t_step, t_before, t_finish = _torch_side(spec)
    e_step()
    t_before()
    t_step()                                                 # warm-ups
    e_times, t_times = [], []
    for _ in range(spec["steps"]):
        e_times += _timed(e_step, 1, clock=spec.get("clock", "wall"), own=_run_time)[0]
        t_times += _timed(t_step, 1, before=t_before, clock=spec.get("clock", "wall"))[0]
    ex = e_finish(e_times)
    spec["exec_loss"] = ex["loss"]
    return {"executor": ex, "torch": t_finish(t_times)}


def _worker_main(side: str, spec_text: str) -> int:
    spec = json.loads(spec_text)
    out = {"executor": worker_executor, "torch": worker_torch, "both": worker_both}[side](spec)
    print("RESULT " + json.dumps(out), flush=True)
    return 0


# ---------------------------------------------------------------- plan steps vs the plain step
#: Zoo models with a row-centric plan (a convolution stack; the others have no row regions).
ROW_MODELS = ("resnet", "unet", "vgg16", "resnet50")
#: Acceptance (issue 26): a plan's step time over the plain step's within this factor of its
#: FLOP ratio.
PLAN_SLACK = 1.25


def plan_steps(name, sizes, dtype="float32", budget="60%", rows=4, policy="share", steps=STEPS,
               clock="wall"):
    """Step times of the plain step and of plans on zoo model ``name``, in this process on
    NumPy (the thread count is the caller's environment): the DP's recomputation schedule at
    ``budget`` (at its smallest feasible budget when that is infeasible) and, for the CNNs, a
    row plan (``rows`` bands, ``policy``). Runs unmetered and interleaved (one of each per
    round, ``steps`` rounds after a warm-up), median step seconds (``RunResult.seconds``:
    the step without building parameters or copying gradients out; ``clock="cpu"``: the
    process's CPU time around the whole ``run``, parameters prebuilt, so the schedule's
    timeline and the gradients' copy-out are in it, on every side alike). Each plan's row: FLOP
    ratio to the plain step, time ratio, and their quotient (the acceptance: at most
    :data:`PLAN_SLACK`)."""
    from hgraph.common.errors import InfeasibleError
    import planner
    from planner.execute import backend, executor, export, rows_exec
    from planner.ops import BACKWARD_FLOPS_FACTOR
    from planner.rows import layers as rows_layers
    from planner.rows import plan as rows_plan
    from planner.rows import with_dp

    g = export.to_cg(build(name, sizes, dtype))
    be = backend.get("numpy")
    fl = rows_layers.read(g).flops.astype(float)          # forward FLOPs of each op
    plain_flops = float(fl.sum()) * (1 + BACKWARD_FLOPS_FACTOR)
    plain = executor.plain_schedule(g)
    runs = {"plain": (lambda: executor.run(g, plain, executor.RunOptions(meter=False), backend=be), plain_flops, "")}
    try:
        dp = planner.plan(g, budget=budget)
        note = f"DP at {budget}"
    except InfeasibleError as err:
        dp = planner.plan(g, budget=err.min_budget_bytes)
        note = f"DP at its smallest budget ({err.min_budget_bytes:,} B; {budget} infeasible)"
    extra = float((with_dp.recomputations(g, dp.schedule) * fl).sum())
    runs["recompute"] = (lambda: executor.run(g, dp.schedule, executor.RunOptions(meter=False),
                                              backend=be),
                         plain_flops + extra, note)
    if name in ROW_MODELS:
        rp = rows_plan.plan(g, rows, policy)
        runs["rows"] = (lambda: rows_exec.run(g, rp, backend=be, meter=False),
                        float(rp.flops()["row_flops"]), f"{rows} bands, {policy}")
    leaf = executor.leaves(g, be.xp, 0) if clock == "cpu" else None

    def timed(fn):
        if clock == "wall":
            return fn().seconds
        with _Prebuilt(g, leaf):
            t0 = time.process_time()
            fn()
            return time.process_time() - t0

    times = {k: [] for k in runs}
    for k, (fn, _, _) in runs.items():
        fn()                                                 # warm-up
    for _ in range(steps):
        for k, (fn, _, _) in runs.items():
            times[k].append(timed(fn))
    base, fastest = statistics.median(times["plain"]), min(times["plain"])
    out = []
    for k, (_, flops, note) in runs.items():
        t = statistics.median(times[k])
        fr, tr, tf = flops / plain_flops, t / base, min(times[k]) / fastest
        out.append({"model": name, "sizes": sizes, "plan": k, "note": note, "flops": flops,
                    "flop_ratio": fr, "seconds": t, "times": times[k], "time_ratio": tr,
                    "time_over_flops": tr / fr, "fastest_ratio": tf, "fastest_over_flops": tf / fr,
                    "ok": tr / fr <= PLAN_SLACK})
    return out


def plans_table(rows: list) -> str:
    head = ("| model | sizes | plan | GFLOP | FLOP ratio | step s (min) | time ratio (fastest) | "
            "time / FLOP ratio (fastest) |\n|---|---|---|---:|---:|---:|---:|---:|\n")
    lines = [f"| {r['model']} | {_fmt_sizes(r['sizes'])} | {r['plan']}{' (' + r['note'] + ')' if r['note'] else ''} | "
             f"{r['flops'] / 1e9:.2f} | {r['flop_ratio']:.3f} | {r['seconds']:.4f} ({min(r['times']):.4f}) | "
             f"{r['time_ratio']:.3f} ({r['fastest_ratio']:.3f}) | {r['time_over_flops']:.2f} "
             f"({r['fastest_over_flops']:.2f}){'' if r['ok'] else ' over ' + str(PLAN_SLACK)} |"
             for r in rows]
    return head + "\n".join(lines) + "\n"


def _plans_main(args, names, argv=None) -> int:
    """``--plans``: the plan-step / plain-step table, in this process with ``--threads`` BLAS
    threads (set before NumPy loads: the driver re-runs itself with the variables set)."""
    from hgraph.common.fileio import write_text

    rerun = with_threads(args.threads, __file__, argv)
    if rerun is not None:
        return rerun
    load0 = os.getloadavg()
    rows = []
    for name in names:
        sizes = sizes_for(name, args)
        print(f"{name} ({_fmt_sizes(sizes)}) ...", flush=True)
        got = plan_steps(name, sizes, args.dtype, args.budget, args.rows, args.policy, args.steps,
                         args.clock)
        for r in got:
            print(f"  {r['plan']:9s} FLOP ratio {r['flop_ratio']:.3f}, time ratio {r['time_ratio']:.3f} "
                  f"({r['time_over_flops']:.2f}x the FLOP ratio)", flush=True)
        rows.extend(got)
    load1 = os.getloadavg()
    cmd = "python3 bench/kernels_bench.py " + " ".join(sys.argv[1:] if argv is None else argv)
    text = (f"    {cmd.strip()}\n\n{_cpu_name()}, {args.threads} BLAS thread(s), {args.dtype}, NumPy "
            f"executor; median of {args.steps} interleaved steps after a warm-up ({args.clock} clock; "
            f"fastest in brackets; "
            f"the ratio of the fastest steps is the steadier one on a shared machine); "
            f"load average {load0[0]:.2f} before, {load1[0]:.2f} after. Acceptance: time / FLOP ratio "
            f"<= {PLAN_SLACK}.\n\n" + plans_table(rows))
    print()
    print(text)
    out = Path(args.out).with_name("plans.md")
    write_text(out, text)
    write_text(out.with_name("plans.json"), json.dumps(rows, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0 if all(r["ok"] for r in rows) else 1


# ---------------------------------------------------------------- the driver
def _run_worker(side: str, spec: dict, threads: int, timeout: float | None) -> dict:
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", side, "--spec", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"{side}: over {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    return {"error": f"{side}: {tail} (exit {proc.returncode})"}


def with_threads(threads: int, script, argv=None):
    """Run ``script`` again in a child with ``threads`` BLAS / OpenMP threads (the variables
    must be set before NumPy loads) and return its exit status; None when this process already
    has them (the child itself), so the caller goes on."""
    if os.environ.get("OPENBLAS_NUM_THREADS") == str(threads):
        return None
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    words = sys.argv[1:] if argv is None else list(argv)
    return subprocess.call([sys.executable, str(Path(script).resolve())] + words, env=env)


def row_model_arguments(ap, steps: int) -> None:
    """The row tools' common flags (``bench/rows_ab.py``, ``bench/rows_profile.py``): the model,
    its sizes (:func:`row_model_sizes` reads them), the bands, the timed steps, the threads."""
    ap.add_argument("model")
    ap.add_argument("--quick", action="store_true", help="kernels_bench's --quick sizes")
    for key in ("batch", "width", "depth", "image"):
        ap.add_argument(f"--{key}", type=int)
    ap.add_argument("--bands", type=int, default=4)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--threads", type=int, default=1)


def row_model_sizes(tool: str, args):
    """The sizes of row model ``args.model`` (``--quick`` or the issue's, with the command
    line's batch/width/depth/image: :func:`sizes_for`), or None after one line on stderr when
    it has no row plan (``tool`` names the command)."""
    if args.model not in ROW_MODELS:
        print(f"{tool}: {args.model!r} has no row plan; choose from {', '.join(ROW_MODELS)}",
              file=sys.stderr)
        return None
    return sizes_for(args.model, args)


def sizes_for(name: str, args) -> dict:
    sizes = dict((QUICK if args.quick else SIZES)[name])
    for key in ("batch", "width", "depth"):
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    if name == "transformer":
        if args.seq is not None:
            sizes["seq"] = args.seq
        if args.heads is not None:
            sizes["heads"] = args.heads
    elif args.image is not None:
        sizes["image"] = args.image
    return sizes


def cuda_status() -> tuple[bool, str]:
    """Whether the CuPy-vs-torch-CUDA rows can run here, and why not."""
    try:
        import torch
    except ImportError as err:
        return False, f"torch does not import ({err})"
    if not torch.cuda.is_available():
        return False, "torch.cuda.is_available() is False"
    from planner.execute import backend

    ok, reason = backend.gpu_available()
    return ok, reason


def _fmt_sizes(sizes: dict) -> str:
    order = ("batch", "width", "depth", "heads", "image", "seq")
    return ", ".join(f"{k} {sizes[k]}" for k in order if k in sizes)


def run_model(name: str, sizes: dict, device: str, args) -> dict:
    row = {"model": name, "sizes": sizes, "device": device, "dtype": args.dtype}
    with tempfile.TemporaryDirectory(prefix="kernels_bench.") as folder:
        spec = {"model": name, "sizes": sizes, "device": device, "dtype": args.dtype,
                "steps": args.steps, "seed": args.seed, "threads": args.threads, "dir": folder,
                "clock": args.clock}
        if args.interleave:
            both = _run_worker("both", spec, args.threads, args.timeout)
            row["executor"] = both.get("executor", both)
            row["torch"] = both.get("torch", both)
            return row
        ex = _run_worker("executor", spec, args.threads, args.timeout)
        row["executor"] = ex
        if "error" in ex:
            return row
        spec["exec_loss"] = ex["loss"]
        row["torch"] = _run_worker("torch", spec, args.threads, args.timeout)
    return row


def table(rows: list) -> str:
    head = ("| model | device | sizes | step GFLOP | executor s (min) | torch s (min) | ratio | "
            "executor peak B | torch peak B | max grad rel diff | loss rel diff |\n"
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    lines = []
    for r in rows:
        ex, to = r.get("executor", {}), r.get("torch", {})
        pre = f"| {r['model']} | {r['device']} | {_fmt_sizes(r['sizes'])} |"
        err = ex.get("error") or to.get("error")
        if err:
            lines.append(f"{pre} | failed: {err} | | | | | | |")
            continue
        gflop = 3 * ex["forward_flops"] / 1e9          # forward + backward (2x forward)
        lines.append(f"{pre} {gflop:.2f} | {ex['seconds']:.4f} ({min(ex['times']):.4f}) | "
                     f"{to['seconds']:.4f} ({min(to['times']):.4f}) | "
                     f"{ex['seconds'] / to['seconds']:.2f}x | {ex['peak_bytes']:,} | "
                     f"{to['peak_bytes']:,} | {to['grad_rel_diff']:.2e} | {to['loss_rel_diff']:.2e} |")
    return head + "\n".join(lines) + "\n"


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def main(argv=None) -> int:
    from planner.execute import zoo

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(zoo.MODELS), help="comma-separated zoo models")
    ap.add_argument("--quick", action="store_true", help="small sizes (the whole table in minutes)")
    ap.add_argument("--batch", type=int, default=None, help="batch size for every model")
    ap.add_argument("--width", type=int, default=None, help="width for every model")
    ap.add_argument("--depth", type=int, default=None, help="depth for every model")
    ap.add_argument("--image", type=int, default=None, help="image side (every model but the transformer)")
    ap.add_argument("--seq", type=int, default=None, help="sequence length (transformer)")
    ap.add_argument("--heads", type=int, default=None, help="attention heads (transformer)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--steps", type=int, default=STEPS, help="timed steps per side (median)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for both sides (default: the cores this process may use)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=None, help="seconds per side per model")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                    help="auto: CPU rows, and CUDA rows where a device answers")
    ap.add_argument("--out", default="out/kernels_bench/table.md")
    ap.add_argument("--plans", action="store_true",
                    help="time recomputation and row plans' steps against the plain step instead "
                         "(NumPy, this process; plans.md beside --out)")
    ap.add_argument("--budget", default="60%", help="--plans: the recomputation DP's budget")
    ap.add_argument("--rows", type=int, default=4, help="--plans: bands of the row plans")
    ap.add_argument("--policy", default="share", choices=["overlap", "share"],
                    help="--plans: the row plans' policy")
    ap.add_argument("--worker", choices=["executor", "torch", "both"], help=argparse.SUPPRESS)
    ap.add_argument("--interleave", action="store_true",
                    help="both sides in one worker process, one step of each in turn (steadier on "
                         "a shared machine than one side after the other)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="step time: wall, or the process's CPU time (steadier on a shared machine; "
                         "with one thread per side, the step's own work)")
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker_main(args.worker, args.spec)
    from hgraph.common.fileio import write_text

    if args.threads is None:
        args.threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in zoo.MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(zoo.MODELS)}")
    if args.plans:
        return _plans_main(args, names, argv)
    if args.clock == "cpu" and args.device == "cuda":
        print("kernels_bench: --clock cpu times host work only; CUDA rows take --clock wall",
              file=sys.stderr)
        return 2
    devices = [] if args.device == "cuda" else ["cpu"]
    gpu_ok, why = cuda_status() if args.device != "cpu" else (False, "--device cpu")
    if gpu_ok and args.clock == "cpu":
        gpu_ok, why = False, "--clock cpu (host CPU time says nothing of a device's kernels)"
    if gpu_ok:
        devices.append("cuda")
    elif args.device == "cuda":
        print(f"kernels_bench: no CUDA rows: {why}", file=sys.stderr)
        return 1
    gpu_line = ("GPU rows (CuPy vs torch CUDA): run" if gpu_ok else
                f"GPU rows (CuPy vs torch CUDA): skipped: {why}")
    print(gpu_line, flush=True)
    load0 = os.getloadavg()
    cores = os.cpu_count() or 1
    busy = ""
    if args.threads > 1 and load0[0] + args.threads > cores + 0.5:
        busy = (f" The CPU was busy (load {load0[0]:.2f} on {cores} cores) with {args.threads} "
                f"threads per side: thread pools that spin at barriers lose whole time slices "
                f"under oversubscription, so these timings can be off by 10x; --threads 1 is "
                f"steadier on a shared machine.")
        print("warning:" + busy, file=sys.stderr, flush=True)
    rows = []
    for device in devices:
        for name in names:
            sizes = sizes_for(name, args)
            print(f"{name} ({device}, {_fmt_sizes(sizes)}) ...", flush=True)
            row = run_model(name, sizes, device, args)
            rows.append(row)
            ex, to = row.get("executor", {}), row.get("torch", {})
            if "error" in ex or "error" in to:
                print(f"  failed: {ex.get('error') or to.get('error')}", flush=True)
            else:
                print(f"  executor {ex['seconds']:.4f} s, torch {to['seconds']:.4f} s "
                      f"({ex['seconds'] / to['seconds']:.2f}x); peaks {ex['peak_bytes']:,} B vs "
                      f"{to['peak_bytes']:,} B; max grad rel diff {to['grad_rel_diff']:.2e}", flush=True)
    load1 = os.getloadavg()
    import numpy
    try:
        import torch
        tv = torch.__version__
    except ImportError:
        tv = "absent"
    cmd = "python3 bench/kernels_bench.py " + " ".join(sys.argv[1:] if argv is None else argv)
    header = (f"    {cmd.strip()}\n\n"
              f"{_cpu_name()}, {args.threads} thread(s) per side (OPENBLAS/OMP/MKL_NUM_THREADS, "
              f"torch.set_num_threads), {args.dtype}, NumPy {numpy.__version__}, torch {tv}; "
              f"median of {args.steps} steps after one warm-up ({args.clock} clock; the fastest in brackets; "
              f"{'both sides in one process, one step of each in turn; ' if args.interleave else 'each side in its own process, one after the other; '}"
              f"ratio: of the medians); load average "
              f"{load0[0]:.2f} before, {load1[0]:.2f} after (other jobs share the CPU: timings "
              f"are noisy). Peaks: executor by its independent meter (tracemalloc on CPU, the CuPy "
              f"pool's used bytes on CUDA), torch by its allocator (profiler memory events on CPU, "
              f"cuda.max_memory_allocated on CUDA); above what existed when the step started. "
              f"step GFLOP: 3x the traced forward FLOPs. {gpu_line}.{busy}\n\n")
    text = header + table(rows)
    print()
    print(text)
    write_text(args.out, text)
    write_text(Path(args.out).with_name("results.json"), json.dumps(rows, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    failed = [r for r in rows if "error" in r.get("executor", {}) or "error" in r.get("torch", {})]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
