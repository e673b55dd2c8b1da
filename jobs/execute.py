"""``hgraph submit execute``: run a graph under a schedule and measure the real peak.

The graph is a cg.txt (``--graph``) or a zoo model built in-process (``--model NAME`` with its
sizes); graphs exported by the zoo carry operator arguments and run real kernels, any other
graph (the reference graphs) replays with stand-in kernels. The schedule (``--schedule``, the
reference format; default: the plain schedule, no recomputation) runs through the chosen
allocators; the JSON report (``--report``) holds ``predicted_peak_bytes`` (the planner's
accounting), ``tracked_peak_bytes`` (the executor's count of the plan's buffers: an accounting
cross-check), ``measured_peak_bytes`` (a meter outside the plan, named by ``meter``: tracemalloc
on NumPy, the CuPy pool's used bytes on CuPy; kernel temporaries included),
``measured_over_predicted``, ``peak_within_prediction`` (measured at most predicted), and for
graphs with op arguments the whole step (:func:`planner.execute.step_memory.evaluate`:
``step_peak_bytes``, ``step_peak_breakdown``, ``measured_step_peak_bytes``,
``step_within_prediction``),
``tracked_within_prediction``, ``allocator``, ``backend``, ``seconds``, and for real-op graphs
``gradients_match``. The exit status is 0 when the tracked peak is within the prediction and the
gradients match (1 otherwise); a measured peak above the prediction is reported, on stderr too.
With ``--address`` / ``--runtime ray`` on a cluster with GPUs, the run happens in a Ray actor
holding one GPU.

Example (``hgraph graph zoo resnet --out cg_resnet.txt`` then ``hgraph submit execute --graph
cg_resnet.txt --schedule sch.txt --allocator all --report r.json``; here the zoo's MLP, no
schedule: the plain step)::

    >>> import os, tempfile
    >>> from jobs.cli import main
    >>> d = tempfile.mkdtemp()
    >>> import json
    >>> graph, report = os.path.join(d, "mlp.txt"), os.path.join(d, "r.json")
    >>> main(["graph", "zoo", "mlp", "--out", graph])
    0
    >>> main(["submit", "execute", "--graph", graph, "--report", report])
    0
    >>> r = json.load(open(report))
    >>> r["gradients_match"], r["tracked_peak_bytes"] <= r["predicted_peak_bytes"]
    (True, True)
"""

from __future__ import annotations

import json
import sys

from hgraph.common.errors import HGraphError
from hgraph.common.fileio import write_text
from jobs import rows_flags

NAME = "execute"
HELP = "run a schedule on a graph (CuPy or NumPy) and report predicted vs measured peak memory"
ALLOCATORS = ("naive", "pool", "static")


def add_arguments(parser) -> None:
    from jobs.graph_zoo import add_size_arguments

    parser.add_argument("--graph", default=None, help="cg.txt to run (or --model)")
    parser.add_argument("--schedule", default=None,
                        help="schedule file (reference format; default: no recomputation)")
    parser.add_argument("--allocator", choices=[*ALLOCATORS, "all"], default="pool",
                        help="memory strategy (default pool; 'all' compares the three)")
    parser.add_argument("--backend", choices=["auto", "numpy", "cupy"], default=None,
                        help="array backend (default: $HGRAPH_BACKEND, else CuPy when a GPU works)")
    parser.add_argument("--free", choices=["auto", "last-use", "schedule"], default="auto",
                        help="free buffers after their last use or at the schedule's forgets "
                             "(auto: last-use for real kernels, schedule for replay)")
    parser.add_argument("--seed", type=int, default=0, help="parameter/input initialisation seed")
    parser.add_argument("--workspace", type=int, default=None, metavar="BYTES",
                        help="convolution workspace cap (a plan report's workspace_bytes: the cap "
                             "its whole-step budget was planned with; default the kernels' own)")
    parser.add_argument("--model", default=None, help="build this zoo model instead of --graph")
    add_size_arguments(parser)
    parser.add_argument("--runtime", choices=["local", "ray"], default=None,
                        help="ray: run in a GPU actor when the cluster has GPUs")
    parser.add_argument("--address", default=None, help="Ray cluster address (HOST:PORT)")
    parser.add_argument("--report", default=None, help="write the JSON report here (default: stdout)")
    parser.add_argument("--torch", default=None, metavar="FILE.py:FUNC",
                        help="run this PyTorch model's real training step under --schedule "
                             "(planner.torch.execute)")
    parser.add_argument("--eager", action="store_true", default=None,
                        help="with --torch: run the undecomposed capture ('hgraph graph torch "
                             "--eager''s graph); default: the capture 'graph torch' writes by "
                             "default (or the eager one where the schedule is its), or the one "
                             "--graph was made with")
    rows_flags.add_arguments(parser, execute=True)


def load_graph(args, dtype: str | None = None):
    """The graph of ``--graph`` or ``--model`` (its sizes, ``dtype``; None: the model's)."""
    from planner import cg
    from planner.execute import export, zoo

    if args.model:
        g = export.to_cg(zoo.build(args.model, batch=args.batch, width=args.width, depth=args.depth,
                                   image=args.image, seq=args.seq, dtype=dtype))
        if args.graph and cg.dumps(cg.read(args.graph)) != cg.dumps(g):
            raise HGraphError(f"{args.graph}: not the graph of --model {args.model} with these sizes")
        return g
    if args.graph:
        return cg.read(args.graph)
    raise HGraphError("execute needs --graph cg.txt or --model NAME")


def load_inputs(args):
    """(graph, schedule) from the flags."""
    from planner.execute import executor
    from planner.schedule import Schedule

    g = load_graph(args, getattr(args, "dtype", None))
    schedule = Schedule.read(args.schedule) if args.schedule else executor.plain_schedule(g)
    if schedule.impossible:
        raise HGraphError(f"{args.schedule}: the schedule is IMPOSSIBLE (no plan fits the budget)")
    return g, schedule


def main(args) -> int:
    if rows_flags.wanted(args):          # row plans: jobs.rows_flags (refuses what they cannot use)
        return rows_flags.execute_main(args, load_graph)
    if args.torch:                       # the PyTorch bridge: a separate job body (--budget too)
        from jobs import execute_torch

        return execute_torch.main(args)
    rows_flags.refuse_without_rows(args)
    from planner import cg
    from planner.execute import executor

    g, schedule = load_inputs(args)
    allocators = ALLOCATORS if args.allocator == "all" else (args.allocator,)
    recycle = {"auto": None, "last-use": True, "schedule": False}[args.free]
    if args.workspace is not None and args.workspace < 1:
        raise HGraphError(f"--workspace must be >= 1 byte, got {args.workspace}")
    options = {"allocators": allocators, "recycle": recycle, "seed": args.seed}
    if args.workspace is not None:
        options["workspace"] = args.workspace
    report = None
    if args.runtime == "ray" or args.address:
        from hgraph.runtime.ray_connect import ensure_ray
        from jobs import gpu_actor

        ensure_ray(args.address)
        if gpu_actor.cluster_gpus() >= 1:
            report = gpu_actor.evaluate_on_gpu(cg.dumps(g), schedule.dumps(), options)
            report["ray_actor"] = True
        else:
            print("hgraph: the Ray cluster has no GPU; executing here", file=sys.stderr)
    if report is None:
        from planner.execute import step_memory

        report = step_memory.evaluate(g, schedule, backend=args.backend, **options)
    report["graph"] = args.graph or f"zoo:{args.model}"
    report["schedule"] = args.schedule or "plain"
    write_text(args.report or "-", json.dumps(report, indent=2) + "\n")
    predicted = report["predicted_peak_bytes"]
    for row in report["allocators"]:
        line = (f"{row['allocator']:6s} {report['backend']}: predicted {predicted:,} B, "
                f"tracked (plan's count) {row['tracked_peak_bytes']:,} B, "
                f"measured ({row['meter']}) {row['measured_peak_bytes']:,} B "
                f"= {row['measured_peak_bytes'] / max(predicted, 1):.2f}x predicted, "
                f"reserved {row['reserved_bytes']:,} B")
        if row.get("arena"):
            line += f" (lower bound {row['arena']['lower_bound_bytes']:,} B, gap {row['arena']['gap_pct']:.2f}%)"
        print(line, file=sys.stderr)
    if "step_peak_bytes" in report:
        print(f"whole step: predicted {report['step_peak_bytes']:,} B (at "
              f"{report['step_peak_breakdown']['op']}), measured ({report['meter']}, parameters and "
              f"inputs included) {report['measured_step_peak_bytes']:,} B = "
              f"{report['measured_over_step_peak']:.3f}x predicted", file=sys.stderr)
    if "gradients_match" in report:
        print(f"gradients_match={report['gradients_match']}", file=sys.stderr)
    if not report["peak_within_prediction"]:
        print(f"measured ({report['meter']}) peak above the prediction: the prediction counts the "
              f"plan's buffers only, not kernel temporaries, rounding or a pool's kept blocks",
              file=sys.stderr)
    ok = report["tracked_within_prediction"] and report.get("gradients_match", True)
    return 0 if ok else 1


if __name__ == "__main__":
    from jobs.cli import module_main

    raise SystemExit(module_main(NAME))
