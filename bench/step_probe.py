"""What a real training step allocates beyond the plan's buffers, op by op (issue 23).

For a zoo model's plain step (or a DP plan at ``--budget``) on NumPy, run once with every kernel
wrapped by tracemalloc (its peak above the call's start: the kernel's temporaries, its results
not written into the plan's buffers included) and once plainly metered (``measured_step_peak_bytes``,
tracemalloc from before the parameters and inputs are built), and print:

* the executor's figures: the reference accounting's prediction (``planner.simulate``), the plan's
  own count of its buffers (``tracked``), the pool's reserved bytes, the meter's step above the
  parameters (``measured``) and the whole step;
* the whole step predicted by :mod:`planner.whole_step` and its parts at the peak;
* per op type and phase, the largest kernel temporary measured and what
  :func:`planner.ops.kernel_temp_bytes` says for that call.

    python3 bench/step_probe.py --model resnet
    python3 bench/step_probe.py --model vgg16 --width 8 --budget 90%
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import planner  # noqa: E402
from planner import ops as ops_mod, simulate  # noqa: E402
from planner.execute import executor, export, step_memory, zoo  # noqa: E402
from planner.whole_step import leaf_bytes, predict  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--width", type=int, default=None)
    ap.add_argument("--image", type=int, default=None)
    ap.add_argument("--budget", default=None, help="a whole-step budget: run the DP's plan there")
    args = ap.parse_args(argv)
    g = export.to_cg(zoo.build(args.model, batch=args.batch, width=args.width, image=args.image))
    ws = None
    if args.budget:
        p = planner.plan(g, budget=args.budget, certify="off")
        schedule, ws = p.schedule, p.report["workspace_bytes"]
    else:
        schedule = executor.plain_schedule(g)
    sim = simulate.replay(g, schedule)
    r = executor.run(g, schedule, executor.RunOptions(workspace=ws))
    pred = predict(g, schedule, workspace=ws)
    params, inputs = leaf_bytes(g)
    print(f"{args.model}: {'plain step' if ws is None else f'DP plan at {args.budget}'}, NumPy, "
          f"pool allocator, freed after last use; bytes")
    print(f"  reference accounting (planner.simulate, the schedule's forgets): {int(sim.peak_bytes):>12,}")
    print(f"  tracked (the plan's buffers, live):                              {r.tracked_peak_bytes:>12,}")
    print(f"  pool reserved (rounded to 64 B, freed blocks kept for reuse):   {r.reserved_bytes:>12,}")
    print(f"  measured (tracemalloc, above the parameters and inputs):        {r.measured_peak_bytes:>12,}")
    print(f"  parameters + inputs:                                            {params + inputs:>12,}")
    print(f"  measured whole step (tracemalloc from before the leaves):       {r.measured_step_peak_bytes:>12,}")
    print(f"  predicted whole step (whole_step.predict):                      {pred.step_peak_bytes:>12,}"
          f"  (measured / predicted {r.measured_step_peak_bytes / pred.step_peak_bytes:.3f})")
    print("  parts at the predicted peak: " + ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}"
                                                     for k, v in pred.breakdown.items()))
    rec = []
    table = step_memory.metered_ops(rec)
    saved = executor.OPS
    executor.OPS = table
    try:
        executor.run(g, schedule, executor.RunOptions(workspace=ws))
    finally:
        executor.OPS = saved
    worst = {}
    for k, phase, ins, out, a, e, want, into, got in rec:
        a = executor.with_workspace(a, k, ws)
        said = ops_mod.kernel_temp_bytes(k, phase, ins, out, a, e, want, into)
        if got > worst.get((k, phase), (-1,))[0]:
            worst[(k, phase)] = (got, said, ins)
    print(f"\n  {'kernel':34s} {'largest temporary measured':>27s} {'kernel_temp_bytes':>18s}  shapes")
    for (k, phase), (got, said, ins) in sorted(worst.items(), key=lambda kv: -kv[1][0]):
        print(f"  {k + ' ' + phase:34s} {got:>27,} {said:>18,}  {ins}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
