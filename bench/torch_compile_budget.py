"""``planner.torch.compile``'s budget against torch.compile's default step, by the allocator.

Issue 35's acceptance, for ``compile``: per model, plain ``torch.compile``'s default step
(Inductor's min-cut partition, no hgraph) and then ``pt.compile`` at each budget, all in one
process, interleaved per model. Each row: the budget in bytes as ``pt.compile`` resolved it
(percent of torch.compile's default step, which its first call measures), the step's peak by
the allocator meter measured here again after the first call (``measure.allocator_peak``: the
CPU allocator's events in ``torch.profiler``, ``cuda.max_memory_allocated`` on CUDA; a meter
outside the plan), whether it is within the budget, the step's seconds (median of 3 runs after
the first call) and their ratio to torch.compile's default step, and the candidates the first
call measured. A refused budget is its one line.

Models: ``examples/torch/NAME.py`` by name; ``hf-gpt2`` (transformers' GPT2LMHeadModel, 4
layers, d=128, seq 64, batch 4, vocab 1024, dropout on), ``hf-vit`` (ViTForImageClassification,
4 layers, d=128, 64x64 images, patch 8, batch 8), ``hf-bert`` (BertForSequenceClassification,
4 layers, d=128, seq 128, batch 8), ``hf-bert-mlm`` (BertForMaskedLM, the same size),
``hf-resnet`` (ResNetForImageClassification, basic blocks, widths 32-256, one block a
stage, 64x64 images, batch 8), ``hf-gpt2-labels`` (``hf-gpt2`` at 2 layers, called with
``labels=``, its own loss: Dynamo splits the step, the budget is shared across the graphs);
transformers is installed for the bench only.

``--matrix``: issue 35's acceptance (:data:`MATRIX`: examples/torch/* and three transformers
models, or ``--models``), each model's rows checked (:func:`verdicts`): every step within its
budget by the allocator or refused in one line, ``"100%"`` never above torch.compile's
default, the peak monotone in the budget, the budget covering the whole step.

    python3 bench/torch_compile_budget.py --models hf-gpt2,gpt --budgets 100% 80% 60% min
    python3 bench/torch_compile_budget.py --matrix
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
EXAMPLES = os.path.join(HERE, "..", "examples", "torch")
#: ``--matrix``: issue 35's acceptance, examples/torch/* and three transformers models.
MATRIX = ("resnet", "gpt", "unet", "bert", "mobilenet", "lstm", "hf-gpt2", "hf-bert-mlm",
          "hf-resnet")


def _labelled(lm):
    """``lm`` (a transformers causal LM) as a module whose step is ``lm(x, labels=x).loss``:
    the loss computed inside the model, as users call it (transformers' loss breaks the
    graph: Dynamo splits the step)."""
    import torch

    class Labelled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, x):
            return self.lm(x, labels=x).loss

    return Labelled()


def hf_model(name):
    """(model, inputs, loss) of a small transformers model (the loss outside the model, so
    Dynamo sees one graph: transformers' own loss logs and breaks the graph)."""
    import torch
    import torch.nn.functional as F
    import transformers as tr

    torch.manual_seed(0)
    if name == "hf-gpt2":
        cfg = tr.GPT2Config(n_layer=4, n_embd=128, n_head=4, n_positions=64, vocab_size=1024)
        m = tr.GPT2LMHeadModel(cfg).train()
        x = torch.randint(0, 1024, (4, 64))
        y = torch.randint(0, 1024, (4, 64))
        return m, (x,), lambda out: F.cross_entropy(out.logits.reshape(-1, 1024), y.reshape(-1))
    if name == "hf-vit":
        cfg = tr.ViTConfig(hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                           intermediate_size=512, image_size=64, patch_size=8, num_labels=10,
                           hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
        m = tr.ViTForImageClassification(cfg).train()
        x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))
        return m, (x,), lambda out: F.cross_entropy(out.logits, y)
    if name == "hf-gpt2-labels":        # transformers' own loss: Dynamo splits the step
        cfg = tr.GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=64, vocab_size=1024)
        m = tr.GPT2LMHeadModel(cfg).train()
        return _labelled(m), (torch.randint(0, 1024, (4, 64)),), None
    if name == "hf-bert-mlm":
        cfg = tr.BertConfig(hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                            intermediate_size=512, vocab_size=1024)
        m = tr.BertForMaskedLM(cfg).train()
        x, y = torch.randint(0, 1024, (8, 128)), torch.randint(0, 1024, (8, 128))
        return m, (x,), lambda out: F.cross_entropy(out.logits.reshape(-1, 1024), y.reshape(-1))
    if name == "hf-resnet":
        cfg = tr.ResNetConfig(embedding_size=32, hidden_sizes=[32, 64, 128, 256],
                              depths=[1, 1, 1, 1], layer_type="basic", num_labels=10)
        m = tr.ResNetForImageClassification(cfg).train()
        x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))
        return m, (x,), lambda out: F.cross_entropy(out.logits, y)
    if name == "hf-bert":
        cfg = tr.BertConfig(hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                            intermediate_size=512, vocab_size=1024, num_labels=2)
        m = tr.BertForSequenceClassification(cfg).train()
        x, y = torch.randint(0, 1024, (8, 128)), torch.randint(0, 2, (8,))
        return m, (x,), lambda out: F.cross_entropy(out.logits, y)
    raise SystemExit(f"torch_compile_budget: unknown model {name!r}")


def load(name):
    if name.startswith("hf-"):
        return hf_model(name)
    path = os.path.join(EXAMPLES, f"{name}.py")
    if not os.path.exists(path):
        raise SystemExit(f"torch_compile_budget: unknown model {name!r} (no {path})")
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod            # Dynamo imports a traced function's module by name
    spec.loader.exec_module(mod)
    got = mod.model()
    loss = got[2] if len(got) > 2 else None                 # (model, inputs[, loss])
    if loss is None and name == "unet":     # the example names no loss: its output's mean, as
        loss = _mean                        # torch_budget_sweep and the other torch benches use
    return got[0], tuple(got[1]), loss


def _mean(out):
    return out.mean()


def timed(step, model, inputs) -> tuple:
    """(peak bytes, seconds): the allocator's peak of one step from no gradients, and the
    median of 3 timed steps."""
    from planner.torch.measure import allocator_peak

    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        step(*inputs)
        times.append(time.perf_counter() - t0)
    for p in model.parameters():
        p.grad = None
    return allocator_peak(step, inputs)[0], statistics.median(times)


def rows(name, budgets):
    """The model's rows, each yielded as soon as it is measured (a long run shows progress):
    torch.compile's default step first, then ``pt.compile`` at each of ``budgets``."""
    import torch

    import planner.torch as pt
    from hgraph.common.errors import HGraphError

    model, inputs, loss = load(name)
    ref = copy.deepcopy(model)
    compiled = torch.compile(lambda *xs: (loss or (lambda v: v))(ref(*xs)), dynamic=False)

    def torch_step(*xs):
        out = compiled(*xs)
        out.backward()
        return out.detach()

    t0 = time.perf_counter()
    torch_step(*inputs)
    base_compile = time.perf_counter() - t0
    base_peak, base_s = timed(torch_step, ref, inputs)
    yield dict(model=name, method="torch.compile default", peak=base_peak, seconds=base_s,
               compile_s=base_compile)
    for b in budgets:
        ours = copy.deepcopy(model)
        step = pt.compile(ours, budget=b, loss=loss, progress="off")
        t0 = time.perf_counter()
        try:
            step(*inputs)
        except HGraphError as err:
            yield dict(model=name, method=f"hgraph {b}", refused=f"{type(err).__name__}: {err}",
                       compile_s=time.perf_counter() - t0)
            continue
        first = time.perf_counter() - t0
        r = step.partitioner.plans[-1].report
        peak, s = timed(step, ours, inputs)
        part = step.partitioner
        yield dict(model=name, method=f"hgraph {b}", peak=peak, seconds=s, compile_s=first,
                   budget=r["step_budget_bytes"], first_call=r["measured_peak_bytes"],
                   within=peak <= r["step_budget_bytes"],
                   default_seen=r["torch_default_peak_bytes"],
                   solver="+".join(p.solver for p in part.plans), tried=r["candidates_measured"],
                   graphs=part.graphs_planned, covers=part.budget_covers_step)


def verdicts(got, budgets) -> list:
    """Issue 35's acceptance on one model's rows (torch's default first, then ``budgets`` in
    order, highest first, ``"min"`` last): lines naming each check that fails (none: it holds).
    Every step within its budget by the allocator or refused in one line; the default
    (``"100%"``) never above torch.compile's default peak; the measured peak monotone in the
    budget; the budget covering the whole step (every graph Dynamo made of it)."""
    base, ours = got[0], got[1:]
    bad = []
    for b, r in zip(budgets, ours):
        if "refused" in r:
            if "\n" in r["refused"]:
                bad.append(f"{b}: refused in more than one line")
        elif not r["within"]:
            bad.append(f"{b}: {r['peak']:,} B above its budget {r['budget']:,} B")
        elif not r["covers"]:
            bad.append(f"{b}: the budget does not cover the whole step")
        if b == "100%" and "peak" in r and r["peak"] > base["peak"]:
            bad.append(f"100%: {r['peak']:,} B above torch.compile's default {base['peak']:,} B")
    peaks = [r["peak"] for r in ours if "peak" in r]
    if peaks != sorted(peaks, reverse=True):
        bad.append(f"peak not monotone in the budget: {peaks}")
    return bad


def show(r, base) -> str:
    if "refused" in r:
        return (f"| {r['model']} | {r['method']} | refused: {r['refused']} | | | | | "
                f"{r['compile_s']:.0f} |")
    budget = f"{r['budget']:,}" if "budget" in r else ""
    within = {True: "yes", False: "**no**"}.get(r.get("within"), "")
    tried = ", ".join(f"{k} {v:,}" for k, v in r.get("tried", ()))
    how = ", ".join(x for x in (r.get("solver"), r.get("graphs", 1) > 1
                                 and f"{r['graphs']} graphs") if x)
    return (f"| {r['model']} | {r['method']}{' (' + how + ')' if how else ''}"
            f" | {r['peak']:,} | {budget} | {within} | {r['peak'] / base['peak']:.3f} | "
            f"{r['seconds'] / base['seconds']:.2f} | {r['compile_s']:.0f} | {tried} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="hf-gpt2,hf-vit,hf-bert,gpt,resnet")
    ap.add_argument("--budgets", nargs="+", default=["100%", "80%", "60%", "min"])
    ap.add_argument("--matrix", action="store_true",
                    help=f"issue 35's acceptance: models {','.join(MATRIX)} (or --models), "
                         "each checked (verdict lines); exit 1 where one misses")
    args = ap.parse_args(argv)
    models = MATRIX if args.matrix and "--models" not in (argv or sys.argv) else \
        args.models.split(",")
    print("| model | method | peak B (allocator) | budget B | within | peak / torch default "
          "| step s / torch default | first call s | candidates measured on the first call |")
    print("|---|---|---:|---:|---|---:|---:|---:|---|")
    missed = []
    for name in models:
        got = []
        for r in rows(name, args.budgets):
            got.append(r)
            print(show(r, got[0]), flush=True)
        if args.matrix:
            bad = verdicts(got, args.budgets)
            missed += [f"{name}: {line}" for line in bad]
            print(f"<!-- {name}: {'; '.join(bad) or 'holds'} -->", flush=True)
    if args.matrix:
        print("\n".join(missed) or f"acceptance holds on {len(models)} models")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
