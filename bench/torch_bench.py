"""PyTorch head to head under real torch.compile: hgraph's partitioner vs torch's own options.

For each example model (examples/torch/NAME.py: ``model`` and ``blocks``) rows of:

* ``eager``: plain autograd (keeps everything it saves);
* ``checkpoint``: ``torch.utils.checkpoint`` on every block (``blocks(net)``);
* ``SAC``: selective checkpointing of every block, policy: save matmuls / convolutions /
  attention, recompute everything else;
* ``torch.compile B``: ``torch.compile`` (Inductor kernels) with its min-cut partitioner at
  ``activation_memory_budget`` B;
* ``hgraph #k (SOURCE)``: ``torch.compile`` (Inductor kernels) with hgraph as the partitioner,
  one row per candidate on hgraph's front for the step (``HGraphPartitioner``: the planner's
  plans, SOURCE ``approx`` / ``exact``, kept by the replayed partition's peak, and torch's
  min-cut partitions offered beside them, SOURCE ``min-cut B``, :mod:`planner.torch.seeds`),
  each compiled and measured;
* ``hgraph @B``: the plan a user asking for torch B's measured peak gets among those rows (the
  least recompute at a measured peak no higher): the dominance check's question.

Each row: the step's peak by an allocator-level meter (``planner.torch.measure.allocator_peak``:
on CPU the CPU allocator's events in ``torch.profiler``, on CUDA
``torch.cuda.max_memory_allocated``; Inductor's buffers and kernel scratch included), and
beside it MemTracker's (tensors through the dispatcher only, labelled), both less parameters,
buffers and inputs; saved bytes (saved-tensor hooks); recompute FLOPs (one cost model for
all: ``planner.torch.costs``; for partitioned graphs the forward ops the backward module runs
again, for eager checkpointing the step's FLOPs less eager's); step seconds (median of 3 runs
after the compiling one, the step only). Writes ``table.md``, one ``NAME.png`` per model
(peak vs recompute FLOPs: the fronts) and prints, per model, whether hgraph's front dominates
torch.compile's: at each torch budget's measured peak, hgraph has a plan at no higher measured
peak recomputing no more FLOPs (strictly fewer, or a strictly lower peak, on one), and whether
hgraph's lowest measured peak is below torch's.

    python3 bench/torch_bench.py --models resnet,gpt,unet --out out/torch_bench
    python3 bench/torch_bench.py --realistic [--scale full]   # bench/realistic_bench.py
"""

from __future__ import annotations

import argparse
import copy
import functools
import os

#: Every compiled row traces recurrent layers (Dynamo's ``allow_rnn``, as
#: ``planner.torch.compile`` does): by default Dynamo runs an LSTM eagerly and no partitioner
#: sees it.
MODELS = ("resnet", "gpt", "unet", "bert", "mobilenet", "lstm")
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "torch")
TORCH_BUDGETS = (0.2, 0.35, 0.5, 1.0)
#: Timed runs per row (after the compiling run); the row's seconds are their median.
TIMED_RUNS = 3


def measure(step, model, inputs, fx_step=None, fx_model=None) -> dict:
    """One row's measurements of ``step`` (a training step; its first run compiles).

    ``fx_step`` (on ``fx_model``): the same partition run as fx graphs without Inductor, for
    MemTracker (under a dispatch mode Dynamo would run a compiled step eagerly, so MemTracker
    cannot meter Inductor's step); None: MemTracker meters ``step`` itself (eager rows).
    """
    import statistics
    import time

    from planner.torch import measure as meter

    step(*inputs)                                       # compiles
    times = []
    for _ in range(TIMED_RUNS):
        for p in model.parameters():
            p.grad = None
        t0 = time.perf_counter()
        step(*inputs)
        times.append(time.perf_counter() - t0)
    for p in model.parameters():
        p.grad = None
    peak, how = meter.allocator_peak(step, inputs)
    saved = meter.saved_bytes(step, model, inputs)
    # the labelled meter last, on the fx twin where there is one; it puts the parameters back
    labelled = meter.labelled_peak(fx_step or step, fx_model or model, inputs)
    return dict(peak=peak, meter=how, memtracker_peak=labelled,
                saved=saved, seconds=statistics.median(times))


def fx_partitioned_step(m, loss, part):
    """The step through AOTAutograd on Inductor's decomposed graph, split by ``part``, forward
    and backward run as fx graphs (no Inductor): what MemTracker can follow."""
    from planner.torch import capture as cap

    step = cap.make_step(m, loss)
    fn = cap.traced(step, part, decompose=True)

    def run(*xs):
        out = fn(*step.args(xs))
        out.backward()
        return out.detach()

    return run


def _row(name, method, got, recompute, **extra):
    return dict(model=name, method=method, recompute=int(recompute), **got, **extra)


def eager_step(m, loss):
    from planner.torch.capture import loss_reads

    def step(*xs):
        out = loss(m(*xs))
        out.backward()
        return out.detach()
    step.step_reads = lambda: loss_reads(loss)      # labels: not the step's memory (MemTracker)
    return step


def eager_rows(name, spec, mod):
    """eager, checkpoint every block, selective checkpointing every block."""
    import torch
    from torch.utils.checkpoint import (CheckpointPolicy, checkpoint,
                                        create_selective_checkpoint_contexts)

    from planner.torch import measure as meter
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
        try:
            got = measure(step, m, spec.inputs)
        except RuntimeError as err:     # SAC on an LSTM: torch refuses its in-place cache
            print(f"  {name} {method}: not run, torch refuses it: {str(err).splitlines()[0]}",
                  flush=True)
            continue
        flops = meter.step_flops(step, spec.inputs)
        base = flops if base is None else base
        extra = eager_prediction(spec, loss) if ctx is None else {}
        rows.append(_row(name, method, got, flops - base, **extra))
    return rows


def _recording_min_cut():
    """torch's min-cut partitioner (as Inductor calls it), recording (joint, fw, bw) per call."""
    import torch._inductor.custom_graph_pass as cgp
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    class MinCut(cgp.CustomPartitionerFn):
        def __init__(self):
            self.parts = []

        def __call__(self, gm, joint_inputs, **kwargs):
            fw, bw = min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
            self.parts.append((gm, fw, bw))
            return fw, bw

        def uuid(self):
            return None

    return MinCut()


def compiled_step(m, loss, part, budget=None):
    """``torch.compile`` of the step (Inductor kernels) with ``part`` as its partitioner and,
    for torch's own, ``activation_memory_budget`` = ``budget``; no compile cache, so every
    step is partitioned afresh (Inductor's kernel cache may stay warm)."""
    import torch
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    from planner.torch.compiled import fresh_function

    compiled = torch.compile(fresh_function(lambda *xs: loss(m(*xs))), dynamic=False)
    patches = dict(activation_memory_budget=budget) if budget is not None else {}

    def run(*xs):
        with inductor_config.patch(custom_partitioner_fn=part, fx_graph_cache=False), \
                functorch_config.patch(enable_autograd_cache=False, **patches), \
                torch._dynamo.config.patch(allow_rnn=True):
            out = compiled(*xs)
        out.backward()
        return out.detach()

    return run


def _recomputed(part):
    from planner.torch import measure as meter

    return sum(meter.recompute_flops(j, bw) for j, _, bw in part.parts)


def _predicted(part):
    """Predictions from the last partition ``part`` made: step peak and saved bytes (the fx
    replay of the unfused partition: Inductor's fused kernels make fewer buffers)."""
    from planner.torch import measure as meter

    fw, bw = part.parts[-1][1:]
    return dict(predicted_peak=meter.predict_step_peak(fw, bw),
                predicted_saved=meter.predict_saved_bytes(fw, bw))


def _the_plan(target, fronts):
    """hgraph's partitioner that splits by ``target`` itself, else (another front) by the
    candidate with ``target``'s keep set and source (the bench measures every candidate; a
    budget picks the least recompute at a replayed peak, which two candidates can share);
    where the front has none such (the fx
    capture's front, for MemTracker's column), the plan at ``target``'s replayed peak, or the
    lowest plan where none fits."""
    from hgraph.common.errors import InfeasibleError
    from planner.torch.compiled import HGraphPartitioner

    class Same(HGraphPartitioner):
        def pick(self, fr):
            same = [c for c in fr if c is target] or [
                c for c in fr if (c.keep, c.source) == (target.keep, target.source)]
            if same:
                return same[0]
            try:
                return super().pick(fr)
            except InfeasibleError:
                self.budget = "min"
                return super().pick(fr)

    return Same(int(target.step_peak), fronts=fronts, whole_front=True)


def compile_rows(name, spec):
    """torch.compile at each activation_memory_budget, then every plan on hgraph's front, all
    with Inductor's kernels; then ``hgraph @B`` picks (see the module docstring)."""
    import torch._functorch.config as functorch_config

    from planner.torch.capture import default_loss
    from planner.torch.compiled import HGraphPartitioner

    rows = []
    loss = spec.loss or default_loss
    for b in TORCH_BUDGETS:
        m, fm = copy.deepcopy(spec.model), copy.deepcopy(spec.model)
        part = _recording_min_cut()
        with functorch_config.patch(activation_memory_budget=b):
            fx = fx_partitioned_step(fm, loss, _recording_min_cut())
            got = measure(compiled_step(m, loss, part, budget=b), m, spec.inputs, fx, fm)
        rows.append(_row(name, f"torch.compile {b}", got, _recomputed(part), **_predicted(part)))
        print(f"  {name} torch.compile {b}: {got['peak']:,} B", flush=True)
    fronts = {}
    m = copy.deepcopy(spec.model)
    first = HGraphPartitioner("100%", fronts=fronts, whole_front=True)
    compiled_step(m, loss, first)(*spec.inputs)       # plans the front of Inductor's graph
    front = next(iter(fronts.values()))[0]
    fx_fronts = {}
    for k, c in enumerate(front):
        m, fm = copy.deepcopy(spec.model), copy.deepcopy(spec.model)
        part = _the_plan(c, fronts)
        fx = fx_partitioned_step(fm, loss, _the_plan(c, fx_fronts))
        got = measure(compiled_step(m, loss, part), m, spec.inputs, fx, fm)
        assert part.plans[-1] is c.plan, "the front's pick moved"
        rows.append(_row(name, f"hgraph #{k} ({c.plan.solver})", got, _recomputed(part),
                         **_predicted(part), plan_peak=int(c.plan.peak_bytes)))
        print(f"  {name} hgraph #{k}: {got['peak']:,} B, {rows[-1]['recompute']:,} FLOPs",
              flush=True)
    hg = [r for r in rows if r["method"].startswith("hgraph #")]
    for t in [r for r in rows if r["method"].startswith("torch.compile")]:
        fits = [h for h in hg if h["peak"] <= t["peak"]]
        if fits:
            best = min(fits, key=lambda h: (h["recompute"], h["peak"]))
            rows.append(dict(best, method=f"hgraph @{t['method'].split()[-1]} = "
                                          f"{best['method'][len('hgraph '):]}"))
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
    """The fx replay of a partition (the planner's model of the step) beside what ran: ratios
    of measured to predicted step peak and saved bytes over the partitioned rows. Under
    Inductor they differ (fused kernels make fewer buffers; on CPU its layout optimisation
    saves channels-last copies of convolution inputs and weights): the replay is a model,
    the meters are the step."""
    have = [r for r in rows if "predicted_saved" in r and not r["method"].startswith("hgraph @")]
    peak = [r["peak"] / max(r["predicted_peak"], 1) for r in have]
    saved = [r["saved"] / max(r["predicted_saved"], 1) for r in have]
    return (f"measured / fx-replay prediction over {len(have)} partitioned rows: step peak "
            f"{min(peak):.2f}-{max(peak):.2f}, saved bytes {min(saved):.2f}-{max(saved):.2f}")


def dominance(rows, name) -> str:
    """Does hgraph's front dominate torch.compile's on ``name`` (see the module docstring)?"""
    hg = [r for r in rows if r["model"] == name and r["method"].startswith("hgraph #")]
    tc = [r for r in rows if r["model"] == name and r["method"].startswith("torch.compile")]
    verdicts, strict = [], False
    for t in tc:
        fits = [h for h in hg if h["peak"] <= t["peak"]]
        if not fits:
            verdicts.append(f"{t['method']}: no hgraph plan at peak <= {t['peak']:,}")
            continue
        best = min(fits, key=lambda h: (h["recompute"], h["peak"]))
        if best["recompute"] > t["recompute"]:
            verdicts.append(f"{t['method']}: hgraph recomputes {best['recompute']:,} > "
                            f"{t['recompute']:,} at peak <= {t['peak']:,}")
        else:
            strict |= best["recompute"] < t["recompute"] or best["peak"] < t["peak"]
    low_h, low_t = min(h["peak"] for h in hg), min(t["peak"] for t in tc)
    lower = (f"lowest peak hgraph {low_h:,} B vs torch.compile {low_t:,} B "
             f"({'lower' if low_h < low_t else 'NOT lower'})")
    if not verdicts and strict:
        return f"{name}: hgraph dominates torch.compile; {lower}"
    return (f"{name}: hgraph does NOT dominate: " + ("; ".join(verdicts) or "no strict gain")
            + f"; {lower}")


def table(rows) -> str:
    meters = sorted({r["meter"] for r in rows})
    out = [f"Every row ran under torch.compile with Inductor's kernels except eager, checkpoint "
           f"and SAC (eager autograd). peak: {', '.join(meters)}, above what was allocated when "
           f"the step started (parameters, buffers, inputs; gradients are made by the step); "
           f"MemTracker peak: the same partitioner's fx graphs run without Inductor, tensors "
           f"through the dispatcher only; predicted peak: the unfused fx replay of the "
           f"partition.", "",
           "| model | method | peak B (allocator) | MemTracker peak B | predicted peak B | "
           "saved B | predicted saved B | recompute FLOPs | step s |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]

    def cell(r, k):
        return f"{r[k]:,}" if k in r else ""

    for r in rows:
        out.append(f"| {r['model']} | {r['method']} | {r['peak']:,} | {r['memtracker_peak']:,} "
                   f"| {cell(r, 'predicted_peak')} | {r['saved']:,} | "
                   f"{cell(r, 'predicted_saved')} | {r['recompute']:,} | {r['seconds']:.4f} |")
    return "\n".join(out) + "\n"


def plot(rows, name, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for prefix, mark in (("hgraph #", "o-"), ("torch.compile", "s-"), ("eager", "x"),
                         ("checkpoint", "^"), ("SAC", "v")):
        pts = sorted((r["peak"], r["recompute"]) for r in rows
                     if r["model"] == name and r["method"].startswith(prefix))
        if pts:
            ax.plot(*zip(*pts), mark, label=prefix)
    ax.set_xlabel("step peak, allocator meter (bytes)")
    ax.set_ylabel("recompute FLOPs")
    ax.set_title(name)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def list_fronts(names) -> int:
    """Each model's front as hgraph's partitioner plans it (the ``hgraph #k`` rows' order)."""
    from planner.torch.capture import default_loss
    from planner.torch.compiled import HGraphPartitioner
    from planner.torch.model_file import load

    for name in names:
        spec = load(os.path.join(EXAMPLES, f"{name}.py:model"))
        fronts = {}
        m = copy.deepcopy(spec.model)
        part = HGraphPartitioner("100%", fronts=fronts, whole_front=True)
        compiled_step(m, spec.loss or default_loss, part)(
            *spec.inputs)
        print(f"== {name}: #k, source, replayed peak B, recompute FLOPs")
        for k, c in enumerate(next(iter(fronts.values()))[0]):
            print(f"{k} {c.plan.solver} {c.step_peak} {c.recompute_flops}", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", default="out/torch_bench")
    ap.add_argument("--list-front", action="store_true",
                    help="only print each model's front (index, source, replayed peak, "
                         "recompute FLOPs): one compile per model")
    ap.add_argument("--realistic", action="store_true",
                    help="issue 35's realistic bench instead (bench/realistic_bench.py: GPT, "
                         "ResNet-50, ViT-B/16-shaped, float32; --models there defaults to "
                         "gpt,resnet50,vit)")
    ap.add_argument("--scale", default="small", choices=("small", "full"),
                    help="with --realistic: the sizes (full: the issue's)")
    args = ap.parse_args(argv)
    if args.realistic:
        from realistic_bench import main as realistic

        models = [] if args.models == ",".join(MODELS) else ["--models", args.models]
        out = [] if args.out == "out/torch_bench" else ["--out", args.out]
        return realistic(["--scale", args.scale, *models, *out])
    if args.list_front:
        return list_fronts(args.models.split(","))
    from hgraph.common.fileio import write_text
    from planner.torch.model_file import load

    os.makedirs(args.out, exist_ok=True)
    rows, verdicts = [], []
    for name in args.models.split(","):
        spec = load(os.path.join(EXAMPLES, f"{name}.py:model"))
        rows += eager_rows(name, spec, spec.module)
        rows += compile_rows(name, spec)
        plot(rows, name, os.path.join(args.out, f"{name}.png"))
        verdicts.append(dominance(rows, name))
        print(table([r for r in rows if r["model"] == name]) + f"- {verdicts[-1]}", flush=True)
    check = prediction_check(rows)
    text = (table(rows) + "\n" + "\n".join(f"- {v}" for v in verdicts) + f"\n- {check}\n")
    write_text(os.path.join(args.out, "table.md"), text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
