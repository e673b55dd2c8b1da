"""PyTorch head to head: hgraph plans vs torch's own activation-memory options, measured.

For each example model (examples/torch/NAME.py: ``model`` and ``blocks``) rows of:

* ``eager``: plain autograd (keeps everything it saves);
* ``checkpoint``: ``torch.utils.checkpoint`` on every block (``blocks(net)``);
* ``SAC``: selective checkpointing of every block, policy: save matmuls / convolutions /
  attention, recompute everything else;
* ``torch.compile B``: Inductor's min-cut partitioner at ``activation_memory_budget`` B;
* ``hgraph B``: ``planner.torch.compile`` (hgraph as Inductor's partitioner) at step-peak budget
  B (percent of its no-recompute step's peak; ``min``: its lowest), and ``hgraph @B`` at the
  predicted peak of the ``torch.compile B`` row — the fair comparison with Inductor (same
  decomposed graph, same fused kernels).

Each row: measured step peak (MemTracker on CPU, less parameters and buffers), saved bytes
(saved-tensor hooks), recompute FLOPs (one cost model for all: ``planner.torch.costs``; for
partitioned graphs the forward ops the backward module runs again, for eager checkpointing the
step's FLOPs less eager's), step seconds (one run: noisy on a loaded machine). Writes
``table.md``, one ``NAME.png`` per model (peak vs recompute FLOPs: the fronts) and prints, per
model, whether hgraph's front dominates torch.compile's: at each torch budget's measured peak,
hgraph's best plan at no higher measured peak recomputes no more FLOPs (strictly fewer on one).

    python3 bench/torch_bench.py --models resnet,gpt,unet --out out/torch_bench
    python3 bench/torch_bench.py --quick            # fewer hgraph budgets
"""

from __future__ import annotations

import argparse
import copy
import functools
import os

MODELS = ("resnet", "gpt", "unet")
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "torch")
HGRAPH_BUDGETS = ("100%", "90%", "80%", "70%", "60%", "50%", "min")
QUICK_BUDGETS = ("100%", "min")
TORCH_BUDGETS = (0.2, 0.35, 0.5, 1.0)


def _row(name, method, got, recompute, **extra):
    return dict(model=name, method=method, peak=got["measured_peak_bytes"],
                saved=got["measured_saved_bytes"], recompute=int(recompute),
                seconds=got["step_seconds"], **extra)


def eager_step(m, loss):
    def step(*xs):
        out = loss(m(*xs))
        out.backward()
        return out.detach()
    return step


def eager_rows(name, spec, mod):
    """eager, checkpoint every block, selective checkpointing every block."""
    import torch
    from torch.utils.checkpoint import (CheckpointPolicy, checkpoint,
                                        create_selective_checkpoint_contexts)

    from planner.torch import measure
    from planner.torch.capture import default_loss

    loss = spec.loss or default_loss
    aten = torch.ops.aten
    keep = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.convolution.default,
            aten._scaled_dot_product_flash_attention_for_cpu.default}

    def policy(_ctx, op, *_a, **_k):
        return CheckpointPolicy.MUST_SAVE if op in keep else CheckpointPolicy.PREFER_RECOMPUTE

    sac = functools.partial(create_selective_checkpoint_contexts, policy)
    rows, base = [], None
    for method, ctx in (("eager", None), ("checkpoint", "all"), ("SAC", sac)):
        m = copy.deepcopy(spec.model)
        for blk in ([] if ctx is None else mod.blocks(m)):
            fwd = blk.forward
            kw = {} if ctx == "all" else {"context_fn": ctx}
            blk.forward = functools.partial(checkpoint, fwd, use_reentrant=False, **kw)
        step = eager_step(m, loss)
        got = measure.measure_step(step, m, spec.inputs)
        flops = measure.step_flops(step, spec.inputs)
        base = flops if base is None else base
        extra = eager_prediction(spec, loss) if ctx is None else {}
        rows.append(_row(name, method, got, flops - base, **extra))
    return rows


def _recording_min_cut():
    """torch's min-cut partitioner (as Inductor calls it), recording (joint, fw, bw) per call."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    class MinCut:
        def __init__(self):
            self.parts = []

        def __call__(self, gm, joint_inputs, **kwargs):
            fw, bw = min_cut_rematerialization_partition(gm, joint_inputs, compiler="inductor",
                                                         **kwargs)
            self.parts.append((gm, fw, bw))
            return fw, bw

    return MinCut()


def _partitioned_step(m, loss, part):
    """The step through AOTAutograd on Inductor's decomposed graph, split by ``part``.

    Forward and backward run as fx graphs (no Inductor code generation: compiling the kernels
    takes minutes per model on 2 loaded cores); both partitioners see the same joint graph
    Inductor would partition, and the two steps run the same unfused ops.
    """
    from planner.torch import capture as cap

    step = cap.make_step(m, loss)
    fn = cap.traced(step, part, decompose=True)

    def run(*xs):
        out = fn(*step.args(xs))
        out.backward()
        return out.detach()

    return run


def _recomputed(part):
    from planner.torch import measure

    return sum(measure.recompute_flops(j, bw) for j, _, bw in part.parts)


def _predicted(part):
    """Predictions from the last partition ``part`` made: step peak and saved bytes."""
    from planner.torch import measure

    fw, bw = part.parts[-1][1:]
    return dict(predicted_peak=measure.predict_step_peak(fw, bw),
                predicted_saved=measure.predict_saved_bytes(fw, bw))


def compile_rows(name, spec, budgets):
    """torch.compile at each activation_memory_budget, and hgraph through torch.compile.

    hgraph runs at each of ``budgets`` (percent of its no-recompute step peak, ``min``: the
    lowest peak it reaches) and at each torch.compile row's predicted peak (``hgraph @B``):
    the least-recompute plan that peaks no higher there, the dominance check's question.
    """
    import torch._functorch.config as fc

    from planner import simulate
    from planner.torch import measure
    from planner.torch.capture import default_loss
    from planner.torch.compiled import HGraphPartitioner

    rows = []
    loss = spec.loss or default_loss
    for b in TORCH_BUDGETS:
        m = copy.deepcopy(spec.model)
        part = _recording_min_cut()
        with fc.patch(activation_memory_budget=b):
            got = measure.measure_step(_partitioned_step(m, loss, part), m, spec.inputs)
        rows.append(_row(name, f"torch.compile {b}", got, _recomputed(part), **_predicted(part)))
    fronts = {}
    targets = [(f"hgraph {b}", 1 if b == "min" else b) for b in budgets]
    targets += [(f"hgraph @{r['method'].split()[-1]}", r["predicted_peak"]) for r in rows]
    for method, b in targets:
        m = copy.deepcopy(spec.model)
        part = HGraphPartitioner(b, fronts=fronts)
        got = measure.measure_step(_partitioned_step(m, loss, part), m, spec.inputs)
        p = part.plans[-1]
        sim = simulate.replay(p.graph, p.schedule)
        rows.append(_row(name, method, got, _recomputed(part), **_predicted(part),
                         plan_peak=int(sim.peak_bytes)))
    return rows


def eager_prediction(spec, loss):
    """Predictions for the eager row: the keep-everything partition of the eager (undecomposed)
    capture, which saves what autograd saves."""
    from planner.torch import measure
    from planner.torch.capture import capture
    from planner.torch.partition import partition

    joint, n_out = capture(copy.deepcopy(spec.model), spec.inputs, loss=loss, decompose=False)
    keep = {n.name for n in joint.graph.nodes if n.op == "call_function"}
    fw, bw = partition(joint, n_out, keep)
    return dict(predicted_peak=measure.predict_step_peak(fw, bw),
                predicted_saved=measure.predict_saved_bytes(fw, bw))


def prediction_check(rows) -> str:
    """The acceptance check: saved bytes within 1% and step peak within 5% of the prediction
    on every row that has one (checkpoint and SAC rows are torch's, with no plan to predict)."""
    have = [r for r in rows if "predicted_peak" in r]
    bad = [r for r in have if abs(r["saved"] - r["predicted_saved"]) > 0.01 * r["predicted_saved"]
           or abs(r["peak"] - r["predicted_peak"]) > 0.05 * r["predicted_peak"]]
    worst_saved = max(abs(r["saved"] / max(r["predicted_saved"], 1) - 1) for r in have)
    worst_peak = max(abs(r["peak"] / max(r["predicted_peak"], 1) - 1) for r in have)
    head = (f"predicted vs measured: {len(have) - len(bad)}/{len(have)} rows with saved bytes "
            f"within 1% and step peak within 5% (worst: saved {100 * worst_saved:.2f}%, peak "
            f"{100 * worst_peak:.2f}%)")
    return head + "".join(f"; OFF: {r['model']} {r['method']}" for r in bad)


def dominance(rows, name) -> str:
    """Does hgraph's front dominate torch.compile's on ``name`` (see the module docstring)?"""
    hg = [r for r in rows if r["model"] == name and r["method"].startswith("hgraph")]
    verdicts, strict = [], False
    for t in (r for r in rows if r["model"] == name and r["method"].startswith("torch.compile")):
        fits = [h["recompute"] for h in hg if h["peak"] <= t["peak"]]
        best = min(fits) if fits else None
        if best is None:
            verdicts.append(f"{t['method']}: no hgraph plan at peak <= {t['peak']:,}")
        elif best > t["recompute"]:
            verdicts.append(f"{t['method']}: hgraph recomputes {best:,} > {t['recompute']:,}")
        else:
            strict |= best < t["recompute"]
    if not verdicts and strict:
        return f"{name}: hgraph dominates torch.compile"
    return f"{name}: hgraph does NOT dominate: " + ("; ".join(verdicts) or "no strict gain")


def table(rows) -> str:
    out = ["| model | method | peak B | predicted peak B | plan-model peak B | saved B | "
           "predicted saved B | recompute FLOPs | step s |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]

    def cell(r, k):
        return f"{r[k]:,}" if k in r else ""

    for r in rows:
        out.append(f"| {r['model']} | {r['method']} | {r['peak']:,} | {cell(r, 'predicted_peak')} "
                   f"| {cell(r, 'plan_peak')} | {r['saved']:,} | {cell(r, 'predicted_saved')} | "
                   f"{r['recompute']:,} | {r['seconds']:.3f} |")
    return "\n".join(out) + "\n"


def plot(rows, name, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for prefix, mark in (("hgraph", "o-"), ("torch.compile", "s-"), ("eager", "x"),
                         ("checkpoint", "^"), ("SAC", "v")):
        pts = sorted((r["peak"], r["recompute"]) for r in rows
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
    ap.add_argument("--quick", action="store_true", help=f"hgraph at {', '.join(QUICK_BUDGETS)}")
    ap.add_argument("--out", default="out/torch_bench")
    args = ap.parse_args(argv)
    from hgraph.fileio import write_text
    from planner.torch.model_file import load

    os.makedirs(args.out, exist_ok=True)
    rows, verdicts = [], []
    for name in args.models.split(","):
        spec = load(os.path.join(EXAMPLES, f"{name}.py:model"))
        rows += eager_rows(name, spec, spec.module)
        rows += compile_rows(name, spec, QUICK_BUDGETS if args.quick else HGRAPH_BUDGETS)
        plot(rows, name, os.path.join(args.out, f"{name}.png"))
        verdicts.append(dominance(rows, name))
        print(table([r for r in rows if r["model"] == name]) + f"- {verdicts[-1]}", flush=True)
    check = prediction_check(rows)
    text = (table(rows) + "\n" + "\n".join(f"- {v}" for v in verdicts) + f"\n- {check}\n")
    write_text(os.path.join(args.out, "table.md"), text)
    print(text)
    return 0 if "OFF:" not in check else 1


if __name__ == "__main__":
    raise SystemExit(main())
