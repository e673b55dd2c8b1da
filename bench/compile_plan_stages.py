"""The planning inside ``pt.compile``'s first call, stage by stage, on the joint graph Inductor
hands the partitioner, and the front it gives (to compare two revisions candidate for candidate).

Why: below ``"100%"`` the first call plans the whole front of each graph inside its first
partitioner call (:meth:`planner.torch.compiled.HGraphPartitioner._plan_front`: torch's min-cut
partitions at ``MIN_CUT_BUDGETS``, the front of the graph as traced, the front of its copy with
subexpressions merged, their union); the trials pick from that front. This script compiles each
model's step once with a partitioner that runs exactly those calls inside AOTAutograd's
partitioner call (the same graphs and context as ``compile``), times each stage in CPU seconds
(``time.process_time``; the DP planning and the pricing inside each front by wrapping
:func:`planner.torch.front._planned` / ``measured_candidate`` / ``seeded_candidate``), writes
every candidate of the front, and then stops the compile (no Inductor code generation: it is not
the planning). The "front as traced / merged" seconds are each ``front`` call's; where a front
is priced only when read (``front._LazyFront``) they are its DP planning, and the pricing falls
in the union. ``--check FILE``: the fronts against another revision's file (a copy of this script
in a ``git worktree`` of it, run from there: it imports the planner of the tree it sits in,
as ``compile_time_bench`` does): exit 1 on any candidate that differs (source,
solver, keep set, replayed step peak, recompute FLOPs). ``--profile N``: cProfile with a CPU
timer, the N functions of most cumulative time. ``--bounds``: every plan of both fronts priced
inside the call against its :class:`planner.torch.bounds.JointIndex` bounds. ``--after``: the
compile goes on (torch's default partition) and both fronts are priced again on the same graphs
once the call has returned, what differs listed, and again under a ``TracingContext`` (what
AOTAutograd's call holds: ``fx.Graph.eliminate_dead_code`` then takes seeded-random ops as pure,
``inductor.config.fallback_random``, so a dead recomputation of one is removed; without it the
copy stays in the backward and its FLOPs count).

    python3 bench/compile_plan_stages.py --models gpt,hf-gpt2 --out new.json --check old.json
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))    # the planner of the tree this script sits in

MODELS = ("gpt", "resnet", "unet", "bert", "mobilenet", "lstm", "hf-gpt2")


class _Stop(Exception):
    """Raised by the partitioner once the front is planned: the compile ends there."""


class _Clock:
    """CPU seconds spent inside wrapped functions, by stage name (outermost call only)."""

    def __init__(self):
        self.seconds, self.calls, self.depth = {}, {}, 0

    @contextlib.contextmanager
    def wrap(self, module, attr, stage):
        real = getattr(module, attr)

        def timed(*a, **k):
            if self.depth:
                return real(*a, **k)
            self.calls[stage] = self.calls.get(stage, 0) + 1
            self.depth += 1
            c0 = time.process_time()
            try:
                return real(*a, **k)
            finally:
                self.depth -= 1
                self.seconds[stage] = self.seconds.get(stage, 0.0) + time.process_time() - c0

        setattr(module, attr, timed)
        try:
            yield
        finally:
            setattr(module, attr, real)


def _row(c) -> dict:
    keep = hashlib.sha1("\n".join(sorted(c.keep)).encode()).hexdigest()[:12]
    return dict(source=c.source, solver=c.plan.report.get("solver", getattr(c.plan, "solver", "")),
                keep=keep, kept=len(c.keep), step_peak=int(c.step_peak),
                recompute_flops=int(c.recompute_flops))


def bound_misses(tg, fr) -> list:
    """The plans of front ``fr`` (``tg``'s) whose price is below their
    :class:`planner.torch.bounds.JointIndex` lower bounds: (solver, peak, bound, FLOPs, bound)."""
    from planner.torch.bounds import JointIndex

    index = JointIndex(tg.joint, tg.num_fwd_outputs)
    out = []
    for c in fr:
        if c.source != "plan":
            continue
        peak, flops = index.bounds(c.keep)
        if peak > c.step_peak or flops > c.recompute_flops:
            out.append((c.plan.report.get("solver"), int(c.step_peak), int(peak),
                        int(c.recompute_flops), int(flops)))
    return out


def plan_inside(name: str, profile: int = 0, bounds: bool = False, fronts: bool = False,
                after: bool = False) -> dict:
    """Compile model ``name``'s step once; inside the partitioner call, plan the front as
    ``_plan_front`` does, stage by stage."""
    import torch
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    import torch._inductor.custom_graph_pass  # noqa: F401

    from compile_time_bench import load
    from planner.torch import capture as cap
    from planner.torch import front as front_mod
    from planner.torch import seeds as seeds_mod
    from planner.torch.compiled import fresh_function
    from planner.torch.model_graph import from_joint

    got = {}

    class Staged(torch._inductor.custom_graph_pass.CustomPartitionerFn):
        def __call__(self, gm, joint_inputs, **kwargs):
            clock = _Clock()
            c_all = time.process_time()
            n_out = kwargs["num_fwd_outputs"]
            c0 = time.process_time()
            tg = from_joint(gm, n_out, decompose=True)
            merged_gm = cap.cse(gm)
            merged = from_joint(merged_gm, n_out, decompose=True)
            clock.seconds["import (from_joint x2, cse)"] = time.process_time() - c0
            prof = None
            if profile:
                import cProfile

                prof = cProfile.Profile(time.process_time)
                prof.enable()
            with clock.wrap(front_mod, "_planned", "DP planning"), \
                    clock.wrap(front_mod, "measured_candidate", "pricing plans"), \
                    clock.wrap(front_mod, "seeded_candidate", "pricing min-cut partitions"), \
                    (clock.wrap(front_mod._Pricing, "bounds", "bounds")
                     if hasattr(front_mod, "_Pricing") else contextlib.nullcontext()):
                c0 = time.process_time()
                seeds = seeds_mod.min_cut_keeps(merged_gm, joint_inputs,
                                                seeds_mod.MIN_CUT_BUDGETS, **kwargs)
                clock.seconds["torch's min-cut at its budgets"] = time.process_time() - c0
                c0 = time.process_time()
                traced = front_mod.front(tg)
                t_traced = time.process_time() - c0
                c0 = time.process_time()
                mfront = front_mod.front(merged, seeds=seeds)
                t_merged = time.process_time() - c0
                fr = front_mod.union([traced, mfront])
            if prof is not None:
                prof.disable()
            if bounds:          # every plan of both fronts priced, against its bounds
                for part, g in (("traced", tg), ("merged", merged)):
                    whole = [front_mod.measured_candidate(g, p) for _, fresh in
                             front_mod._planned(g, front_mod.SOLVERS, front_mod.POINTS,
                                                front_mod.EXACT_MAX_LOWER_SETS, {})
                             for p in fresh]
                    got[f"bound_misses_{part}"] = bound_misses(g, whole)
            got.update(planning_s=time.process_time() - c_all, front=[_row(c) for c in fr],
                       joint_nodes=len(gm.graph.nodes), activations=int(tg.cg.num_forward),
                       seconds=clock.seconds, calls=clock.calls, front_traced_s=t_traced,
                       front_merged_s=t_merged)
            if fronts:          # each front in full (priced now, after the timing)
                got.update(traced=[_row(c) for c in traced], merged=[_row(c) for c in mfront])
            if prof is not None:
                import io
                import pstats

                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(profile)
                got["profile"] = s.getvalue()
            if not after:
                raise _Stop()
            got["graphs"] = (tg, merged)            # priced again once the compile is done
            got["inside"] = [[_row(c) for c in front_mod.front(g)] for g in (tg, merged)]
            from planner.torch.seeds import min_cut_partition

            return min_cut_partition(gm, joint_inputs, **kwargs)[1:]

        def uuid(self):
            return None

    m, inputs, loss = load(name)
    compiled = torch.compile(fresh_function(lambda *xs: loss(m(*xs))), dynamic=False)
    with inductor_config.patch(custom_partitioner_fn=Staged(), fx_graph_cache=False,
                               compile_threads=1), \
            functorch_config.patch(enable_autograd_cache=False), \
            torch._dynamo.config.patch(allow_rnn=True):
        try:
            compiled(*inputs).backward()
        except Exception as err:        # the partitioner's stop, wrapped by Dynamo
            if "front" not in got:
                raise
            del err
    if after:       # every plan of both fronts priced again, after the call returned
        import torch._guards

        for how in ("after_differs", "after_traced_differs"):
            got[how] = []
            for part, g, inside in zip(("traced", "merged"), got["graphs"], got["inside"]):
                g.fronts.clear()
                with (torch._guards.tracing(torch._guards.TracingContext(None))
                      if how == "after_traced_differs" else contextlib.nullcontext()):
                    again = [_row(c) for c in front_mod.front(g)]
                got[how] += [(part, a, b) for a, b in zip(inside, again) if a != b]
                if len(inside) != len(again):
                    got[how].append((part, len(inside), len(again)))
        del got["graphs"], got["inside"]
    torch._dynamo.reset()
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", help="write the fronts and stage seconds here (JSON)")
    ap.add_argument("--check", help="compare the fronts with this file (another revision's)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="print cProfile's N functions of most cumulative CPU time")
    ap.add_argument("--bounds", action="store_true",
                    help="also price every plan of both fronts and list those priced below "
                         "their JointIndex bounds")
    ap.add_argument("--fronts", action="store_true",
                    help="also write each of the two fronts in full (priced after the timing)")
    ap.add_argument("--after", action="store_true",
                    help="let the compile finish (torch's default partition) and price both "
                         "fronts again on the same graphs after the call: list what differs")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, load {os.getloadavg()[0]:.1f}", flush=True)
    out = {}
    for name in [s for s in args.models.split(",") if s]:
        g = plan_inside(name, args.profile, args.bounds, args.fronts, args.after)
        out[name] = g
        stages = ", ".join(f"{k} {v:.2f}" + (f" ({g['calls'][k]} calls)" if "pricing" in k
                                              else "") for k, v in g["seconds"].items())
        print(f"{name}: {g['joint_nodes']} joint nodes, {g['activations']} activations; "
              f"planning {g['planning_s']:.2f} CPU s (front as traced {g['front_traced_s']:.2f}, "
              f"merged {g['front_merged_s']:.2f}); {stages}; front {len(g['front'])} "
              f"candidates", flush=True)
        if args.profile:
            print(g["profile"])
        if "after_differs" in g:
            print(f"  priced after the call, differing from inside it: {g['after_differs']}")
            print(f"  priced after the call under a TracingContext, differing from inside it: "
                  f"{g['after_traced_differs']}")
        for part in ("traced", "merged"):
            if f"bound_misses_{part}" in g:
                print(f"  {part}: plans priced below their bounds (solver, peak, bound, FLOPs, "
                      f"bound): {g[f'bound_misses_{part}']}", flush=True)
    print(f"load {os.getloadavg()[0]:.1f}")
    if args.out:
        from hgraph.common.fileio import write_text

        write_text(args.out, json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "profile"}
                                         for k, v in out.items()}, indent=1, sort_keys=True))
    if not args.check:
        return 0
    with open(args.check) as f:
        old = json.load(f)
    bad = 0
    for name, new in out.items():
        if name not in old:
            print(f"{name}: not in {args.check}")
            continue
        for part in ("front", "traced", "merged"):
            if part not in new or part not in old[name]:
                continue
            same = old[name][part] == new[part]
            if part == "front" or not same:
                print(f"{name}: {part} {'same' if same else 'DIFFERS'} "
                      f"({len(old[name][part])} -> {len(new[part])} candidates)")
            if part == "front" and not same:
                bad += 1
                for a, b in zip(old[name][part], new[part]):
                    if a != b:
                        print(f"  was {a}\n  now {b}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
