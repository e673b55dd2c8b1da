"""The reference's op order: its topological order of forward functions, and its optimizer.

``topsor`` is the order DP.cpp / DP2.cpp / Chen.cpp compute forward functions in: a DFS over
all N variables from var 0..N-1, out-edges in insertion order (forward blocks in file order,
inputs in order), reverse postorder. :func:`hoist_forgets` is their forget-hoisting optimizer.
The emitter (:mod:`planner.emit`) uses both so that its schedules equal the reference's op for
op.

Example::

    >>> from planner import synth
    >>> g = synth.build(layers=1, heads=1)
    >>> sorted(topsor(g).tolist()) == list(range(len(g.forward)))
    True
"""

from __future__ import annotations

import numpy as np

from planner.arrays import ranges

__all__ = ["topsor", "hoist_forgets"]


def topsor(g) -> np.ndarray:
    """Forward function indices in the reference's DFS topological order of their outputs."""
    n = g.num_vars
    a, y = g.forward_edges                         # edge a -> output, in insertion order
    order = np.argsort(a, kind="stable")
    succ = y[order].tolist()
    ptr = np.concatenate(([0], np.cumsum(np.bincount(a, minlength=n)))).tolist()
    seen = bytearray(n)
    post = []
    for root in range(n):
        if seen[root]:
            continue
        seen[root] = 1
        stack = [(root, ptr[root])]
        while stack:
            u, k = stack[-1]
            end = ptr[u + 1]
            while k < end and seen[succ[k]]:
                k += 1
            if k < end:
                stack[-1] = (u, k + 1)
                w = succ[k]
                seen[w] = 1
                stack.append((w, ptr[w]))
            else:
                stack.pop()
                post.append(u)
    order = np.asarray(post[::-1], dtype=np.int64)
    prod = g.producer[order]
    return prod[prod >= 0]


def hoist_forgets(g, ops: list) -> list:
    """The reference's optimizer: move each forget up to just after the last earlier compute
    that reads or produces the same value (forgets pass other forgets).

    Equivalent to the reference's bubbling walk, vectorised: a forget lands right after its
    anchor compute (or at the front), and forgets sharing an anchor end up in reverse order.
    The anchor is found by one ``searchsorted`` of every forget's (key, position) among the
    computes' touches — a key is a var, or var + N for a gradient.
    """
    nf, n, cols = g.num_forward, g.num_vars, g.columns
    nops = len(ops)
    if nops == 0:
        return []
    is_c = np.fromiter((op.kind == "compute" for op in ops), bool, nops)
    index = np.fromiter((op.index for op in ops), np.int64, nops)
    cpos = np.flatnonzero(is_c)
    fpos = np.flatnonzero(~is_c)
    f = index[cpos]
    # touches: every input of a compute, a forward compute's output, a backward one's grads
    keys = cols.in_var + np.where(cols.in_grad, n, 0)
    cnt = cols.k[f]
    first = ranges(cols.in_ptr[f], cnt)
    t_key = [keys[first], cols.out_var[cols.out_ptr[f[f < nf]]]]
    t_pos = [np.repeat(cpos, cnt), cpos[f < nf]]
    bpos = cpos[f >= nf]
    grads = [ops[i].grads for i in bpos.tolist()]
    glen = np.fromiter(map(len, grads), np.int64, len(grads))
    j = np.fromiter((x for gr in grads for x in gr), np.int64, int(glen.sum()))
    t_key.append(cols.out_var[np.repeat(cols.out_ptr[index[bpos]], glen) + j] + n)
    t_pos.append(np.repeat(bpos, glen))
    span = nops + 1
    touch = np.sort(np.concatenate(t_key) * span + np.concatenate(t_pos))
    which_bwd = np.fromiter((ops[i].which == "backward" for i in fpos.tolist()), bool, fpos.size)
    q_key = index[fpos] + np.where(which_bwd, n, 0)
    at = np.searchsorted(touch, q_key * span + fpos) - 1
    hit = (at >= 0) & (touch[np.maximum(at, 0)] // span == q_key)
    ordinal = np.cumsum(is_c) - 1                  # computes up to each op, minus one
    group = np.empty(nops, np.int64)
    group[cpos] = ordinal[cpos] + 1
    group[fpos] = np.where(hit, ordinal[touch[np.maximum(at, 0)] % span] + 1, 0)
    # each group: its compute, then its forgets last-first
    order = np.lexsort((np.where(is_c, 0, -np.arange(nops)), ~is_c, group))
    return [ops[i] for i in order.tolist()]
