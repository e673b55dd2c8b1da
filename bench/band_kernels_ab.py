"""The row executor's band convolutions (planner/execute/band_kernels.py) against the whole-op
kernels (planner.ops) on the band shapes of row plans: the A/Bs behind band_kernels'
thresholds (issue 26).

    python3 bench/band_kernels_ab.py                 # k x k bands, then 1x1 bands
    python3 bench/band_kernels_ab.py --repeat 15

k x k: per band (images, channels, padded rows, padded columns -> output channels, stride), the
forward (whole-op ``conv2d`` forward on the padded band vs ``band_kernels.conv_forward``) and the
backward with both gradients, the weight's added into a buffer (whole-op VJP then its add vs
``conv_backward``), and whether ``band_kernels.backward_pays`` picks the band kernel. 1x1: the
merged forward / backward (``MERGE_WEIGHT`` 0) against the per-image one (``MERGE_WEIGHT``
unreachable), and whether ``merged`` picks merging. CPU time, median of ``--repeat`` interleaved
calls after one warm-up, one BLAS thread unless ``--threads``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

#: (images, channels, padded band rows, padded band columns, output channels, stride): bands of
#: resnet50 (--quick and 128x128 width 64), the CIFAR resnet (16 images) and VGG-16 (--quick) plans.
KXK = [(2, 16, 6, 18, 16, 1), (2, 64, 3, 6, 64, 1), (2, 32, 4, 10, 32, 1), (2, 16, 18, 66, 16, 1),
       (2, 32, 10, 34, 32, 1), (2, 64, 6, 18, 64, 1), (2, 64, 10, 66, 64, 1), (2, 128, 6, 34, 128, 1),
       (2, 256, 4, 18, 256, 1), (2, 256, 4, 10, 256, 1), (2, 512, 3, 6, 512, 1),
       (16, 16, 10, 34, 16, 1), (16, 32, 6, 18, 32, 1), (16, 64, 4, 10, 64, 1)]
#: (images, channels, band rows, columns, output channels): 1x1 bands.
ONE = [(2, 64, 4, 8, 256), (2, 128, 4, 8, 512), (2, 256, 2, 8, 1024), (2, 1024, 2, 8, 256),
       (2, 256, 8, 16, 1024), (2, 512, 1, 4, 2048), (2, 2048, 1, 4, 512), (2, 512, 4, 16, 2048),
       (2, 512, 8, 32, 2048)]


def medians(fns, repeat, unit=1e3):
    """Each of ``fns``' median CPU time over ``repeat`` rounds (one call of each a round, in
    turn, after one warm-up call of each), times ``unit`` (1e3: milliseconds)."""
    for f in fns:
        f()
    times = [[] for _ in fns]
    for _ in range(repeat):
        for k, f in enumerate(fns):
            t0 = time.process_time()
            f()
            times[k].append(time.process_time() - t0)
    return [statistics.median(t) * unit for t in times]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    import kernels_bench as kb

    rerun = kb.with_threads(args.threads, __file__, argv)
    if rerun is not None:
        return rerun
    import numpy as np

    from planner.execute import band_kernels as bk
    from planner.ops import OPS

    conv = OPS["conv2d"]
    rng = np.random.default_rng(0)
    print("| band (n, c, rows, cols -> o, stride), k x k | fwd ms: whole-op / band | "
          "bwd ms: whole-op / band | band bwd picked |\n|---|---:|---:|---|")
    for n, c, h, w, o, s in KXK:
        x = rng.standard_normal((n, c, h, w), dtype=np.float32)
        wt = rng.standard_normal((o, c, 3, 3), dtype=np.float32)
        ho, wo = (h - 3) // s + 1, (w - 3) // s + 1
        gy = rng.standard_normal((n, o, ho, wo), dtype=np.float32)
        y, dw = np.empty((n, o, ho, wo), np.float32), np.zeros(wt.shape, np.float32)
        a = {"stride": s, "pad": 0}

        def whole_bwd():
            dw.__iadd__(conv.backward(np, gy, {0: x, 1: wt}, None, a, [x.shape, wt.shape], [0, 1])[1])

        got = medians([lambda: conv.forward(np, [x, wt], a, out=y),
                        lambda: bk.conv_forward(np, x, wt, s, y), whole_bwd,
                        lambda: bk.conv_backward(np, gy, x, wt, s, dw, False, True)], args.repeat)
        print(f"| {(n, c, h, w)} -> {o}, s{s} | {got[0]:.3f} / {got[1]:.3f} | {got[2]:.3f} / "
              f"{got[3]:.3f} | {bk.backward_pays(wt.shape, n * ho * wo)} |")
    print("\n| band (n, c, rows, cols -> o), 1x1 | fwd ms: per image / merged | "
          "bwd ms: per image / merged | merged picked |\n|---|---:|---:|---|")
    keep = bk.MERGE_WEIGHT
    try:
        for n, c, h, w, o in ONE:
            x = rng.standard_normal((n, c, h, w), dtype=np.float32)
            gy = rng.standard_normal((n, o, h, w), dtype=np.float32)
            wt = rng.standard_normal((o, c, 1, 1), dtype=np.float32)
            y, dw, dx = np.empty(gy.shape, np.float32), np.zeros(wt.shape, np.float32), \
                np.zeros(x.shape, np.float32)
            fns = []
            for merge in (False, True):
                def fwd(m=merge):
                    bk.MERGE_WEIGHT = 0 if m else 1 << 62
                    bk.conv1x1_forward(np, x, wt, 1, y)

                def bwd(m=merge):
                    bk.MERGE_WEIGHT = 0 if m else 1 << 62
                    bk.conv1x1_backward(np, gy, x, wt, 1, dw, False, dx, False)
                fns += [fwd, bwd]
            got = medians(fns, args.repeat)
            bk.MERGE_WEIGHT = keep
            print(f"| {(n, c, h, w)} -> {o} | {got[0]:.3f} / {got[2]:.3f} | {got[1]:.3f} / "
                  f"{got[3]:.3f} | {bk.merged(h, w, o, c)} |")
    finally:
        bk.MERGE_WEIGHT = keep
    return 0


if __name__ == "__main__":
    sys.exit(main())
