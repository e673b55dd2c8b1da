"""PyTorch head to head: hgraph plans vs torch's own activation-memory options, measured.

For each example model (examples/torch/*.py:model) rows of: eager (keep everything), hgraph at
budgets (planner.torch.apply on the eager capture), and, with --compile, torch.compile at
``activation_memory_budget`` 0.2 / 0.35 / 0.5 / 1.0 and hgraph through torch.compile. Each row:
measured step peak (MemTracker on CPU), saved bytes, recompute FLOPs, step seconds. Writes a
markdown table and, per model, one plot of the two fronts (peak vs recompute FLOPs).

    python3 bench/torch_bench.py --models resnet --out out/torch_bench
"""

from __future__ import annotations

import argparse
import copy
import os

MODELS = ("resnet", "gpt", "unet")
HGRAPH_BUDGETS = ("100%", "85%", "70%", "min")
TORCH_BUDGETS = (0.2, 0.35, 0.5, 1.0)


def hgraph_rows(name, spec):
    import planner.torch as pt
    from hgraph.errors import InfeasibleError
    from planner.torch import measure
    from planner.torch.partition import apply_plan

    tg = pt.graph(spec.model, *spec.inputs, loss=spec.loss, decompose=False, source=spec.source)
    rows = []
    for b in HGRAPH_BUDGETS:
        try:
            p = pt.plan(tg, 1 if b == "min" else b)
        except InfeasibleError as err:
            if b != "min":
                continue
            p = pt.plan(tg, err.min_budget_bytes)
        m = copy.deepcopy(spec.model)
        step = apply_plan(m, p, spec.inputs, loss=spec.loss)
        got = measure.measure_step(step, m, spec.inputs)
        rows.append(dict(model=name, method=f"hgraph {b}", peak=got["measured_peak_bytes"],
                         saved=got["measured_saved_bytes"],
                         recompute=measure.recompute_flops(tg.joint, step.partition["backward"]),
                         seconds=got["step_seconds"]))
    return rows


def eager_row(name, spec):
    from planner.torch import measure
    from planner.torch.capture import default_loss

    m = copy.deepcopy(spec.model)
    loss = spec.loss or default_loss

    def step(*xs):
        out = loss(m(*xs))
        out.backward()
        return out.detach()

    got = measure.measure_step(step, m, spec.inputs)
    return dict(model=name, method="eager", peak=got["measured_peak_bytes"],
                saved=got["measured_saved_bytes"], recompute=0, seconds=got["step_seconds"])


def compile_rows(name, spec):
    """torch.compile at each activation_memory_budget (recompute FLOPs not separated: -1)."""
    import torch
    import torch._functorch.config as fc

    from planner.torch import measure
    from planner.torch.capture import default_loss

    rows = []
    loss = spec.loss or default_loss
    for b in TORCH_BUDGETS:
        m = copy.deepcopy(spec.model)
        torch._dynamo.reset()
        with fc.patch(activation_memory_budget=b):
            compiled = torch.compile(lambda *xs: loss(m(*xs)))

            def step(*xs):
                out = compiled(*xs)
                out.backward()
                return out.detach()

            got = measure.measure_step(step, m, spec.inputs)
        rows.append(dict(model=name, method=f"torch.compile {b}", peak=got["measured_peak_bytes"],
                         saved=got["measured_saved_bytes"], recompute=-1,
                         seconds=got["step_seconds"]))
    return rows


def table(rows) -> str:
    out = ["| model | method | peak B | saved B | recompute FLOPs | step s |",
           "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        rec = "n/a" if r["recompute"] < 0 else f"{r['recompute']:,}"
        out.append(f"| {r['model']} | {r['method']} | {r['peak']:,} | {r['saved']:,} | {rec} | "
                   f"{r['seconds']:.3f} |")
    return "\n".join(out) + "\n"


def plot(rows, name, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    for prefix, mark in (("hgraph", "o-"), ("torch.compile", "s-"), ("eager", "x")):
        pts = sorted((r["peak"], max(r["recompute"], 0)) for r in rows
                     if r["model"] == name and r["method"].startswith(prefix))
        if pts:
            ax.plot(*zip(*pts), mark, label=prefix)
    ax.set_xlabel("measured step peak (bytes)")
    ax.set_ylabel("recompute FLOPs")
    ax.set_title(name)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--compile", action="store_true", help="also torch.compile rows (slow)")
    ap.add_argument("--out", default="out/torch_bench")
    args = ap.parse_args(argv)
    from hgraph.fileio import write_text
    from planner.torch.model_file import load

    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        spec = load(f"examples/torch/{name}.py:model")
        rows.append(eager_row(name, spec))
        rows += hgraph_rows(name, spec)
        if args.compile:
            rows += compile_rows(name, spec)
        plot(rows, name, os.path.join(args.out, f"{name}.png"))
    text = table(rows)
    write_text(os.path.join(args.out, "table.md"), text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
