"""Budgets that are promises on PyTorch steps (issue 23): measured by torch's memory tracker.

For each model, budgets from 100% of the keep-all step's peak down past the lowest peak hgraph
reaches: ``planner.torch.plan_for_step``'s choice (the front of :mod:`planner.torch.front`,
``front.pick``) is applied as an eager step (``planner.torch.apply``) and its second run is
metered by ``torch.distributed._tools.mem_tracker.MemTracker`` (``measure.measure_step``: every
tensor through the dispatcher, less parameters, buffers, inputs and the labels the loss reads), or the budget is refused with
:class:`hgraph.common.errors.InfeasibleError` (checked to be one line). Each row: the budget, what
happened, the measured peak, whether it is within the budget; per model, whether the measured
peaks are monotone (a lower budget never measures higher).

Models: examples/torch/{resnet,gpt,unet,bert,mobilenet,lstm}.py and two written here, not in
examples/: an MLP-Mixer (token and channel mixing MLPs, layer norms) and an inception-style
CNN (parallel 1x1 / 3x3 / pooled branches concatenated).

    python3 bench/torch_budget_sweep.py --out out/torch_budget_sweep
    python3 bench/torch_budget_sweep.py --models mixer,inception --percents 100,50,10
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples", "torch")
MODELS = ("resnet", "gpt", "unet", "bert", "mobilenet", "lstm", "mixer", "inception")
PERCENTS = (100, 90, 80, 70, 60, 50, 40, 30, 20, 10)


def mixer_spec():
    """An MLP-Mixer: patches, then blocks of token mixing and channel mixing MLPs."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, tokens, d):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.tok = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(),
                                     nn.Linear(2 * tokens, tokens))
            self.ch = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

        def forward(self, x):
            x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
            return x + self.ch(self.n2(x))

    class Mixer(nn.Module):
        def __init__(self, d=32, patch=4, image=16, depth=2, classes=10):
            super().__init__()
            self.embed = nn.Conv2d(3, d, patch, stride=patch)
            tokens = (image // patch) ** 2
            self.blocks = nn.Sequential(*[Block(tokens, d) for _ in range(depth)])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, classes)

        def forward(self, x):
            x = self.embed(x).flatten(2).transpose(1, 2)
            return self.head(self.norm(self.blocks(x)).mean(1))

    torch.manual_seed(0)
    net = Mixer().double()
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64)
    y = torch.randint(0, 10, (4,))
    return net, (x,), lambda out: F.cross_entropy(out, y)


def inception_spec():
    """An inception-style CNN: each block runs 1x1, 3x3 and pooled branches side by side."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, c_in, c):
            super().__init__()
            self.b1 = nn.Conv2d(c_in, c, 1)
            self.b3 = nn.Sequential(nn.Conv2d(c_in, c, 1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1))
            self.bp = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(c_in, c, 1))
            self.bn = nn.BatchNorm2d(3 * c)

        def forward(self, x):
            return F.relu(self.bn(torch.cat([self.b1(x), self.b3(x), self.bp(x)], 1)))

    class Inception(nn.Module):
        def __init__(self, c=8, classes=10):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU())
            self.blocks = nn.Sequential(Block(c, c), nn.MaxPool2d(2), Block(3 * c, c))
            self.head = nn.Linear(3 * c, classes)

        def forward(self, x):
            return self.head(self.blocks(self.stem(x)).mean((2, 3)))

    torch.manual_seed(0)
    net = Inception().double()
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64)
    y = torch.randint(0, 10, (4,))
    return net, (x,), lambda out: F.cross_entropy(out, y)


def load_spec(name):
    """(model, inputs, loss) of a bench model."""
    if name == "mixer":
        return mixer_spec()
    if name == "inception":
        return inception_spec()
    from planner.torch.model_file import load

    spec = load(os.path.join(EXAMPLES, f"{name}.py:model"))
    return spec.model, tuple(spec.inputs), spec.loss


def sweep(model, inputs, loss, percents=PERCENTS) -> list:
    """One row per budget: percent, budget bytes, outcome ('plan' or the refusal's line),
    measured peak (MemTracker), within (measured <= budget), replayed peak, recompute FLOPs."""
    from hgraph.common.errors import InfeasibleError
    from planner.torch import front, measure
    import planner.torch as pt

    tg = pt.graph(model, *inputs, loss=loss)
    fr = front.front(tg)
    rows = []
    for pc in percents:
        budget = front.resolve_step_budget(fr, f"{pc}%")
        try:
            c = front.pick(fr, f"{pc}%")
        except InfeasibleError as err:
            rows.append(dict(percent=pc, budget=budget, outcome=f"refused: {err}",
                             one_line="\n" not in str(err)))
            continue
        m = copy.deepcopy(model)
        got = measure.measure_step(pt.apply(m, c.plan, *inputs, loss=loss), m, inputs)
        peak = got["measured_peak_bytes"]
        rows.append(dict(percent=pc, budget=budget, outcome="plan", measured=peak,
                         within=peak <= budget, replayed=c.step_peak,
                         recompute=c.recompute_flops))
    return rows


def monotone(rows) -> bool:
    """A lower budget never measures a higher peak (rows from high budget to low)."""
    peaks = [r["measured"] for r in rows if r["outcome"] == "plan"]
    return all(b <= a for a, b in zip(peaks, peaks[1:]))


def table(name, rows) -> str:
    out = [f"### {name}", "",
           "| budget | budget B | outcome | measured peak B (MemTracker) | within | "
           "replayed peak B | recompute FLOPs |", "|---:|---:|---|---:|---|---:|---:|"]
    for r in rows:
        if r["outcome"] == "plan":
            out.append(f"| {r['percent']}% | {r['budget']:,} | plan | {r['measured']:,} | "
                       f"{'yes' if r['within'] else '**NO**'} | {r['replayed']:,} | "
                       f"{r['recompute']:,} |")
        else:
            line = r["outcome"] + ("" if r["one_line"] else " (**not one line**)")
            out.append(f"| {r['percent']}% | {r['budget']:,} | {line} | | | | |")
    plans = [r for r in rows if r["outcome"] == "plan"]
    out += ["", f"- {name}: {sum(r['within'] for r in plans)} of {len(plans)} plans within "
                f"their budget by MemTracker; {len(rows) - len(plans)} budgets refused; measured "
                f"peaks {'monotone' if monotone(rows) else '**NOT monotone**'} in the budget", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--percents", default=",".join(map(str, PERCENTS)))
    ap.add_argument("--out", default="out/torch_budget_sweep")
    args = ap.parse_args(argv)
    sys.path[:0] = [os.path.dirname(HERE)]
    from hgraph.common.fileio import write_text

    os.makedirs(args.out, exist_ok=True)
    percents = [int(p) for p in args.percents.split(",")]
    parts = ["CPU, float64; meter: torch's MemTracker on the applied eager step (second run), "
             "less parameters, buffers and the tensors the step is given (inputs, the labels "
             "its loss reads); budget = percent of the keep-all step's replayed peak.", ""]
    for name in args.models.split(","):
        parts.append(table(name, sweep(*load_spec(name), percents)))
        print(parts[-1], flush=True)
    write_text(os.path.join(args.out, "table.md"), "\n".join(parts) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
