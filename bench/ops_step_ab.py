"""Kernels timed inside real steps, this tree's against another revision's, op by op (issue 26).

``bench/kernels_ab.py`` compares whole steps; a change to one small kernel (a batch norm, a max
pool: a few per cent of a step) drowns there in the load's noise, and timing the kernel alone
on warm arrays misleads: inside a step its inputs were written many kernels earlier and come
from memory rather than from cache. So this steps one zoo model on NumPy in turn with ``planner/ops.py`` as it is and
as it was at ``--base`` (bench/kernels_ab.py's ``load_ops``), the order reversed every other
round, each kernel's CPU time (one BLAS thread unless ``--threads``) summed per (op, direction)
and step as bench/kernels_profile.py's wrapper does. Prints, for the ``--ops`` chosen (default:
the norms, pooling and ReLU), each side's median over ``--steps`` steps and the ratio (and the
ratio of the fastest steps: on a loaded machine the two can part), the whole steps' medians, and the largest gradient difference between the two kernel sets (relative to
each gradient's largest entry; ``--dtype float64`` to see it beyond float32 rounding).

    python3 bench/ops_step_ab.py resnet --base HEAD --batch 32 --width 64 --depth 2 --image 32
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

from kernels_ab import add_arguments, prepare  # noqa: E402

DEFAULT_OPS = ("batch_norm", "layer_norm", "max_pool", "avg_pool", "relu")


def _timed(table, acc):
    """``table`` (an ``OPS`` dict) with every kernel adding its CPU time to ``acc[(op, dir)]``."""
    def wrap(key, fn):
        def timed(*a, **k):
            t0 = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                acc[key] += time.process_time() - t0
        return timed

    return {n: dataclasses.replace(d, forward=wrap((n, "fwd"), d.forward),
                                   backward=wrap((n, "bwd"), d.backward))
            for n, d in table.items()}


def _row(label, base, tree):
    b, t = statistics.median(base), statistics.median(tree)
    print(f"  {label:22s} {b:9.4f} {t:9.4f}  {t / max(b, 1e-12):.3f} "
          f"({min(tree) / max(min(base), 1e-12):.3f})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap, steps=15)
    ap.add_argument("--ops", default=",".join(DEFAULT_OPS),
                    help="comma-separated op names to report (default: %(default)s)")
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    args = ap.parse_args(argv)
    if args.steps < 1:
        print("ops_step_ab: --steps must be at least 1", file=sys.stderr)
        return 2
    got = prepare("ops_step_ab", args, argv)
    if isinstance(got, int):
        return got
    old, _, sizes, _, step = got
    import numpy as np

    from planner import ops

    mine = dict(ops.OPS)
    tables = {"base": old.OPS, "this tree": mine}
    per = {k: collections.defaultdict(list) for k in tables}
    whole = {k: [] for k in tables}

    def run_with(side):
        acc = collections.defaultdict(float)
        ops.OPS.update(_timed(tables[side], acc))
        try:
            t0 = time.process_time()
            r = step()
            whole[side].append(time.process_time() - t0)
        finally:
            ops.OPS.update(mine)
        for key, v in acc.items():
            per[side][key].append(v)
        return r

    grads = {k: run_with(k) for k in tables}             # warm-up, and the gradients
    for k in tables:
        whole[k].clear()
        per[k].clear()
    names = list(tables)
    for i in range(args.steps):
        for k in (names if i % 2 == 0 else names[::-1]):
            run_with(k)
    gap = max(float(np.abs(grads["this tree"].param_grads[v] - a).max() /
                    max(float(np.abs(a).max()), 1e-30))
              for v, a in grads["base"].param_grads.items())
    chosen = [o.strip() for o in args.ops.split(",") if o.strip()]
    print(f"{args.model} {sizes}, {args.dtype}, {args.threads} thread(s), CPU time inside the "
          f"step, median of {args.steps}, load {os.getloadavg()[0]:.2f}; base {args.base}:")
    print(f"  {'kernel':22s} {'base s':>9s} {'tree s':>9s}  tree/base (fastest)")
    both = {k: [0.0] * args.steps for k in tables}
    for key in sorted(per["base"]):
        if key[0] not in chosen:
            continue
        for k in tables:
            both[k] = [a + b for a, b in zip(both[k], per[k][key])]
        _row(key[0] + " " + key[1], per["base"][key], per["this tree"][key])
    _row("(those together)", both["base"], both["this tree"])
    _row("(whole step)", whole["base"], whole["this tree"])
    print(f"  max grad rel diff between them {gap:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
