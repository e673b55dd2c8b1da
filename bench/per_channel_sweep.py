"""Where expanding a per-channel operand over the map pays (issue 26: ``planner.ops.EXPAND_PIXELS``).

A batch norm's elementwise passes take per-channel operands shaped ``(1, c, 1)`` against a
``(n, c, pixels)`` map. NumPy runs such a pass as inner loops of ``pixels`` elements against a
stride-0 operand; :func:`planner.ops._per_channel` instead hands it the operand expanded to
``(1, c, pixels)`` (a copy ``1 / n`` of the map), whose inner loops run ``c * pixels`` elements
against a contiguous one. For each (channels, pixels) of a grid, with ``n`` chosen so that the
map holds about ``--elements`` values (at least 2 images), this times an out-of-place subtract
(``x - mean``) and an in-place multiply (``y *= inv``) both ways, the two interleaved, and
prints the medians (CPU time, one thread unless ``--threads``) and expanded / broadcast.

    python3 bench/per_channel_sweep.py
    python3 bench/per_channel_sweep.py --pixels 256,1024,4096,8192,16384 --channels 64,256
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _ints(text: str, flag: str) -> list:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        vals = []
    if not vals or min(vals) < 1:
        raise SystemExit(f"per_channel_sweep: {flag} takes positive integers, comma-separated")
    return vals


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pixels", default="16,64,256,1024,2048,4096,8192,16384")
    ap.add_argument("--channels", default="64,256")
    ap.add_argument("--elements", type=int, default=1 << 21)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    pixels, channels = _ints(args.pixels, "--pixels"), _ints(args.channels, "--channels")
    if args.reps < 1 or args.elements < 1:
        print("per_channel_sweep: --reps and --elements must be positive", file=sys.stderr)
        return 2
    if os.environ.get("OPENBLAS_NUM_THREADS") != str(args.threads):
        words = sys.argv[1:] if argv is None else list(argv)
        env = {**os.environ, "OPENBLAS_NUM_THREADS": str(args.threads),
               "OMP_NUM_THREADS": str(args.threads)}
        return subprocess.call([sys.executable, str(Path(__file__).resolve())] + words, env=env)
    import numpy as np

    rng = np.random.default_rng(0)
    print(f"numpy {np.__version__}, float32, median of {args.reps}, CPU time, "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"  {'n':>4s} {'c':>5s} {'pixels':>7s}  {'subtract ms':>11s} {'exp/bc':>6s}  "
          f"{'imul ms':>8s} {'exp/bc':>6s}")
    for p in pixels:
        for c in channels:
            n = max(2, args.elements // (c * p))
            x = rng.standard_normal((n, c, p)).astype(np.float32)
            y = np.empty_like(x)
            v = rng.standard_normal((1, c, 1)).astype(np.float32)
            ve = np.ascontiguousarray(np.broadcast_to(v, (1, c, p)))
            row = []
            for kind in ("subtract", "imul"):
                if kind == "subtract":
                    pair = (lambda: np.subtract(x, v, out=y), lambda: np.subtract(x, ve, out=y))
                else:
                    pair = (lambda: y.__imul__(v), lambda: y.__imul__(ve))
                got = ([], [])
                for r in range(args.reps):
                    for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                        t0 = time.process_time()
                        pair[k]()
                        got[k].append(time.process_time() - t0)
                bc, ex = statistics.median(got[0]), statistics.median(got[1])
                row.append((bc, ex / max(bc, 1e-12)))
            print(f"  {n:4d} {c:5d} {p:7d}  {row[0][0] * 1e3:11.3f} {row[0][1]:6.2f}  "
                  f"{row[1][0] * 1e3:8.3f} {row[1][1]:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
