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
4 layers, d=128, seq 128, batch 8); transformers is installed for the bench only.

    python3 bench/torch_compile_budget.py --models hf-gpt2,gpt --budgets 100% 80% 60% min
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import statistics
import sys
import time

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "torch")


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
    return got[0], tuple(got[1]), got[2]


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
    import torch

    import planner.torch as pt
    from hgraph.common.errors import HGraphError

    model, inputs, loss = load(name)
    ref = copy.deepcopy(model)
    compiled = torch.compile(lambda *xs: loss(ref(*xs)), dynamic=False)

    def torch_step(*xs):
        out = compiled(*xs)
        out.backward()
        return out.detach()

    t0 = time.perf_counter()
    torch_step(*inputs)
    base_compile = time.perf_counter() - t0
    base_peak, base_s = timed(torch_step, ref, inputs)
    out = [dict(model=name, method="torch.compile default", peak=base_peak, seconds=base_s,
                compile_s=base_compile)]
    for b in budgets:
        ours = copy.deepcopy(model)
        step = pt.compile(ours, budget=b, loss=loss, progress="off")
        t0 = time.perf_counter()
        try:
            step(*inputs)
        except HGraphError as err:
            out.append(dict(model=name, method=f"hgraph {b}",
                            refused=f"{type(err).__name__}: {err}",
                            compile_s=time.perf_counter() - t0))
            continue
        first = time.perf_counter() - t0
        r = step.partitioner.plans[-1].report
        peak, s = timed(step, ours, inputs)
        out.append(dict(model=name, method=f"hgraph {b}", peak=peak, seconds=s,
                        compile_s=first, budget=r["step_budget_bytes"],
                        first_call=r["measured_peak_bytes"], within=peak <= r["step_budget_bytes"],
                        default_seen=r["torch_default_peak_bytes"],
                        solver=step.partitioner.plans[-1].solver,
                        tried=r["candidates_measured"], graphs=step.partitioner.graphs_planned))
    return out


def show(r, base) -> str:
    if "refused" in r:
        return (f"| {r['model']} | {r['method']} | refused: {r['refused']} | | | | | "
                f"{r['compile_s']:.0f} |")
    budget = f"{r['budget']:,}" if "budget" in r else ""
    within = {True: "yes", False: "**no**"}.get(r.get("within"), "")
    tried = ", ".join(f"{k} {v:,}" for k, v in r.get("tried", ()))
    return (f"| {r['model']} | {r['method']}{' (' + r['solver'] + ')' if 'solver' in r else ''}"
            f" | {r['peak']:,} | {budget} | {within} | {r['peak'] / base['peak']:.3f} | "
            f"{r['seconds'] / base['seconds']:.2f} | {r['compile_s']:.0f} | {tried} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="hf-gpt2,hf-vit,hf-bert,gpt,resnet")
    ap.add_argument("--budgets", nargs="+", default=["100%", "80%", "60%", "min"])
    args = ap.parse_args(argv)
    print("| model | method | peak B (allocator) | budget B | within | peak / torch default "
          "| step s / torch default | first call s | candidates measured on the first call |")
    print("|---|---|---:|---:|---|---:|---:|---:|---|")
    for name in args.models.split(","):
        got = rows(name, args.budgets)
        for r in got:
            print(show(r, got[0]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
