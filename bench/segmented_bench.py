"""The segmented DP against the one walk, in-process: model recompute gap and DP seconds.

For ``hgraph graph synth`` graphs (transformer, CNN) of the given sizes, at each budget, on
the scale path's family (segment-local, window 8, front cap 128, reach pruning): the one
stacked walk (:func:`planner.dp.stacked.run_stacked`, what ``plan()`` runs below 10^5
activations), the hand-over (:func:`planner.dp.segmented.solve_handover`, = the forced walk)
and the composed scan (:func:`planner.dp.segmented.solve_composed`, what ``plan()`` runs
from 10^5 on the engine), cut into ``--segments``. Prints each one's model recompute, its gap
to the one walk, the segments walked seeded, and the seconds: the one walk's, the hand-over's
and, for the composed scan, the sum of its free walks, the largest free walk (what a worker
holding one segment would take) and the scan's own.

Run::

    python3 bench/segmented_bench.py --sizes 4000,20000 --budgets 0.3,0.5 --segments 16,64
"""

from __future__ import annotations

import argparse
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4000,20000")
    ap.add_argument("--kinds", default="transformer,cnn")
    ap.add_argument("--budgets", default="0.3,0.5", help="fractions of m(V)")
    ap.add_argument("--segments", default="16,64")
    args = ap.parse_args(argv)
    from planner import synth
    from planner.activation_graph import ActivationGraph
    from planner.dp import segmented as S
    from planner.dp.scale import pass_lambdas
    from planner.dp.stacked import run_stacked

    print(f"{'kind':>11} {'nodes':>7} {'budget':>6} {'segs':>4} {'one walk':>9} {'hand-over':>16} "
          f"{'composed':>16} {'seeded':>6}  seconds: one / hand-over / composed (free sum, "
          f"largest free, scan)")
    for kind in args.kinds.split(","):
        for n in (int(x) for x in args.sizes.split(",")):
            cg = (synth.build(layers=synth.layers_for_nodes(n)) if kind == "transformer" else
                  synth.build_cnn(blocks=synth.cnn_blocks_for_nodes(n)))
            g = ActivationGraph.from_cg(cg)
            fam = S.scale_family(g)
            T = int(g.t.sum())
            for frac in (float(x) for x in args.budgets.split(",")):
                B = int(frac * g.m.sum())
                t0 = time.perf_counter()
                f, e = run_stacked(fam, g.t, g.m, B, 8, 128, pass_lambdas(g.t, g.m, 128, "time"),
                                   "time")
                one_s = time.perf_counter() - t0
                one = None if e is None else T - int(f.s[e])
                for segs in (int(x) for x in args.segments.split(",")):
                    cuts = S.choose_cuts(fam, segs)
                    t0 = time.perf_counter()
                    h = S.solve_handover(fam, g, B, cuts)
                    h_s = time.perf_counter() - t0
                    parts = S.segment_dps(fam, g, B, cuts)
                    for p in parts:
                        p.solve(None)
                    free = [p.seconds for p in parts]
                    t0 = time.perf_counter()
                    c = S.solve_composed(fam, g, B, cuts, segs=parts)
                    scan_s = time.perf_counter() - t0
                    cell = []
                    for r in (h, c):
                        if r is None or one is None:
                            cell.append("none")
                            continue
                        rc = T - int(r.fronts.s[r.entry])
                        cell.append(f"{rc:,} {100 * (rc - one) / max(1, one):+.2f}%")
                    print(f"{kind:>11} {g.n:>7,} {frac:>6.2f} {cuts.size - 1:>4} "
                          f"{one if one is not None else 'none':>9} {cell[0]:>16} {cell[1]:>16} "
                          f"{c.handed_over if c else '-':>6}  {one_s:.2f} / {h_s:.2f} / "
                          f"{sum(free):.2f} {max(free):.3f} {scan_s:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
