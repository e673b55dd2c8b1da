"""A/B of the row-centric step: this tree's ``planner/execute/rows_exec.py`` against REV's,
with the plain step beside them, interleaved in one process (issue 26's second acceptance).

    python3 bench/rows_ab.py resnet50 --base 907bae3 --quick --steps 9
    python3 bench/rows_ab.py resnet50 --base 907bae3 --batch 2 --width 64 --image 128 --steps 3

REV's ``rows_exec`` is loaded from git (``git show REV:planner/execute/rows_exec.py``) and runs
on this tree's kernels (``planner.ops``) and plans, so the A/B isolates the row executor. Each
round runs one plain step, one row step of each side (a ``bands``-band plan, ``--policy``), timed
by the process's CPU time around the whole ``run`` (parameters prebuilt, as
``kernels_bench.py --plans --clock cpu``). Prints median (fastest) seconds, each row step's
time over the plain step's divided by the plan's FLOP ratio (the acceptance: <= 1.25),
whether the two sides' losses are equal and their gradients bitwise equal, and else their
largest relative difference (``rows_exec.relative_error``: per parameter, the largest |a - b|
over the largest |b|). Exit 0 when the losses are equal and the gradients within ``--tol``
(default: 1e-5 in float32, 1e-12 in float64: rounding; 0 asks for bits). BLAS threads: set
``OPENBLAS_NUM_THREADS`` (the driver re-runs itself with ``--threads``)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))


def load_rows_exec(rev: str):
    """``planner/execute/rows_exec.py`` as of git revision ``rev``, as a module (None where git
    has no such file)."""
    got = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:planner/execute/rows_exec.py"],
                         capture_output=True, text=True)
    if got.returncode != 0:
        return None
    src = got.stdout
    name = f"rows_exec_{rev}"
    mod = types.ModuleType(name)
    sys.modules[name] = mod          # dataclasses look their module up
    exec(compile(src, f"{rev}:planner/execute/rows_exec.py", "exec"), mod.__dict__)
    return mod


def main(argv=None) -> int:
    import kernels_bench as kb                  # stdlib only at import: NumPy not loaded yet

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    kb.row_model_arguments(ap, steps=7)
    ap.add_argument("--base", required=True, help="git revision of the other rows_exec")
    ap.add_argument("--policy", default="share", choices=("share", "overlap"))
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--tol", type=float, help="largest relative gradient difference accepted")
    args = ap.parse_args(argv)

    rerun = kb.with_threads(args.threads, __file__, argv)
    if rerun is not None:
        return rerun

    import numpy as np

    from planner.execute import backend, executor, export, rows_exec
    from planner.ops import BACKWARD_FLOPS_FACTOR
    from planner.rows import layers as rows_layers
    from planner.rows import plan as rows_plan

    sizes = kb.row_model_sizes("rows_ab", args)
    if sizes is None:
        return 2
    old = load_rows_exec(args.base)
    if old is None:
        print(f"rows_ab: git has no planner/execute/rows_exec.py at {args.base!r}", file=sys.stderr)
        return 2
    g = export.to_cg(kb.build(args.model, sizes, args.dtype))
    be = backend.get("numpy")
    plan = rows_plan.plan(g, args.bands, args.policy)
    other = rows_plan.plan(g, args.bands, args.policy)       # the same plan, its own object: a
    # rows_exec caches its compiled steps on the plan's walk, and each side compiles its own
    plain_flops = float(rows_layers.read(g).flops.astype(float).sum()) * (1 + BACKWARD_FLOPS_FACTOR)
    fr = float(plan.flops()["row_flops"]) / plain_flops
    sched = executor.plain_schedule(g)
    runs = {"plain": lambda: executor.run(g, sched, executor.RunOptions(meter=False), backend=be),
            f"rows {args.base}": lambda: old.run(g, other, backend=be, meter=False),
            "rows this tree": lambda: rows_exec.run(g, plan, backend=be, meter=False)}
    leaf = executor.leaves(g, be.xp, 0)
    got = {k: fn() for k, fn in runs.items()}                # warm-up (and the gradients)
    a, b = got[f"rows {args.base}"], got["rows this tree"]
    same = a.param_grads.keys() == b.param_grads.keys() and all(
        np.array_equal(a.param_grads[k], b.param_grads[k]) for k in a.param_grads)
    diff = rows_exec.relative_error(b.param_grads, a.param_grads)
    tol = args.tol if args.tol is not None else (1e-5 if args.dtype == "float32" else 1e-12)
    times = {k: [] for k in runs}
    load0 = os.getloadavg()[0]
    with kb._Prebuilt(g, leaf):
        for _ in range(args.steps):
            for k, fn in runs.items():
                t0 = time.process_time()
                fn()
                times[k].append(time.process_time() - t0)
    load1 = os.getloadavg()[0]
    med = {k: statistics.median(v) for k, v in times.items()}
    low = {k: min(v) for k, v in times.items()}
    print(f"{args.model} ({kb._fmt_sizes(sizes)}), {args.dtype}, {args.bands} bands {args.policy}, "
          f"{args.threads} BLAS "
          f"thread(s), CPU time, median (fastest) of {args.steps} interleaved rounds, load "
          f"{load0:.2f} -> {load1:.2f}; row FLOP ratio {fr:.3f}")
    for k in runs:
        line = f"  {k:22s} {med[k]:.4f} s ({low[k]:.4f})"
        if k != "plain":
            tr, tf = med[k] / med["plain"], low[k] / low["plain"]
            line += f"  time ratio {tr:.3f} ({tf:.3f}), time / FLOP ratio {tr / fr:.2f} ({tf / fr:.2f})"
        print(line)
    print(f"  losses equal: {a.loss == b.loss}; gradients bitwise equal between the two row "
          f"executors: {same}" + ("" if same else f"; largest relative difference {diff:.2e}"))
    pl = got["plain"].param_grads
    print(f"  largest relative difference from the plain step's gradients: {args.base} "
          f"{rows_exec.relative_error(a.param_grads, pl):.2e}, this tree "
          f"{rows_exec.relative_error(b.param_grads, pl):.2e}")
    return 0 if a.loss == b.loss and diff <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
