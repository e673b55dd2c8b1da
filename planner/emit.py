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

:func:`recover_chain` reads the chain back from a reference schedule (checkpoints are implicit
there); ``emit(recover_chain(s)) == s`` holds for all 47 schedules in ../shared/reference.

``topsor`` is the reference's order: a DFS over all N variables from var 0..N-1, out-edges in
insertion order (forward blocks in file order, inputs in order), reverse postorder.

Example::

    >>> from planner import cg, chen                                      # doctest: +SKIP
    >>> g = cg.read("../shared/graphs/cg_vgg19.txt")                      # doctest: +SKIP
    >>> sched = emit(g, chen.solve(g, budget=10**11).chain)               # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from planner.activation_graph import ActivationGraph
from planner.schedule import Op, Schedule

__all__ = ["topsor", "normalize_chain", "emit", "hoist_forgets", "recover_chain"]


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


def emit(g, chain, ag: ActivationGraph | None = None, optimize: bool = True) -> Schedule:
    """The reference schedule of ``chain`` on ``g`` (optimizer on unless ``optimize=False``).

    The chain is checked (strictly increasing lower sets ending at V) and turned into the block
    index of every node; :func:`planner.emit_scale.emit_groups` then emits in time linear in
    the graph (one emitter for every size, equal op for op to the reference's).
    """
    from planner.emit_scale import emit_groups

    ag = ag if ag is not None else ActivationGraph.from_cg(g)
    grp = np.zeros(ag.n, dtype=np.int64)
    prev = np.zeros(ag.n, dtype=bool)
    for i, m in enumerate(normalize_chain(ag, chain)):
        grp[m & ~prev] = i
        prev = m
    return emit_groups(g, grp, ag, optimize=optimize)


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


def recover_chain(g, schedule, ag: ActivationGraph | None = None, search: bool = True,
                  max_passes: int = 3) -> list:
    """The chain of lower sets behind a reference schedule (best effort; for cross-checks).

    Checkpoints are implicit in a schedule, but the backward phase shows the blocks: block i's
    recomputations (forward computes that are not a ReLU-exception pair ``compute f`` +
    ``compute f+M/2``) come right before its backward computes, and a backward compute lists the
    gradients of the activations of its own block. So the activation gradients produced between
    two recomputation runs form a block. A block whose nodes are all checkpoints has no
    recomputation and merges with its neighbour: inside a segment, the recomputed nodes' block is
    taken whole and every later split point that leaves a lower set is used (these blocks hold
    only checkpoints). With ``search`` (the default) the split points
    inside segments that keep lower sets are toggled greedily (up to ``max_passes`` sweeps) while
    that lengthens the agreement of :func:`emit`'s output with ``schedule`` (common prefix +
    suffix). Callers compare ``emit(recover_chain(s)) == s`` to know whether it succeeded.

    Returns bool masks (∅ excluded, ending with V).
    """
    ag = ag if ag is not None else ActivationGraph.from_cg(g)
    nf = len(g.forward)
    ops = schedule.ops if hasattr(schedule, "ops") else list(schedule)
    comps = [op for op in ops if op.kind == "compute"]
    first_bw = nf                           # the forward phase computes each function once
    sinks = ag.sinks.tolist()
    segments = []
    current = []
    prev_backward = True
    produced = np.zeros(ag.n, dtype=bool)
    recomputed = np.zeros(ag.n, dtype=bool)
    i = first_bw
    if (len(comps) > first_bw + 1 and comps[first_bw].index < nf
            and comps[first_bw + 1].index < nf
            and ag.node_of_var[g.forward[comps[first_bw].index].outputs[0]] in sinks):
        segments.append([])                 # the last block is the loss alone
        i += 1
    while i < len(comps):
        op = comps[i]
        if op.index < nf:
            nxt = comps[i + 1] if i + 1 < len(comps) else None
            y = int(ag.node_of_var[g.forward[op.index].outputs[0]])
            if nxt is not None and nxt.index == op.index + nf and produced[y]:
                pass                    # ReLU-exception pair: y's block was processed already
            else:
                recomputed[y] = True
                if prev_backward and current:
                    segments.append(current)
                    current = []
            prev_backward = False
        else:
            bw = g.functions[op.index]
            for j in op.grads:
                v = ag.node_of_var[bw.outputs[j]]
                if v >= 0:
                    current.append(int(v))
                    produced[v] = True
            prev_backward = True
        i += 1
    if current:
        segments.append(current)
    if segments:                # sinks (the loss) get no gradient: they belong to the last block
        segments[0] = np.flatnonzero(~produced).tolist() + segments[0]
    boundaries = []                         # lower sets between segments, highest first
    candidates = []                         # lower sets inside segments (split points)
    structured = set()                      # the recomputed block whole, the rest one by one
    done = np.zeros(ag.n, dtype=bool)
    for seg in segments:
        top = ~done
        boundaries.append(top)
        seg = list(dict.fromkeys(seg))
        below = top.copy()
        below[seg] = False
        last_rec = max((q for q, v in enumerate(seg) if recomputed[v]), default=-1)
        for p in range(1, len(seg)):
            low = below.copy()
            low[seg[p:]] = True
            if ag.is_lower_set(low):
                if p > last_rec:
                    structured.add(len(candidates))
                candidates.append(low)
        done = ~below
    boundaries = [b for b in boundaries if b.any()]

    def chain_of(chosen):
        sets = boundaries + [candidates[c] for c in sorted(chosen)]
        return sorted(sets, key=lambda m: int(m.sum()))

    if not search or not candidates:
        return chain_of(structured)
    want = schedule.dumps().split("\n")

    def score(chosen):
        got = emit(g, chain_of(chosen), ag).dumps().split("\n")
        if got == want:
            return None
        pre = next(i for i, (x, y) in enumerate(zip(got + [None], want + [""])) if x != y)
        suf = next(i for i, (x, y) in enumerate(zip(got[::-1] + [None], want[::-1] + [""]))
                   if x != y)
        return pre + suf

    chosen, best = set(), score(set())
    for start in (structured, set(range(len(candidates)))):
        sc = score(start)
        if sc is None or (best is not None and sc > best):
            chosen, best = set(start), sc
    for _ in range(max_passes):
        if best is None:
            break
        improved = False
        for c in range(len(candidates)):
            trial = chosen ^ {c}
            sc = score(trial)
            if sc is None or sc > best:
                chosen, best, improved = trial, sc, True
                if sc is None:
                    break
        if not improved:
            break
    return chain_of(chosen)
