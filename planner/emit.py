"""Emit the reference's training schedule from a chain of lower sets (FORMAT.md §4.7).

Given the computational graph and a strictly increasing chain ``∅ ⊊ L1 ⊊ … ⊊ Lk = V`` of lower sets
of its activation graph, :func:`emit` writes the schedule DP.cpp / DP2.cpp / Chen.cpp print,
op for op:

1. forward phase, block by block: compute block i's functions (in ``topsor`` order), then forget its
   non-checkpoints (``Vi \\ ∂Li``, id order);
2. backward phase, blocks k..1: (a) recompute what is not live; (b) run the backward blocks in
   reverse topological order -- output indices are the activations in Vi plus, on a block's first
   run, its parameter/input outputs; the "ReLU exception" recomputes a forgotten forward output a
   backward block needs (``output`` tag) and forgets it again; (c) mark Vi's gradients live;
   (d) forget forward values not in L(i-1) ∪ B(L(i-1)); (e) forget gradients not in A(L(i-1));
3. the forget-hoisting optimizer (on by default): every forget moves up to just after the last
   earlier compute that reads or produces the same value.

Chains may be given as bool masks, bitset ints or lists of node indices (activation-graph nodes,
not var ids); a leading ∅ is optional and dropped, the last set must be V.

``topsor`` (the reference's DFS order of forward functions) and the optimizer
(:func:`hoist_forgets`) are the reference's own, copied so that the schedules equal its op for
op; they are at the end of this file. :func:`emit_groups` takes the
chain as ``groups``, the block index of every node (``L_i = {groups ≤ i}``), the form the DP
returns; :func:`emit` takes lower sets, checks them and converts.

Working from lower sets directly costs O(n) per block (masks,
boundaries, the sorted live set) — quadratic on deep graphs (10^5 nodes, ~3·10^4 blocks).
A strictly increasing chain is the same thing as ``groups`` — the block index of
every node (``L_i = {groups ≤ i}``) — and every per-block set the emitter reads follows from
per-node numbers: a node of block i is a checkpoint iff a successor lies in a later block;
``A(L_{i-1})`` is the nodes of blocks ≥ i with a predecessor in a block < i; ``B(L_{i-1})``
their predecessors in blocks ≥ i. Forward values and gradients still live at step i are
tracked in small sets (what survives a step is in ``B``/``A``), so the whole emission is
O(n + E + ops). tests/test_emit checks the output against the reference's schedule files.


Example::

    >>> from planner import synth
    >>> from planner.activation_graph import ActivationGraph
    >>> g = synth.build(layers=1, heads=1)
    >>> n = ActivationGraph.from_cg(g).n
    >>> one_block = emit_groups(g, np.zeros(n, np.int64))        # keep everything
    >>> one_block.dumps() == emit(g, [np.arange(n)]).dumps()
    True
    >>> sorted(topsor(g).tolist()) == list(range(len(g.forward)))
    True
"""

from __future__ import annotations

import numpy as np

from planner.activation_graph import ActivationGraph
from planner.arrays import ranges
from planner.cg import TAGS
from planner.schedule import Op, Schedule

__all__ = ["normalize_chain", "groups_of_chain", "emit", "emit_groups", "topsor", "hoist_forgets"]


def normalize_chain(ag: ActivationGraph, chain) -> list:
    """The chain as bool masks without ∅, checked strictly increasing and ending at V."""
    masks = [ag.to_mask(c).copy() for c in chain]
    masks = [m for m in masks if m.any()] if masks and not masks[0].any() else masks
    if not masks or not masks[-1].all():
        raise ValueError("a chain of lower sets must end with V (all nodes)")
    for a, b in zip(masks, masks[1:]):
        if np.any(a & ~b) or np.array_equal(a, b):
            raise ValueError("a chain of lower sets must be strictly increasing")
    for m in masks:
        if not ag.is_lower_set(m):
            raise ValueError("every set of the chain must be a lower set")
    return masks


def groups_of_chain(ag: ActivationGraph, chain) -> np.ndarray:
    """Block index of every node for a chain of lower sets (checked by :func:`normalize_chain`)."""
    grp = np.zeros(ag.n, dtype=np.int64)
    prev = np.zeros(ag.n, dtype=bool)
    for i, m in enumerate(normalize_chain(ag, chain)):
        grp[m & ~prev] = i
        prev = m
    return grp


def emit(g, chain, ag: ActivationGraph | None = None, optimize: bool = True) -> Schedule:
    """The reference schedule of ``chain`` on ``g`` (optimizer on unless ``optimize=False``):
    :func:`emit_groups` of the chain's block indices."""
    ag = ag if ag is not None else ActivationGraph.from_cg(g)
    return emit_groups(g, groups_of_chain(ag, chain), ag, optimize=optimize)


def emit_decision(g, decision, ag: ActivationGraph | None = None,
                  optimize: bool = True) -> Schedule:
    """The reference schedule of a solver's :class:`planner.decision.Decision`: its stages,
    with its own per-stage choices where it has them (:func:`emit_groups`)."""
    return emit_groups(g, decision.stage, ag, optimize, **decision.choices())


def emit_groups(g, groups: np.ndarray, ag: ActivationGraph | None = None,
                optimize: bool = True, keep=None, recompute=None, retain=None) -> Schedule:
    """The reference schedule of the chain ``L_i = {groups ≤ i}`` (see the module docstring).

    ``keep``/``recompute``/``retain`` (all three or none): a schedule with its own keep and
    recompute decisions on the same chain (:mod:`planner.milp`): ``keep``, the nodes kept from
    the forward pass (the others are freed after their last forward read, checkpoints
    included); ``recompute[i]``, the nodes recomputed before block ``i``'s backward (any node
    of ``L_i``, in topological order, with the block's values not live); ``retain[i]``, the
    nodes of ``L_{i-1}`` kept live into block ``i − 1``'s backward (the others are freed).
    Without them, the canonical schedule (checkpoints kept, the interior recomputed)."""
    ag = ag if ag is not None else ActivationGraph.from_cg(g)
    e = _Emitter(g, np.asarray(groups, dtype=np.int64), ag, keep)
    e.forward()
    for i in range(e.k - 1, -1, -1):
        e.recompute(i, recompute[i] if e.staged else None)
        e.backwards(i)
        e.forget(i, retain[i] if e.staged and i > 0 else None)
    ops = hoist_forgets(g, e.ops) if optimize else e.ops
    return Schedule(ops)


class _Emitter:
    """One emission of :func:`emit_groups`: the per-node numbers of the chain (computed once,
    as lists for the loops) and what is live, then the forward pass and each backward block's
    three steps, in the order the reference prints them (the ops in :attr:`ops`).

    Why a class: the steps share a dozen per-node tables and the live sets; one function held
    them all in 147 lines."""

    def __init__(self, g, grp, ag, keep):
        n = ag.n
        self.k = k = int(grp.max(initial=-1)) + 1
        self.nf = nf = g.num_forward
        node_of_var = ag.node_of_var
        self.ag, self.var = ag, ag.var.tolist()
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
        node_of_func = node_of_var[g.forward_output]
        fgrp = grp[node_of_func]
        self.sorted_f = order[np.argsort(fgrp[order], kind="stable")]
        self.fb = np.searchsorted(fgrp[self.sorted_f], np.arange(k + 1))
        self.by_node = np.argsort(grp, kind="stable")           # id order inside a block
        self.nb = np.searchsorted(grp[self.by_node], np.arange(k + 1))
        # blocks that may run in group i: consumers of Vi nodes and producers of Vi nodes
        self.cand = cand = [set() for _ in range(k)]
        for f in range(nf):
            cand[fgrp[f]].add(f)
        for a_node, y_node in zip(src.tolist(), ag.func[dst].tolist()):
            cand[grp[a_node]].add(y_node)
        self.succ_ptr, self.succ_idx = ag.succ_indptr, ag.succ_indices
        self.grp_l = grp.tolist()
        self.min_pred_l = min_pred.tolist()
        self.staged = keep is not None
        if self.staged:
            kept = np.zeros(n, bool)
            kept[np.asarray(keep, np.int64)] = True
            self.fwd_keep = (ckpt | kept).tolist()
            self.kept_l = kept.tolist()
        self.ops = []
        self.live = set()
        self.nfunc = node_of_func.tolist()
        self.nvar = node_of_var.tolist()
        self.act = g.is_activation.tolist()
        self.tpos = topo_pos.tolist()
        self.ck = ckpt.tolist()
        cols = g.columns
        self.ran = [False] * nf
        self.has_output_tag = (np.bincount(cols.in_block[cols.in_tag == TAGS.index("output")],
                                           minlength=2 * nf)[nf:] > 0).tolist()
        self.out_var, self.out_ptr = cols.out_var.tolist(), cols.out_ptr.tolist()
        self.upper = set()           # live forward values of nodes in blocks ≥ i
        self.glive = set()           # nodes whose gradient is live

    def forward(self):
        """The forward phase: each block's functions, then its non-checkpoints forgotten."""
        append, live, var, nfunc = self.ops.append, self.live, self.var, self.nfunc
        keeps = self.fwd_keep if self.staged else self.ck
        sorted_f, fb, by_node, nb = self.sorted_f, self.fb, self.by_node, self.nb
        for i in range(self.k):
            for f in sorted_f[fb[i]:fb[i + 1]].tolist():
                append(Op("compute", f))
                live.add(nfunc[f])
            for v in by_node[nb[i]:nb[i + 1]].tolist():
                if not keeps[v] and v in live:
                    append(Op("forget", var[v], (), "forward"))
                    live.discard(v)
        if self.staged:             # checkpoints the stages do not keep: freed after the forward
            for v in sorted(live):
                if not self.kept_l[v]:
                    append(Op("forget", var[v], (), "forward"))
                    live.discard(v)

    def recompute(self, i, todo):
        """(a) Block ``i``'s values not live, recomputed in topological order (staged: the
        nodes ``todo`` too)."""
        live, nfunc, sorted_f, fb = self.live, self.nfunc, self.sorted_f, self.fb
        if self.staged:
            todo = set(np.asarray(todo, np.int64).tolist())
            todo.update(nfunc[f] for f in sorted_f[fb[i]:fb[i + 1]].tolist())
            funcs = sorted((self.ag.func[v] for v in todo if v not in live),
                           key=self.tpos.__getitem__)
        else:
            funcs = sorted_f[fb[i]:fb[i + 1]].tolist()
        for f in funcs:
            f = int(f)
            v = nfunc[f]
            if v not in live:
                self.ops.append(Op("compute", f))
                live.add(v)

    def backwards(self, i):
        """(b) The backward blocks of group ``i`` in reverse topological order, with the ReLU
        exception."""
        append, live, nf, nfunc, nvar = self.ops.append, self.live, self.nf, self.nfunc, self.nvar
        out_var, out_ptr, act, grp_l, ran = self.out_var, self.out_ptr, self.act, self.grp_l, self.ran
        for f in sorted(self.cand[i], key=self.tpos.__getitem__, reverse=True):
            outs = out_var[out_ptr[f + nf]:out_ptr[f + nf + 1]]
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
            exception = self.has_output_tag[f] and y not in live
            if exception:
                append(Op("compute", f))
            append(Op("compute", f + nf, tuple(idx)))
            ran[f] = True
            if exception:
                append(Op("forget", self.var[y], (), "forward"))

    def forget(self, i, keep_next):
        """(c) Block ``i``'s gradients live; (d) forward values of blocks ≥ i forgotten unless
        in B(L_{i-1}) (staged: values of blocks still to do not in ``keep_next`` too); (e)
        gradients not in A(L_{i-1}) forgotten."""
        append, live, var, upper, glive = self.ops.append, self.live, self.var, self.upper, self.glive
        grp_l, min_pred_l, succ_ptr, succ_idx = self.grp_l, self.min_pred_l, self.succ_ptr, self.succ_idx
        block = self.by_node[self.nb[i]:self.nb[i + 1]].tolist()
        glive.update(block)
        upper.update(v for v in block if v in live)
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
        if keep_next is not None:     # values of blocks still to do the next stage does not keep
            keep_next = set(np.asarray(keep_next, np.int64).tolist())
            for v in sorted(live):
                if grp_l[v] < i and v not in keep_next:
                    append(Op("forget", var[v], (), "forward"))
                    live.discard(v)
        for v in sorted(glive):
            if not (i > 0 and min_pred_l[v] <= i - 1):
                append(Op("forget", var[v], (), "backward"))
                glive.discard(v)


# ---- the reference's order and optimizer ------------------------------------------------------
# topsor: the order DP.cpp / DP2.cpp / Chen.cpp compute forward functions in: a DFS over all N
# variables from var 0..N-1, out-edges in insertion order (forward blocks in file order, inputs
# in order), reverse postorder. hoist_forgets: their forget-hoisting optimizer.

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
