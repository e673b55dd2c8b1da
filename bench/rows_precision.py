"""Why a float32 row step's gradients differ from the plain float32 step's: per parameter, the
row step against the plain step and both against a float64 step of the same model.

Where the plain float32 step is itself far from float64 (a badly conditioned gradient: ResNet-50's
early-layer gradients pass ~50 batch-norm backwards; VGG-16 at 224x224: one conv5_3 output of
2.5e-8 in float32, zero in float64, passes its ReLU and wins its max-pool window, see ``--kinks``),
any change of float32 rounding can move it by that much, and the row step is judged by its distance
to float64 instead (``bench/rows_bench.py``'s check). Norm-wise:
||a - b|| / ||b|| per parameter; ``max`` is max |a - b| / max |b|.

    python3 bench/rows_precision.py --model resnet50 --rows 8
    python3 bench/rows_precision.py --model vgg16 --rows 8 --policy share --image 224
    python3 bench/rows_precision.py --model vgg16 --rows 8 --kinks

``--kinks`` adds where the float32 and float64 forwards take different branches of a
non-differentiable op: a ReLU output zero in one and positive in the other, a max-pool window whose
first maximum differs. Such a flip sends one gradient element down a different path, a change no
summation order can undo.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from planner.execute import executor, export, rows_exec, zoo  # noqa: E402
from planner.fixed_schedules import forward_order  # noqa: E402
from planner.ops import OPS  # noqa: E402
from planner.rows import plan as rows_plan  # noqa: E402



def _norm(x) -> float:
    return float(np.linalg.norm(np.asarray(x, dtype=np.float64)))


def _window_argmax(x, k):
    """First maximum of each k x k window (max pools here have stride = kernel, no padding)."""
    n, c, h, w = x.shape
    ho, wo = h // k, w // k
    win = x[:, :, :ho * k, :wo * k].reshape(n, c, ho, k, wo, k).transpose(0, 1, 2, 4, 3, 5)
    return win.reshape(n, c, ho, wo, k * k).argmax(-1), win.reshape(n, c, ho, wo, k * k)


def _reduction_error(d, name, xs64):
    """The weight- and bias-gradient reductions of one convolution alone, float32 vs float64, on
    the same float64-exact operands (a random output gradient): the summation error by itself."""
    gy = np.random.default_rng(0).standard_normal(tuple(d["out_shape"]))
    shapes = [tuple(s) for s in d["in_shapes"]]
    res = {}
    for dt in (np.float32, np.float64):
        xs = {p: x.astype(dt) for p, x in enumerate(xs64)}
        dw = OPS["conv2d"].backward(np, gy.astype(dt), xs, None, d["attrs"], shapes, [1])[1]
        db = OPS["bias"].backward(np, gy.astype(dt), {}, None, {"axis": 1}, [gy.shape, gy.shape[1:2]], [1])[1]
        res[dt] = (dw.astype(np.float64), db.astype(np.float64))
    err = [_norm(a - b) / _norm(b) for a, b in zip(res[np.float32], res[np.float64])]
    n, _, h, w = gy.shape
    return (f"conv2d {name.split()[-1]}: summation error alone over {n * h * w} positions: weight gradient "
            f"{err[0]:.1e}, bias gradient {err[1]:.1e}")


def kinks(g32, g64):
    """Lines naming every ReLU whose zero pattern and every max pool whose window choice differs
    between the float32 and the float64 forward of the same model (same parameters and inputs),
    and each convolution's reduction error alone (:func:`_reduction_error`)."""
    vals = [executor.leaves(g32, np), executor.leaves(g64, np)]
    out, last = [], "the input"                  # ops are named after the last convolution's weight
    for f in forward_order(g32):
        fns = (g32.forward[f], g64.forward[f])
        d = executor._details(fns[0])
        ys = [OPS[d["op"]].forward(np, [v[a] for a, _ in fn.inputs], d["attrs"])
              for v, fn in zip(vals, fns)]
        for v, fn, y in zip(vals, fns, ys):
            v[fn.outputs[0]] = y
        if d["op"] == "conv2d":
            last = g32.var_names[fns[0].inputs[1][0]].rsplit("/", 1)[0]
        name = f"after {last}"
        if d["op"] == "relu":
            flip = (ys[0] > 0) != (ys[1] > 0)
            if flip.any():
                out.append(f"relu {name}: {int(flip.sum())} of {flip.size} outputs zero in one "
                           f"dtype only, float32 values there up to {float(np.abs(ys[0][flip]).max()):.1e}")
        elif d["op"] == "conv2d":
            out.append(_reduction_error(d, name, [vals[1][a] for a, _ in fns[1].inputs]))
        elif d["op"] == "max_pool":
            x32, x64 = (v[fn.inputs[0][0]] for v, fn in zip(vals, fns))
            (a32, w32), (a64, w64) = (_window_argmax(x, d["attrs"]["kernel"]) for x in (x32, x64))
            for idx in np.argwhere(a32 != a64)[:5]:
                idx = tuple(int(i) for i in idx)
                out.append(f"max_pool {name} window {idx}: float32 inputs {w32[idx].tolist()}, "
                           f"float64 {w64[idx].tolist()}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", choices=sorted(zoo.REAL_DEPTH))
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--policy", default="overlap", choices=rows_plan.POLICIES)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--worst", type=int, default=5, help="parameters listed")
    ap.add_argument("--kinks", action="store_true",
                    help="also list ReLU / max-pool branches the float32 forward takes differently")
    args = ap.parse_args(argv)
    kw = dict(batch=args.batch, width=args.width, depth=zoo.REAL_DEPTH[args.model], image=args.image)
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
    if args.kinks:
        lines = kinks(g32, g64)
        sums = [line for line in lines if line.startswith("conv2d")]
        flips = [line for line in lines if not line.startswith("conv2d")]
        print("float32 summation error of each convolution's gradient reductions alone:")
        for line in sums:
            print("  " + line)
        print(f"branches the plain float32 forward takes differently from float64: {len(flips) or 'none'}")
        for line in flips:
            print("  " + line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
