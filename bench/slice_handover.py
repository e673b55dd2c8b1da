"""What one slice of a plan's schedule stage needs from the others: the sizes of the messages
a per-slice schedule stage on the workers would exchange (issue 37).

Why: the schedule stage (:mod:`planner.sliced`: emit, hoist, replay) is the driver's last
stage over the whole graph. Moved to the workers slice by slice, each slice would need (1)
the emitter's state at its backward start, (2) the anchor line of each forget the hoisting
moves out of its piece, (3) for the replay, the values and gradients it touches that other
slices touch too. This measures all three on a real plan's chain, the forward and backward
pieces of a slice counted as one slice (one worker would make both):

* ``entry``: values and gradients live at each slice's backward start from later blocks
  (:class:`planner.slice_state.SliceStarts`: a function of the chain, no hand-over);
* ``moved``: forgets whose anchor is not in their own piece (:func:`planner.emit.hoist_piece`'s
  set-aside forgets, whose anchor line comes from an earlier piece);
* ``shared keys``: values / gradients touched by computes or forgets of more than one slice.

Run (the chain from a plan's report; the graph the report was planned on)::

    python3 bench/slice_handover.py --graph W/cg_transformer_100000.txt --report W/r.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from schedule_slices import chain_of_report  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--report", required=True, help="a plan's JSON report of that graph")
    ap.add_argument("--slice-nodes", type=int, default=None,
                    help="activations a slice holds (default planner.sliced.SLICE_NODES)")
    args = ap.parse_args(argv)

    from hgraph.common.errors import HGraphError
    from planner import cg, sliced
    from planner.activation_graph import ActivationGraph
    from planner.emit import _anchors, emit_pieces, hoist_piece
    from planner.slice_state import SliceStarts

    t0 = time.perf_counter()
    try:
        g = cg.read(args.graph)
        groups = chain_of_report(args.report)
    except (HGraphError, OSError, ValueError, KeyError) as e:
        print(f"slice_handover: {e}", file=sys.stderr)
        return 2
    ag = ActivationGraph.from_cg(g)
    if groups.size != ag.n:
        print(f"slice_handover: {args.report}: {groups.size} decisions for a graph of "
              f"{ag.n} activations", file=sys.stderr)
        return 2
    sl = sliced.slices(groups, args.slice_nodes or sliced.SLICE_NODES)
    m = len(sl)
    ent = SliceStarts.of(g, ag, groups).entries(np.array([b1 for _, b1 in sl]))
    entry = np.array([u.size + x.size for u, x in zip(ent.upper, ent.glive)])

    n = g.num_vars
    slices_touching = np.zeros(2 * n, np.int64)      # per key (var, + n for a gradient)
    last_slice = np.full(2 * n, -1, np.int64)
    last_touch = np.full(2 * n, -1, np.int64)
    moved = line0 = 0
    ops_per_piece = []
    for p, ops in enumerate(emit_pieces(g, groups, ag, sl)):
        s = p if p < m else 2 * m - 1 - p            # forward pieces in order, then backward
        h = _anchors(g, ops)                         # the hoisting's touches (a diagnostic)
        keys = np.unique(np.concatenate([h.touch // h.span, h.key[h.fpos]]))
        new = last_slice[keys] != s
        slices_touching[keys[new]] += 1
        last_slice[keys] = s
        cols, (anchor, _, _) = hoist_piece(g, ops, last_touch, line0)
        moved += anchor.size
        line0 += cols[0].size
        ops_per_piece.append(len(ops))
    touched = int((slices_touching > 0).sum())
    shared = int((slices_touching > 1).sum())
    print(f"{args.graph}: {ag.n:,} activations, {int(groups.max()) + 1:,} blocks, {m} slices "
          f"({2 * m} pieces, ops a piece max {max(ops_per_piece):,} mean "
          f"{int(np.mean(ops_per_piece)):,})")
    print(f"entry state at a slice's backward start: max {int(entry.max(initial=0))}, mean "
          f"{entry.mean():.1f} values + gradients")
    print(f"forgets moved out of their piece: {moved}")
    print(f"keys touched by more than one slice: {shared:,} of {touched:,} "
          f"({shared / max(1, m):.1f} a slice)")
    print(f"{time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
