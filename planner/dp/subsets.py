"""How the DP reads its sets: dense bitsets or segment-local bits, behind one interface.

A transition ``L_i → L_j`` needs two things from the set representation: whether ``L_i ⊆ L_j``,
and ``(dt, dm)`` — the ``t`` and ``m`` of ``∂L_j \\ L_i`` (the new block's checkpoints; only
the part of ``∂L_j`` already inside ``L_i`` is not new). :func:`transitions` returns, for a
family, the function that answers both for one target and many sources at once; the DP loop
(:mod:`planner.dp.loop`) never looks at how the sets are held.

* dense (``fam.sets``): n-bit rows; on the approximate family ``L_i ⊆ L_j ⟺ v_i ∈ L_j`` (one
  bit), on the exact one a row test;
* segment-local (``fam.local``): ``L_v`` is "all positions before its segment" plus local bits
  (:mod:`planner.analyses.local_stats`), so the test and ``∂L_j ∩ L_i`` read a position and
  at most a segment's bits — never an n-bit row.

Example::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph, approx_family
    >>> g = DPGraph(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]),
    ...             src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]))   # a diamond
    >>> for dense in (True, False):
    ...     fam = approx_family(g, dense=dense)          # ∅, {0}, {0,1}, {0,2}, V
    ...     src, dt, dm = transitions(fam, g.t, g.m)(2, np.arange(2))   # into {0, 1}
    ...     print(src.tolist(), dm.tolist(), groups(fam, [0, 2, 4], g.n).tolist())
    [0, 1] [6, 2] [0, 0, 1, 1]
    [0, 1] [6, 2] [0, 0, 1, 1]
"""

from __future__ import annotations

import numpy as np

from planner.bitsets import nodes, unpack

__all__ = ["transitions", "pair_transitions", "window_transitions", "groups", "groups_to_chain"]

_ONE = np.uint64(1)


def transitions(fam, t: np.ndarray, m: np.ndarray):
    """``f(j, src) -> (src', dt, dm)``: the sources of ``src`` that are subsets of ``L_j``
    (order kept), with each transition's ``dt``/``dm``."""
    if fam.sets is not None:
        return _dense(fam, t, m)
    return _local(fam, t, m)


def _dense(fam, t, m):
    sets, node = fam.sets, fam.node

    def step(j, src):
        if node is not None:                 # approx: L_i ⊆ L_j ⟺ v_i ∈ L_j
            v = node[src]
            sub = v < 0
            vv = v[~sub]
            sub[~sub] = ((sets[j][vv // 64] >> (vv % 64).astype(np.uint64)) & _ONE) == 1
        else:
            sub = np.all((sets[src] & ~sets[j]) == 0, axis=1)
        src = src[sub]
        bn = nodes(fam.bnd[j])               # ∂Lj ∩ Li = ∂Lj ∩ ∂Li: subtract what Li holds
        if bn.size == 0:
            zero = np.zeros(src.size, np.int64)
            return src, zero, zero.copy()
        member = ((sets[src[:, None], (bn // 64)[None, :]] >> (bn % 64).astype(np.uint64))
                  & _ONE).astype(np.int64)
        return src, fam.t_bnd[j] - member @ t[bn], fam.m_bnd[j] - member @ m[bn]
    return step


def _local(fam, t, m):
    pairs = _pairs_local(fam, t, m)

    def step(j, src):
        sub, dt, dm = pairs(np.full(src.size, j), src)
        return src[sub], dt[sub], dm[sub]
    return step


def pair_transitions(fam, t: np.ndarray, m: np.ndarray):
    """``f(jj, ii) -> (sub, dt, dm)`` for pairs of states of the approximate family (dense or
    segment-local): whether ``L_ii ⊆ L_jj``, and the transition's ``dt``/``dm`` where it is."""
    if fam.sets is not None:
        return _pairs_dense(fam, t, m)
    return _pairs_local(fam, t, m)


def window_transitions(fam, t: np.ndarray, m: np.ndarray, window: int, chunk: int = 1 << 16):
    """The transitions from the ``window`` states before every state, as ``(L, W)`` tables.

    Column ``w`` of row ``j`` is the source ``i = j − W + w`` (none when ``i < 0``):
    ``sub[j, w]`` says whether ``L_i ⊆ L_j``, ``dt``/``dm`` are the transition's terms as
    :func:`transitions` gives them (where ``sub``). For the approximate family (``fam.node``),
    dense or segment-local; built in chunks of ``chunk`` targets, no step per state.
    """
    L, W = fam.num_sets, int(window)
    sub = np.zeros((L, W), bool)
    dt = np.zeros((L, W), np.int64)
    dm = np.zeros((L, W), np.int64)
    pairs = pair_transitions(fam, t, m)
    words = fam.sets.shape[1] if fam.sets is not None else fam.local.lloc.shape[1]
    chunk = max(1, min(chunk, (1 << 22) // (W * words)))     # ≤ 32 MB of bit rows a chunk
    for lo in range(1, L, chunk):
        hi = min(L, lo + chunk)
        jj = np.repeat(np.arange(lo, hi), W)
        ii = jj - W + np.tile(np.arange(W), hi - lo)
        ok = ii >= 0
        s, a, b = pairs(jj[ok], ii[ok])
        for out, val in ((sub, s), (dt, a), (dm, b)):
            block = out[lo:hi].reshape(-1)
            block[ok] = val
            out[lo:hi] = block.reshape(hi - lo, W)
    return sub, dt, dm


def _held_sums(x: np.ndarray, base: np.ndarray, wt: np.ndarray, wm: np.ndarray):
    """Per row of the bit rows ``x``: exact int64 sums of ``wt``/``wm`` at ``base[row] + bit``
    over its set bits (only non-zero words are unpacked)."""
    rw, cw = np.nonzero(x)
    st = np.zeros(x.shape[0], np.int64)
    sm = np.zeros(x.shape[0], np.int64)
    if rw.size:
        r2, b2 = np.nonzero(unpack(x[rw, cw][:, None], 64))
        row = rw[r2]
        at = base[row] + cw[r2] * 64 + b2
        np.add.at(st, row, wt[at])
        np.add.at(sm, row, wm[at])
    return st, sm


def _pairs_dense(fam, t, m):
    """``f(jj, ii) -> (sub, dt, dm)`` for pairs of states, dense approximate family."""
    sets, bnd, node = fam.sets, fam.bnd, fam.node

    def pairs(jj, ii):
        v = node[ii]
        vv = np.maximum(v, 0)
        bit = ((sets[jj, vv // 64] >> (vv % 64).astype(np.uint64)) & _ONE) == _ONE
        sub = (v < 0) | bit
        held_t, held_m = _held_sums(sets[ii] & bnd[jj], np.zeros(ii.size, np.int64), t, m)
        return sub, fam.t_bnd[jj] - held_t, fam.m_bnd[jj] - held_m
    return pairs


def _pairs_local(fam, t, m):
    """``f(jj, ii) -> (sub, dt, dm)`` for pairs of states, segment-local approximate family:
    ``L_v`` is the positions before its segment plus local bits, so the test reads a position
    and a bit, and only a same-segment source holds any of ``∂L_j`` (``dt``/``dm`` where
    ``sub``)."""
    st = fam.local
    seg = st.seg
    pos, sstart, loc = seg.pos, seg.sstart, seg.loc
    lloc, bndloc = st.lloc, st.bndloc
    t_pos, m_pos = t[seg.node_at], m[seg.node_at]
    node = fam.node

    def pairs(jj, ii):
        vj = node[jj]
        sj = sstart[vj]
        v = node[ii]
        vv = np.maximum(v, 0)
        same = (v >= 0) & (sstart[vv] == sj)
        lv = loc[vv]
        bit = ((lloc[vj, lv // 64] >> (lv % 64).astype(np.uint64)) & _ONE) == _ONE
        sub = (v < 0) | (pos[vv] <= sj) | (same & bit)
        dt = fam.t_bnd[jj].copy()
        dm = fam.m_bnd[jj].copy()
        k = np.flatnonzero(same & sub)
        if k.size:
            held_t, held_m = _held_sums(lloc[vv[k]] & bndloc[vj[k]], sj[k], t_pos, m_pos)
            dt[k] -= held_t
            dm[k] -= held_m
        return sub, dt, dm
    return pairs


def groups(fam, states: list, n: int) -> np.ndarray:
    """Block index (0-based) of every node for a chain of family states ∅ ⊊ L1 ⊊ … ⊊ V: the
    first set of the chain that holds it."""
    states = np.asarray(states[1:], dtype=np.int64)
    if fam.sets is not None:
        return np.argmax(unpack(fam.sets[states], n), axis=0)
    # segment-local: a vectorized binary search (membership is monotone along a chain)
    vs = fam.node[states]
    lo = np.zeros(n, np.int64)
    hi = np.full(n, vs.size - 1, np.int64)
    every = np.arange(n)
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        inside = fam.local.member(every, vs[mid])
        hi = np.where(inside, mid, hi)
        lo = np.where(inside, lo, mid + 1)
    return lo


def groups_to_chain(grp: np.ndarray) -> list:
    """The chain as sorted node arrays (∅ first) from block indices."""
    k = int(grp.max(initial=-1)) + 1
    return [np.zeros(0, np.int64)] + [np.flatnonzero(grp <= i) for i in range(k)]
