"""A zoo model's convolution layers one by one, the executor's kernels vs PyTorch's, and the GEMM
floor under them (issue 26).

Two tables, CPU time, one thread per side, median over ``--reps`` after a warm-up:

* per layer: the op table's forward, input and weight gradients (``planner.ops``) against
  ``torch.nn.functional.conv2d`` and ``aten.convolution_backward`` (both gradients) on the same
  float32 arrays;
* the GEMM floor: NumPy's ``matmul`` (the BLAS the executor has on CPU: OpenBLAS in NumPy's
  wheel) against ``torch.matmul`` (MKL in torch's CPU wheel) on each 3x3 layer's im2col product
  ``(pixels, 9c) @ (9c, out)``: how far the direct convolution's products alone sit from torch's.

    python3 bench/conv_layers_bench.py                 # the CIFAR ResNet (batch 32, width 64)
    python3 bench/conv_layers_bench.py --model unet    # U-Net, batch 4, width 32, 128x128
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: (batch, in, out, kernel, stride, pad, map side) and how many such layers the model has.
LAYERS = {
    "resnet": [((32, 3, 64, 3, 1, 1, 32), 1), ((32, 64, 64, 3, 1, 1, 16), 4),
               ((32, 64, 128, 3, 2, 1, 16), 1), ((32, 128, 128, 3, 1, 1, 8), 3),
               ((32, 64, 128, 1, 2, 0, 16), 1), ((32, 128, 256, 3, 2, 1, 8), 1),
               ((32, 256, 256, 3, 1, 1, 4), 3), ((32, 128, 256, 1, 2, 0, 8), 1)],
    "unet": [((4, 3, 32, 3, 1, 1, 128), 1), ((4, 32, 32, 3, 1, 1, 128), 1),
             ((4, 32, 64, 3, 1, 1, 64), 1), ((4, 64, 64, 3, 1, 1, 64), 1),
             ((4, 64, 128, 3, 1, 1, 32), 1), ((4, 128, 128, 3, 1, 1, 32), 1),
             ((4, 128, 256, 3, 1, 1, 16), 1), ((4, 256, 256, 3, 1, 1, 16), 1),
             ((4, 256, 128, 3, 1, 1, 32), 1), ((4, 128, 64, 3, 1, 1, 64), 1),
             ((4, 64, 32, 3, 1, 1, 128), 1), ((4, 256, 128, 1, 1, 0, 32), 1),
             ((4, 128, 64, 1, 1, 0, 64), 1), ((4, 64, 32, 1, 1, 0, 128), 1)],
}


def _median(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(LAYERS), default="resnet")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args(argv)
    if os.environ.get("OPENBLAS_NUM_THREADS") != "1" or os.environ.get("OMP_NUM_THREADS") != "1":
        os.environ.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        os.execv(sys.executable, [sys.executable] + sys.argv)
    import numpy as np
    import torch

    from planner import ops

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    cap = ops.CONV_WORKSPACE_BYTES
    print(f"{args.model}: CPU time, one thread a side, median of {args.reps} (ms)\n")
    print("| layer (n, c, o, k, s, p, side) x count | executor fwd | torch fwd | ratio | "
          "executor dx + dw | torch bwd | ratio |\n|---|---:|---:|---:|---:|---:|---:|")
    tot = np.zeros(4)
    gemms = []
    for (n, c, o, k, s, p, side), count in LAYERS[args.model]:
        x = rng.standard_normal((n, c, side, side)).astype(np.float32)
        w = rng.standard_normal((o, c, k, k)).astype(np.float32)
        a = {"stride": s, "pad": p}
        y = ops.OPS["conv2d"].forward(np, [x, w], a)
        gy = rng.standard_normal(y.shape).astype(np.float32)
        tx, tw, tg = (torch.from_numpy(v) for v in (x, w, gy))
        f = _median(lambda: ops.OPS["conv2d"].forward(np, [x, w], a), args.reps)
        b = _median(lambda: (ops._conv_dx(np, gy, w, x.shape, s, p, cap),
                             ops._conv_dw(np, gy, x, w.shape, s, p, cap)), args.reps)
        tf = _median(lambda: torch.nn.functional.conv2d(tx, tw, stride=s, padding=p), args.reps)
        tb = _median(lambda: torch.ops.aten.convolution_backward(
            tg, tx, tw, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, [True, True, False]),
            args.reps)
        tot += count * np.array([f, tf, b, tb])
        print(f"| {(n, c, o, k, s, p, side)} x{count} | {f * 1e3:.2f} | {tf * 1e3:.2f} | "
              f"{f / tf:.2f} | {b * 1e3:.2f} | {tb * 1e3:.2f} | {b / tb:.2f} |")
        if k == 3 and s == 1:
            gemms.append((n * y.shape[2] * y.shape[3], 9 * c, o))
    print(f"| all, weighted by count | {tot[0] * 1e3:.1f} | {tot[1] * 1e3:.1f} | "
          f"{tot[0] / tot[1]:.2f} | {tot[2] * 1e3:.1f} | {tot[3] * 1e3:.1f} | {tot[2] / tot[3]:.2f} |")
    print("\n| im2col GEMM (m, k, n) | NumPy GFLOP/s | torch GFLOP/s | torch / NumPy |\n|---|---:|---:|---:|")
    for m, kk, nn in sorted(set(gemms)):
        A = rng.standard_normal((m, kk)).astype(np.float32)
        B = rng.standard_normal((kk, nn)).astype(np.float32)
        tA, tB = torch.from_numpy(A), torch.from_numpy(B)
        t_np = _median(lambda: A @ B, args.reps)
        t_t = _median(lambda: tA @ tB, args.reps)
        fl = 2 * m * kk * nn / 1e9
        print(f"| ({m}, {kk}, {nn}) | {fl / t_np:.0f} | {fl / t_t:.0f} | {t_np / t_t:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
