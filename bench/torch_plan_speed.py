"""How long a PyTorch model takes to plan, and whether a faster planner still picks the same plans.

Three commands, each rerunnable:

``picks``: for each examples/torch model, ``pt.graph`` and the front of ``pt.plan_for_step``
(:func:`planner.torch.front.front`, the planner's plans without seeds), then the pick at each
budget: the solver, the replayed step peak and the recomputed FLOPs (or the smallest reachable
step peak of a refused budget), and the whole front (one row per candidate). ``--out`` writes
them as JSON, ``--check FILE`` compares them to a file written by another revision (the same
process layout, e.g. a ``git worktree`` of the old revision running this script) and exits 1
on any difference in the picks.

    python3 bench/torch_plan_speed.py picks --out out/picks_new.json --check out/picks_old.json

``gpt``: a GPT-2-shaped model (examples/torch/gpt.py: pre-norm blocks, causal attention,
GELU MLP; ``--layers 12 --d 256 --seq 128 --batch 2`` by default) through ``pt.graph`` and
``pt.plan_for_step`` at each of ``--budgets``, each timed, and the same step traced by
``aot_function`` alone (the capture's floor: its trace with Inductor's decompositions, stopped
before any partition) in the same process, so the ratio is taken under one load.

    python3 bench/torch_plan_speed.py gpt --budgets 100% 60% min

``scale``: plan time (``pt.plan_for_step`` at ``--budget``, a fresh graph each, front not
cached) against joint-graph size, GPT models of growing depth; prints nodes, activations,
seconds, and seconds / (n log n) normalised to the first row.

    python3 bench/torch_plan_speed.py scale --layers 1 2 4 8 16 32 64
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
EXAMPLES = os.path.join(HERE, "..", "examples", "torch")
sys.path.insert(0, EXAMPLES)

MODELS = ("resnet", "gpt", "unet", "bert", "mobilenet", "lstm")
BUDGETS = ("100%", "90%", "80%", "60%", "40%", "min")


def load(name):
    """``examples/torch/NAME.py:model``: (module, inputs, loss)."""
    from planner.torch.model_file import load as load_spec

    spec = load_spec(os.path.join(EXAMPLES, f"{name}.py:model"))
    return spec.model, spec.inputs, spec.loss or mean_loss


def mean_loss(out):
    """The loss of a model file that names none (unet's): its output's mean."""
    return out if out.dim() == 0 else out.mean()


def _row(c) -> dict:
    return dict(solver=c.plan.solver, source=c.source, step_peak=int(c.step_peak),
                recompute_flops=int(c.recompute_flops), kept=len(c.keep))


def picks(args) -> int:
    import planner.torch as pt
    from hgraph.common.errors import InfeasibleError
    from planner.torch import front

    out = {}
    for name in args.models.split(","):
        model, inputs, loss = load(name)
        t0 = time.perf_counter()
        tg = pt.graph(model, *inputs, loss=loss)
        t1 = time.perf_counter()
        fr = front.front(tg)
        t2 = time.perf_counter()
        chosen = {}
        for b in args.budgets:
            try:
                chosen[b] = _row(front.pick(fr, b))
            except InfeasibleError as err:
                chosen[b] = dict(refused=int(err.min_budget_bytes))
        out[name] = dict(picks=chosen, front=[_row(c) for c in fr],
                         graph_s=round(t1 - t0, 2), front_s=round(t2 - t1, 2))
        print(f"{name}: graph {t1 - t0:.1f} s, front {t2 - t1:.1f} s, {len(fr)} candidates",
              flush=True)
        for b, r in chosen.items():
            print(f"  {b:>5}: {r}", flush=True)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f, indent=1, sort_keys=True)
        os.replace(tmp, args.out)
    if not args.check:
        return 0
    with open(args.check) as f:
        old = json.load(f)
    bad = 0
    for name, new in out.items():
        if name not in old:
            print(f"{name}: not in {args.check}")
            continue
        for b, r in new["picks"].items():
            was = old[name]["picks"].get(b)
            if was is not None and was != r:
                bad += 1
                print(f"DIFFERENT {name} {b}: was {was}, now {r}")
        same_front = old[name]["front"] == new["front"]
        print(f"{name}: picks {'same' if not bad else 'differ'}; whole front "
              f"{'same' if same_front else 'differs'} ({len(old[name]['front'])} -> "
              f"{len(new['front'])} candidates); front {old[name]['front_s']} -> "
              f"{new['front_s']} s (two runs, not one process)")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("picks")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--budgets", nargs="+", default=list(BUDGETS))
    p.add_argument("--out")
    p.add_argument("--check")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    return {"picks": picks}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
