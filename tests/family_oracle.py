"""A NumPy reference for the approximate DP's family, independent of the engine analyses.

``L_v = {v} ∪ ancestors(v)`` as dense bitsets, ORed level by level along the edges, with the
per-set statistics of :func:`planner.dp_families._set_stats` (the exact family's own code);
the engine-built family (:func:`planner.dp_families.approx_family`) must equal it.
"""

from __future__ import annotations

import graphlib

import numpy as np

from planner.dp_families import _set_stats

_ONE = np.uint64(1)


def topological_levels(g) -> np.ndarray:
    """Longest-path level of each node (0 without predecessors): a plain loop in
    :mod:`graphlib`'s order, the oracle of the engine's :func:`planner.analyses.levels.levels`."""
    preds = {v: [] for v in range(g.n)}
    for u, v in zip(g.src.tolist(), g.dst.tolist()):
        preds[v].append(u)
    level = [0] * g.n
    for v in graphlib.TopologicalSorter(preds).static_order():
        level[v] = max((level[u] + 1 for u in preds[v]), default=0)
    return np.asarray(level, dtype=np.int64)


def ancestor_sets(g) -> np.ndarray:
    """uint64 [n, W]: row v is ``L_v = {v} ∪ ancestors(v)``, built level by level."""
    anc = np.zeros((g.n, g.words), dtype=np.uint64)
    ids = np.arange(g.n)
    anc[ids, ids // 64] = _ONE << (ids % 64).astype(np.uint64)
    if g.src.size == 0:
        return anc
    edge_level = topological_levels(g)[g.dst]
    order = np.argsort(edge_level, kind="stable")
    el = edge_level[order]
    bounds = np.flatnonzero(np.r_[True, el[1:] != el[:-1], True])
    for a, b in zip(bounds[:-1], bounds[1:]):
        e = order[a:b]
        np.bitwise_or.at(anc, g.dst[e], anc[g.src[e]])
    return anc


def family_arrays(g) -> dict:
    """The approximate family's arrays (∅ first, then by (m(L), |L|, v)), by field name."""
    sets = np.vstack([np.zeros((1, g.words), np.uint64), ancestor_sets(g)])
    size, mL, tL, bnd, t_bnd, m_bnd, mAB = _set_stats(g, sets)
    order = np.lexsort((np.arange(size.size), size, mL))
    out = dict(sets=sets, size=size, mL=mL, tL=tL, bnd=bnd, t_bnd=t_bnd, m_bnd=m_bnd, mAB=mAB,
               node=np.arange(-1, g.n, dtype=np.int64))
    return {k: v[order] for k, v in out.items()}


def stats_arrays(g) -> dict:
    """Per-node statistics of every ``L_v`` (row v), as :class:`LocalStats` holds them."""
    sets = ancestor_sets(g)
    size, mL, tL, bnd, t_bnd, m_bnd, mAB = _set_stats(g, sets)
    return dict(sets=sets, bnd=bnd, size=size, mL=mL, tL=tL, t_bnd=t_bnd, m_bnd=m_bnd, mAB=mAB)


def random_single_sink_dag(rng, n: int, p: float):
    """A random DAG on ``n`` nodes with one sink, like every training graph: node ``b`` takes
    each earlier node as a predecessor with probability ``p`` (at least one), every node left
    without a successor feeds node ``n − 1``, and ids are shuffled (they say nothing about the
    topology). Returns ``(src, dst, perm)``: shuffled edge arrays and the shuffle (node ``v``
    is ``perm[v]``). Draws edges, then the shuffle, from ``rng``."""
    src, dst = [], []
    for b in range(1, n):
        ps = [a for a in range(b) if rng.random() < p] or [int(rng.integers(0, b))]
        src += ps
        dst += [b] * len(ps)
    has_succ = set(src)
    for a in range(n - 1):
        if a not in has_succ:
            src.append(a)
            dst.append(n - 1)
    perm = rng.permutation(n)
    return perm[np.array(src)], perm[np.array(dst)], perm
