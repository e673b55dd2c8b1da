"""A plan's engine stages with a run per stage against one engine session, in one process.

Why: before issue 37's sessions every ``hgraph.run`` started its own workers (on Ray an actor
process per task, numpy and the planner imported in each) and gathered every value to the
driver; a plan runs five engine programs in a row (levels, separators, the statistics' two
runs, the segmented DP). This runs those stages on a ``hgraph graph synth`` graph twice per
repeat, alternating: each run on workers of its own (what a run outside a session does, as
before) and all in one :func:`planner.analyses.engine.session` (what :func:`planner.plan` now
opens). It checks both give the same levels, separators, statistics and DP chain, and prints
per stage the wall seconds and this process's CPU seconds (the driver's: ``time.process_time``),
the Ray actors started (counted at :class:`hgraph.runtime.ray_actors.RayRuntime`'s actor
start) and the ratio session / per-run of the totals, measured in the same process.

Run::

    python3 bench/session_bench.py --nodes 20000 --tasks 4 --repeat 2
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _stages(ir, opts, fam_budget):
    """The plan's engine stages on ``ir`` (each timed): ``(times, digest, actors)``."""
    from planner.analyses.levels import levels
    from planner.analyses.local_stats import local_stats
    from planner.analyses.segments import segments
    from planner.dp import segmented as S
    from planner.dp.segmented_engine import solve_on_engine

    times, h = {}, hashlib.sha256()

    def timed(name, fn):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        times[name] = (time.perf_counter() - w, time.process_time() - c)
        return out

    level = timed("levels", lambda: levels(ir, opts=opts))
    seg = timed("separators", lambda: segments(ir, opts=opts, level=level))
    st = timed("statistics", lambda: local_stats(ir, opts=opts, seg=seg))
    fam, budget = fam_budget(ir, st)
    cuts = S.choose_cuts(fam, S.DEFAULT_SEGMENTS)
    run = timed("segmented DP", lambda: solve_on_engine(fam, ir, budget, cuts, opts=opts))
    for a in (level, seg.pos, seg.sep, st.lloc, st.bndloc, st.size, st.mL, st.mAB,
              run.stitched.fronts.state):
        h.update(np.ascontiguousarray(a).tobytes())
    return times, h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=20000)
    ap.add_argument("--kind", choices=("transformer", "cnn"), default="transformer")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--runtime", choices=("local", "ray"), default="ray")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    import hgraph
    from hgraph.runtime import ray_actors
    from planner import synth
    from planner.activation_graph import ActivationGraph
    from planner.analyses.engine import session
    from planner.dp import segmented as S

    cg = (synth.build(layers=synth.layers_for_nodes(args.nodes)) if args.kind == "transformer"
          else synth.build_cnn(blocks=synth.cnn_blocks_for_nodes(args.nodes)))
    ir = ActivationGraph.from_cg(cg)
    opts = hgraph.EngineOptions(tasks=args.tasks, runtime=args.runtime)

    def fam_budget(g, _stats):
        return S.scale_family(g), int(0.5 * g.m.sum())

    started = []
    new_actor = ray_actors.RayRuntime._new_actor
    ray_actors.RayRuntime._new_actor = lambda rt, t: (started.append(t), new_actor(rt, t))[1]
    print(f"{args.kind} {ir.n:,} activations, {args.tasks} tasks on {args.runtime}; "
          f"wall / driver CPU seconds per stage")
    totals = {"per run": [0.0, 0.0], "session": [0.0, 0.0]}
    digests = set()
    for rep in range(args.repeat):
        for how in ("per run", "session"):
            started.clear()
            scope = session(opts) if how == "session" else contextlib.nullcontext()
            with scope:
                times, digest = _stages(ir, opts, fam_budget)
            digests.add(digest)
            wall = sum(w for w, _ in times.values())
            cpu = sum(c for _, c in times.values())
            totals[how][0] += wall
            totals[how][1] += cpu
            row = ", ".join(f"{k} {w:.2f}/{c:.2f}" for k, (w, c) in times.items())
            print(f"  repeat {rep} {how:>8}: {row}; total {wall:.2f}/{cpu:.2f} s; "
                  f"actors started {len(started)}; digest {digest[:12]}", flush=True)
    (pw, pc), (sw, sc) = totals["per run"], totals["session"]
    print(f"session / per run: wall {sw / pw:.3f}, driver CPU {sc / pc:.3f}; "
          f"results identical: {len(digests) == 1}")
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
