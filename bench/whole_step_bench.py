"""Whole-step plans against activation-only plans of the same zoo graph, in one process.

``planner.plan(g, budget)`` on a graph with op arguments budgets the whole step: it plans the
activations along a ladder of budgets (:func:`planner.whole_step.candidates`, one analysis of
the graph for all of them) and prices every plan at every convolution workspace cap. This prints
the best wall seconds of that and of ``accounting="activations"`` (one plan) at the same budget,
run alternately ``--rounds`` times after a warm-up, their ratio, how many times the graph was
analysed per plan (``planner.api.analyse``: issue 38 wants one) and the load it ran under.

    python3 bench/whole_step_bench.py                          # zoo resnet at 99%
    python3 bench/whole_step_bench.py --model vgg16 --budget 90% --rounds 9
    python3 bench/whole_step_bench.py --ratios     # every zoo model: plan(99%) / plan(activations)

``--ratios`` is issue 38's acceptance check ("plan() on the zoo ResNet at 99% at most 2x the
activation-only time"): for every zoo model, the best CPU seconds (``time.process_time``: the
figure holds on a loaded machine, where wall seconds do not) of the two plans over the rounds,
and their ratio, all in one process.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import planner  # noqa: E402
from hgraph.common.errors import InfeasibleError  # noqa: E402
import planner.api as api  # noqa: E402
from planner.execute import export, zoo  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet", choices=sorted(zoo.MODELS))
    ap.add_argument("--budget", default="99%")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--ratios", action="store_true",
                    help="every zoo model: CPU seconds of plan(budget) / plan(activations)")
    args = ap.parse_args(argv)
    if args.ratios:
        return ratios(args.budget, args.rounds)
    g = export.to_cg(zoo.build(args.model))
    analyses = [0]
    real = api.analyse

    def counting(*a, **k):
        analyses[0] += 1
        return real(*a, **k)

    api.analyse = counting
    kinds = {"whole step": {}, "activations": {"accounting": "activations"}}
    best = dict.fromkeys(kinds, float("inf"))
    per_plan = {}
    for round_ in range(args.rounds + 1):            # round 0 warms caches and imports
        for name, kw in kinds.items():
            analyses[0] = 0
            t0 = time.perf_counter()
            p = planner.plan(g, budget=args.budget, **kw)
            wall = time.perf_counter() - t0
            per_plan[name] = (analyses[0], p.recompute_cost, p.report.get("step_peak_bytes"))
            if round_:
                best[name] = min(best[name], wall)
    print(f"zoo {args.model} ({int(g.is_activation.sum())} activations) at {args.budget}, best of "
          f"{args.rounds} interleaved rounds, load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for name in kinds:
        n, cost, step = per_plan[name]
        print(f"  {name:12} {best[name]:.3f} s  analyses per plan: {n}  recompute cost: {cost}"
              + (f"  step peak: {step:,} B" if step is not None else ""))
    print(f"  whole step / activations: {best['whole step'] / best['activations']:.1f}x")
    return 0


def ratios(budget: str, rounds: int) -> int:
    """Print, per zoo model, the best CPU seconds of ``planner.plan(g, budget)`` (the whole
    step) and of the same with ``accounting="activations"``, interleaved, and their ratio."""
    print(f"plan({budget}) / plan(accounting='activations'), best CPU seconds of {rounds} rounds")
    for model in sorted(zoo.MODELS):
        g = export.to_cg(zoo.build(model))
        kinds = {"whole step": {}, "activations": {"accounting": "activations"}}
        best = dict.fromkeys(kinds, float("inf"))
        refused = set()
        for round_ in range(rounds + 1):             # round 0 warms caches and imports
            for name, kw in kinds.items():
                t0 = time.process_time()
                try:
                    planner.plan(g, budget=budget, **kw)
                except InfeasibleError:              # a refusal is the search's answer too
                    refused.add(name)
                if round_:
                    best[name] = min(best[name], time.process_time() - t0)
        print(f"  {model:12} whole step {best['whole step']:.4f} s  activations "
              f"{best['activations']:.4f} s  ratio {best['whole step'] / best['activations']:.1f}x"
              + (f"  (refused: {', '.join(sorted(refused))})" if refused else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
