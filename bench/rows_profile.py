"""Where a row-centric step's time goes: CPU time per step kind (and per op of each kind), the
allocations and their zero fills, and the convolutions' GFLOP/s by shape class beside the plain
step's (issue 26's second acceptance: a row step's time over its FLOP ratio).

    python3 bench/rows_profile.py resnet50 --quick
    python3 bench/rows_profile.py resnet50 --batch 2 --width 64 --image 128 --steps 2

One thread (``--threads``; the driver re-runs itself with the BLAS variables set), NumPy, a
``bands``-band ``share`` plan, parameters prebuilt, one warm-up run, then ``--steps`` runs of
the row step (and of the plain step for the convolution table). The timers sit around every
step of ``rows_exec._Run.run`` and every convolution kernel call (``planner.ops``' and
``planner/band_kernels.py``'s, the latter's classes marked "band kernel"), so the
totals run a little above an untimed step's; compare the shares, not absolute times with the
bench's.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))


def _timed_run(kinds: dict, allocs: dict):
    """A stand-in for ``rows_exec._Run.run`` that times each step: the same walk
    (:mod:`planner.walk`), its visitor's hooks timed."""
    from planner.execute import rows_exec

    pc = time.process_time
    base, walk = rows_exec._Run, rows_exec._Run.run

    class Timed(base):
        def alloc(self, request):
            t0 = pc()
            base.alloc(self, request)
            allocs["alloc + zero s"] += pc() - t0
            allocs["allocations"] += 1
            if request[5]:
                allocs["zero-filled bytes"] += request[2]

        def free(self, request):
            t0 = pc()
            base.free(self, request)
            allocs["free s"] += pc() - t0

        def visit(self, s, c):
            t0 = pc()
            base.visit(self, s, c)
            dt, st = pc() - t0, c.st
            op = self.ly.ops[st.op] + (" (norm)" if self.ly.norm[st.op] else "")
            for k in (st.kind, f"{st.kind}: {op}"):
                kinds[k][0] += dt
                kinds[k][1] += 1

    def run(self):
        self.__class__ = Timed
        return walk(self)

    return run


def _conv_meter(rec: dict, side: list):
    """The conv2d op with its forward and backward timed, FLOPs per shape class into ``rec``."""
    import planner.ops as ops

    base = ops.OPS["conv2d"]

    def cls(k, s, n, ho, wo):
        return f"{k}x{k} s{s}, {'<' if ho * wo < ops.MERGE_PIXELS else '>='}{ops.MERGE_PIXELS} px/image"

    def fwd(xp, xs, a, out=None):
        t0 = time.process_time()
        y = base.forward(xp, xs, a, out=out)
        t = time.process_time() - t0
        o, c, k, _ = xs[1].shape
        n, _, ho, wo = y.shape
        r = rec[(side[0], "fwd", cls(k, a["stride"], n, ho, wo))]
        r[0] += t
        r[1] += 2 * n * o * ho * wo * c * k * k
        r[2] += 1
        return y

    def bwd(xp, gy, saved, y, a, in_shapes, want, out=None):
        t0 = time.process_time()
        got = base.backward(xp, gy, saved, y, a, in_shapes, want, out)
        t = time.process_time() - t0
        o, c, k, _ = in_shapes[1]
        n, _, ho, wo = gy.shape
        r = rec[(side[0], "bwd", cls(k, a["stride"], n, ho, wo))]
        r[0] += t
        r[1] += 2 * n * o * ho * wo * c * k * k * len(want)
        r[2] += 1
        return got

    return dataclasses.replace(base, forward=fwd, backward=bwd)


def _band_meter(rec: dict, side: list) -> dict:
    """planner/band_kernels.py's convolutions timed like :func:`_conv_meter`'s (the row
    executor calls them through the module): ``{name: wrapper}`` to set on the module."""
    from planner import band_kernels as bk

    def cls(k, s, ho, wo):
        return f"{k}x{k} s{s}, {'<' if ho * wo < 256 else '>='}256 px/image, band kernel"

    def timed(kind, fn, flops):
        def run(*args):
            t0 = time.process_time()
            got = fn(*args)
            t = time.process_time() - t0
            name, fl = flops(*args)
            r = rec[(side[0], kind, name)]
            r[0] += t
            r[1] += fl
            r[2] += 1
            return got
        return run

    def fwd_flops(xp, x, w, s, out):
        n, o, ho, wo = out.shape
        return cls(w.shape[2], s, ho, wo), 2 * n * o * ho * wo * w.shape[1] * w.shape[2] ** 2

    def bwd_flops(xp, gy, x, w, s, dw, *rest):
        n, o, ho, wo = gy.shape
        grads = (dw is not None) + (rest[1] is not None and rest[1] is not False)   # dx / want_dx
        return cls(w.shape[2], s, ho, wo), 2 * n * o * ho * wo * w.shape[1] * w.shape[2] ** 2 * grads

    def pm_fwd_flops(xp, x, a, b, p, w, out):
        return fwd_flops(xp, x, w, 1, out)

    def pm_bwd_flops(xp, gy, x, a, b, p, w, dw, dw_fill, dx, dx_fill):
        return bwd_flops(xp, gy, x, w, 1, dw, dw_fill, dx)

    return {"conv_pm_forward": timed("fwd", bk.conv_pm_forward, pm_fwd_flops),
            "conv_pm_backward": timed("bwd", bk.conv_pm_backward, pm_bwd_flops),
            "conv1x1_forward": timed("fwd", bk.conv1x1_forward, fwd_flops),
            "conv_forward": timed("fwd", bk.conv_forward, fwd_flops),
            "conv1x1_backward": timed("bwd", bk.conv1x1_backward, bwd_flops),
            "conv_backward": timed("bwd", bk.conv_backward, bwd_flops)}


def main(argv=None) -> int:
    import kernels_bench as kb                  # stdlib only at import: NumPy not loaded yet

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    kb.row_model_arguments(ap, steps=3)
    ap.add_argument("--top", type=int, default=16, help="rows of the step-kind table")
    args = ap.parse_args(argv)

    rerun = kb.with_threads(args.threads, __file__, argv)
    if rerun is not None:
        return rerun

    from planner import band_kernels
    from planner.execute import backend, executor, export, rows_exec
    from planner.rows import plan as rows_plan

    sizes = kb.row_model_sizes("rows_profile", args)
    if sizes is None:
        return 2
    g = export.to_cg(kb.build(args.model, sizes))
    be = backend.get("numpy")
    plan = rows_plan.plan(g, args.bands, "share")
    sched = executor.plain_schedule(g)
    kinds, allocs = defaultdict(lambda: [0.0, 0]), defaultdict(float)
    rec, side = defaultdict(lambda: [0.0, 0, 0]), ["rows"]
    conv = _conv_meter(rec, side)
    band = _band_meter(rec, side)
    band_saved = {k: getattr(band_kernels, k) for k in band}
    saved = (rows_exec._Run.run, rows_exec.OPS["conv2d"], executor.OPS["conv2d"])
    leaf = executor.leaves(g, be.xp, 0)
    rows_exec.run(g, plan, backend=be, meter=False)           # warm-up, compiles the steps
    executor.run(g, sched, executor.RunOptions(meter=False), backend=be)
    try:
        rows_exec.OPS["conv2d"] = executor.OPS["conv2d"] = conv
        for k, fn in band.items():
            setattr(band_kernels, k, fn)
        plan.walk.program = None                              # recompiled with the metered op
        rows_exec._program(g, plan)
        with kb._Prebuilt(g, leaf):
            rows_exec._Run.run = _timed_run(kinds, allocs)
            t0 = time.process_time()
            for _ in range(args.steps):
                rows_exec.run(g, plan, backend=be, meter=False)
            rows_t = (time.process_time() - t0) / args.steps
            rows_exec._Run.run = saved[0]
            side[0] = "plain"
            t0 = time.process_time()
            for _ in range(args.steps):
                executor.run(g, sched, executor.RunOptions(meter=False), backend=be)
            plain_t = (time.process_time() - t0) / args.steps
    finally:
        rows_exec._Run.run, rows_exec.OPS["conv2d"], executor.OPS["conv2d"] = saved
        for k, fn in band_saved.items():
            setattr(band_kernels, k, fn)
        plan.walk.program = None
    n = args.steps
    print(f"{args.model} ({kb._fmt_sizes(sizes)}), {args.bands} bands share, {args.threads} BLAS "
          f"thread(s), CPU time per step (mean of {n}, timers in): row step {rows_t * 1e3:.1f} ms, "
          f"{len(plan.walk.steps)} steps; plain step {plain_t * 1e3:.1f} ms\n")
    print("| step kind (: op) | ms a step | calls | us a call |\n|---|---:|---:|---:|")
    top = sorted(kinds.items(), key=lambda kv: -kv[1][0])[:args.top]
    for k, (t, c) in top:
        print(f"| {k} | {t / n * 1e3:.2f} | {c // n} | {t / max(c, 1) * 1e6:.1f} |")
    print(f"| allocation (+ zero fills) | {allocs['alloc + zero s'] / n * 1e3:.2f} | "
          f"{int(allocs['allocations']) // n} | |")
    print(f"| free | {allocs['free s'] / n * 1e3:.2f} | | |")
    print(f"\nzero-filled bytes a step: {int(allocs['zero-filled bytes']) // n:,}\n")
    print("| step | convolution class | ms a step | calls | GFLOP/s |\n|---|---|---:|---:|---:|")
    for (s, ph, c), (t, fl, cnt) in sorted(rec.items(), key=lambda kv: (kv[0][0] != "rows", -kv[1][0])):
        print(f"| {s} | {ph} {c} | {t / n * 1e3:.1f} | {cnt // n} | {fl / max(t, 1e-12) / 1e9:.1f} |")
    for s in ("rows", "plain"):
        tot = sum(t for (s2, _, _), (t, _, _) in rec.items() if s2 == s)
        print(f"\n{s}: convolutions {tot / n * 1e3:.1f} ms a step", end="")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
