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

__all__ = ["topsor", "hoist_forgets"]


def topsor(g) -> np.ndarray:
    """Forward function indices in the reference's DFS topological order of their outputs."""
    n = g.num_vars
    out = [[] for _ in range(n)]
    for f in g.forward:
        y = f.outputs[0]
        for a, _ in f.inputs:
            out[a].append(y)
    seen = bytearray(n)
    post = []
    for root in range(n):
        if seen[root]:
            continue
        seen[root] = 1
        stack = [(root, 0)]
        while stack:
            u, k = stack[-1]
            nxt = out[u]
            while k < len(nxt) and seen[nxt[k]]:
                k += 1
            if k < len(nxt):
                stack[-1] = (u, k + 1)
                w = nxt[k]
                seen[w] = 1
                stack.append((w, 0))
            else:
                stack.pop()
                post.append(u)
    order = np.asarray(post[::-1], dtype=np.int64)
    prod = g.producer[order]
    return prod[prod >= 0]


def hoist_forgets(g, ops: list) -> list:
    """The reference's optimizer: move each forget up to just after the last earlier compute
    that reads or produces the same value (forgets pass other forgets).

    Equivalent to the reference's bubbling walk, in linear time: a forget lands right after its
    anchor compute (or at the front), and forgets sharing an anchor end up in reverse order.
    """
    nf = len(g.forward)
    n = g.num_vars
    fkeys = [[a for a, _ in f.inputs] + f.outputs for f in g.forward]
    bkeys = [[a + n if tag == "gradient" else a for a, tag in bw.inputs] for bw in g.backward]
    bouts = [[v + n for v in bw.outputs] for bw in g.backward]
    last = {}                      # key (var, or var + N for a gradient) -> last compute touching it
    computes = []
    attached = [[]]                # attached[c + 1]: forgets anchored after compute c
    for op in ops:
        if op.kind == "compute":
            c = len(computes)
            computes.append(op)
            attached.append([])
            f = op.index
            if f < nf:
                for key in fkeys[f]:
                    last[key] = c
            else:
                for key in bkeys[f - nf]:
                    last[key] = c
                outs = bouts[f - nf]
                for j in op.grads:
                    last[outs[j]] = c
        else:
            key = op.index if op.which == "forward" else op.index + n
            attached[last.get(key, -1) + 1].append(op)
    out = list(reversed(attached[0]))
    for c, op in enumerate(computes):
        out.append(op)
        out.extend(reversed(attached[c + 1]))
    return out
