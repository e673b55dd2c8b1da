"""How long a PyTorch model takes to plan, and whether a faster planner still picks the same plans.

Four commands, each rerunnable:

``picks``: for each examples/torch model, ``pt.graph``, then the pick at each budget as
``pt.plan_for_step`` makes it (:func:`planner.torch.front.for_budget`, each budget on its own:
the shortlist that prices few candidates; its CPU seconds): the solver, the replayed step peak
and the recomputed FLOPs (or the smallest reachable step peak of a refused budget), and the
whole front (:func:`planner.torch.front.front`, one row per candidate). An older revision's
file holds the picks of its own ``plan_for_step`` path (before the shortlist: the whole front). ``--out`` writes
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
    python3 bench/torch_plan_speed.py gpt --hf --dp-window 0 --dp-front-cap 0   # exact DP forced

``planning``: the front's DP planning alone (both solvers at the front's budgets, no pricing),
CPU seconds per solver and a digest of the plans' schedules (same digest: same plans), on
each examples/torch model; run beside an older tree to compare.

    python3 bench/torch_plan_speed.py planning --models gpt,resnet,mobilenet

``scale``: plan time (``pt.plan_for_step`` at ``--budget``, a fresh graph each, front not
cached) against joint-graph size, GPT models of growing depth (``--layers 0``: embedding and
head alone, ~100 joint nodes); prints nodes, activations, CPU seconds, seconds / (n log n),
and that over the first row's (growth no faster than n log n keeps it at or below about 1),
and the pick. ``--dp-window`` / ``--dp-front-cap``: the approximate DP's scale options
(``planner.options.SolverLimits``; by default the front's own choice,
``planner.torch.front.scale_limits``: capped past ``CAPPED_FROM`` activations; ``0 0``: the
exact DP); ``--against-exact``: each graph planned again with the exact DP, same process.

    python3 bench/torch_plan_speed.py scale --layers 0 4 8 16 32 60
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


def _row(c, slack: int = 0) -> dict:
    """A candidate as ``--check`` compares it: ``step_peak`` the replay alone (its price less
    the graph's allocator slack, ``tg.step_slack``, which the model's record says once), so a
    file from before the slack (issue 35) compares candidate for candidate."""
    return dict(solver=c.plan.solver, source=c.source, step_peak=int(c.step_peak) - slack,
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
        chosen, seconds = {}, {}
        for b in args.budgets:            # as plan_for_step picks, each budget afresh
            tg.fronts.clear()
            c0 = time.process_time()
            try:
                chosen[b] = _row(front.pick(front.for_budget(tg, b), b), tg.step_slack)
            except InfeasibleError as err:
                chosen[b] = dict(refused=int(err.min_budget_bytes) - tg.step_slack)
            seconds[b] = round(time.process_time() - c0, 2)
        tg.fronts.clear()
        t2 = time.perf_counter()
        fr = list(front.front(tg))        # read: priced in full (front() prices when read)
        t3 = time.perf_counter()
        out[name] = dict(picks=chosen, front=[_row(c, tg.step_slack) for c in fr],
                         step_slack=int(tg.step_slack), pick_cpu_s=seconds,
                         graph_s=round(t1 - t0, 2), front_s=round(t3 - t2, 2))
        print(f"{name}: graph {t1 - t0:.1f} s, whole front {t3 - t2:.1f} s, {len(fr)} "
              f"candidates", flush=True)
        for b, r in chosen.items():
            print(f"  {b:>5}: {seconds[b]:5.1f} s CPU  {r}", flush=True)
    if args.out:
        from hgraph.common.fileio import write_text

        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        write_text(args.out, json.dumps(out, indent=1, sort_keys=True))
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


def gpt_model(layers: int, d: int, seq: int, batch: int, hf: bool = False):
    """A GPT-2-shaped model, its inputs and loss: examples/torch/gpt.py's (plain torch), or
    with ``hf`` Hugging Face's ``GPT2LMHeadModel`` (dropout on, as it trains)."""
    import torch

    if not hf:
        import gpt

        return gpt.model(batch=batch, seq=seq, d=d, layers=layers)
    import torch.nn.functional as F
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    vocab = 512
    net = GPT2LMHeadModel(GPT2Config(n_layer=layers, n_embd=d, n_head=4, n_positions=seq,
                                     vocab_size=vocab)).train()
    idx = torch.randint(0, vocab, (batch, seq))
    target = torch.roll(idx, -1, dims=1)
    return (net, (idx,),
            lambda out: F.cross_entropy(out.logits.reshape(-1, vocab), target.reshape(-1)))


def aot_trace_seconds(model, inputs, loss) -> tuple:
    """(wall, CPU) seconds of ``aot_function``'s own trace of the step (Inductor's decompositions, the
    joint graph made, stopped there): the floor of any capture."""
    from functorch.compile import aot_function

    from planner.torch import capture as cap

    class Stop(BaseException):
        pass

    def stop(joint, joint_inputs, **kwargs):
        raise Stop

    step = cap.make_step(model, loss)
    fn = aot_function(step.fn, fw_compiler=cap._boxed, bw_compiler=cap._boxed,
                      partition_fn=stop, decompositions=cap.decompositions(True))
    args = step.args(cap.fresh_inputs(inputs))
    t = _clock()
    try:
        fn(*args[:2], list(args[2]), *args[3:])
    except Stop:
        pass
    return _since(t)


def _clock():
    return time.perf_counter(), time.process_time()


def _since(t) -> tuple:
    w, c = _clock()
    return w - t[0], c - t[1]


def gpt(args) -> int:
    """``pt.graph`` against aot_function's trace (interleaved, same process), then
    ``pt.plan_for_step`` at each budget on the same graph, each timed (wall and CPU)."""
    import planner.torch as pt
    from hgraph.common.errors import InfeasibleError

    model, inputs, loss = gpt_model(args.layers, args.d, args.seq, args.batch, args.hf)
    small = gpt_model(1, 32, 16, 2, args.hf)
    pt.graph(*small[:1], *small[1], loss=small[2], progress="off")      # one-time imports
    aot_trace_seconds(*small)
    for rep in range(args.repeats):
        a = aot_trace_seconds(model, inputs, loss)
        t = _clock()
        tg = pt.graph(model, *inputs, loss=loss, progress=args.progress)
        g = _since(t)
        print(f"trace: aot_function {a[0]:.1f} s (cpu {a[1]:.1f} s), pt.graph {g[0]:.1f} s "
              f"(cpu {g[1]:.1f} s): ratio {g[0] / a[0]:.2f} wall, {g[1] / a[1]:.2f} cpu",
              flush=True)
    print(f"{'hf GPT2LMHeadModel' if args.hf else 'gpt'}: {args.layers} layers, d={args.d}, "
          f"seq {args.seq}, batch {args.batch}: {len(tg.joint.graph.nodes):,} joint nodes, "
          f"{tg.info['activations']} activations; load {os.getloadavg()[0]:.1f}", flush=True)
    extra = {}
    if args.dp_window is not None or args.dp_front_cap is not None:
        from planner.options import SolverLimits

        extra["limits"] = SolverLimits(dp_window=args.dp_window, dp_front_cap=args.dp_front_cap)
    for b in args.budgets:
        t = _clock()
        try:
            p = pt.plan_for_step(tg, b, progress=args.progress, **extra)
            what = (f"{p.solver}, step peak {p.report['step_peak_bytes']:,} B, recompute "
                    f"{p.report['step_recompute_flops']:,} FLOPs, DP window "
                    f"{p.report.get('dp_window', 'exact')}")
        except InfeasibleError as err:
            what = f"refused: {err}"
        w, c = _since(t)
        print(f"plan_for_step {b}: {w:.1f} s (cpu {c:.1f} s): {what}; load "
              f"{os.getloadavg()[0]:.1f}", flush=True)
    return 0


def scale(args) -> int:
    """Plan time against joint-graph size: a fresh graph per depth, ``plan_for_step`` at
    ``--budget`` (its front computed: a budget below keep-all), CPU seconds. With
    ``--against-exact`` the same graph is planned again (front dropped) with the exact DP
    forced (``--dp-window 0 --dp-front-cap 0``), in the same process: the CPU ratio, and
    whether the two picks (replayed step peak, recomputed FLOPs) differ."""
    import planner.torch as pt
    from planner.options import SolverLimits

    extra = {}
    if args.dp_window is not None or args.dp_front_cap is not None:
        extra["limits"] = SolverLimits(dp_window=args.dp_window, dp_front_cap=args.dp_front_cap)
    print("layers | joint nodes | activations | plan cpu s | cpu s / (n log2 n) x 1e6 | "
          "that / first row's | pick (step peak B, recompute FLOPs)"
          + (" | exact DP: cpu s, pick" if args.against_exact else ""))
    first = None
    for layers in args.layers:
        model, inputs, loss = gpt_model(layers, args.d, args.seq, args.batch)
        tg = pt.graph(model, *inputs, loss=loss, progress="off")
        n = len(tg.joint.graph.nodes)
        tg.step_slack        # measured when first read (a step run): not in either plan's time
        (w, c), got = _timed_pick(tg, args.budget, extra)
        per = 1e6 * c / (n * math.log2(n))
        first = per if first is None else first
        row = (f"{layers} | {n:,} | {tg.info['activations']} | {c:.2f} | {per:.2f} | "
               f"{per / first:.2f} | {got}")
        if args.against_exact:
            tg.fronts.clear()
            (_, ce), want = _timed_pick(tg, args.budget, dict(
                limits=SolverLimits(dp_window=0, dp_front_cap=0)))
            row += f" | {ce:.2f} ({ce / c:.2f}x), {'same' if want == got else want}"
        print(f"{row}   (wall {w:.1f} s, load {os.getloadavg()[0]:.1f})", flush=True)
    return 0


def planning(args) -> int:
    """The front's DP planning alone (:func:`planner.torch.front._planned`: both solvers at the
    front's budgets, the fits' re-solves, no partition priced) on each model, CPU seconds per
    solver (one process, a fresh graph each, the slack not measured), the plans kept and a
    digest of their schedules' text: two trees run side by side print the same digest when
    their plans are the same."""
    import hashlib

    import planner.torch as pt
    from planner.torch import front

    print("model | activations | solver | plans kept | plan CPU s | schedules' sha1")
    for name in args.models.split(","):
        model, inputs, loss = load(name)
        tg = pt.graph(model, *inputs, loss=loss, progress="off", measure_slack=False)
        for solver in front.SOLVERS:
            c0 = time.process_time()
            got = front._planned(tg, (solver,), front.POINTS, front.EXACT_MAX_LOWER_SETS, {})
            cpu = time.process_time() - c0
            plans = [p for _, fresh in got for p in fresh]
            digest = hashlib.sha1("".join(p.schedule.dumps() for p in plans).encode())
            print(f"{name} | {tg.info['activations']} | {solver} | {len(plans)} | {cpu:.2f} | "
                  f"{digest.hexdigest()[:12]}   (load {os.getloadavg()[0]:.1f})", flush=True)
    return 0


def _timed_pick(tg, budget, extra) -> tuple:
    """((wall, CPU) seconds of ``plan_for_step(tg, budget)``, its pick's (solver, step peak,
    recompute FLOPs, the DP window its plan was solved with), or the refusal's smallest step
    peak (a graph too small to recompute anything: planned all the same)."""
    import planner.torch as pt
    from hgraph.common.errors import InfeasibleError

    t = _clock()
    try:
        p = pt.plan_for_step(tg, budget, progress="off", **extra)
    except InfeasibleError as err:
        return _since(t), ("refused", err.min_budget_bytes)
    return _since(t), (p.solver, p.report["step_peak_bytes"], p.report["step_recompute_flops"],
                       p.report.get("dp_window", "exact"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("picks")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--budgets", nargs="+", default=list(BUDGETS))
    p.add_argument("--out")
    p.add_argument("--check")
    p = sub.add_parser("planning")
    p.add_argument("--models", default=",".join(MODELS))
    p = sub.add_parser("gpt")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--hf", action="store_true", help="Hugging Face GPT2LMHeadModel")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--budgets", nargs="+", default=["100%", "60%", "min"])
    p.add_argument("--progress", default="off")
    p.add_argument("--dp-window", type=int, help="the approximate DP's window (0 0: exact DP)")
    p.add_argument("--dp-front-cap", type=int, help="its front cap (0: off)")
    p = sub.add_parser("scale")
    p.add_argument("--layers", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 60])
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--budget", default="90%")
    p.add_argument("--dp-window", type=int, help="the approximate DP's window (0: off)")
    p.add_argument("--dp-front-cap", type=int, help="its front cap (0: off)")
    p.add_argument("--against-exact", action="store_true",
                   help="plan each graph again with the exact DP forced, same process")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    return {"picks": picks, "gpt": gpt, "scale": scale, "planning": planning}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
