"""Why a float32 row step's gradients differ from the plain float32 step's: per parameter, the
row step against the plain step and both against a float64 step of the same model.

Where the plain float32 step is itself far from float64 (a badly conditioned gradient: ResNet-50's
early-layer gradients pass ~50 batch-norm backwards; VGG-16's bias gradients sum 50,000
cancelling terms), any change of float32 rounding order moves it by that order, and the row step
is judged by its distance to float64 instead (``bench/rows_bench.py``'s check). Norm-wise:
||a - b|| / ||b|| per parameter; ``max`` is max |a - b| / max |b|.

    python3 bench/rows_precision.py --model resnet50 --rows 8
    python3 bench/rows_precision.py --model vgg16 --rows 8 --policy share --image 224
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from planner.execute import executor, export, rows_exec, zoo  # noqa: E402
from planner.rows import plan as rows_plan  # noqa: E402

DEPTH = {"vgg16": 3, "resnet50": 6}


def _norm(x) -> float:
    return float(np.linalg.norm(np.asarray(x, dtype=np.float64)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", choices=sorted(DEPTH))
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--policy", default="overlap", choices=rows_plan.POLICIES)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--worst", type=int, default=5, help="parameters listed")
    args = ap.parse_args(argv)
    kw = dict(batch=args.batch, width=args.width, depth=DEPTH[args.model], image=args.image)
    g32 = export.to_cg(zoo.build(args.model, dtype="float32", **kw))
    g64 = export.to_cg(zoo.build(args.model, dtype="float64", **kw))
    plain = executor.run(g32, executor.plain_schedule(g32), recycle=True)
    ref = executor.run(g64, executor.plain_schedule(g64), recycle=True).param_grads
    rows = rows_exec.run(g32, rows_plan.plan(g32, args.rows, args.policy))
    a, r = plain.param_grads, rows.param_grads
    table = sorted(((_norm(r[k] - a[k].astype(np.float64)) / _norm(a[k]),
                     _norm(a[k] - ref[k]) / _norm(ref[k]), _norm(r[k] - ref[k]) / _norm(ref[k]),
                     float(np.abs(r[k].astype(np.float64) - a[k]).max() / np.abs(a[k]).max()),
                     g32.var_names[k]) for k in ref), reverse=True)
    print(f"{args.model} {args.image}x{args.image} batch {args.batch}, rows {args.rows} {args.policy}, "
          f"float32; loss identical: {rows.loss == plain.loss}")
    print(f"{'rows-plain':>10s} {'plain-f64':>10s} {'rows-f64':>10s} {'max':>8s}  parameter "
          f"(worst {args.worst} by rows-plain, then the worst by plain-f64)")
    worst_plain = max(table, key=lambda t: t[1])
    for t in table[:args.worst] + [worst_plain]:
        print(f"{t[0]:10.1e} {t[1]:10.1e} {t[2]:10.1e} {t[3]:8.1e}  {t[4]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
