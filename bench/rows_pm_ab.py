"""The row executor's pixel-major band convolutions (``band_kernels.conv_pm_forward`` /
``conv_pm_backward``) against the kernels those band steps took before them, on the k x k band
steps of a model's row plan: the A/B behind ``band_kernels.PM_PIXELS_PER_OUT`` (issue 26).

    python3 bench/rows_pm_ab.py resnet --quick
    python3 bench/rows_pm_ab.py resnet50 --batch 2 --width 64 --image 128 --repeat 5

Every band step of a stride-1 k x k convolution that ``band_kernels.pixel_major`` would take
at any pixel count and width (its thresholds lifted) is listed once per distinct shape (how many steps
share it): its output pixels (all images) per output channel, the CPU time of the kernel it
takes without the pixel-major kernels (``rows_exec.conv_band``: the channel-major band kernel
on the explicitly padded band, else the whole-op kernel on it, its gradients added into their
buffers as the step does) and of the pixel-major kernel on the band's rows, and whether the
threshold picks it. Median of ``--repeat`` interleaved calls after a warm-up, random inputs
of the step's shapes, gradients added (not written) into their buffers, one BLAS thread unless
``--threads``; the last line: the steps' total either way, each weighted by its count.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from band_kernels_ab import medians  # noqa: E402


def band_cases(g, p) -> Counter:
    """``(phase, padded band shape, weight shape, (top, bottom, side), input gradient wanted,
    channel-major band kernel before)`` of every k x k band step that ``pixel_major`` takes at
    any pixel count, counted."""
    from planner.execute import band_kernels as bk
    from planner.execute import rows_exec

    ly, cases = p.layers, Counter()
    saved = bk.PM_PIXELS_PER_OUT, bk.PM_FORWARD_NARROW, bk.PM_FORWARD_PIXELS, bk.PM_MAX_WEIGHT
    try:
        for st in p.walk.steps:
            i = st.op
            if st.kind not in ("band", "bandbwd") or ly.ops[i] != "conv2d" or int(ly.k[i]) == 1:
                continue
            lo, hi = (int(v) for v in p.phase_ranges[st.level, i, st.band])
            if st.kind == "band":
                lo = max(lo, int(p.phase_fresh[st.level, i, st.band]))
                if lo >= hi:
                    continue
            phase = st.phase if st.kind == "band" else "bwd"
            cut = rows_exec._cut(ly, i, lo, hi)
            bk.PM_PIXELS_PER_OUT, bk.PM_FORWARD_NARROW, bk.PM_FORWARD_PIXELS, bk.PM_MAX_WEIGHT = \
                0, 1 << 30, 0, 1 << 60
            if not rows_exec.conv_pm_band(p, i, phase, cut):
                continue
            bk.PM_PIXELS_PER_OUT = 1 << 60
            before = rows_exec.conv_band(p, i, phase, cut)
            n, c, _, w = ly.in_shapes[i][0]
            shape = (n, c, cut.r1 - cut.r0 + cut.top + cut.bottom, w + 2 * cut.side)
            dx = st.kind == "bandbwd" and bool(g.is_activation[ly.in_vars[i][0]])
            cases[("forward" if st.kind == "band" else "backward", shape,
                   tuple(ly.in_shapes[i][1]), (cut.top, cut.bottom, cut.side), dx, before)] += 1
    finally:
        bk.PM_PIXELS_PER_OUT, bk.PM_FORWARD_NARROW, bk.PM_FORWARD_PIXELS, bk.PM_MAX_WEIGHT = saved
    return cases


def _kernels(np, case, dtype):
    """(before, pixel-major) calls of one case on random inputs."""
    from planner.execute import band_kernels as bk
    from planner.ops import OPS, pad_map

    phase, shape, wshape, (top, bottom, side), want_dx, before = case
    rng = np.random.default_rng(0)
    n, c, h, wp = shape
    o, _, k, _ = wshape
    rows, w = h - top - bottom, wp - 2 * side
    x = rng.standard_normal((n, c, rows, w)).astype(dtype)
    wt = rng.standard_normal(wshape).astype(dtype)
    ho, wo = h - k + 1, wp - k + 1
    a, b = -top, rows + bottom
    attrs = {"stride": 1, "pad": 0}
    if phase == "forward":
        out = np.empty((n, o, ho, wo), dtype)

        def old():
            bk.conv_forward(np, pad_map(np, x, top, bottom, side), wt, 1, out)

        return old, lambda: bk.conv_pm_forward(np, x, a, b, side, wt, out)
    gy = rng.standard_normal((n, o, ho, wo)).astype(dtype)
    dw, dx = np.zeros(wshape, dtype), np.zeros(x.shape, dtype) if want_dx else None
    want = [0, 1] if want_dx else [1]

    def old():
        xp = pad_map(np, x, top, bottom, side)
        if before:
            got = bk.conv_backward(np, gy, xp, wt, 1, dw, False, want_dx)
        else:
            grads = OPS["conv2d"].backward(np, gy, {0: xp, 1: wt}, None, attrs,
                                           [xp.shape, wt.shape], want)
            dw.__iadd__(grads[1])
            got = grads.get(0)
        if want_dx:
            dx.__iadd__(got[:, :, top:top + rows, side:side + w])

    return old, lambda: bk.conv_pm_backward(np, gy, x, a, b, side, wt, dw, False, dx, False)


def main(argv=None) -> int:
    import kernels_bench as kb

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    kb.row_model_arguments(ap, steps=0)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args(argv)
    rerun = kb.with_threads(args.threads, __file__, argv)
    if rerun is not None:
        return rerun

    import numpy as np

    from planner.execute import band_kernels as bk
    from planner.execute import export
    from planner.rows import plan as rows_plan

    sizes = kb.row_model_sizes("rows_pm_ab", args)
    if sizes is None:
        return 2
    g = export.to_cg(kb.build(args.model, sizes))
    p = rows_plan.plan(g, args.bands, "share")
    cases = band_cases(g, p)
    print(f"{args.model} ({kb._fmt_sizes(sizes)}), {args.bands} bands share, float32, "
          f"{args.threads} BLAS thread(s), CPU time, median of {args.repeat}; "
          f"PM_PIXELS_PER_OUT {bk.PM_PIXELS_PER_OUT}, PM_MAX_WEIGHT {bk.PM_MAX_WEIGHT}, forward: PM_FORWARD_NARROW "
          f"{bk.PM_FORWARD_NARROW}, PM_FORWARD_WIDE {bk.PM_FORWARD_WIDE}, PM_FORWARD_PIXELS "
          f"{bk.PM_FORWARD_PIXELS}\n")
    print("| phase | padded band | weight | pads | dx | before | steps | px / out | before us | "
          "pixel-major us | ratio | taken |\n|---|---|---|---|---|---|---:|---:|---:|---:|---:|---|")
    tot = [0.0, 0.0, 0.0]
    for case, count in sorted(cases.items(), key=lambda kv: (kv[0][0], kv[0][1][1], kv[0][1])):
        phase, shape, wshape, pads, want_dx, before = case
        n, _, h, wp = shape
        k = wshape[2]
        per = n * (h - k + 1) * (wp - k + 1) / wshape[0]
        t_old, t_pm = medians(_kernels(np, case, np.float32), args.repeat, unit=1e6)
        taken = bk.pixel_major(shape, wshape, 1, "bwd" if phase == "backward" else "r")
        tot[0] += count * t_old
        tot[1] += count * t_pm
        tot[2] += count * (t_pm if taken else t_old)
        print(f"| {phase} | {shape} | {wshape} | {pads} | {'yes' if want_dx else 'no'} | "
              f"{'band kernel' if before else 'whole op'} | {count} | {per:.1f} | {t_old:.1f} | "
              f"{t_pm:.1f} | {t_pm / t_old:.2f} | {'yes' if taken else 'no'} |")
    print(f"\nall {sum(cases.values())} steps: before {tot[0] / 1e3:.2f} ms, pixel-major "
          f"{tot[1] / 1e3:.2f} ms, as the threshold picks {tot[2] / 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
