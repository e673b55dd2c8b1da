"""``pt.compile``'s partitioner work below 100%: the whole front against the trial front, CPU
seconds in one process, and the same choices.

Per model, the joint graph Inductor hands the partitioner is captured once (a compile at
torch's default partition, as ``pt.compile``'s first trial makes it); then on that graph, each
from fresh planner graphs: (a) the trial front (``HGraphPartitioner._trial_front``:
the plans of the traced and merged graphs and torch's min-cut partitions, priced lazily,
:class:`planner.torch.trial_front.TrialFront`) and the first choice of a trial at each budget,
then (b) the whole front ``pt.compile`` priced before (``_plan_front``: every candidate
partitioned and replayed) and the same choices on it (:func:`planner.torch.trial_front.choose_on`).
The budget's target is the percent of torch's default step's replayed peak (the first call
measures it by the allocator instead; scale 1). Meter: ``time.process_time`` (CPU seconds of
this process; no child processes run); the lazy side runs first, so a cache it warms favours
the whole front. Reported: CPU seconds of each, candidates priced of all, choices equal.

    python3 bench/trial_front_bench.py --models gpt,hf-gpt2 --budgets 80% 60% min
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)


def captured(name):
    """(key, joint graph, joint inputs, partitioner kwargs, torch's default candidate) of
    model ``name``'s step, as ``pt.compile``'s first trial sees it."""
    import torch
    import torch._inductor.config as inductor_config

    from compile_time_bench import _settings, load
    from planner.torch.compiled import TORCH_DEFAULT, HGraphPartitioner, fresh_function

    seen = {}

    class Recorder(HGraphPartitioner):
        def _torch_default(self, tg, key, gm, joint_inputs, **kwargs):
            seen.update(key=key, gm=gm, joint_inputs=joint_inputs, kwargs=kwargs)
            return super()._torch_default(tg, key, gm, joint_inputs, **kwargs)

    m, inputs, loss = load(name)
    part = Recorder("80%", progress="off")
    part.trial, part.need_front = TORCH_DEFAULT, False
    step = torch.compile(fresh_function(lambda *xs: loss(m(*xs))), dynamic=False)
    with _settings(), inductor_config.patch(custom_partitioner_fn=part):
        step(*inputs).backward()
    return seen, part.defaults[seen["key"]]


def _graphs(gm, n_out):
    from planner.torch import capture as cap
    from planner.torch.model_graph import from_joint

    merged_gm = cap.cse(gm)
    return from_joint(gm, n_out, decompose=True), merged_gm, from_joint(merged_gm, n_out,
                                                                        decompose=True)


def _target(dflt, budget) -> tuple:
    """(target bytes, lowest) of ``budget`` on torch's default replayed peak."""
    if budget == "min":
        return 0, True
    return dflt.step_peak * float(budget.rstrip("%")) / 100, False


def compare(name, budgets) -> dict:
    """CPU seconds and candidates priced of both fronts on model ``name``, and the choices."""
    from planner.torch.compiled import TRIAL_FRONT, CompiledStep, HGraphPartitioner
    from planner.torch.trial_front import choose_on

    seen, dflt = captured(name)
    key, gm, n_out = seen["key"], seen["gm"], seen["kwargs"]["num_fwd_outputs"]
    m0 = dflt.step_peak
    t = time.process_time()
    lazy = HGraphPartitioner("80%", progress="off")
    tg, merged_gm, merged = _graphs(gm, n_out)
    lazy._trial_front(tg, key, gm, merged_gm, merged, seen["joint_inputs"], **seen["kwargs"])
    fr = lazy.fronts[(TRIAL_FRONT, key)][0]
    got = {}
    for b in budgets:
        target, lowest = _target(dflt, b)
        left = {i for i in range(len(fr)) if fr.plan[i] or fr.keep[i] != dflt.keep}
        i = CompiledStep._next(fr, left, dflt, 1.0, target, m0, lowest)
        got[b] = None if i is None else fr.priced[i]
    lazy_cpu, priced = time.process_time() - t, len(fr.priced)
    t = time.process_time()
    whole = HGraphPartitioner("80%", progress="off", whole_front=True)
    tg, merged_gm, merged = _graphs(gm, n_out)
    whole._plan_front(tg, key, gm, merged_gm, merged, seen["joint_inputs"], **seen["kwargs"])
    wf = whole.fronts[key][0]
    want = {}
    for b in budgets:
        target, lowest = _target(dflt, b)
        want[b] = choose_on([c for c in wf if not (c.source == "min-cut" and c.keep == dflt.keep)],
                            dflt, 1.0, target, m0, lowest)
    whole_cpu = time.process_time() - t

    def ident(c):
        return None if c is None else (c.keep, c.source, c.step_peak, c.recompute_flops)
    return dict(lazy_cpu=lazy_cpu, whole_cpu=whole_cpu, priced=priced, candidates=len(fr),
                whole_front=len(wf), same={b: ident(got[b]) == ident(want[b]) for b in budgets})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt")
    ap.add_argument("--budgets", nargs="+", default=["80%", "60%", "min"])
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    print(f"torch {torch.__version__}; load {os.getloadavg()[0]:.1f}")
    print("| model | trial front CPU s | whole front CPU s | ratio | candidates priced / all "
          "(whole front's size) | same choices at " + " ".join(args.budgets) + " |")
    print("|---|---|---|---|---|---|")
    for name in [s for s in args.models.split(",") if s]:
        r = compare(name, args.budgets)
        same = " ".join("yes" if r["same"][b] else "**no**" for b in args.budgets)
        print(f"| {name} | {r['lazy_cpu']:.1f} | {r['whole_cpu']:.1f} | "
              f"{r['lazy_cpu'] / r['whole_cpu']:.2f} | {r['priced']} / {r['candidates']} "
              f"({r['whole_front']}) | {same} |", flush=True)
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
