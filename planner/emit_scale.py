"""The reference schedule of a chain given as block indices, in time linear in the graph.

The emitter behind :func:`planner.emit.emit` (which takes the chain as lower sets, checks it and
calls :func:`emit_groups`). Working from lower sets directly costs O(n) per block (masks,
boundaries, the sorted live set) — quadratic on deep graphs (10^5 nodes, ~3·10^4 blocks).
A strictly increasing chain is the same thing as ``groups`` — the block index of
every node (``L_i = {groups ≤ i}``) — and every per-block set the emitter reads follows from
per-node numbers: a node of block i is a checkpoint iff a successor lies in a later block;
``A(L_{i-1})`` is the nodes of blocks ≥ i with a predecessor in a block < i; ``B(L_{i-1})``
their predecessors in blocks ≥ i. Forward values and gradients still live at step i are
tracked in small sets (what survives a step is in ``B``/``A``), so the whole emission is
O(n + E + ops). tests/test_emit checks the output against the reference's schedule files.

Example::

    >>> from planner import cg, chen                                      # doctest: +SKIP
    >>> sched = emit_groups(g, groups)                                    # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from planner.activation_graph import ActivationGraph
from planner.emit import hoist_forgets, topsor
from planner.schedule import Op, Schedule

__all__ = ["emit_groups", "groups_of_chain"]


def groups_of_chain(ag: ActivationGraph, chain) -> np.ndarray:
    """Block index of every node for a chain of lower sets (∅ optional, ends with V)."""
    grp = np.full(ag.n, -1, np.int64)
    k = 0
    for c in chain:
        mask = ag.to_mask(c)
        if not mask.any():
            continue
        grp[mask & (grp < 0)] = k
        k += 1
    return grp


def emit_groups(g, groups: np.ndarray, ag: ActivationGraph | None = None,
                optimize: bool = True) -> Schedule:
    """The reference schedule of the chain ``L_i = {groups ≤ i}`` (see the module docstring)."""
    ag = ag if ag is not None else ActivationGraph.from_cg(g)
    grp = np.asarray(groups, dtype=np.int64)
    n = ag.n
    k = int(grp.max(initial=-1)) + 1
    nf = len(g.forward)
    node_of_var = ag.node_of_var
    is_act = g.is_activation
    var = ag.var.tolist()
    src, dst = ag.src, ag.dst
    # per node: the latest block among successors, the earliest among predecessors
    max_succ = np.full(n, -1, np.int64)
    np.maximum.at(max_succ, src, grp[dst])
    min_pred = np.full(n, k, np.int64)
    np.minimum.at(min_pred, dst, grp[src])
    ckpt = max_succ > grp                                   # ∂L_i ∩ V_i
    order = topsor(g)
    topo_pos = np.empty(nf, dtype=np.int64)
    topo_pos[order] = np.arange(nf)
    node_of_func = node_of_var[[f.outputs[0] for f in g.forward]]
    fgrp = grp[node_of_func]
    sorted_f = order[np.argsort(fgrp[order], kind="stable")]
    fb = np.searchsorted(fgrp[sorted_f], np.arange(k + 1))
    by_node = np.argsort(grp, kind="stable")                # id order inside a block
    nb = np.searchsorted(grp[by_node], np.arange(k + 1))
    # blocks that may run in group i: consumers of Vi nodes and producers of Vi nodes
    cand = [set() for _ in range(k)]
    for f in range(nf):
        cand[fgrp[f]].add(f)
    for a_node, y_node in zip(src.tolist(), ag.func[dst].tolist()):
        cand[grp[a_node]].add(y_node)
    succ_ptr, succ_idx = ag.succ_indptr, ag.succ_indices
    grp_l = grp.tolist()
    min_pred_l = min_pred.tolist()

    ops = []
    append = ops.append
    live = set()
    nfunc = node_of_func.tolist()
    nvar = node_of_var.tolist()
    act = is_act.tolist()
    tpos = topo_pos.tolist()
    ck = ckpt.tolist()
    for i in range(k):
        for f in sorted_f[fb[i]:fb[i + 1]].tolist():
            append(Op("compute", f))
            live.add(nfunc[f])
        for v in by_node[nb[i]:nb[i + 1]].tolist():
            if not ck[v] and v in live:
                append(Op("forget", var[v], (), "forward"))
                live.discard(v)

    ran = [False] * nf
    has_output_tag = [any(tag == "output" for _, tag in bw.inputs) for bw in g.backward]
    upper = set()                # live forward values of nodes in blocks ≥ i
    glive = set()                # nodes whose gradient is live
    for i in range(k - 1, -1, -1):
        for f in sorted_f[fb[i]:fb[i + 1]].tolist():
            v = nfunc[f]
            if v not in live:
                append(Op("compute", f))
                live.add(v)
        for f in sorted(cand[i], key=tpos.__getitem__, reverse=True):
            outs = g.backward[f].outputs
            idx = []
            some_in = False
            first = not ran[f]
            for j, v in enumerate(outs):
                if act[v]:
                    if grp_l[nvar[v]] == i:
                        idx.append(j)
                        some_in = True
                elif first:
                    idx.append(j)
            y = nfunc[f]
            if not (some_in or (len(idx) == len(outs) and grp_l[y] == i)):
                continue
            exception = has_output_tag[f] and y not in live
            if exception:
                append(Op("compute", f))
            append(Op("compute", f + nf, tuple(idx)))
            ran[f] = True
            if exception:
                append(Op("forget", var[y], (), "forward"))
        block = by_node[nb[i]:nb[i + 1]].tolist()
        glive.update(block)
        upper.update(v for v in block if v in live)
        # (d) forget live values of blocks ≥ i unless in B(L_{i-1}); (e) gradients not in A
        for v in sorted(upper):
            if v not in live:
                upper.discard(v)
                continue
            in_b = False
            if i > 0:
                for w in succ_idx[succ_ptr[v]:succ_ptr[v + 1]].tolist():
                    if grp_l[w] >= i and min_pred_l[w] <= i - 1:
                        in_b = True
                        break
            if not in_b:
                append(Op("forget", var[v], (), "forward"))
                live.discard(v)
                upper.discard(v)
        for v in sorted(glive):
            if not (i > 0 and min_pred_l[v] <= i - 1):
                append(Op("forget", var[v], (), "backward"))
                glive.discard(v)
    if optimize:
        ops = hoist_forgets(g, ops)
    return Schedule(ops)
