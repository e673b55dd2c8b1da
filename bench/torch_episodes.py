"""Plans that recompute a value more than once, with and without the backward following them.

For each budget (percent of the keep-all plan's peak) and solver, plans the model's training
step, counts the blocks the schedule recomputes twice or more in the backward phase, and runs
the step twice through ``apply``'s partition: once as torch partitions it (one recomputation
per value not saved), once following the plan's recompute episodes
(:mod:`planner.torch.episodes`). Prints the measured peaks (MemTracker), the copies the
episodes added and whether the gradients of the two are bitwise equal.

    python3 bench/torch_episodes.py examples/torch/resnet.py:model --budgets 92,93,96 \\
        --solver approx --capture eager
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def twice_recomputed(g, schedule, joint) -> dict:
    """{fx node: recomputations} of the blocks the backward phase recomputes more than once."""
    from planner.torch.episodes import plan_times

    return {k: len(v) for k, v in plan_times(g, schedule, joint)[0].items() if len(v) > 1}


def run(spec_text: str, budgets, solver: str, capture: str) -> list:
    import planner
    import planner.torch as pt
    from planner.torch import measure
    from planner.torch.model_file import load
    from planner.torch.partition import apply_keep, keep_names

    spec = load(spec_text)
    decompose = capture == "inductor"
    tg = pt.graph(spec.model, *spec.inputs, loss=spec.loss, decompose=decompose)
    top = int(planner.plan(tg.cg, budget="100%").peak_bytes)
    rows = []
    for pct in budgets:
        p = planner.plan(tg.cg, budget=int(top * pct / 100), solver=solver)
        keep = keep_names(p.graph, p.schedule)
        row = dict(budget=f"{pct}%", budget_bytes=int(top * pct / 100),
                   twice=len(twice_recomputed(p.graph, p.schedule, tg.joint)))
        grads = {}
        for follow in (False, True):
            m = copy.deepcopy(spec.model)
            step = apply_keep(m, keep, decompose, loss=spec.loss, plan=p if follow else None)
            got = measure.measure_step(step, m, spec.inputs)
            key = "episodes" if follow else "once"
            row[f"peak_{key}"] = got["measured_peak_bytes"]
            row[f"copies_{key}"] = sum("recompute_of" in n.meta
                                       for n in step.partition["backward"].graph.nodes)
            grads[follow] = measure.grads_of(m)
        row["grads_bitwise_equal"] = measure.same_grads(grads[False], grads[True])
        rows.append(row)
        print("  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="FILE.py:FUNC returning (model, inputs[, loss])")
    ap.add_argument("--budgets", default="92,93,96",
                    help="percent of the keep-all plan's peak, comma separated")
    ap.add_argument("--solver", default="approx")
    ap.add_argument("--capture", choices=("eager", "inductor"), default="eager")
    a = ap.parse_args(argv)
    from hgraph.common.errors import HGraphError

    try:
        budgets = [float(b) for b in a.budgets.split(",")]
    except ValueError:
        print(f"--budgets: not a comma-separated list of percents: {a.budgets!r}",
              file=sys.stderr)
        return 2
    try:
        run(a.model, budgets, a.solver, a.capture)
    except HGraphError as err:
        print(err, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
