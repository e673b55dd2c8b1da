"""Per-layer A/B of the Winograd backward against the direct kernels (issue 26; planner/winograd.py).

For each layer shape, the op table's input gradient (``ops._conv_dx``) and weight gradient
(``ops._conv_dw``) with Winograd allowed and with it turned off (``winograd.MIN_CHANNELS``
raised past every layer), alternating the two in one process, CPU time, one BLAS thread:
direct time / Winograd time, median over the alternations after a warm-up. "--" where the op
table's rule (``winograd.pays``) does not route that gradient through Winograd (the direct
kernels then run both ways, and the ratio only shows the meter's noise). ``--any-channels``
lifts the channel rule (``MIN_CHANNELS``) on the Winograd side: what the
rule's bounds were chosen from.

    python3 bench/winograd_ab.py                          # the zoo's layers at the issue's sizes
    python3 bench/winograd_ab.py --shapes 32x64x64x16 8x256x256x14 --reps 20
    python3 bench/winograd_ab.py --any-channels            # every layer through Winograd
    python3 bench/winograd_ab.py --model resnet --steps 15  # whole plain steps: off / rule / any

``--model``: whole plain steps of a zoo model at kernels_bench's sizes (the issue's; CPU time,
one thread) with Winograd off, under the op table's rule and with the channel rule lifted, one
step of each in turn: median step time over the rule's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: images x in x out channels x map side: the stride-1 3x3 layers of the CIFAR ResNet (batch
#: 32, width 64), U-Net (batch 4, width 32, 128x128), ResNet-50 and VGG-16 (batch 8, 224x224),
#: the --quick sizes' (batch 2), and 16-32 channel layers (below the rule's floor).
SHAPES = ["32x64x64x16", "32x128x128x8", "32x256x256x4", "4x64x64x64", "4x128x128x32",
          "4x256x256x16", "8x64x64x56", "8x128x128x28", "8x256x256x14", "8x512x512x14",
          "2x64x64x16", "2x128x128x8", "2x64x64x32", "16x64x64x8",
          "16x16x16x16", "2x16x16x64", "4x32x32x128", "16x32x32x8"]


def _shape(spec: str) -> tuple:
    """``NxCxOxSIDE`` as four positive ints (argparse reports anything else in one line)."""
    try:
        got = tuple(int(v) for v in spec.split("x"))
    except ValueError:
        got = ()
    if len(got) != 4 or min(got) < 1:
        raise argparse.ArgumentTypeError(f"{spec!r} is not NxCxOxSIDE (four positive integers)")
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", type=_shape, default=[_shape(v) for v in SHAPES],
                    help="NxCxOxSIDE (C in, O out)")
    ap.add_argument("--reps", type=int, default=10, help="timed runs of each side per gradient")
    ap.add_argument("--any-channels", action="store_true",
                    help="Winograd side: any channel count (the map and workspace rules stay)")
    ap.add_argument("--model", help="time whole plain steps of this zoo model instead")
    ap.add_argument("--steps", type=int, default=9, help="with --model: timed steps of each")
    args = ap.parse_args(argv)
    if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
        os.execv(sys.executable, [sys.executable] + sys.argv)
    import numpy as np

    from planner import ops, winograd

    if args.model:
        return _steps(args.model, args.steps)
    cap = ops.CONV_WORKSPACE_BYTES
    saved = winograd.MIN_CHANNELS
    lifted = 1 if args.any_channels else saved
    rng = np.random.default_rng(0)
    print("| layer (images x in x out x side) | input gradient: direct / Winograd | "
          "weight gradient: direct / Winograd |\n|---|---:|---:|")
    for n, c, o, side in args.shapes:
        spec = f"{n}x{c}x{o}x{side}"
        x = rng.standard_normal((n, c, side, side)).astype(np.float32)
        w = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
        gy = rng.standard_normal((n, o, side, side)).astype(np.float32)
        cells = []
        winograd.MIN_CHANNELS = lifted
        rules = (ops._winograd(n, o, c, 3, 1, 1, side, side, 4, cap),
                 ops._winograd(n, c, o, 3, 1, 1, side, side, 4, cap, weight_grad=True))
        winograd.MIN_CHANNELS = saved
        for fn, on in zip((lambda: ops._conv_dx(np, gy, w, x.shape, 1, 1, cap),
                           lambda: ops._conv_dw(np, gy, x, w.shape, 1, 1, cap)), rules):
            times = {True: [], False: []}
            try:
                for i in range(2 * args.reps + 4):      # the first two of each: warm-up
                    wino = i % 2 == 0
                    winograd.MIN_CHANNELS = lifted if wino else 1 << 30
                    t0 = time.process_time()
                    fn()
                    if i >= 4:
                        times[wino].append(time.process_time() - t0)
            finally:
                winograd.MIN_CHANNELS = saved
            ratio = float(np.median(times[False]) / np.median(times[True]))
            cells.append(f"{ratio:.2f}" if on else f"-- ({ratio:.2f})")
        print(f"| {spec} | {cells[0]} | {cells[1]} |", flush=True)
    return 0


def _steps(model: str, steps: int) -> int:
    import numpy as np

    sys.path.insert(0, str(ROOT / "bench"))
    import kernels_bench as kb
    from hgraph.common.errors import HGraphError
    from planner import winograd
    from planner.execute import backend, executor, export

    if model not in kb.SIZES:
        print(f"winograd_ab: unknown model {model!r}; choose from {', '.join(kb.SIZES)}",
              file=sys.stderr)
        return 2
    try:
        g = export.to_cg(kb.build(model, kb.SIZES[model]))
    except HGraphError as err:
        print(f"winograd_ab: {err}", file=sys.stderr)
        return 2
    be = backend.get("numpy")
    step = kb.executor_step(g, executor.leaves(g, be.xp, 0), be)
    saved = winograd.MIN_CHANNELS
    sides = {"off": 1 << 30, "rule": saved, "any channels": 1}
    times = {k: [] for k in sides}
    try:
        for i in range(steps + 1):                      # the first of each: warm-up
            for name, bound in sides.items():
                winograd.MIN_CHANNELS = bound
                t0 = time.process_time()
                step()
                if i:
                    times[name].append(time.process_time() - t0)
    finally:
        winograd.MIN_CHANNELS = saved
    ref = float(np.median(times["rule"]))
    print(f"{model} {kb.SIZES[model]}, plain step, CPU time, median of {steps}: " + ", ".join(
        f"{k} {np.median(v):.4f} s ({np.median(v) / ref:.3f})" for k, v in times.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
