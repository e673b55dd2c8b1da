"""The capped approximate DP on the scale path: time and plan summary, per-pass vs stacked.

Builds a ``planner.synth`` graph (transformer, or ``--kind cnn``) of about ``--nodes``
activations, its segment-local approximate family (engine analyses in this process, local
runtime), and solves it at ``--budget`` with the scale options
(:func:`planner.dp.scale.plan_options`). It runs the DP twice in this process — the per-pass
loop (:func:`planner.dp.loop.run_dp` once per pass) and the stacked loop
(:func:`planner.dp.stacked.run_stacked`, all passes in one walk over the states, entries that
cannot reach V dropped before thinning) — prints both times, their ratio, and the plan summary
(status, blocks, model recompute, model peak, ckpt, a hash of the chain). The two plans may
differ (the pruning changes which entries a capped front keeps; without it the stacked loop
gives the per-pass plans, ``tests/test_dp_stacked.py``); the bench exits 1 if the stacked one
finds no plan where the per-pass one does.

``--against REV`` compares instead the stacked loop of git revision ``REV`` (its
``planner/dp/stacked.py``, loaded beside this tree's) with this tree's, in this process,
alternating ``--repeat`` times: DP CPU seconds of each, their ratio, and whether the chains
(states, saved, ckpt along the chain) are identical (exits 1 if they are not); and how many
states this tree's walk takes a step (:mod:`planner.dp.stacked` batches).

Run::

    python3 bench/dp_loop_bench.py --nodes 100000 --only stacked --against main
    python3 bench/dp_loop_bench.py --nodes 20000
    python3 bench/dp_loop_bench.py --nodes 100000 --only stacked
    python3 bench/dp_loop_bench.py --nodes 8000 --kind cnn --budget 30%
    python3 bench/dp_loop_bench.py --nodes 20000 --only stacked --cap 32
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner import synth  # noqa: E402
from planner.activation_graph import ActivationGraph  # noqa: E402
from planner.analyses.local_stats import local_stats  # noqa: E402
from planner.budget import parse_budget  # noqa: E402
from planner.dp import scale  # noqa: E402
from planner.dp.fronts import path  # noqa: E402
from planner.dp.solve import solve_family  # noqa: E402
from planner.dp.stacked import _batches, _limits, run_stacked  # noqa: E402
from planner.dp.subsets import window_transitions  # noqa: E402
from planner.dp_families import DPGraph, approx_family  # noqa: E402


def build(kind: str, nodes: int):
    """The DP graph and its segment-local family for a synth graph of about ``nodes``."""
    if kind == "cnn":
        g = synth.build_cnn(blocks=synth.cnn_blocks_for_nodes(nodes))
    else:
        g = synth.build(layers=synth.layers_for_nodes(nodes))
    ag = ActivationGraph.from_cg(g)
    dg = DPGraph(m=ag.bytes, t=ag.t, src=ag.src, dst=ag.dst)
    fam = approx_family(dg, stats=local_stats(dg), dense=False)
    return dg, fam


def summary(r) -> dict:
    """What must not change: status, the chain (hashed) and the model's numbers."""
    chain = hashlib.sha256(",".join(map(str, r.chain_ids)).encode()).hexdigest()[:16]
    return dict(status=r.status, blocks=r.blocks, recompute=r.model_recompute_cost,
                peak=r.model_peak_bytes, ckpt=r.ckpt_bytes, chain=chain)


def stacked_at(rev: str):
    """``run_stacked`` as ``planner/dp/stacked.py`` was at git revision ``rev``."""
    root = Path(__file__).resolve().parents[1]
    text = subprocess.run(["git", "-C", str(root), "show", f"{rev}:planner/dp/stacked.py"],
                          check=True, capture_output=True, text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(f"stacked_at_{rev}", f.name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    Path(f.name).unlink()
    return mod.run_stacked


def against(rev: str, dg, fam, b: int, window: int, cap: int, strategy: str,
            repeat: int) -> int:
    """The stacked DP of ``rev`` and of this tree, alternating; CPU seconds and chains."""
    lams = scale.pass_lambdas(dg.t, dg.m, cap, strategy)
    sub, _, dm = window_transitions(fam, dg.t, dg.m, window)
    steps = max(1, len(_batches(_limits(fam.mL, fam.mAB, b, sub, dm, True))) - 1)
    print(f"{fam.num_sets:,} states in {steps:,} steps of this tree's walk "
          f"({fam.num_sets / steps:.2f} a step)", flush=True)
    runs = {rev: stacked_at(rev), "this tree": run_stacked}
    secs, chains = {k: [] for k in runs}, {}
    for _ in range(repeat):
        for name, run in runs.items():
            t = time.process_time()
            fronts, entry = run(fam, dg.t, dg.m, b, window, cap, lams, strategy)
            secs[name].append(time.process_time() - t)
            chain = [] if entry is None else [
                (int(fronts.state[e]), int(fronts.s[e]), int(fronts.c[e]))
                for e in path(fronts, entry)]
            chains[name] = hashlib.sha256(repr(chain).encode()).hexdigest()[:16]
            print(f"{name}: DP {secs[name][-1]:.2f} s CPU, chain {chains[name]} "
                  f"({len(chain)} states)", flush=True)
    old, new = min(secs[rev]), min(secs["this tree"])
    same = chains[rev] == chains["this tree"]
    print(f"window {window} cap {cap}: {rev} {old:.2f} s, this tree {new:.2f} s (best of "
          f"{repeat}, CPU), ratio {old / max(new, 1e-9):.2f}x, chains identical: {same}")
    return 0 if same else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=20000)
    ap.add_argument("--kind", choices=("transformer", "cnn"), default="transformer")
    ap.add_argument("--budget", default="50%")
    ap.add_argument("--strategy", choices=("time", "memory"), default="time")
    ap.add_argument("--only", choices=("both", "per-pass", "stacked"), default="both")
    ap.add_argument("--window", type=int, default=None, help="default: plan_options'")
    ap.add_argument("--cap", type=int, default=None, help="front cap; default: plan_options'")
    ap.add_argument("--against", metavar="REV", help="compare the stacked DP of git revision "
                    "REV with this tree's (same process)")
    ap.add_argument("--repeat", type=int, default=1, help="with --against: runs of each")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    dg, fam = build(args.kind, args.nodes)
    print(f"graph: {args.kind} {dg.n} nodes, family built in {time.perf_counter() - t:.1f}s",
          flush=True)
    b = parse_budget(args.budget, baseline=int(dg.m.sum()))
    window, cap = scale.plan_options(dg.n, args.window, args.cap, strategy=args.strategy)
    if args.against:
        return against(args.against, dg, fam, b, window, cap, args.strategy, args.repeat)
    rows = {}
    for impl in ("per-pass", "stacked"):
        if args.only not in ("both", impl):
            continue
        t = time.perf_counter()
        r = solve_family(fam, dg, b, strategy=args.strategy, window=window, front_cap=cap,
                         stacked=impl == "stacked")
        rows[impl] = dict(dp_s=round(time.perf_counter() - t, 3), **summary(r))
        print(impl, json.dumps(rows[impl]), flush=True)
    if len(rows) == 2:
        a, s = rows["per-pass"], rows["stacked"]
        same = {k: v for k, v in a.items() if k != "dp_s"} == \
            {k: v for k, v in s.items() if k != "dp_s"}
        print(f"window {window} cap {cap}: per-pass {a['dp_s']:.2f}s, stacked {s['dp_s']:.2f}s, "
              f"ratio {a['dp_s'] / max(s['dp_s'], 1e-9):.1f}x, plans identical: {same}, "
              f"recompute stacked − per-pass: {s['recompute'] - a['recompute']:+,}")
        return 1 if a["status"] == "OK" and s["status"] != "OK" else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
