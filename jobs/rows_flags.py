"""``--rows R --row-policy overlap|share|auto`` for the plan and execute jobs (LR-CNN row plans).

``hgraph submit plan --graph cg.txt --rows 8 --row-policy share --report r.json`` writes the
row plan's report (:meth:`planner.rows.plan.RowPlan.report`: predicted peak, extra FLOPs over a
plain step, halo overhead per layer, bands, what is kept between the passes); ``--row-policy
auto`` chooses ``R`` and the policy for ``--budget`` (a percentage is of the plain step's peak).
With ``--rows R --budget B`` the row plan is combined with the recomputation DP when rows alone
do not fit (:mod:`planner.rows.with_dp`: rows first, then whole tensors are dropped and
recomputed -- whole ops, and region outputs remade by one more band sweep of their region -- as
the DP's schedules or a greedy search on the exact step list choose); the report then says
``combined_with_dp: true`` and lists the recomputed ops (``dp_recomputed_ops``) and the regions
swept again (``dp_reswept_regions``).

``hgraph submit execute --model vgg16 --rows 8`` runs the row plan for real
(:mod:`planner.execute.rows_exec`) beside a plain step and reports ``measured_peak_bytes``,
``predicted_peak_bytes``, ``gradients_match`` (relative error within 1e-10 in float64, 1e-4 in
float32), ``activation_peak_bytes`` (measured peak minus the parameter gradients) and
``extra_flops``. The row plan covers the convolution stacks; the rest of the step runs on whole
tensors, with the DP's recomputation when ``--budget`` asks for less than rows alone hold.
"""

from __future__ import annotations

import json
import sys

from hgraph.errors import HGraphError
from hgraph.fileio import write_text

POLICIES = ("overlap", "share", "auto")
#: Largest relative gradient error of a row step against a plain step that still counts as equal.
TOLERANCE = {"float64": 1e-10, "float32": 1e-4}


def add_arguments(parser, execute: bool = False) -> None:
    parser.add_argument("--rows", type=int, default=None, metavar="R",
                        help="row-centric (LR-CNN) plan with R row bands through the convolution stack")
    parser.add_argument("--row-policy", choices=POLICIES, default=None,
                        help="rows shared by neighbouring bands: overlap (recompute the halo, "
                             "default), share (compute once, keep for the next band), auto")
    if execute:
        parser.add_argument("--budget", default=None,
                            help="with --rows: memory budget (bytes, a size, or a percentage of the "
                                 "plain step's peak); rows + recomputation DP when rows alone exceed it")
        parser.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                            help="--model with --rows: precision of the zoo model (default float32)")


def wanted(args) -> bool:
    return getattr(args, "rows", None) is not None or getattr(args, "row_policy", None) is not None


def _policy(args) -> str:
    policy = args.row_policy or "overlap"
    if policy != "auto" and args.rows is None:
        raise HGraphError(f"--row-policy {policy} needs --rows R")
    if args.rows is not None and args.rows < 1:
        raise HGraphError(f"--rows must be >= 1, got {args.rows}")
    return policy


def _plain_peak(g) -> int:
    from planner.execute import executor

    return int(executor.timeline(g, executor.plain_schedule(g), recycle=True).live_peak())


def row_plan(args, g, budget_text=None):
    """The row plan the flags ask for (``auto``: chosen for the budget)."""
    from planner.analyses.engine import EngineOptions
    from planner.rows import plan as rows_plan

    from planner.budget import Budget
    from planner.rows import with_dp

    policy = _policy(args)
    opts = EngineOptions(tasks=getattr(args, "tasks", 1) or 1, blocks=getattr(args, "blocks", 1) or 1,
                         mode=getattr(args, "mode", "hybrid") or "hybrid")
    budget = None if budget_text is None else Budget.parse(budget_text).resolve(_plain_peak(g))
    if policy == "auto":
        if budget is None:
            raise HGraphError("--row-policy auto needs --budget")
        return rows_plan.choose(g, budget, opts)
    p = rows_plan.plan(g, args.rows, policy, opts)
    return p if budget is None else with_dp.combine(p, budget, opts)


def _emit(report: dict, path) -> None:
    text = json.dumps(report, indent=2) + "\n"
    if path and path != "-":
        write_text(path, text)
    else:
        sys.stdout.write(text)


def plan_main(args) -> int:
    """The plan job with ``--rows``: write the row plan's report."""
    from planner import cg

    if args.out:
        raise HGraphError("--out: a row plan has no recomputation schedule to write; use --report")
    if args.execute:
        raise HGraphError("--execute with --rows: run the row plan with hgraph submit execute --rows R")
    g = cg.read(args.graph)
    p = row_plan(args, g, args.budget)
    report = p.report()
    report["graph"] = args.graph
    report["plain_peak_bytes"] = _plain_peak(g)
    plain_act = report["plain_peak_bytes"] - p.param_grad_bytes
    report["plain_activation_peak_bytes"] = plain_act
    _emit(report, args.report)
    dp = (f" + DP recomputing {len(p.recompute)} whole ops and sweeping {len(p.resweep)} regions again"
          if p.recompute or p.resweep else "")
    print(f"rows {p.bands} {p.policy}{dp}: {p.num_regions} regions, predicted peak "
          f"{p.predicted_peak_bytes:,} B (plain {report['plain_peak_bytes']:,} B), activations "
          f"{report['predicted_activation_peak_bytes']:,} B = "
          f"{report['predicted_activation_peak_bytes'] / max(plain_act, 1):.3f} x plain, extra FLOPs "
          f"{report['extra_flops']:,} ({100 * report['extra_flops_ratio']:.1f}%)",
          file=sys.stdout if args.report and args.report != "-" else sys.stderr)  # a result line
    return 0


def execute_main(args) -> int:
    """The execute job with ``--rows``: run the row plan and a plain step, report both."""
    from planner import cg
    from planner.execute import backend as backend_mod
    from planner.execute import executor, export, rows_exec, zoo

    if args.schedule:
        raise HGraphError("--schedule does not apply with --rows (the row plan is the schedule)")
    if args.model:
        g = export.to_cg(zoo.build(args.model, batch=args.batch, width=args.width, depth=args.depth,
                                   image=args.image, seq=args.seq, dtype=args.dtype))
    elif args.graph:
        g = cg.read(args.graph)
    else:
        raise HGraphError("execute needs --graph cg.txt or --model NAME")
    p = row_plan(args, g, getattr(args, "budget", None))
    be = backend_mod.get(args.backend)
    r = rows_exec.run(g, p, backend=be, seed=args.seed)
    plain = executor.run(g, executor.plain_schedule(g), backend=be, recycle=True, seed=args.seed)
    err = rows_exec.relative_error(r.param_grads, plain.param_grads)
    dtype = next(iter(r.param_grads.values())).dtype.name if r.param_grads else "float32"
    fl = p.flops()
    report = {"graph": args.graph or f"zoo:{args.model}", "rows": p.bands, "row_policy": p.policy,
              "measured_peak_bytes": r.measured_peak_bytes, "predicted_peak_bytes": r.predicted_peak_bytes,
              "peak_within_prediction": r.measured_peak_bytes <= r.predicted_peak_bytes,
              "activation_peak_bytes": r.activation_peak_bytes, "param_grad_bytes": r.param_grad_bytes,
              "device_peak_bytes": r.device_peak_bytes, "backend": r.backend,
              "gradients_match": err <= TOLERANCE.get(dtype, 1e-4), "max_relative_error": err,
              "loss": r.loss, "plain_loss": plain.loss, "loss_identical": r.loss == plain.loss,
              "extra_flops": fl["extra_flops"], "plain_flops": fl["plain_flops"],
              "combined_with_dp": bool(p.recompute or p.resweep), "dp_recomputed_ops": list(p.recompute),
              "dp_reswept_regions": list(p.resweep),
              "plain_peak_bytes": plain.measured_peak_bytes,
              "plain_activation_peak_bytes": plain.measured_peak_bytes - r.param_grad_bytes,
              "seconds": round(r.seconds, 6), "plain_seconds": round(plain.seconds, 6)}
    _emit(report, args.report)
    print(f"rows {p.bands} {p.policy} {r.backend}: measured {r.measured_peak_bytes:,} B "
          f"(predicted {r.predicted_peak_bytes:,} B), activations {r.activation_peak_bytes:,} B vs plain "
          f"{report['plain_activation_peak_bytes']:,} B, gradients_match={report['gradients_match']}",
          file=sys.stderr)
    return 0 if report["peak_within_prediction"] and report["gradients_match"] else 1
