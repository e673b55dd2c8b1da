"""What the canonical emitter holds when a slice of blocks begins its backward phase, as a
function of the chain alone (issue 37: the schedule stage per slice, on the workers).

Why: the sliced emission (:func:`planner.emit.emit_pieces`) hands its live sets from piece to
piece, so slice ``s`` cannot be emitted before every later slice's backward is. For the
canonical schedule of a chain (:func:`planner.emit.emit_groups` without a MILP's own choices)
that state needs no hand-over. A node's successors lie in its own block or later ones (the
blocks are a chain of lower sets), so with ``min_pred[w]`` the earliest block among ``w``'s
predecessors, when blocks ``≥ b1`` are done:

* a forward value ``v`` of a block ``≥ b1`` is still live (in ``upper``) iff some successor
  ``w`` has ``min_pred[w] ≤ b1 − 1`` (the emitter's step (d) keeps ``B(L_{j-1})``; for
  ``j ≤ grp[v]`` every successor is in a block ``≥ j``, so the test at ``j = b1`` is the
  hardest of those ``v`` went through): ``succ_min[v] < b1 ≤ grp[v]``;
* ``v``'s gradient is still live (in ``glive``) iff ``min_pred[v] < b1 ≤ grp[v]`` (step (e)
  keeps ``A(L_{j-1})``);
* backward block ``f`` has run (``ran``) iff one of its activation inputs is in a block
  ``≥ b1``, or it has none and its output is: ``run_by[f] ≥ b1``;
* the slice's own values live are its checkpoints (what the forward phase kept); values of
  earlier blocks are never read by a later block's backward, and no later backward touches
  the slice's values.

Each set is an interval of ``b1`` per node, so the entries of every slice boundary come from
one ``searchsorted`` (:func:`entries`), and each is the few values and gradients that cross the
cut: its width, not the graph's size. ``tests/test_slice_state.py`` checks them against the
sets the sequential emitter hands over, at every slice of transformer and CNN chains.

>>> from planner import synth
>>> from planner.activation_graph import ActivationGraph
>>> g = synth.build(layers=2, heads=2)
>>> ag = ActivationGraph.from_cg(g)
>>> grp = np.arange(ag.n) * 4 // ag.n         # the id order (topological) cut in four blocks
>>> st = SliceStarts.of(g, ag, grp)
>>> e = st.entries(np.array([3, 1, 2]))       # blocks ≥ 3, ≥ 1, ≥ 2 done
>>> [u.tolist() for u in e.upper]            # values still live: the cut's few
[[30], [10, 12], [30]]
>>> [x.tolist() for x in e.glive]            # gradients still live
[[30, 31], [10, 11, 13], [20, 21, 22, 31]]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SliceStarts", "Entries"]


@dataclass
class Entries:
    """The backward entry state at each slice start ``b1`` asked (in that order): ``upper[s]``
    and ``glive[s]``, sorted node arrays."""

    upper: list
    glive: list


@dataclass
class SliceStarts:
    """Per node and per forward function, the block interval in which it crosses a slice
    start (see the module docstring): ``upper_lo`` (``succ_min``), ``glive_lo``
    (``min_pred``), ``grp``; ``run_by`` per function."""

    grp: np.ndarray
    upper_lo: np.ndarray
    glive_lo: np.ndarray
    run_by: np.ndarray

    @classmethod
    def of(cls, g, ag, grp) -> "SliceStarts":
        grp = np.asarray(grp, np.int64)
        n, k = ag.n, int(grp.max(initial=-1)) + 1
        src, dst = ag.src, ag.dst
        min_pred = np.full(n, k, np.int64)
        np.minimum.at(min_pred, dst, grp[src])
        succ_min = np.full(n, k, np.int64)
        np.minimum.at(succ_min, src, min_pred[dst])
        nf = g.num_forward
        run_by = grp[ag.node_of_var[g.forward_output]].copy()     # without activation inputs
        maxin = np.full(nf, -1, np.int64)
        np.maximum.at(maxin, ag.func[dst], grp[src])
        has_in = np.zeros(nf, bool)
        has_in[ag.func[dst]] = True
        run_by[has_in] = maxin[has_in]
        return cls(grp, succ_min, min_pred, run_by)

    def ran(self, funcs: np.ndarray, b1: int) -> np.ndarray:
        """Whether each backward block of ``funcs`` has run when blocks ``≥ b1`` are done."""
        return self.run_by[np.asarray(funcs, np.int64)] >= b1

    def entries(self, starts: np.ndarray) -> Entries:
        """``upper`` and ``glive`` at each slice start of ``starts`` (blocks ``≥ b1`` done)."""
        starts = np.asarray(starts, np.int64)
        return Entries(self._stab(self.upper_lo, starts), self._stab(self.glive_lo, starts))

    def _stab(self, lo: np.ndarray, starts: np.ndarray) -> list:
        """For each start ``b``, the nodes with ``lo < b ≤ grp`` (sorted): every node's run
        of starts by two searches, expanded once (the pairs are the cuts' widths summed)."""
        order = np.argsort(starts, kind="stable")
        s = starts[order]
        live = np.flatnonzero(lo < self.grp)
        a = np.searchsorted(s, lo[live], "right")
        b = np.searchsorted(s, self.grp[live], "right")
        cnt = np.maximum(b - a, 0)
        node = np.repeat(live, cnt)
        first = np.repeat(a - np.cumsum(cnt) + cnt, cnt)
        which = first + np.arange(node.size)
        by = np.argsort(which, kind="stable")                     # node order kept in a start
        bounds = np.searchsorted(which[by], np.arange(s.size + 1))
        out = [None] * s.size
        for j, o in enumerate(order.tolist()):
            out[o] = node[by[bounds[j]:bounds[j + 1]]]
        return out
