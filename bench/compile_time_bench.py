"""Compile time: ``planner.torch.compile``'s first call against ``torch.compile``'s at the
matching ``activation_memory_budget``, same process, interleaved.

What is timed is the first call of a compiled training step (Dynamo's capture, AOTAutograd's
joint graph, the partition, Inductor's code generation, one step), the only call that
compiles; for ``pt.compile`` it includes everything its first call does (torch's default step
compiled and measured, the plan front, the candidates compiled and measured), and a budget it
refuses is timed to the refusal. ``torch.compile`` runs at the budget's match
(:data:`TORCH_BUDGET`: a percent ``p`` at ``activation_memory_budget`` ``p / 100``; ``"min"``
at 0.0, torch's lowest setting, which saves only the graph's inputs and recomputes the rest:
the end of torch's range as ``"min"`` is the end of hgraph's, and the cheapest for torch to
compile, as it runs no min-cut).

Both sides run with the FX-graph and autograd caches off (a cache hit would skip the
partitioner and most of Inductor: the first side to run would warm the disk cache for the
other), Dynamo's ``allow_rnn`` on (``planner.torch.compile`` traces recurrent layers) and
Inductor's ``compile_threads`` at 1, each compile of a fresh function (``fresh_function``:
Dynamo caches per code object). Meters: CPU seconds of this process and the processes it
waited for (``resource.getrusage`` SELF + CHILDREN: with one compile thread Inductor's C++
compiles are children it waits for, so they count; with a worker pool they would not), the
ratio's meter, as the machine is shared; and wall seconds (``time.perf_counter``). Inductor's
kernel cache may stay warm across runs; a tiny model is compiled by each side first (the
process's first compile pays one-time set-up), and each budget's pair is interleaved, which
side goes first alternating between budgets and repeats, so a warm cache and the machine's
load favour neither side. Reported: the median of ``--repeats`` runs per configuration and
the ratio of medians; for hgraph, the seconds inside its partitioner (planning, partitioning,
replaying) and what it chose (``--json``: the picks, to compare two versions).

Models: ``examples/torch/NAME.py`` by name, and transformers' ``hf-gpt2`` and ``hf-vit``
(built from configs, no download: :func:`torch_compile_budget.hf_model`, bench only).

    python3 bench/compile_time_bench.py --budgets 100% 80% 60% min --repeats 1
    python3 bench/compile_time_bench.py --models gpt,hf-gpt2 --budgets 80% min --json picks.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

EXAMPLE_MODELS = ("resnet", "gpt", "unet", "bert", "mobilenet", "lstm")
HF_MODELS = ("hf-gpt2", "hf-vit")
MODELS = EXAMPLE_MODELS + HF_MODELS
#: torch's ``activation_memory_budget`` at hgraph's ``"min"`` (see the module's docstring).
TORCH_MIN = 0.0


def torch_budget(budget: str) -> float:
    """The ``activation_memory_budget`` matching hgraph's ``budget`` (a percent or ``"min"``)."""
    if budget.strip().lower() == "min":
        return TORCH_MIN
    if not budget.strip().endswith("%"):
        raise SystemExit(f"compile_time_bench: budget {budget!r} has no torch match "
                         f"(a percent up to 100%, or min)")
    value = float(budget.strip()[:-1]) / 100
    if not 0 <= value <= 1:
        raise SystemExit(f"compile_time_bench: budget {budget!r} is outside torch's 0-100%")
    return value


def load(name):
    """(module, inputs, loss) of model ``name`` (:func:`torch_compile_budget.load`, whose
    examples and transformers models these are; a model without a loss gets the default)."""
    from planner.torch.capture import default_loss
    from torch_compile_budget import load as load_model

    m, inputs, loss = load_model(name)
    return m, inputs, loss or default_loss


def _cpu() -> float:
    """CPU seconds of this process and the children it has waited for."""
    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _settings(**functorch):
    """The settings both sides compile under (see the module's docstring)."""
    import contextlib

    import torch
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    stack = contextlib.ExitStack()
    stack.enter_context(inductor_config.patch(fx_graph_cache=False, compile_threads=1))
    stack.enter_context(functorch_config.patch(enable_autograd_cache=False, **functorch))
    stack.enter_context(torch._dynamo.config.patch(allow_rnn=True))
    return stack


def torch_first_call(m, inputs, loss, amb: float = 1.0) -> dict:
    """CPU and wall seconds of the first call of ``torch.compile``'s step at
    ``activation_memory_budget`` ``amb``."""
    import torch

    from planner.torch.compiled import fresh_function

    compiled = torch.compile(fresh_function(lambda *xs: loss(m(*xs))), dynamic=False)
    c, t = _cpu(), time.perf_counter()
    with _settings(activation_memory_budget=amb):
        out = compiled(*inputs)
        out.backward()
    return dict(cpu=_cpu() - c, wall=time.perf_counter() - t)


def hgraph_first_call(m, inputs, loss, budget) -> dict:
    """CPU and wall seconds of the first call of ``planner.torch.compile``'s step at
    ``budget`` (to its refusal, if it refuses), the seconds inside its partitioner, and what
    it chose."""
    import planner.torch as pt
    from hgraph.common.errors import InfeasibleError

    step = pt.compile(m, budget=budget, loss=loss, progress="off")
    c, t = _cpu(), time.perf_counter()
    with _settings():
        try:
            step(*inputs)
            refused = None
        except InfeasibleError as err:
            refused = str(err).splitlines()[0]
    got = dict(cpu=_cpu() - c, wall=time.perf_counter() - t, inside=step.partitioner.seconds)
    return dict(got, pick=_pick(step, refused))


def _pick(step, refused) -> dict:
    """What the first call chose: its plans' solver, replayed peak and recompute FLOPs, the
    measured peak and the candidates measured; or the refusal."""
    if refused is not None:
        return {"refused": refused}
    keys = ("solver", "step_peak_bytes", "step_recompute_flops", "measured_peak_bytes",
            "candidates_measured")
    return {"plans": [{k: p.report.get(k) for k in keys} for p in step.partitioner.plans]}


def warm_up() -> None:
    """One compile of a tiny model by each side: the process's first compile (imports,
    Inductor's set-up) is timed by neither."""
    import torch

    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(2, 4)
    torch_first_call(m, (x,), lambda y: y.mean())
    hgraph_first_call(m, (x,), lambda y: y.mean(), "100%")


def run_model(name, budgets, repeats, done=lambda b, runs: None) -> dict:
    """Every (side, budget) of model ``name``, ``repeats`` times, each budget's pair
    interleaved with the side going first alternating: {budget: {"torch": [runs],
    "hgraph": [runs]}}; ``done(budget, its runs)`` after a budget's last pair (a row shows
    as soon as it is measured: a model's four budgets take minutes on a loaded machine)."""
    runs = {b: {"torch": [], "hgraph": []} for b in budgets}
    for r in range(repeats):
        for i, b in enumerate(budgets):
            order = ("torch", "hgraph") if (i + r) % 2 == 0 else ("hgraph", "torch")
            for side in order:
                m, inputs, loss = load(name)
                runs[b][side].append(torch_first_call(m, inputs, loss, torch_budget(b))
                                     if side == "torch" else
                                     hgraph_first_call(m, inputs, loss, b))
            if r == repeats - 1:
                done(b, runs[b])
    return runs


def row(name, b, runs) -> str:
    """One table row: medians of both sides, CPU and wall, their ratios, the outcome."""
    med = {s: {k: statistics.median(r[k] for r in runs[s]) for k in ("cpu", "wall")}
           for s in ("torch", "hgraph")}
    inside = statistics.median(r["inside"] for r in runs["hgraph"])
    pick = runs["hgraph"][-1]["pick"]
    what = ("refused" if "refused" in pick else
            "+".join(str(p["solver"]) for p in pick["plans"]) or "?")
    t, h = med["torch"], med["hgraph"]
    return (f"| {name} | {b} | {torch_budget(b):g} | {t['cpu']:.1f} ({t['wall']:.1f}) | "
            f"{h['cpu']:.1f} ({h['wall']:.1f}) [{inside:.1f}] | "
            f"**{h['cpu'] / t['cpu']:.2f}** ({h['wall'] / t['wall']:.2f}) | {what} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--budgets", nargs="+", default=["100%"],
                    help="budgets to time (default: 100%%, planner.torch.compile's default)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", help="write every run (seconds, picks) here")
    args = ap.parse_args(argv)
    names = [s for s in args.models.split(",") if s]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        ap.error(f"no model {unknown[0]!r}; choose from {', '.join(MODELS)}")
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {args.repeats}")
    for b in args.budgets:
        torch_budget(b)                 # a budget without a torch match, refused before any run
    import torch

    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), median of "
          f"{args.repeats}, interleaved; load {os.getloadavg()[0]:.1f}")
    print("| model | budget | torch's activation_memory_budget | torch.compile CPU s (wall) | "
          "hgraph CPU s (wall) [partitioner s] | ratio CPU (wall) | hgraph's step |")
    print("|---|---|---|---|---|---|---|")
    warm_up()
    everything = {}
    for name in names:
        def done(b, runs, name=name):
            print(row(name, b, runs), flush=True)
            everything.setdefault(name, {})[b] = runs
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(everything, f, indent=1, sort_keys=True, default=str)
        run_model(name, args.budgets, args.repeats, done)
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
