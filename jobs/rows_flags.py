"""``--rows R --row-policy overlap|share|auto`` for the plan and execute jobs (LR-CNN row plans).

The flags and the printing only: the plan is :func:`planner.rows_api.plan_rows` and the run
:func:`planner.execute.rows_run.execute_rows`, with the same engine flags as a recomputation plan
(``--tasks --blocks --mode`` for the row analyses, ``--runtime --address`` where they run,
``--checkpoint-every --inject-failure`` for each engine run, ``--progress``). A flag the row path
cannot use is refused in one line (exit 2), never dropped.

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
(:mod:`planner.execute.rows_exec`) beside a plain step and reports ``predicted_peak_bytes``,
``tracked_peak_bytes`` (the plan's own count of its buffers), ``measured_peak_bytes`` (a meter
outside the plan, ``meter``: tracemalloc on NumPy, the CuPy pool on CuPy; kernel temporaries
included), ``gradients_match`` (relative error within 1e-10 in float64, 1e-4 in float32),
``activation_peak_bytes`` (tracked peak minus the parameter gradients) and ``extra_flops``. The
row plan covers the convolution stacks; the rest of the step runs on whole tensors, with the DP's
recomputation when ``--budget`` asks for less than rows alone hold.
"""

from __future__ import annotations

import json
import sys

from hgraph.common.errors import HGraphError
from hgraph.common.fileio import write_stream, write_text
from jobs import common

POLICIES = ("overlap", "share", "auto")

#: Plan-job flags a row plan has no use for: (flag's dest, its value when not given, why).
PLAN_ONLY = (
    ("out", None, "a row plan has no recomputation schedule to write; use --report"),
    ("plot", None, "a row plan has no schedule timeline to plot; the report has its peaks"),
    ("execute", False, "run the row plan with hgraph submit execute --rows R"),
    ("solver", "approx", "rows + DP runs the approximate DP"),
    ("strategy", "time", "rows + DP is time-centric (least extra FLOPs)"),
    ("units", "bytes", "row plans count exact bytes"),
    ("max_lower_sets", None, "rows + DP runs the approximate DP, not the exact one"),
    ("fallback", False, "rows + DP runs the approximate DP, not the exact one"),
    ("dp_window", None, "rows + DP runs the DP with its default window"),
    ("dp_front_cap", None, "rows + DP runs the DP with its default front cap"),
    ("certify", "on", "a row plan carries no recomputation certificate"),
    ("certify_time_limit", None, "a row plan carries no recomputation certificate"),
    ("milp_time_limit", None, "rows + DP runs the approximate DP"),
    ("milp_stages", None, "rows + DP runs the approximate DP"),
)
#: Execute-job flags a row step has no use for.
EXECUTE_ONLY = (
    ("schedule", None, "the row plan is the schedule"),
    ("torch", None, "the PyTorch bridge runs recomputation schedules, not row plans"),
    ("allocator", "pool", "the row step runs on the pool allocator"),
    ("free", "auto", "the row step frees each buffer after its last use in its walk"),
)


def add_arguments(parser, execute: bool = False) -> None:
    parser.add_argument("--rows", type=int, default=None, metavar="R",
                        help="row-centric (LR-CNN) plan with R row bands through the convolution stack")
    parser.add_argument("--row-policy", choices=POLICIES, default=None,
                        help="rows shared by neighbouring bands: overlap (recompute the halo, "
                             "default), share (compute once, keep for the next band), auto "
                             "(R and the policy chosen for --budget)")
    if execute:
        parser.add_argument("--budget", default=None,
                            help="with --rows: memory budget (bytes, a size, or a percentage of the "
                                 "plain step's peak); rows + recomputation DP when rows alone exceed it. "
                                 "With --torch: the step budget the schedule was planned at (as "
                                 "submit plan read it; 'min' needs --graph), judged against the "
                                 "measured peak")
        parser.add_argument("--dtype", choices=["float32", "float64"], default=None,
                            help="--model: precision of the zoo model (with --rows default float32, "
                                 "else the model's)")


def wanted(args) -> bool:
    return getattr(args, "rows", None) is not None or getattr(args, "row_policy", None) is not None


def _refuse(args, flags) -> None:
    """One line for the first flag in ``flags`` given a value the row path cannot honour."""
    from planner.options import DEFAULT_MAX_LOWER_SETS

    for dest, unset, why in flags:
        value = getattr(args, dest, unset)
        if dest == "max_lower_sets" and value == DEFAULT_MAX_LOWER_SETS:
            value = None
        if value != unset:
            shown = "" if value is True else f" {value}"
            raise HGraphError(f"--{dest.replace('_', '-')}{shown} does not apply with --rows: {why}")


def refuse_without_rows(args) -> None:
    """The execute job without ``--rows``: ``--budget`` is a row option there (plan a schedule
    with ``hgraph submit plan --budget``), ``--dtype`` builds a ``--model``."""
    if getattr(args, "budget", None) is not None:
        raise HGraphError("--budget applies to execute with --rows R (a recomputation schedule is "
                          "planned with hgraph submit plan --budget, then run with --schedule)")
    _check_dtype(args)


def _check_dtype(args) -> None:
    if getattr(args, "dtype", None) is not None and not getattr(args, "model", None):
        raise HGraphError("--dtype applies to --model (a cg.txt has its own sizes)")


def _plan(args, graph):
    """The row plan the flags ask for (:func:`planner.rows_api.plan_rows`)."""
    from planner.rows_api import plan_rows

    return plan_rows(graph, rows=args.rows, policy=args.row_policy, budget=args.budget,
                     engine=common.engine_options(args))


def _emit(report: dict, path) -> None:
    write_text(path or "-", json.dumps(report, indent=2) + "\n")


def plan_main(args) -> int:
    """The plan job with ``--rows``: write the row plan's report and print its result line."""
    from hgraph.common.progress import tracking

    _refuse(args, PLAN_ONLY)
    with tracking(args.progress or "auto"):
        r = _plan(args, args.graph)
    p, report = r.plan, r.report
    _emit(report, args.report)
    dp = (f" + DP recomputing {len(p.recompute)} whole ops and sweeping {len(p.resweep)} regions again"
          if r.combined_with_dp else "")
    write_stream(sys.stdout if args.report and args.report != "-" else sys.stderr,  # a result line
                 f"rows {p.bands} {p.policy}{dp}: {p.num_regions} regions, predicted peak "
                 f"{p.predicted_peak_bytes:,} B (plain {r.plain_peak_bytes:,} B), activations "
                 f"{report['predicted_activation_peak_bytes']:,} B = "
                 f"{report['predicted_activation_peak_bytes'] / max(r.plain_activation_peak_bytes, 1):.3f} "
                 f"x plain, extra FLOPs {report['extra_flops']:,} ({100 * report['extra_flops_ratio']:.1f}%); "
                 f"whole step {report['step_peak_bytes']:,} B = "
                 f"{report['step_peak_bytes'] / max(report['step_baseline_peak_bytes'], 1):.3f} x plain's"
                 "\n")
    return 0


def execute_main(args, load_graph) -> int:
    """The execute job with ``--rows``: run the row plan and a plain step, report both.
    ``load_graph(args, dtype)``: the execute job's ``--graph``/``--model`` loader."""
    from planner.execute.rows_run import execute_rows

    _refuse(args, EXECUTE_ONLY)
    _check_dtype(args)
    g = load_graph(args, args.dtype or "float32")
    r = _plan(args, g)
    if r.engine.runtime == "ray":
        print("hgraph: the row analyses ran on Ray; the row step runs here (a GPU actor runs "
              "schedules, not row plans)", file=sys.stderr)
    run = execute_rows(r, backend=args.backend, seed=args.seed)
    report = run.report(args.graph or f"zoo:{args.model}")
    _emit(report, args.report)
    m = run.rows
    print(f"rows {r.bands} {r.policy} {m.backend}: predicted {m.predicted_peak_bytes:,} B, tracked "
          f"(plan's count) {m.tracked_peak_bytes:,} B, measured ({m.meter}) {m.measured_peak_bytes:,} B "
          f"= {report['measured_over_predicted']:.2f}x predicted (plain: measured "
          f"{report['plain_measured_peak_bytes']:,} B); tracked activations {m.activation_peak_bytes:,} B "
          f"vs plain {report['plain_tracked_activation_peak_bytes']:,} B; whole step predicted "
          f"{report['step_peak_bytes']:,} B, measured {report['measured_step_peak_bytes']:,} B "
          f"(plain: {report['plain_measured_step_peak_bytes']:,} B), "
          f"gradients_match={report['gradients_match']}", file=sys.stderr)
    return 0 if run.ok else 1
