"""Strict separators of the activation graph, and the segments between them.

A separator ``c`` has every node before it (in topological order) as an ancestor, every node
after it as a descendant, and no edge jumping over it; then ``L_c`` is exactly the positions up
to ``c``. Between two separators every ``L_v`` is "all positions before the segment" plus a
local part, so the approximate DP's sets need bits over one segment only
(:mod:`planner.analyses.local_stats`). Two engine runs: levels, then each vertex's largest
successor position.

Example::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph
    >>> g = DPGraph(m=np.ones(4), t=np.ones(4), src=np.array([0, 0, 1, 2]),
    ...             dst=np.array([1, 2, 3, 3]))                              # a diamond
    >>> s = segments(g, tasks=2)
    >>> s.sep.tolist(), s.width
    ([True, False, False, True], 4)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import hgraph
from planner.analyses.engine import (EngineOptions, options, put_by_var, run_program, session,
                                     var_graph)
from planner.analyses.levels import levels

__all__ = ["Segments", "segments"]


class _MaxSuccPos(hgraph.VertexProgram):
    """On the reversed graph: every vertex sends its topological position (column ``pos``) to
    its predecessors, which keep the largest (-1: no successor). Two supersteps."""

    value_dtype = message_dtype = np.int64
    combiner = np.maximum
    max_supersteps = 2
    always_update = True

    def init(self, block):
        return block.columns["pos"].copy(), np.ones(block.size, bool)

    def update(self, ctx, block, values, inbox, has_message):
        return hgraph.Update(np.where(has_message, inbox, -1), respond=np.zeros(block.size, bool))

    def message(self, src_values, weights):
        return src_values


@dataclass
class Segments:
    """Strict separators of the activation graph and the segments between them.

    ``pos``: int64 [n] topological position (by (level, id)); ``node_at``: its inverse;
    ``sep``: bool [n] (by node) — ``c`` is a separator when every node before it (in ``pos``
    order) is an ancestor, every node after it a descendant, and no edge jumps over it. Then
    ``L_c`` is exactly the positions ``≤ pos(c)`` and ``∂L_c = {c}``. ``sstart``: int64 [n] the
    position where a node's segment starts (its own for a separator, 0 before the first);
    ``loc = pos − sstart``; ``width``: the widest segment; ``words``: uint64 words per local set.
    """

    pos: np.ndarray
    node_at: np.ndarray
    sep: np.ndarray
    sstart: np.ndarray
    loc: np.ndarray
    width: int
    words: int
    supersteps: int = 0


#: Kept columns of :func:`_max_succ_vars` (dropped once read).
_POS, _MAXSUCC = "segments.pos", "segments.maxsucc"


def _max_succ_vars(sharded, pos: np.ndarray, var: np.ndarray, o: EngineOptions):
    """``(maxsucc, supersteps)``: :class:`_MaxSuccPos` on a cg.txt's variable graph on the
    workers (reversed), the positions handed to them as a column by variable (parameters
    and inputs: -1; no activation is their successor), only the activations' rows back."""
    with session(o) as s:
        put_by_var(s, _POS, pos, sharded, var, fill=-1)
        res = run_program(o, _MaxSuccPos(), sharded.reversed(), keep=_MAXSUCC,
                          inputs={"pos": _POS}, gather=False)
        maxsucc = np.asarray(s.gather_rows(_MAXSUCC, var), np.int64)
        s.drop(_POS)
        s.drop(_MAXSUCC)
    return maxsucc, res.supersteps


def segments(g, *, opts: EngineOptions | None = None, level=None, **engine) -> Segments:
    """Topological positions and strict separators (engine: levels, then successor positions)."""
    o = options(opts, engine)
    n = g.n
    steps = 0
    if level is None:
        level, steps = levels(g, opts=o, with_supersteps=True)
    node_at = np.lexsort((np.arange(n), level))
    pos = np.empty(n, np.int64)
    pos[node_at] = np.arange(n)
    sharded = var_graph(o, g)        # kept bound: the statistics run on it next
    if sharded is not None:      # on the variable graph the workers read (planner.cg_shards)
        maxsucc, more = _max_succ_vars(sharded, pos, g.var, o)
    else:
        res = run_program(o, _MaxSuccPos(), hgraph.Graph.from_edges(g.dst, g.src, n=n,
                                                                    columns={"pos": pos}))
        maxsucc, more = np.asarray(res.values, np.int64), res.supersteps
    steps += more                                         # maxsucc by node; -1: no successor
    # separator at position p: no edge from before p lands after p, and no source after p
    ms_by_pos = maxsucc[node_at]
    reach_before = np.r_[-1, np.maximum.accumulate(ms_by_pos)[:-1]]   # max over positions < p
    indeg = np.bincount(g.dst, minlength=n)
    src_by_pos = (indeg[node_at] == 0)
    last_source = int(np.flatnonzero(src_by_pos).max(initial=0))
    p = np.arange(n)
    sep_pos = (reach_before <= p) & (p >= last_source)
    sep = np.zeros(n, bool)
    sep[node_at[sep_pos]] = True
    starts_by_pos = np.where(sep_pos, p, 0)
    sstart_pos = np.maximum.accumulate(starts_by_pos)
    sstart = sstart_pos[pos]
    loc = pos - sstart
    ends = np.r_[np.flatnonzero(sep_pos), n]
    begins = np.r_[0, np.flatnonzero(sep_pos)]
    width = int((ends - begins).max(initial=1)) + 1
    return Segments(pos=pos, node_at=node_at, sep=sep, sstart=sstart, loc=loc, width=width,
                    words=max(1, (width + 63) // 64), supersteps=steps)
