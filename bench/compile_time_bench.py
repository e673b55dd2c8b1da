"""Compile wall time: ``planner.torch.compile`` against ``torch.compile``'s default, same process.

What is timed is the first call of a compiled training step (Dynamo's capture, AOTAutograd's
joint graph, the partition, Inductor's code generation, one step), the only call that
compiles. Both sides run with the FX-graph and autograd caches off (a cache hit would skip the
partitioner and most of Inductor: the first side to run would warm the disk cache for the
other) and Dynamo's ``allow_rnn`` on (``planner.torch.compile`` traces recurrent layers), each
compile of a fresh function (``fresh_function``: Dynamo caches per code object). Inductor's
kernel cache may stay warm across runs; a tiny model is compiled by each side first (the
process's first compile pays one-time set-up), and the configurations are interleaved, their
order alternating between repeats, so a warm cache and the machine's load favour neither side. Reported: the median of
``--repeats`` runs per configuration and the ratio of medians; for hgraph, the seconds spent
inside its partitioner (planning, partitioning, replaying).

    python3 bench/compile_time_bench.py                      # every examples/torch model, 3 runs
    python3 bench/compile_time_bench.py --models gpt --budgets 100% 50% min
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

MODELS = ("resnet", "gpt", "unet", "bert", "mobilenet", "lstm")
EXAMPLES = os.path.join(HERE, "..", "examples", "torch")


def load(name):
    """``examples/torch/NAME.py:model`` (its ``model()``): (module, inputs, loss)."""
    from planner.torch.capture import default_loss
    from planner.torch.model_file import load as load_spec

    spec = load_spec(os.path.join(EXAMPLES, f"{name}.py:model"))
    return spec.model, spec.inputs, spec.loss or default_loss


def torch_first_call(m, inputs, loss) -> float:
    """Seconds of the first call of ``torch.compile``'s step (its default partitioner)."""
    import torch
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    from planner.torch.compiled import fresh_function

    compiled = torch.compile(fresh_function(lambda *xs: loss(m(*xs))), dynamic=False)
    t = time.perf_counter()
    with inductor_config.patch(fx_graph_cache=False), \
            functorch_config.patch(enable_autograd_cache=False), \
            torch._dynamo.config.patch(allow_rnn=True):
        out = compiled(*inputs)
    out.backward()
    return time.perf_counter() - t


def hgraph_first_call(m, inputs, loss, budget) -> tuple:
    """Seconds of the first call of ``planner.torch.compile``'s step at ``budget``, and of them
    the seconds inside its partitioner."""
    import planner.torch as pt

    step = pt.compile(m, budget=budget, loss=loss, progress="off")
    t = time.perf_counter()
    step(*inputs)
    return time.perf_counter() - t, step.partitioner.seconds


def warm_up() -> None:
    """One compile of a tiny model by each side: the process's first compile (imports,
    Inductor's set-up) is timed by neither."""
    import torch

    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(2, 4)
    torch_first_call(m, (x,), lambda y: y.mean())
    hgraph_first_call(m, (x,), lambda y: y.mean(), "100%")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--budgets", nargs="+", default=["100%"],
                    help="hgraph budgets to time (default: 100%%, planner.torch.compile's default)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    unknown = sorted(set(args.models.split(",")) - set(MODELS) - {""})
    if unknown:
        ap.error(f"no example model {unknown[0]!r}; choose from {', '.join(MODELS)}")
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {args.repeats}")
    import torch

    torch.set_num_threads(1)
    names = [s for s in args.models.split(",") if s]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
          f"median of {args.repeats}, interleaved")
    print("| model | torch.compile s | " + " | ".join(
        f"hgraph {b} s (partitioner s) | ratio" for b in args.budgets) + " |")
    print("|---|---|" + "---|---|" * len(args.budgets))
    warm_up()
    for name in names:
        runs = {"torch": [], **{b: [] for b in args.budgets}}
        inside = {b: [] for b in args.budgets}
        for r in range(args.repeats):
            order = ["torch", *args.budgets]
            for which in (order if r % 2 == 0 else order[::-1]):
                m, inputs, loss = load(name)
                if which == "torch":
                    runs["torch"].append(torch_first_call(m, inputs, loss))
                    continue
                wall, part = hgraph_first_call(m, inputs, loss, which)
                runs[which].append(wall)
                inside[which].append(part)
        t = statistics.median(runs["torch"])
        cells = [f"{statistics.median(runs[b]):.1f} ({statistics.median(inside[b]):.1f}) | "
                 f"{statistics.median(runs[b]) / t:.2f}" for b in args.budgets]
        print(f"| {name} | {t:.1f} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
