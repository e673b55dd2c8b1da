"""``hgraph submit plan``: a recomputation schedule for a training graph under a memory budget.

Reads a cg.txt (the NeurIPS'19 reference format), runs the graph analyses on the engine over
``--tasks`` workers, solves the DP (or Chen's chain) on the driver, checks the schedule with the
independent simulator and writes: ``--out`` (the schedule, reference format), ``--report``
(JSON, :mod:`planner.report`), ``--plot`` (memory timeline PNG). The summary table is the
result: it goes to stdout (to stderr when ``--out -`` or ``--report -`` puts data there), whatever
``--progress`` says; progress (stage, engine superstep, DP position, ETA) goes to stderr, live on
a terminal and silent in a log or pipe unless ``--progress plain``. All files are written
atomically. ``--execute`` then runs the plan (:mod:`planner.execute`) with lazy allocation and
recycling after last use, and puts what it measured under the report's ``execute`` key.

An infeasible budget exits with code 3 and one line giving the smallest feasible budget for the
solver. Bad flags or files exit with code 2 and one line.

Example (``hgraph submit plan --graph jobs/data/cg_resnet50.txt --tasks 4 --budget 60% --out
sch.txt --report r.json --plot t.png``; here a small synthetic graph, and the summary table,
printed on stdout, is kept out of the way)::

    >>> import os, tempfile
    >>> from jobs.cli import main
    >>> d = tempfile.mkdtemp()
    >>> import contextlib, io, json
    >>> graph, report = os.path.join(d, "cg.txt"), os.path.join(d, "r.json")
    >>> with contextlib.redirect_stdout(io.StringIO()):
    ...     codes = [main(["graph", "synth", "--layers", "2", "--hidden", "64", "--seq", "16",
    ...                    "--out", graph]),
    ...              main(["submit", "plan", "--graph", graph, "--tasks", "2", "--budget", "60%",
    ...                    "--out", os.path.join(d, "sch.txt"), "--report", report])]
    >>> codes
    [0, 0]
    >>> r = json.load(open(report))
    >>> r["within_budget"], r["accounting"], r["peak_bytes"] <= r["budget_bytes"]
    (True, 'activations', True)
"""

from __future__ import annotations

import sys

from hgraph.common.errors import HGraphError
from jobs import common, rows_flags

NAME = "plan"
HELP = "recomputation schedule under a memory budget (approx/exact DP, Chen), report and plot"

__all__ = ["NAME", "HELP", "add_arguments", "main"]


def add_arguments(parser) -> None:
    from jobs.flags import add_common_arguments
    from planner.dp import scale
    from planner.options import AccountingOptions, SolverLimits

    from jobs.flags import add_certificate_arguments

    limit, units = SolverLimits(), AccountingOptions().units

    add_common_arguments(parser)
    parser.add_argument("--budget", default=None,
                        help="memory budget: bytes (4000000000, 1e9), a size (1.5GB, 800MiB) or a "
                             "percentage of the no-recomputation peak (60%%); required but with "
                             "--rows R")
    parser.add_argument("--solver", choices=["approx", "exact", "chen", "milp"], default="approx",
                        help="approximate DP (default), exact DP, Chen's sqrt(n) or Checkmate's "
                             "MILP on HiGHS (--milp-time-limit, --milp-stages)")
    parser.add_argument("--strategy", choices=["time", "memory"], default="time",
                        help="time: least recomputation (default); memory: least checkpoint memory")
    parser.add_argument("--units", choices=["bytes", "reference"], default=units,
                        help="exact bytes (default) or the reference's scaled accounting")
    parser.add_argument("--out", default=None, help="write the schedule (reference format) here")
    parser.add_argument("--report", default=None, help="write the JSON report here ('-': stdout)")
    parser.add_argument("--plot", default=None, help="write the memory-timeline PNG here")
    parser.add_argument("--execute", action="store_true",
                        help="run the plan (CuPy or NumPy) and add the measured peak to the report")
    parser.add_argument("--max-lower-sets", type=int, default=limit.max_lower_sets,
                        help=f"exact DP: refuse above this many lower sets "
                             f"(default {limit.max_lower_sets:,})")
    add_certificate_arguments(parser)
    rows_flags.add_arguments(parser)
    parser.add_argument("--fallback", action="store_true",
                        help="exact DP: fall back to the approximate family above --max-lower-sets")
    parser.add_argument("--dp-window", type=int, default=None,
                        help=f"approximate DP: reach a state only from the W states before it "
                             f"(default: off up to {scale.EXACT_LIMIT:,} activations, above: "
                             f"{scale.DEFAULT_WINDOW}, memory-centric {scale.MEMORY_WINDOW}; 0: off)")
    parser.add_argument("--dp-front-cap", type=int, default=None,
                        help=f"approximate DP: keep at most K entries per Pareto front "
                             f"(default: off up to {scale.EXACT_LIMIT:,} activations, above: "
                             f"{scale.DEFAULT_FRONT_CAP}, memory-centric {scale.MEMORY_FRONT_CAP}; "
                             f"0: off)")


def main(args) -> int:
    from hgraph.common.progress import tracking
    from planner import report
    import planner
    from planner.budget import Budget

    for flag in ("max_supersteps", "stats"):
        if getattr(args, flag, None) is not None:
            raise HGraphError(f"--{flag.replace('_', '-')} does not apply to the plan job "
                              f"(its analyses run to completion)")
    if rows_flags.wanted(args):
        return rows_flags.plan_main(args)
    if args.budget is None:
        raise HGraphError("--budget is required (or --rows R for a row plan)")
    # bad values fail before any work; "min" (the lowest step) is for graphs with a step front
    budget = args.budget if args.budget.strip().lower() == "min" else Budget.parse(args.budget)
    for flag in ("dp_window", "dp_front_cap"):
        if getattr(args, flag) is not None and getattr(args, flag) < 0:
            raise HGraphError(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    if args.max_lower_sets < 1:
        raise HGraphError(f"--max-lower-sets must be >= 1, got {args.max_lower_sets}")
    with tracking(args.progress or "auto") as stages:
        p = planner.plan(args.graph, budget, solver=args.solver, strategy=args.strategy,
                         engine=common.engine_options(args), limits=limits(args),
                         certify=planner.CertifyOptions(args.certify, args.certify_time_limit),
                         accounting=planner.AccountingOptions(units=args.units))
        if args.execute:
            with stages.stage("executing the plan"):
                p.report["execute"] = _execute(p)
        with stages.stage("writing outputs"):
            if args.out:
                p.schedule.write(args.out)      # "-": stdout
            if args.report:
                report.write_json(p.report, args.report)
            if args.plot:
                report.plot(p, args.plot)
    # the table is the result: stdout, unless --out - / --report - already put data there
    data_on_stdout = "-" in (args.out, args.report)
    report.print_summary(p.report, file=sys.stderr if data_on_stdout else sys.stdout)
    return 0


def limits(args) -> "planner.SolverLimits":
    """The solver limits the flags in ``args`` ask for (``--max-lower-sets``, ``--fallback``,
    ``--dp-window``, ``--dp-front-cap``, ``--milp-time-limit``, ``--milp-stages``)."""
    import planner

    return planner.SolverLimits(
        max_lower_sets=args.max_lower_sets, fallback=args.fallback, dp_window=args.dp_window,
        dp_front_cap=args.dp_front_cap, milp_time_limit=args.milp_time_limit,
        milp_stages=args.milp_stages)


def _execute(p) -> dict:
    """Run the schedule as a user's training step would (lazy allocation, recycling after last
    use; stand-in kernels for reference graphs) and compare with the planned peak: the report's
    ``execute`` object (``predicted_peak_bytes``, ``tracked_peak_bytes`` -- the plan's count --,
    ``measured_peak_bytes`` by ``meter`` -- tracemalloc / the CuPy pool --, ``recycle``,
    ``peak_within_prediction`` …, :func:`planner.execute.executor.evaluate`)."""
    from planner.execute import step_memory

    return step_memory.evaluate(p.graph, p.schedule, allocators=("pool",), recycle=True,
                                workspace=p.report.get("workspace_bytes"))


if __name__ == "__main__":
    from jobs.cli import module_main

    raise SystemExit(module_main(NAME))
