"""``hgraph submit execute --torch FILE.py:FUNC --schedule s.txt --report r.json``.

Runs a PyTorch model's real training step under a plan (:func:`planner.torch.apply`: the
backward keeps exactly the schedule's tensors) and reports predicted against measured:
``predicted_peak_bytes`` (the partitioned step's liveness replayed from tensor shapes,
:func:`planner.torch.measure.predict_step_peak`) / ``measured_peak_bytes`` (allocator level),
``plan_model_peak_bytes`` (the planner's own model of the schedule: it keeps every block
boundary until the backward, where torch frees what no backward op reads), ``predicted_saved_bytes``
/ ``measured_saved_bytes``, ``recompute_flops`` (the plan's recomputation in the graph's
costs), ``step_seconds`` and ``gradients_match`` (bitwise, against the plain eager step).

The schedule belongs to the graph ``hgraph graph torch FILE.py:FUNC --eager`` writes; the graph
is re-imported here (``--graph g.txt`` checks it is the same one). Without ``--schedule`` the
step keeps everything (the no-recomputation baseline).
"""

from __future__ import annotations

import copy
import json
import sys

from hgraph.errors import HGraphError
from hgraph.fileio import write_text


def run(spec_text: str, schedule_path: str | None, graph_path: str | None) -> dict:
    """The report dict (see the module docstring)."""
    from planner.torch import require_torch

    require_torch()
    import planner.torch as pt
    from planner import cg, simulate
    from planner.api import baseline_schedule
    from types import SimpleNamespace

    from planner.schedule import Schedule
    from planner.torch import measure
    from planner.torch.model_file import load
    from planner.torch.model_graph import KEEP
    from planner.torch.partition import apply_keep, keep_names, plan_capture, saved_nodes

    spec = load(spec_text)
    decompose = False
    if graph_path:
        decompose = plan_capture(cg.read(graph_path)) == "inductor"
        if decompose:
            raise HGraphError(f"{graph_path}: captured for Inductor; execute --torch runs the "
                              f"eager step: import with 'hgraph graph torch --eager'")
    model0 = copy.deepcopy(spec.model)
    tg = pt.graph(spec.model, *spec.inputs, loss=spec.loss, decompose=decompose,
                  source=spec.source)
    g = tg.cg
    if graph_path:
        want = cg.read(graph_path)
        if [f.inputs for f in want.functions] != [f.inputs for f in g.functions] or \
                list(want.var_bytes) != list(g.var_bytes):
            raise HGraphError(f"{graph_path}: not the graph of {spec_text} (re-import it)")
    schedule = Schedule.read(schedule_path) if schedule_path else baseline_schedule(g)
    if schedule.impossible:
        raise HGraphError(f"{schedule_path}: the schedule is IMPOSSIBLE (no plan fits the budget)")
    sim = simulate.replay(g, schedule)
    if sim.violations:
        raise HGraphError(f"{schedule_path}: not a valid schedule for {spec_text}: "
                          f"{sim.violations[0]}")
    if schedule_path:
        keep = keep_names(g, schedule)
    else:                           # keep everything: the no-recomputation step
        keep = {g.var_names[v] for v in g.activations} - {KEEP}
    var_of_name = {name: v for v, name in enumerate(g.var_names)}
    saved = {n.name for n in saved_nodes(tg.joint, keep) if n.op != "placeholder"}
    predicted_saved = sum(int(g.var_bytes[var_of_name[n]]) for n in saved if n in var_of_name)

    plain = copy.deepcopy(model0)
    loss_fn = spec.loss or (lambda out: out if out.dim() == 0 else out.mean())
    loss_fn(plain(*spec.inputs)).backward()
    planned = copy.deepcopy(model0)
    order = SimpleNamespace(graph=g, schedule=schedule) if schedule_path else None
    step = apply_keep(planned, keep, decompose, loss=spec.loss, plan=order)
    got = measure.measure_step(step, planned, spec.inputs)
    recomputed = measure.recompute_flops(tg.joint, step.partition["backward"])
    report = dict(model=spec_text, schedule=schedule_path or "keep-all", capture="eager",
                  predicted_peak_bytes=measure.predict_step_peak(step.partition["forward"],
                                                                 step.partition["backward"]),
                  plan_model_peak_bytes=int(sim.peak_bytes),
                  measured_peak_bytes=got["measured_peak_bytes"],
                  predicted_saved_bytes=int(predicted_saved),
                  measured_saved_bytes=got["measured_saved_bytes"],
                  predicted_recompute_flops=int(sim.recompute_cost),
                  recompute_flops=int(recomputed), step_seconds=got["step_seconds"],
                  gradients_match=measure.same_grads(measure.grads_of(planned),
                                                     measure.grads_of(plain)),
                  peak_measured_by=got["peak_measured_by"])
    return report


def main(args) -> int:
    report = run(args.torch, args.schedule, args.graph)
    text = json.dumps(report, indent=2) + "\n"
    if args.report:
        write_text(args.report, text)
    else:
        sys.stdout.write(text)
    print(f"{args.torch}: predicted peak {report['predicted_peak_bytes']:,} B, measured "
          f"{report['measured_peak_bytes']:,} B; saved {report['predicted_saved_bytes']:,} / "
          f"{report['measured_saved_bytes']:,} B; recompute {report['recompute_flops']:,} FLOPs; "
          f"gradients_match={report['gradients_match']}", file=sys.stderr)
    return 0 if report["gradients_match"] else 1
