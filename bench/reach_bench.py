"""In-process seconds of the segmented DP's budget-side work per segment set (issue 37,
seventh session): the reach pass, old against new, and a worker's tables and limits on a
first solve and on a re-solve.

Why a script: on the plan job the reach pass and the tables are a second or so of a DP stage
whose walks, on 2 shared cores, vary by tens of seconds run to run; measured alone, in CPU
seconds (``time.process_time``), they compare.

    # the reach pass over the 64 segments of a graph: the loop of a tree's planner/dp/reach.py
    # (OLD, e.g. a `git worktree` before the change) against the stacked pass, checked equal
    python3 bench/reach_bench.py --graph G --old-reach OLD/planner/dp/reach.py
    # one worker's share (16 of 64 segments): tables + the limit table, first solve, then a
    # re-solve 1 MiB lower on fresh segment objects with the stash kept — run once per tree
    PYTHONPATH=T python3 bench/reach_bench.py --graph G --worker

Figures: bench/NOTES_scale.md, issue 37 seventh session.
"""

from __future__ import annotations

import argparse
import importlib.util
import time

import numpy as np

from planner import cg
from planner.activation_graph import ActivationGraph
from planner.dp import segmented as S


def _clock(f, repeat: int = 3):
    """(least CPU seconds of ``repeat`` calls, the last result)."""
    best = r = None
    for _ in range(repeat):
        t0 = time.process_time()
        r = f()
        t = time.process_time() - t0
        best = t if best is None else min(best, t)
    return best, r


def reach_pass(fam, g, old_path: str) -> None:
    from planner.dp.reach import reach_at, reach_limits, reach_limits_many, reach_offsets
    from planner.dp.stacked import room_offsets

    spec = importlib.util.spec_from_file_location("old_reach", old_path)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    b = int(0.5 * g.m.sum())
    segs = S.segment_dps(fam, g, b, S.choose_cuts(fam, S.DEFAULT_SEGMENTS))
    W = segs[0].sub.shape[1]
    offs = [(sg.sub, room_offsets(sg.mL, sg.mAB, W), sg.dm, None) for sg in segs]
    tabs = [(s, o + b, d, e) for s, o, d, e in offs]
    print(f"{len(tabs)} segments, {sum(t[0].shape[0] for t in tabs)} states, W = {W}")
    t_old, want = _clock(lambda: [old.reach_limits(s, r, d) for s, r, d, _ in tabs])
    print(f"  old loop, a segment a call:     {t_old:.3f} s")
    for name, f in (("stacked, a segment a call", lambda: [reach_limits(*t[:3]) for t in tabs]),
                    ("stacked, 16 segments a call",
                     lambda: sum((reach_limits_many(tabs[i:i + 16])
                                  for i in range(0, len(tabs), 16)), [])),
                    (f"stacked, all {len(tabs)} in one call", lambda: reach_limits_many(tabs))):
        t, got = _clock(f)
        assert all(np.array_equal(a, c) for a, c in zip(want, got)), name
        print(f"  {name + ':':32s} {t:.3f} s  ({t_old / t:.2f}x)")
    t, R = _clock(lambda: reach_offsets(offs))
    t_at, got = _clock(lambda: [reach_at(x, b) for x in R])
    assert all(np.array_equal(a, c) for a, c in zip(want, got))
    print(f"  offsets, all in one call:        {t:.3f} s; then a budget from them: "
          f"{t_at:.4f} s ({t_old / t_at:.0f}x)")
    print("  every result equal to the old loop's")


def worker_share(fam, g) -> None:
    from planner.dp.stacked import walk_limits

    b = int(0.5 * g.m.sum())
    cuts = S.choose_cuts(fam, S.DEFAULT_SEGMENTS)
    prepare = getattr(S, "prepare", None)          # None: a tree before the change
    stash = {}
    for run, budget in (("first solve", b), ("re-solve", b - 2 ** 20)):
        segs = S.segment_dps(fam, g, budget, cuts, local_tables=True)
        share = segs[:len(segs) // 4]
        t0 = time.process_time()
        if prepare is not None:
            prepare(share, stash)
        limits = [walk_limits(sg._input()) for sg in share]   # tables made on first read
        t = time.process_time() - t0
        digest = S._digest(*limits).hex()[:12]
        print(f"{run}: {len(share)} segments, {sum(sg.num_states for sg in share)} states: "
              f"tables + limits {t:.3f} s CPU (limits {digest})")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--old-reach", help="a planner/dp/reach.py to time against this tree's")
    ap.add_argument("--worker", action="store_true", help="a worker's share, this tree's code")
    a = ap.parse_args(argv)
    g = ActivationGraph.from_cg(cg.read(a.graph))
    fam = S.scale_family(g)
    if a.old_reach:
        reach_pass(fam, g, a.old_reach)
    if a.worker:
        worker_share(fam, g)


if __name__ == "__main__":
    main()
