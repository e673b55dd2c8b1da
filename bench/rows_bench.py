"""Row-centric training (LR-CNN) against a plain step and the checkpointing DP, on real kernels.

For VGG-16 and the ResNet-50 CNN of the zoo (224x224, real widths, small batch), in one
process: the plain step (no recomputation, buffers freed after their last use), the DP's
checkpointing schedule at ``--budget``, row plans with both policies for each ``R``, and rows +
DP (``planner.rows.with_dp.combine`` on the overlap plan: whole ops recomputed, region outputs
swept again and stage ends opened, from the DP's schedules and a greedy search on the exact step
list, at the smallest of ``--dp-fractions`` x the rows-alone activation peak it reaches; the
label counts them as ``Nr`` / ``Ns`` / ``No``; none when nothing lowers it),
each beside the DP alone at that rows + DP whole-step peak. Per row, two meters: the executor's tracked peak
(``tracked_peak_bytes``: the plan's own count of its buffers) and the tracked activation peak
(minus the parameter gradients, which no plan can touch); the measured peak
(``measured_peak_bytes``, by a meter outside the plan: tracemalloc on NumPy, the CuPy pool's
used bytes -- ``device_peak_bytes`` -- on CuPy; kernel temporaries included) and its ratio to
the plain step's; the whole step (``step pred``: ``planner.whole_step``'s prediction;
``step meas``: the same meter counted from before the parameters and inputs are built) and its
ratio to the plain step's (the cut a budget of the whole step sees); extra FLOPs over the plain step, wall and CPU time (this process, all threads)
as ratios to the plain step, and the gradients' relative error against the plain step (max
|diff| / max |plain| and ||diff|| / ||plain|| per parameter, worst parameter) and, in float32,
against a float64 step of the same model (||diff|| / ||float64||: the plain row's own figure
there is what float32 rounding gives, ReLU / max-pool branches flipped by it included:
``bench/rows_precision.py --kinks`` at 78975d9). The check is the norm-wise one <= 1e-4 against the
plain step, or, where the plain float32 step is itself further from the float64 step, no
further from the float64 step than twice that. Exit status 1 if a row plan's tracked peak
exceeds its prediction or a gradient check fails (the measured peak is reported, not checked: the
prediction counts plan buffers only).

    python3 bench/rows_bench.py                       # both models, 224x224, batch 1
    python3 bench/rows_bench.py --models vgg16 --bands 2,4 --image 64 --width 16   # quick
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hgraph.common.errors import HGraphError, InfeasibleError  # noqa: E402
from hgraph.common.fileio import write_text  # noqa: E402
import planner  # noqa: E402
from planner.execute import backend as backend_mod, executor, export, rows_exec, zoo  # noqa: E402
from planner.rows.step import predict_rows  # noqa: E402
from planner.whole_step import predict  # noqa: E402
from planner.rows import layers as rows_layers, plan as rows_plan, with_dp  # noqa: E402

TOLERANCE = {"float32": 1e-4, "float64": 1e-10}


def mib(n):
    return "-" if n is None else f"{n / 2**20:9.1f}"


def _errors(grads, plain, ref=None):
    """(max |d| / max |plain|, ||d|| / ||plain||, ||grads - ref|| / ||ref||) per parameter, worst
    parameter; the last against the float64 step (None without one)."""
    return (rows_exec.relative_error(grads, plain.param_grads),
            rows_exec.relative_error(grads, plain.param_grads, norm=True),
            None if ref is None else rows_exec.relative_error(grads, ref, norm=True))


def _timed(fn, repeat):
    """(result, wall seconds, CPU seconds of this process): the fastest of ``repeat`` runs of
    ``fn(meter=False)`` (timed without tracemalloc, which slows Python-level work), and the result
    of one more run, ``fn(meter=True)``, whose peaks the table shows.

    CPU seconds (all threads of this process) are what the step costs; on a machine shared with
    other jobs the wall time mostly measures the others."""
    best = None
    for _ in range(repeat):
        c0 = time.process_time()
        r = fn(meter=False)
        cpu = time.process_time() - c0
        if best is None or r.seconds < best[1]:
            best = (r.seconds, min(cpu, best[1]) if best else cpu)
        elif cpu < best[1]:
            best = (best[0], cpu)
    return (fn(meter=True), *best)


def _row(label, r, act, extra, timing, base, err, predicted=None, step=None):
    """One table row for run ``r`` (an executor ``RunResult`` or a ``RowsResult``); ``step``:
    the whole step's prediction (``planner.whole_step``), beside the meter's whole step
    (``measured_step_peak_bytes``: parameters, inputs, gradients, temporaries, the allocator)."""
    err, norm_err, f64_err = err
    seconds, cpu = timing
    measured = int(r.measured_peak_bytes)
    whole = r.measured_step_peak_bytes
    return {"config": label, "tracked_peak_bytes": int(r.tracked_peak_bytes), "activation_peak_bytes": int(act),
            "measured_peak_bytes": measured, "meter": r.meter,
            "measured_ratio": round(measured / base["measured_peak_bytes"], 4),
            "step_peak_bytes": None if step is None else int(step.step_peak_bytes),
            "step_peak_op": None if step is None else step.breakdown["op"],
            "measured_step_peak_bytes": whole,
            "measured_step_ratio": round(whole / base["measured_step_peak_bytes"], 4),
            "measured_over_step_peak": None if step is None else round(whole / step.step_peak_bytes, 4),
            "device_peak_bytes": r.device_peak_bytes, "predicted_peak_bytes": predicted, "extra_flops": extra,
            "seconds": round(seconds, 3), "time_ratio": round(seconds / base["seconds"], 3),
            "cpu_seconds": round(cpu, 3), "cpu_ratio": round(cpu / base["cpu_seconds"], 3),
            "activation_ratio": round(act / base["activation_peak_bytes"], 4), "max_relative_error": err,
            "norm_relative_error": norm_err, "float64_norm_relative_error": f64_err}


def _with_dp(name, label, p, fractions):
    """Rows + DP at the smallest of ``fractions`` x the rows-alone activation peak (the peak
    minus the parameter gradients) that it reaches."""
    found = with_dp.candidates(p)
    for fraction in sorted(fractions):
        try:
            return with_dp.choose(p, found, p.param_grad_bytes + int(fraction * (p.predicted_peak_bytes
                                                                                 - p.param_grad_bytes)))
        except InfeasibleError:
            continue
    print(f"{name}: {label}: neither the DP nor the walk search lowers the activation peak "
          f"below {max(fractions):.0%} of rows alone", file=sys.stderr)
    return None


def _reference(name, args, be, plain):
    """(tolerance, float64 gradients or None): how a row step's gradients are checked.

    float64: norm-wise within ``TOLERANCE`` of the plain step. float32: within ``TOLERANCE``, or
    -- when the plain float32 step is itself further from the float64 step (a bias gradient that
    sums 50,000 cancelling terms on VGG-16, batch statistics over small maps) -- no further from
    the float64 step than twice the plain float32 step's own error: a row step is then as exact
    as the plain step it stands in for."""
    tol = TOLERANCE[args.dtype]
    if args.dtype != "float32":
        return tol, None
    g64 = export.to_cg(zoo.build(name, batch=args.batch, width=args.width, depth=zoo.REAL_DEPTH.get(name),
                                 image=args.image, dtype="float64"))
    ref = executor.run(g64, executor.plain_schedule(g64), executor.RunOptions(recycle=True),
                       backend=be).param_grads
    own = rows_exec.relative_error(plain.param_grads, ref, norm=True)
    print(f"{name}: plain float32 vs float64 gradients: {own:.1e} (norm-wise)", file=sys.stderr)
    return max(tol, 2 * own), ref


def _exact(grads, plain, tol, ref, dtype) -> bool:
    """Within ``TOLERANCE`` of the plain step, or (float32) within ``tol`` of the float64 step."""
    if rows_exec.relative_error(grads, plain.param_grads, norm=True) <= TOLERANCE[dtype]:
        return True
    return ref is not None and rows_exec.relative_error(grads, ref, norm=True) <= tol


def _dp_row(name, g, budget, be, repeat, plain, pgrad, base, ref, fallback=True):
    """The checkpointing DP alone at ``budget`` (``fallback``: at its smallest feasible budget
    when ``budget`` is infeasible), executed; None when it cannot plan."""
    try:
        try:
            p = planner.plan(g, budget=budget)
        except InfeasibleError as err:        # parameters alone can exceed a relative budget
            print(f"{name}: DP at {budget}: {err}" + ("; planning at that smallest budget"
                                                       if fallback else ""), file=sys.stderr)
            if not fallback:
                return None
            p = planner.plan(g, budget=err.min_budget_bytes)
    except HGraphError as err:
        print(f"{name}: DP at {budget}: {err}", file=sys.stderr)
        return None
    ws = p.report.get("workspace_bytes")
    r, wall, cpu = _timed(lambda meter: executor.run(
        g, p.schedule, executor.RunOptions(recycle=True, workspace=ws, meter=meter), backend=be),
        repeat)
    extra = int((with_dp.recomputations(g, p.schedule) * rows_layers.read(g).flops).sum())
    return _row(f"DP {p.report['budget_bytes'] / 2**20:.1f} MiB", r,
                r.tracked_peak_bytes - pgrad, extra, (wall, cpu), base,
                _errors(r.param_grads, plain, ref), step=predict(g, p.schedule, workspace=ws))


def bench_model(name, args, be):
    g = export.to_cg(zoo.build(name, batch=args.batch, width=args.width, depth=zoo.REAL_DEPTH.get(name),
                               image=args.image, dtype=args.dtype))
    plain, wall, cpu = _timed(lambda meter: executor.run(
        g, executor.plain_schedule(g), executor.RunOptions(recycle=True, meter=meter), backend=be),
        args.repeat)
    pgrad = sum(int(a.nbytes) for a in plain.param_grads.values())
    base = {"seconds": wall, "cpu_seconds": cpu, "activation_peak_bytes": plain.tracked_peak_bytes - pgrad,
            "measured_peak_bytes": plain.measured_peak_bytes,
            "measured_step_peak_bytes": plain.measured_step_peak_bytes}
    fl = rows_plan.plan(g, 2, "overlap", prune=False).flops()["plain_flops"]
    ok, (tol, ref) = True, _reference(name, args, be, plain)
    rows = [_row("plain", plain, base["activation_peak_bytes"], 0, (wall, cpu), base,
                 _errors(plain.param_grads, plain, ref),
                 step=predict(g, executor.plain_schedule(g)))]
    dp_row = _dp_row(name, g, args.budget, be, args.repeat, plain, pgrad, base, ref)
    rows += [dp_row] if dp_row else []
    for bands in args.bands:
        for policy in ("overlap", "share", "overlap+dp"):
            label = f"rows {bands} {policy}"
            try:
                p = rows_plan.plan(g, bands, policy.split("+")[0])
            except HGraphError as err:         # e.g. batch norm after every convolution
                print(f"{name}: {label}: {err}; running its unpruned regions instead", file=sys.stderr)
                p = rows_plan.plan(g, bands, policy.split("+")[0], prune=False)
                label += " unpruned"
            if policy.endswith("+dp"):
                p = _with_dp(name, label, p, args.dp_fractions)
                if p is None:
                    continue
                label += "".join(f" {len(x)}{c}" for x, c in ((p.recompute, "r"), (p.resweep, "s"),
                                                                 (p.open_stages, "o")) if x)
                same = _dp_row(name, g, predict_rows(g, p).step_peak_bytes, be, args.repeat,
                               plain, pgrad, base, ref, fallback=False)
                rows += [same] if same else []
            r, wall, cpu = _timed(lambda **kw: rows_exec.run(g, p, backend=be, **kw), args.repeat)
            err = _errors(r.param_grads, plain, ref)
            good = r.tracked_peak_bytes <= r.predicted_peak_bytes and _exact(r.param_grads, plain, tol, ref, args.dtype)
            ok &= good
            rows.append(_row(label, r, r.activation_peak_bytes, p.flops()["extra_flops"], (wall, cpu),
                             base, err, r.predicted_peak_bytes, step=predict_rows(g, p)))
    return {"model": name, "batch": args.batch, "image": args.image, "width": args.width,
            "gradient_tolerance": tol,
            "plain_flops": fl, "param_grad_bytes": pgrad, "rows": rows}, ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="vgg16,resnet50")
    ap.add_argument("--batch", type=int, default=1,
                    help="images per step (default 1: a VGG-16 step is ~90 GFLOP/image on this CPU)")
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--width", type=int, default=64, help="channel multiplier (64: the real widths)")
    ap.add_argument("--bands", default="2,4,8,16")
    ap.add_argument("--budget", default="60%", help="the checkpointing DP's budget")
    ap.add_argument("--dp-fractions", default="0.5,0.6,0.7,0.75,0.8,0.85,0.9,0.95,0.97",
                    help="rows + DP: budgets tried, as fractions of the rows-alone predicted "
                         "activation peak (the smallest that fits is run)")
    ap.add_argument("--backend", default="numpy")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--repeat", type=int, default=1, help="runs per configuration; the fastest counts")
    args = ap.parse_args(argv)
    args.bands = [int(b) for b in args.bands.split(",") if b]
    args.dp_fractions = [float(f) for f in args.dp_fractions.split(",") if f]
    be = backend_mod.get(args.backend)
    print(f"backend {be.name} ({be.device}); MiB; tracked = the plan's count of its buffers, act = tracked "
          f"minus parameter gradients; measured = {'the CuPy pool used bytes' if be.is_gpu else 'tracemalloc'} "
          f"(kernel temporaries included, parameters and inputs not); step pred / step meas = the whole "
          f"step (parameters, inputs, gradients, temporaries, allocator) as predicted "
          f"(planner.whole_step) and by the same meter; s/pred = step meas / step pred; "
          f"ratios to plain")
    results, ok = [], True
    for name in args.models.split(","):
        t0 = time.perf_counter()
        res, good = bench_model(name, args, be)
        ok &= good
        results.append(res)
        print(f"\n{name} {args.image}x{args.image} batch {args.batch} width {args.width}: plain "
              f"{res['plain_flops'] / 1e9:.1f} GFLOP, parameter gradients {mib(res['param_grad_bytes'])} MiB")
        print(f"{'config':26s} {'tracked':>9s} {'act':>9s} {'act/plain':>9s} {'measured':>9s} {'m/plain':>7s} "
              f"{'step pred':>9s} {'step meas':>9s} {'s/plain':>7s} {'s/pred':>6s} "
              f"{'extra FLOPs':>12s} {'wall':>7s} {'w/plain':>7s} {'cpu':>7s} {'c/plain':>7s} "
              f"{'max err':>8s} {'norm err':>8s} {'f64 err':>8s}  step peak at")
        for r in res["rows"]:
            extra = r["extra_flops"]
            extra = f"{100 * extra / res['plain_flops']:+.1f}%" if isinstance(extra, int) else extra
            print(f"{r['config']:26s} {mib(r['tracked_peak_bytes'])} {mib(r['activation_peak_bytes'])} "
                  f"{r['activation_ratio']:9.3f} {mib(r['measured_peak_bytes'])} {r['measured_ratio']:7.3f} "
                  f"{mib(r['step_peak_bytes'])} {mib(r['measured_step_peak_bytes'])} "
                  f"{r['measured_step_ratio']:7.3f} {r['measured_over_step_peak'] or 0:6.3f} "
                  f"{extra:>12s} "
                  f"{r['seconds']:7.2f} {r['time_ratio']:7.2f} {r['cpu_seconds']:7.2f} {r['cpu_ratio']:7.2f} "
                  f"{r['max_relative_error']:8.1e} "
                  f"{r['norm_relative_error']:8.1e} "
                  + ("       -" if r["float64_norm_relative_error"] is None else
                     f"{r['float64_norm_relative_error']:8.1e}") + f"  {r['step_peak_op']}")
        print(f"({time.perf_counter() - t0:.0f} s)", flush=True)
    if args.json:
        write_text(args.json, json.dumps(results, indent=2) + "\n")
    print("all checks passed" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
