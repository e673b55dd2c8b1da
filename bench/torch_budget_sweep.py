"""Budgets that are promises on PyTorch steps (issue 23): measured by the allocator.

For each model, budgets from 100% of the keep-all step's peak down past the lowest peak hgraph
reaches: ``planner.torch.plan_for_step``'s choice (``front.pick`` on the front of
:mod:`planner.torch.front`, the pick's own step checked by the allocator:
``slack.checked_pick``) is applied as an eager step (``planner.torch.apply``) and its second run is
metered by the allocator (``measure.measure_step``: the CPU allocator's events in
``torch.profiler``, kernel scratch included, over what the step allocates: parameters, buffers,
inputs and the labels the loss reads exist before it), or the budget is refused with
:class:`hgraph.common.errors.InfeasibleError` (checked to be one line). Each row: the budget, what
happened, the measured peak, whether it is within the budget; per model, whether the measured
peaks are monotone (a lower budget never measures higher).

Models: examples/torch/{resnet,gpt,unet,bert,mobilenet,lstm}.py, two written here, not in
examples/: an MLP-Mixer (token and channel mixing MLPs, layer norms) and an inception-style
CNN (parallel 1x1 / 3x3 / pooled branches concatenated), and three transformers models
(``hf-gpt2``, ``hf-vit``, ``hf-bert-mlm``: ``torch_compile_budget.hf_model``'s, float32).

    python3 bench/torch_budget_sweep.py --out out/torch_budget_sweep
    python3 bench/torch_budget_sweep.py --models mixer,inception --percents 100,50,10
    python3 bench/torch_budget_sweep.py --models gpt,resnet --percents 100,80,60,min
    python3 bench/torch_budget_sweep.py --models hf-gpt2,hf-vit,hf-bert-mlm --percents 100,80,60,min

``--cli``: the command-line round trip instead (issue 35), as a user runs it, in this process
(``jobs.cli.main``): ``hgraph graph torch SPEC --out g.txt`` once, then per budget ``hgraph
submit plan --graph g.txt --budget B --out s.txt --report p.json`` and, where it plans,
``hgraph submit execute --torch SPEC --graph g.txt --schedule s.txt --budget B --report
r.json``. Each row: the budget, the plan or its one-line refusal (exit 3), the measured peak
(the allocator's events, execute's report), the predicted one, ``within_budget``, and the
recompute FLOPs ``plan`` reported against those the executed backward ran. Models: the examples
by name (``unet`` with its output's mean as the loss: the example names none), ``mlp`` (a plain
MLP), ``hf-gpt2`` (transformers' GPT2LMHeadModel, 2 layers, d=64, seq 32, batch 2, dropout
on), ``hf-vit`` (ViTForImageClassification, 2 layers, d=64, 32x32, patch 8, batch 4) and
``hf-bert-mlm`` (BertForMaskedLM, 2 layers, d=64, seq 32, batch 4), written as model files
into ``--out``.

    python3 bench/torch_budget_sweep.py --cli --models gpt,mlp,hf-gpt2 --percents 100,80,60,min
    python3 bench/torch_budget_sweep.py --cli --models hf-gpt2,hf-vit,hf-bert-mlm
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


#: transformers models (bench only: ``torch_compile_budget.hf_model`` builds them from configs,
#: no download), the acceptance's "at least three models the project never wrote".
HF_MODELS = ("hf-gpt2", "hf-vit", "hf-bert-mlm")


def load_spec(name):
    """(model, inputs, loss) of a bench model."""
    if name in HF_MODELS:
        sys.path.insert(0, HERE)
        from torch_compile_budget import hf_model

        return hf_model(name)
    if name == "mixer":
        return mixer_spec()
    if name == "inception":
        return inception_spec()
    from planner.torch.model_file import load

    spec = load(os.path.join(EXAMPLES, f"{name}.py:model"))
    if spec.loss is None and name == "unet":     # the example names no loss: its output's
        return spec.model, tuple(spec.inputs), lambda out: out.mean()   # mean, as --cli's
    return spec.model, tuple(spec.inputs), spec.loss


def sweep(model, inputs, loss, percents=PERCENTS) -> list:
    """One row per budget: percent, budget bytes, outcome ('plan' or the refusal's line),
    measured peak (the allocator), within (measured <= budget), replayed (the price: replayed
    peak + ``tg.step_slack``), recompute FLOPs."""
    from hgraph.common.errors import InfeasibleError
    from planner.torch import front, measure
    import planner.torch as pt

    tg = pt.graph(model, *inputs, loss=loss)
    fr = front.front(tg)
    rows = []
    for pc in percents:
        asked = pc if pc == "min" else f"{pc}%"
        budget = front.resolve_step_budget(fr, asked)
        try:
            p = pt.plan_for_step(tg, asked, progress="off")     # the product's pick, checked
        except InfeasibleError as err:
            rows.append(dict(percent=pc, budget=budget, outcome=f"refused: {err}",
                             one_line="\n" not in str(err)))
            continue
        budget = p.report["step_budget_bytes"]      # "min": the lowest price once checked
        m = copy.deepcopy(model)
        got = measure.measure_step(pt.apply(m, p, *inputs, loss=loss), m, inputs)
        peak = got["measured_peak_bytes"]
        rows.append(dict(percent=pc, budget=budget, outcome="plan", measured=peak,
                         within=peak <= budget, replayed=p.report["step_peak_bytes"],
                         recompute=p.report["step_recompute_flops"]))
    return rows


CLI_MODELS = ("gpt", "resnet", "mlp", "bert", "unet", "lstm", "mobilenet", "hf-gpt2", "hf-vit",
              "hf-bert-mlm")
CLI_BUDGETS = ("100%", "80%", "60%", "min")

#: Model files the CLI mode writes (``FILE.py:model``), for models not in examples/torch.
MODEL_FILES = {
    "mlp": """import torch
import torch.nn as nn
import torch.nn.functional as F


def model():
    torch.manual_seed(0)
    layers = [nn.Linear(64, 256), nn.GELU()]
    for _ in range(6):
        layers += [nn.Linear(256, 256), nn.GELU()]
    net = nn.Sequential(*layers, nn.Linear(256, 1))
    x, y = torch.randn(512, 64), torch.randn(512, 1)
    return net, (x,), lambda out: F.mse_loss(out, y)
""",
    "hf-gpt2": """import torch
import torch.nn.functional as F
import transformers as tr


def model():
    torch.manual_seed(0)
    cfg = tr.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=32, vocab_size=512)
    m = tr.GPT2LMHeadModel(cfg).train()
    x = torch.randint(0, 512, (2, 32))
    y = torch.randint(0, 512, (2, 32))
    return m, (x,), lambda out: F.cross_entropy(out.logits.reshape(-1, 512), y.reshape(-1))
""",
    "hf-vit": """import torch
import torch.nn.functional as F
import transformers as tr


def model():
    torch.manual_seed(0)
    cfg = tr.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=256, image_size=32, patch_size=8, num_labels=10,
                       hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    m = tr.ViTForImageClassification(cfg).train()
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    return m, (x,), lambda out: F.cross_entropy(out.logits, y)
""",
    "hf-bert-mlm": """import torch
import torch.nn.functional as F
import transformers as tr


def model():
    torch.manual_seed(0)
    cfg = tr.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=256, vocab_size=512, max_position_embeddings=64)
    m = tr.BertForMaskedLM(cfg).train()
    x, y = torch.randint(0, 512, (4, 32)), torch.randint(0, 512, (4, 32))
    return m, (x,), lambda out: F.cross_entropy(out.logits.reshape(-1, 512), y.reshape(-1))
""",
}


MODEL_FILES["unet"] = f"""import importlib.util

_s = importlib.util.spec_from_file_location("ex_unet", {os.path.join(EXAMPLES, "unet.py")!r})
_m = importlib.util.module_from_spec(_s)
_s.loader.exec_module(_m)


def model():
    net, inputs = _m.model()        # the example names no loss: its output's mean, as the
    return net, inputs, lambda out: out.mean()      # other torch benches use
"""


def cli_spec(name, out) -> str:
    """``FILE.py:model`` of a CLI-mode model (written into ``out`` where not an example)."""
    if name not in MODEL_FILES:
        return os.path.join(EXAMPLES, f"{name}.py") + ":model"
    path = os.path.join(out, name.replace("-", "_") + ".py")
    with open(path, "w") as f:
        f.write(MODEL_FILES[name])
    return path + ":model"


def _cli(argv) -> tuple:
    """(exit status, stderr) of ``hgraph ARGV`` run in this process."""
    import contextlib
    import io

    from jobs.cli import main as cli_main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli_main(argv)
    return code, err.getvalue()


def cli_round_trip(name, out, budgets=CLI_BUDGETS) -> list:
    """The round trip of one model at each budget: one row each (see ``--cli``)."""
    import json
    import time

    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    spec, g = cli_spec(name, d), os.path.join(d, "g.txt")
    t0 = time.perf_counter()
    code, err = _cli(["graph", "torch", spec, "--out", g])
    if code:
        raise SystemExit(f"{name}: graph torch exited {code}: {err.strip()}")
    rows = [dict(budget="graph torch", seconds=time.perf_counter() - t0,
                 outcome=err.strip().splitlines()[-1])]
    for b in budgets:
        tag = b.replace("%", "pc")
        s, p, r = (os.path.join(d, f"{k}_{tag}.{e}") for k, e in
                   (("s", "txt"), ("p", "json"), ("r", "json")))
        code, err = _cli(["submit", "plan", "--graph", g, "--budget", b, "--out", s,
                          "--report", p])
        if code:
            lines = err.strip().splitlines()
            rows.append(dict(budget=b, outcome=f"refused (exit {code}): {lines[-1]}",
                             one_line=len(lines) == 1))
            continue
        code, err = _cli(["submit", "execute", "--torch", spec, "--graph", g, "--schedule", s,
                          "--budget", b, "--report", r])
        with open(p) as f1, open(r) as f2:
            plan, run = json.load(f1), json.load(f2)
        rows.append(dict(budget=b, outcome="plan", exit=code, budget_bytes=run["budget_bytes"],
                         plan_budget_bytes=plan["budget_bytes"],
                         measured=run["measured_peak_bytes"],
                         predicted=run["predicted_peak_bytes"],
                         plan_peak=plan["step_peak_bytes"], within=run["within_budget"],
                         planned=plan["recompute_cost"], run=run["recompute_flops"],
                         grads=run["gradients_match"], stderr=err.strip().splitlines()))
    return rows


def cli_table(name, rows) -> str:
    out = [f"### {name}", "", f"`graph torch`: {rows[0]['seconds']:.0f} s wall; "
           f"{rows[0]['outcome']}", "",
           "| budget | budget B | outcome | measured peak B (allocator) | within | predicted "
           "peak B | plan's step peak B | recompute FLOPs planned / run | gradients match |",
           "|---|---:|---|---:|---|---:|---:|---:|---|"]
    for r in rows[1:]:
        if r["outcome"] != "plan":
            one = "" if r["one_line"] else " (**not one line**)"
            out.append(f"| {r['budget']} | | {r['outcome']}{one} | | | | | | |")
            continue
        same = r["budget_bytes"] == r["plan_budget_bytes"]
        out.append(f"| {r['budget']} | {r['budget_bytes']:,}{'' if same else ' (**plan: ' + format(r['plan_budget_bytes'], ',') + '**)'} "
                   f"| plan | {r['measured']:,} | {'yes' if r['within'] else '**NO**'} | "
                   f"{r['predicted']:,} | {r['plan_peak']:,} | {r['planned']:,} / {r['run']:,}"
                   f"{'' if r['planned'] == r['run'] else ' (**differ**)'} | "
                   f"{'yes' if r['grads'] else '**NO**'} |")
    plans = [r for r in rows[1:] if r["outcome"] == "plan"]
    peaks = [r["measured"] for r in plans]
    out += ["", f"- {name}: {sum(bool(r['within']) for r in plans)} of {len(plans)} plans "
                f"within their budget by the allocator, {len(rows) - 1 - len(plans)} refused; "
                f"recompute planned = run on {sum(r['planned'] == r['run'] for r in plans)} of "
                f"{len(plans)}; measured peaks "
                f"{'monotone' if all(b <= a for a, b in zip(peaks, peaks[1:])) else '**NOT monotone**'}"
                f" in the budget", ""]
    return "\n".join(out)


def monotone(rows) -> bool:
    """A lower budget never measures a higher peak (rows from high budget to low)."""
    peaks = [r["measured"] for r in rows if r["outcome"] == "plan"]
    return all(b <= a for a, b in zip(peaks, peaks[1:]))


def _pc(row) -> str:
    return "min" if row["percent"] == "min" else f"{row['percent']}%"


def table(name, rows) -> str:
    out = [f"### {name}", "",
           "| budget | budget B | outcome | measured peak B (allocator) | within | "
           "price B (replay + slack) | recompute FLOPs |", "|---:|---:|---|---:|---|---:|---:|"]
    for r in rows:
        if r["outcome"] == "plan":
            out.append(f"| {_pc(r)} | {r['budget']:,} | plan | {r['measured']:,} | "
                       f"{'yes' if r['within'] else '**NO**'} | {r['replayed']:,} | "
                       f"{r['recompute']:,} |")
        else:
            line = r["outcome"] + ("" if r["one_line"] else " (**not one line**)")
            out.append(f"| {_pc(r)} | {r['budget']:,} | {line} | | | | |")
    plans = [r for r in rows if r["outcome"] == "plan"]
    out += ["", f"- {name}: {sum(r['within'] for r in plans)} of {len(plans)} plans within "
                f"their budget by the allocator; {len(rows) - len(plans)} budgets refused; "
                f"measured peaks {'monotone' if monotone(rows) else '**NOT monotone**'} "
                f"in the budget", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--percents", default=",".join(map(str, PERCENTS)))
    ap.add_argument("--out", default="out/torch_budget_sweep")
    ap.add_argument("--cli", action="store_true",
                    help="the command-line round trip (graph torch, submit plan, execute "
                         "--torch) at --percents (default 100,80,60,min)")
    args = ap.parse_args(argv)
    sys.path[:0] = [os.path.dirname(HERE)]
    from hgraph.common.fileio import write_text

    os.makedirs(args.out, exist_ok=True)
    if args.cli:
        return cli_main(args, write_text)
    percents = [p if p == "min" else int(p) for p in args.percents.split(",")]
    parts = ["CPU, float64; meter: the allocator's events on the applied eager step (second "
             "run; what it allocates: parameters, buffers and the tensors it is given exist "
             "before it); budget = percent of the keep-all step's price (replay + the "
             "allocator's slack).", ""]
    for name in args.models.split(","):
        parts.append(table(name, sweep(*load_spec(name), percents)))
        print(parts[-1], flush=True)
    write_text(os.path.join(args.out, "table.md"), "\n".join(parts) + "\n")
    return 0


def cli_main(args, write_text) -> int:
    """``--cli``: the round trip per model, a table each, all in ``--out``/cli.md."""
    models = args.models if args.models != ",".join(MODELS) else ",".join(CLI_MODELS)
    budgets = (CLI_BUDGETS if args.percents == ",".join(map(str, PERCENTS)) else
               [b if b == "min" else f"{b.rstrip('%')}%" for b in args.percents.split(",")])
    parts = [f"CPU; the round trip in one process; budgets {', '.join(budgets)}; meter: the "
             f"allocator's events over one step from no gradients (execute --torch's report); "
             f"load average at start {os.getloadavg()[0]:.1f}.", ""]
    for name in models.split(","):
        parts.append(cli_table(name, cli_round_trip(name, args.out, budgets)))
        print(parts[-1], flush=True)
    write_text(os.path.join(args.out, "cli.md"), "\n".join(parts) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
