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

from array import array
from itertools import repeat

import numpy as np

from planner.activation_graph import ActivationGraph
from planner.arrays import byte_array, int_array, ranges
from planner.cg import TAGS
from planner.schedule import COMPUTE, FORGET_BACKWARD, FORGET_FORWARD, Op, Schedule
from planner.slice_state import SliceStarts

__all__ = ["normalize_chain", "groups_of_chain", "emit", "emit_groups", "emit_pieces", "topsor",
           "hoist_forgets", "hoist_piece"]


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
    return Schedule(list(map(tuple.__new__, repeat(Op), ops)))     # each an Op, made in C


def emit_pieces(g, groups: np.ndarray, ag: ActivationGraph, slices):
    """:func:`emit_groups`'s ops before the hoisting, in pieces (lists of ops, each a
    tuple of an Op's fields: :class:`_Emitter`): the forward
    phase of each slice of blocks ``(b0, b1)`` in order, then the backward phase of each in
    reverse — concatenated, the whole emission's ops. Why: a piece needs only what crosses
    into it (the live values and gradients, the backward blocks already run: the emitter's
    sets, handed from piece to piece) and its slice's tables (read on demand, dropped with
    the slice), so the driver never holds the whole op list nor a Python object per node
    (:mod:`planner.sliced`, bench/NOTES_scale.md)."""
    e = _Emitter(g, np.asarray(groups, dtype=np.int64), ag, None, sliced=True)
    for b0, b1 in slices:
        e.tables(b0, b1)
        e.forward(b0, b1)
        yield e.take()
    for b0, b1 in reversed(slices):
        e.tables(b0, b1)
        for i in range(b1 - 1, b0 - 1, -1):
            e.recompute(i, None)
            e.backwards(i)
            e.forget(i, None)
        yield e.take()


class _Emitter:
    """One emission of :func:`emit_groups`: the per-node numbers of the chain (computed once,
    as compact arrays the loops read like lists) and what is live, then the forward pass and
    each backward block's three steps, in the order the reference prints them (the ops in
    :attr:`ops`, each a plain tuple of an :class:`Op`'s four fields: made ~7x cheaper than
    an ``Op(...)``, whose defaults go through a Python ``__new__``; :func:`emit_groups`
    makes them Ops in C at the end, the sliced emission never). ``sliced``: ``cand`` is made a slice of blocks at a time
    (:meth:`tables`, :func:`emit_pieces`); the live sets (``live``, ``upper``, ``glive``)
    and ``ran`` are what one slice hands the next.

    Why a class: the steps share a dozen per-node tables and the live sets; one function held
    them all in 147 lines."""

    def __init__(self, g, grp, ag, keep, sliced: bool = False):
        n = ag.n
        self.k = k = int(grp.max(initial=-1)) + 1
        self.nf = nf = g.num_forward
        node_of_var = ag.node_of_var
        self.ag = ag
        src, dst = ag.src, ag.dst
        # per node: the latest block among successors
        max_succ = np.full(n, -1, np.int64)
        np.maximum.at(max_succ, src, grp[dst])
        ckpt = max_succ > grp                                   # ∂L_i ∩ V_i
        # the backward step at which each node's value (d) and gradient (e) is forgotten:
        # a node of block j stays in B(L_{i-1}) / A(L_{i-1}) for the steps i ≤ j above its
        # interval's low end (planner.slice_state), so each is forgotten at one known step,
        # and step i's forgets are the nodes due then, in id order: a slice of an array
        # where a scan of every live value and gradient (and a value's successors) per
        # block was the emitter's largest cost (bench/NOTES_scale.md)
        st = SliceStarts.of(g, ag, grp)
        due_f, due_g = np.minimum(grp, st.upper_lo), np.minimum(grp, st.glive_lo)
        by_f, by_g = np.argsort(due_f, kind="stable"), np.argsort(due_g, kind="stable")
        self.fdue, self.fdue_ptr = by_f, np.searchsorted(due_f[by_f], np.arange(k + 1))
        self.gdue, self.gdue_ptr = by_g, np.searchsorted(due_g[by_g], np.arange(k + 1))
        order = topsor(g)
        topo_pos = np.empty(nf, dtype=np.int64)
        topo_pos[order] = np.arange(nf)
        node_of_func = node_of_var[g.forward_output]
        self.fgrp = fgrp = grp[node_of_func]
        self.sorted_f = order[np.argsort(fgrp[order], kind="stable")]
        self.fb = np.searchsorted(fgrp[self.sorted_f], np.arange(k + 1))
        self.by_node = np.argsort(grp, kind="stable")           # id order inside a block
        self.nb = np.searchsorted(grp[self.by_node], np.arange(k + 1))
        # the edges by their source's block: the consumers a block's backward may run
        self.by_src = np.argsort(grp[src], kind="stable")
        self.eb = np.searchsorted(grp[src][self.by_src], np.arange(k + 1))
        self.edge_func = ag.func[dst]
        self.staged = keep is not None
        cols = g.columns
        has_output_tag = np.bincount(cols.in_block[cols.in_tag == TAGS.index("output")],
                                     minlength=2 * nf)[nf:] > 0
        fwd_keep = ckpt
        if self.staged:
            kept = np.zeros(n, bool)
            kept[np.asarray(keep, np.int64)] = True
            fwd_keep = ckpt | kept
            self.kept_l = kept.tolist()
        # the per-node and per-function tables the loops read, as compact arrays read like
        # lists (8 bytes an entry, 1 a flag; lists of ints were ~40: bench/NOTES_scale.md)
        # per function output: its node's block (-1: not an activation), what backwards reads
        out_act = g.is_activation[cols.out_var]
        out_grp = np.full(cols.out_var.size, -1, np.int64)
        out_grp[out_act] = grp[node_of_var[cols.out_var[out_act]]]
        self.topo_pos = topo_pos
        for name, arr in dict(var=ag.var, grp_l=grp, nfunc=node_of_func, tpos=topo_pos,
                              out_ptr=cols.out_ptr, out_grp=out_grp).items():
            setattr(self, name, int_array(arr))
        for name, arr in dict(keeps=fwd_keep, has_output_tag=has_output_tag).items():
            setattr(self, name, byte_array(arr))
        self.grp = grp
        if not sliced:
            self.tables()
        self.ops = []
        self.live = set()
        self.ran = bytearray(nf)
        self.upper = set()           # live forward values of nodes in blocks ≥ i
        self.glive = set()           # nodes whose gradient is live

    def tables(self, b0: int = 0, b1: int | None = None) -> None:
        """``cand`` for blocks ``b0 … b1 − 1`` (all by default): the backward blocks that may
        run in each (consumers and producers of its nodes), each block's distinct ones in
        the order they run (reverse topological): one sort of the slice's (block,
        function) pairs, not a set and a sort per block. Made for a slice at a time in the
        sliced emission."""
        b1 = self.k if b1 is None else b1
        fs = self.sorted_f[self.fb[b0]:self.fb[b1]]
        es = self.by_src[self.eb[b0]:self.eb[b1]]
        blk = np.concatenate((self.fgrp[fs], self.grp[self.ag.src[es]]))
        fun = np.concatenate((fs, self.edge_func[es]))
        order = np.lexsort((-self.topo_pos[fun], blk))
        blk, fun = blk[order], fun[order]
        first = np.r_[True, (blk[1:] != blk[:-1]) | (fun[1:] != fun[:-1])]
        blk, fun = blk[first], fun[first].tolist()
        ends = np.searchsorted(blk, np.arange(b0, b1 + 1)).tolist()
        self.cand = {i: fun[ends[i - b0]:ends[i - b0 + 1]] for i in range(b0, b1)}

    def take(self) -> list:
        """The ops emitted since the last take (a piece of the schedule)."""
        ops, self.ops = self.ops, []
        return ops

    def forward(self, b0: int = 0, b1: int | None = None):
        """The forward phase of blocks ``b0 … b1 − 1`` (all by default): each block's
        functions, then its non-checkpoints forgotten."""
        b1 = self.k if b1 is None else b1
        append, live, var, nfunc = self.ops.append, self.live, self.var, self.nfunc
        keeps = self.keeps
        sorted_f, fb, by_node, nb = self.sorted_f, self.fb, self.by_node, self.nb
        for i in range(b0, b1):
            for f in sorted_f[fb[i]:fb[i + 1]].tolist():
                append(("compute", f, (), "forward"))
                live.add(nfunc[f])
            for v in by_node[nb[i]:nb[i + 1]].tolist():
                if not keeps[v] and v in live:
                    append(("forget", var[v], (), "forward"))
                    live.discard(v)
        if self.staged and b1 == self.k:   # checkpoints the stages do not keep: freed after it
            for v in sorted(live):
                if not self.kept_l[v]:
                    append(("forget", var[v], (), "forward"))
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
                self.ops.append(("compute", f, (), "forward"))
                live.add(v)

    def backwards(self, i):
        """(b) The backward blocks of group ``i`` in reverse topological order, with the ReLU
        exception."""
        append, live, nf, nfunc = self.ops.append, self.live, self.nf, self.nfunc
        out_grp, out_ptr, grp_l, ran = self.out_grp, self.out_ptr, self.grp_l, self.ran
        for f in self.cand[i]:
            lo, hi = out_ptr[f + nf], out_ptr[f + nf + 1]
            idx = []
            some_in = False
            first = not ran[f]
            for j, b in enumerate(out_grp[lo:hi]):
                if b == i:                       # an activation of block i
                    idx.append(j)
                    some_in = True
                elif b < 0 and first:            # a parameter's or input's, on the first run
                    idx.append(j)
            y = nfunc[f]
            if not (some_in or (len(idx) == hi - lo and grp_l[y] == i)):
                continue
            exception = self.has_output_tag[f] and y not in live
            if exception:
                append(("compute", f, (), "forward"))
            append(("compute", f + nf, tuple(idx), "forward"))
            ran[f] = True
            if exception:
                append(("forget", self.var[y], (), "forward"))

    def forget(self, i, keep_next):
        """(c) Block ``i``'s gradients live; (d) forward values of blocks ≥ i forgotten unless
        in B(L_{i-1}) (staged: values of blocks still to do not in ``keep_next`` too); (e)
        gradients not in A(L_{i-1}) forgotten. The values and gradients leaving at step
        ``i`` are those due then (:meth:`__init__`); ``upper`` and ``glive`` are what is
        live of them (what a slice hands the next: planner.slice_state)."""
        append, live, var, upper, glive = self.ops.append, self.live, self.var, self.upper, self.glive
        block = self.by_node[self.nb[i]:self.nb[i + 1]].tolist()
        glive.update(block)
        upper.update(v for v in block if v in live)
        for v in self.fdue[self.fdue_ptr[i]:self.fdue_ptr[i + 1]].tolist():
            if v in upper:                   # upper ⊆ live: each path out of live leaves it
                append(("forget", var[v], (), "forward"))
                live.discard(v)
                upper.discard(v)
        if keep_next is not None:     # values of blocks still to do the next stage does not keep
            keep_next = set(np.asarray(keep_next, np.int64).tolist())
            for v in sorted(live):
                if self.grp_l[v] < i and v not in keep_next:
                    append(("forget", var[v], (), "forward"))
                    live.discard(v)
                    upper.discard(v)
        gone = self.gdue[self.gdue_ptr[i]:self.gdue_ptr[i + 1]].tolist()
        glive.difference_update(gone)
        for v in gone:
            append(("forget", var[v], (), "backward"))


# ---- the reference's order and optimizer ------------------------------------------------------
# topsor: the order DP.cpp / DP2.cpp / Chen.cpp compute forward functions in: a DFS over all N
# variables from var 0..N-1, out-edges in insertion order (forward blocks in file order, inputs
# in order), reverse postorder. hoist_forgets: their forget-hoisting optimizer.

def topsor(g) -> np.ndarray:
    """Forward function indices in the reference's DFS topological order of their outputs."""
    n = g.num_vars
    a, y = g.forward_edges                         # edge a -> output, in insertion order
    order = np.argsort(a, kind="stable")
    # array('q'), read like lists at 8 bytes an entry (lists of ints were ~40: 0.27 KB an
    # activation, the sliced emission's peak; bench/NOTES_scale.md)
    succ = array("q", y[order].astype(np.int64).tobytes())
    ptr = array("q", np.concatenate(([0], np.cumsum(np.bincount(a, minlength=n))))
                .astype(np.int64).tobytes())
    seen = bytearray(n)
    post = array("q")
    for root in range(n):
        if seen[root]:
            continue
        seen[root] = 1
        su, sk = array("q", (root,)), array("q", (ptr[root],))     # the stack: (var, next edge)
        while su:
            u, k = su[-1], sk[-1]
            end = ptr[u + 1]
            while k < end and seen[succ[k]]:
                k += 1
            if k < end:
                sk[-1] = k + 1
                w = succ[k]
                seen[w] = 1
                su.append(w)
                sk.append(ptr[w])
            else:
                su.pop()
                sk.pop()
                post.append(u)
    order = np.frombuffer(post, dtype=np.int64)[::-1]
    prod = g.producer[order]
    return prod[prod >= 0]


def hoist_forgets(g, ops: list) -> list:
    """The reference's optimizer: move each forget up to just after the last earlier compute
    that reads or produces the same value (forgets pass other forgets).

    Equivalent to the reference's bubbling walk, vectorised: a forget lands right after its
    anchor compute (or at the front), and forgets sharing an anchor end up in reverse order.
    The anchor is found by one ``searchsorted`` of every forget's (key, position) among the
    computes' touches — a key is a var, or var + N for a gradient (:func:`_anchors`).
    """
    if not ops:
        return []
    h = _anchors(g, ops)
    return [ops[i] for i in h.order(np.ones(len(ops), bool)).tolist()]


def hoist_piece(g, ops: list, last_touch: np.ndarray, line0: int):
    """:func:`hoist_forgets` of one piece of a schedule whose earlier pieces are written:
    ``(columns, moved)``, the piece's hoisted ops as columns (``code, index, glen, gflat``:
    :func:`planner.schedule.columns_text`). A forget whose anchor is in the piece lands as
    there; one whose value was last touched in an earlier piece leaves it: ``moved`` holds
    those, as three arrays (anchor line, position in the piece, key: var, + N for a
    gradient), the anchor line read from ``last_touch``
    (per key, the output line of its last touching compute so far; −1: the front), which
    is then updated with this piece's computes (their lines from ``line0``). The pieces'
    lines with the moved forgets put back after their anchors, each anchor's latest first,
    are :func:`hoist_forgets` of the whole (planner/sliced.py; tests/test_sliced.py)."""
    empty = np.zeros(0, np.int64)
    if not ops:
        return (np.zeros(0, np.int8), empty, empty, empty), (empty, empty, empty)
    h = _anchors(g, ops)
    order = h.order(h.hit | h.is_c)
    cross = h.fpos[~h.hit[h.fpos]]
    moved = (last_touch[h.key[cross]], cross, h.key[cross])
    line = np.empty(len(ops), np.int64)
    line[order] = line0 + np.arange(order.size)
    if h.touch.size:
        last = np.r_[h.touch[1:] // h.span != h.touch[:-1] // h.span, True]
        last_touch[h.touch[last] // h.span] = line[h.touch[last] % h.span]
    return h.columns(order), moved


class _anchors:
    """Every op's anchor for the forget hoisting: ``is_c`` (a compute), ``key`` (a forget's
    var, + N for a gradient), ``hit`` (a forget with a touching compute before it),
    ``group`` (a compute's ordinal + 1; a forget's anchor's, 0 without one) and the sorted
    touches (``key * span + position``), which :meth:`order` sorts the ops by."""

    def __init__(self, g, ops: list):
        nf, n, cols = g.num_forward, g.num_vars, g.columns
        nops = len(ops)
        # an op's fields by position: an Op or the emitter's plain tuple of them
        self.is_c = is_c = np.fromiter((op[0] == "compute" for op in ops), bool, nops)
        index = np.fromiter((op[1] for op in ops), np.int64, nops)
        cpos = np.flatnonzero(is_c)
        self.fpos = fpos = np.flatnonzero(~is_c)
        f = index[cpos]
        # touches: every input of a compute, a forward compute's output, a backward one's grads
        keys = cols.in_var + np.where(cols.in_grad, n, 0)
        cnt = cols.k[f]
        first = ranges(cols.in_ptr[f], cnt)
        t_key = [keys[first], cols.out_var[cols.out_ptr[f[f < nf]]]]
        t_pos = [np.repeat(cpos, cnt), cpos[f < nf]]
        bpos = cpos[f >= nf]
        grads = [ops[i][2] for i in bpos.tolist()]
        glen = np.fromiter(map(len, grads), np.int64, len(grads))
        j = np.fromiter((x for gr in grads for x in gr), np.int64, int(glen.sum()))
        t_key.append(cols.out_var[np.repeat(cols.out_ptr[index[bpos]], glen) + j] + n)
        t_pos.append(np.repeat(bpos, glen))
        self.span = span = nops + 1
        self.touch = touch = np.sort(np.concatenate(t_key) * span + np.concatenate(t_pos))
        which_bwd = np.fromiter((ops[i][3] == "backward" for i in fpos.tolist()), bool,
                                fpos.size)
        self.index, self.bpos, self.glen, self.gflat = index, bpos, glen, j
        self.which_bwd = which_bwd
        self.key = key = np.zeros(nops, np.int64)
        key[fpos] = index[fpos] + np.where(which_bwd, n, 0)
        at = np.searchsorted(touch, key[fpos] * span + fpos) - 1
        hit = (at >= 0) & (touch[np.maximum(at, 0)] // span == key[fpos])
        self.hit = np.zeros(nops, bool)
        self.hit[fpos] = hit
        ordinal = np.cumsum(is_c) - 1                  # computes up to each op, minus one
        self.group = group = np.empty(nops, np.int64)
        group[cpos] = ordinal[cpos] + 1
        group[fpos] = np.where(hit, ordinal[touch[np.maximum(at, 0)] % span] + 1, 0)

    def columns(self, order: np.ndarray) -> tuple:
        """The ops at positions ``order`` as columns (``code, index, glen, gflat``:
        :func:`planner.schedule.columns_text`)."""
        nops = self.is_c.size
        code = np.full(nops, COMPUTE, np.int8)
        code[self.fpos] = np.where(self.which_bwd, FORGET_BACKWARD, FORGET_FORWARD)
        glen = np.zeros(nops, np.int64)
        glen[self.bpos] = self.glen
        start = np.cumsum(glen) - glen
        return code[order], self.index[order], glen[order], \
            self.gflat[ranges(start[order], glen[order])]

    def order(self, keep: np.ndarray) -> np.ndarray:
        """The positions of the ops ``keep`` selects, hoisted: each group its compute, then
        its forgets last-first."""
        pos = np.flatnonzero(keep)
        is_c = self.is_c[pos]
        return pos[np.lexsort((np.where(is_c, 0, -pos), ~is_c, self.group[pos]))]
