"""How far Winograd F(4x4, 3x3) moves a step's gradients in float32 (issue 26; planner/winograd.py).

The op table routes a stride-1 3x3 convolution's backward through Winograd and keeps its
forward direct. This measures why: the plain step of a zoo model in float32 under four kernel
choices, each parameter gradient against the same step in float64 (direct kernels), as the
largest difference over the gradient's largest entry; max and median over the parameters.

* ``direct``: no Winograd anywhere (``winograd.MIN_CHANNELS`` raised past every layer);
* ``backward`` (the op table's choice): input and weight gradients through Winograd;
* ``forward too``: also the forward of every layer whose backward takes it;
* ``noise``: the direct kernels, with Gaussian noise of ``--noise`` times each of those
  layers' largest output added to their forward outputs, in float64: how much a perturbation
  of that size moves the gradients through the network (ReLU masks), whatever its source.

    python3 bench/winograd_rounding.py                       # the CIFAR ResNet at the issue's sizes
    python3 bench/winograd_rounding.py --model unet --batch 4 --width 32 --depth 3 --image 128
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _grads(model, sizes, dtype):
    import numpy as np

    from planner.execute import executor, export, zoo

    g = export.to_cg(zoo.build(model, dtype=dtype, **sizes))
    r = executor.run(g, executor.plain_schedule(g), seed=0)
    return {k: np.asarray(v, dtype=np.float64) for k, v in r.param_grads.items()}


def _gaps(got, ref):
    import numpy as np

    gaps = [float(np.abs(got[k] - ref[k]).max() / max(np.abs(ref[k]).max(), 1e-300)) for k in ref]
    return max(gaps), float(np.median(gaps))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet")
    for k, v in (("batch", 32), ("width", 64), ("depth", 2), ("image", 32)):
        ap.add_argument(f"--{k}", type=int, default=v)
    ap.add_argument("--noise", type=float, default=1e-6)
    args = ap.parse_args(argv)
    if os.environ.get("OPENBLAS_NUM_THREADS") is None:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    import numpy as np

    from planner import ops, winograd

    sizes = {k: getattr(args, k) for k in ("batch", "width", "depth", "image")}
    from hgraph.common.errors import HGraphError
    from planner.execute import zoo

    try:
        zoo.build(args.model, **sizes)
    except HGraphError as err:           # an unknown model, sizes its shape rules refuse
        print(f"winograd_rounding: {err}", file=sys.stderr)
        return 2
    table = dict(ops.OPS)
    conv = ops.OPS["conv2d"]

    def takes_winograd(xs, a, itemsize):
        """Whether the op table's rule routes this layer's backward through Winograd (at
        float32's ``itemsize`` 4 for the float64 runs: the same layers)."""
        n, c, h, w = xs[0].shape
        o, _, k, _ = xs[1].shape
        ho, wo = ops._out_hw(h, w, k, a["stride"], a["pad"])
        return ops._winograd(n, c, o, k, a["stride"], a["pad"], ho, wo, itemsize,
                             ops._workspace(a))

    def routed(xp, xs, a, out=None):
        if takes_winograd(xs, a, xs[0].dtype.itemsize):
            return winograd.forward(xp, xs[0], xs[1], a["pad"], ops._workspace(a), out)
        return conv.forward(xp, xs, a, out)

    rng = np.random.default_rng(0)

    def noisy(xp, xs, a, out=None):
        y = conv.forward(xp, xs, a, out)
        if takes_winograd(xs, a, 4):
            y += rng.standard_normal(y.shape) * (args.noise * float(np.abs(y).max()))
        return y

    saved = winograd.MIN_CHANNELS
    try:
        winograd.MIN_CHANNELS = 1 << 30
        ref = _grads(args.model, sizes, "float64")
        rows = [("direct", _gaps(_grads(args.model, sizes, "float32"), ref))]
        winograd.MIN_CHANNELS = saved
        rows.append(("backward (the op table's choice)", _gaps(_grads(args.model, sizes, "float32"), ref)))
        ops.OPS["conv2d"] = dataclasses.replace(conv, forward=routed)
        rows.append(("forward too", _gaps(_grads(args.model, sizes, "float32"), ref)))
        ops.OPS["conv2d"] = dataclasses.replace(conv, forward=noisy)
        winograd.MIN_CHANNELS = saved
        rows.append((f"float64, direct + {args.noise:g} x max noise on those layers",
                     _gaps(_grads(args.model, sizes, "float64"), ref)))
    finally:
        winograd.MIN_CHANNELS = saved
        ops.OPS.clear()
        ops.OPS.update(table)
    print(f"{args.model} {sizes}: parameter gradients vs the float64 direct step "
          "(largest difference / largest entry)")
    print("| kernels | max over parameters | median |\n|---|---:|---:|")
    for name, (mx, med) in rows:
        print(f"| {name} | {mx:.1e} | {med:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
