"""Follow the plan where it recomputes a value more than once: one copy per recompute episode.

torch's partition recomputes each forward value the backward needs but does not save once,
before its first use, and holds it until its last use. A plan may instead recompute a block,
forget it, and recompute it again later (an *episode* each time), so that the value is not held
across the backward ops in between. :func:`follow_episodes` rewrites the partitioned backward
graph that way: each backward op reads the copy of a recomputed value from the episode the plan
has running when it computes that op's backward block; a copy (and the forward ops folded into
it, its views, the op's other outputs) is emitted before its first reader in the episode, and fx
frees it after its last one. Where no block is recomputed twice the graph is left untouched.

Times are positions in the plan's schedule: a backward fx op's time is that of the backward
block of the forward op it differentiates (its ``seq_nr``,
:func:`planner.torch.model_graph.seq_lookup`, as the importer attributes its reads), or of the
first piece of that block (``compute b grads...``) that computes a gradient the op feeds; a
block's episodes start at its recomputations. A value torch saves (the plan kept it through the
forward) stays saved until its last use, even where the plan forgets and recomputes it later:
the backward reads the saved tensor, so its recomputation would only add work.
"""

from __future__ import annotations

import bisect
import json

from torch.fx import Node

from planner.torch.model_graph import KEEP, seq_lookup

__all__ = ["plan_times", "follow_episodes"]


def plan_times(g, schedule, joint) -> tuple:
    """(recompute positions per fx node name, block of a ``seq_nr``, position of each
    (backward block, var whose gradient it computes)).

    A recomputation is a forward block's compute once every forward block has run; a
    multi-output op's recomputations are those of all its outputs' blocks (each runs the op).
    A backward block may run in pieces (``compute b grads...``), each for some of its outputs.
    """
    nf = len(g.forward)
    nodes = {n.name: n for n in joint.graph.nodes}
    detail = [json.loads(f.details) for f in g.forward]
    name = [d.get("group", d["node"]) for d in detail]
    seq = [nodes[n].meta.get("seq_nr", -1) if n in nodes else -1 for n in name]
    recompute, grad_at, done = {}, {}, set()
    for pos, op in enumerate(schedule.ops):
        if op.kind != "compute":
            continue
        if op.index >= nf:
            outs = g.functions[op.index].outputs
            for j in op.grads or range(len(outs)):
                grad_at.setdefault((op.index - nf, outs[j]), pos)
        elif len(done) < nf:
            done.add(op.index)
        elif name[op.index] != KEEP:
            recompute.setdefault(name[op.index], []).append(pos)
    real = [i for i, n in enumerate(name) if n != KEEP]
    lookup = seq_lookup([seq[i] for i in real])
    return recompute, (lambda s: real[lookup(s)]), grad_at


def _consumer_times(bw, g, block_of_seq, grad_at, tags, end: int) -> dict:
    """Schedule position at which the plan runs each backward fx op (``end`` for an op of a
    block the schedule never runs).

    An op of backward block ``i`` runs in the first piece of ``i`` that computes a gradient it
    feeds: the gradients leave the block into another block's ops (the gradient of the var that
    block makes) or into the module's outputs (a parameter's or input's gradient).
    """
    nf = len(g.forward)
    producer = {f.outputs[0]: f.index for f in g.forward}
    var = {n: i for i, n in enumerate(g.var_names)}
    nodes = list(bw.graph.nodes)
    out = nodes[-1]
    grad_var = {}               # node -> vars of the step's inputs whose gradient it is
    for k, a in enumerate(out.args[0] if out.op == "output" else ()):
        if isinstance(a, Node) and f"primals_{k + 1}" in var:
            grad_var.setdefault(a, set()).add(var[f"primals_{k + 1}"])
    block = {u: block_of_seq(u.meta.get("seq_nr", -1)) for u in nodes
             if u.op == "call_function" and tags.get(u.name) == "is_backward"}
    first = {}
    for (i, _), pos in grad_at.items():
        first[i] = min(first.get(i, pos), pos)
    feeds, times = {}, {}
    for u in reversed(nodes):
        if u not in block:
            continue
        i = block[u]
        outs = set(g.functions[nf + i].outputs)
        f = set(grad_var.get(u, ()))
        for w in u.users:
            if w in block and block[w] == i:
                f |= feeds[w]
            elif w in block:
                f |= {v for v in outs if producer.get(v) == block[w]}
        feeds[u] = f & outs
        ts = [grad_at[(i, v)] for v in feeds[u] if (i, v) in grad_at]
        times[u] = min(ts) if ts else first.get(i, end)
    return times


def follow_episodes(bw, joint, g, schedule):
    """Rewrite backward module ``bw`` so each recompute episode of the plan has its own copy.

    ``joint``: the joint graph ``bw`` was partitioned from (its node names); ``g``/``schedule``:
    the plan's graph and schedule. Returns the number of nodes copied (0: ``bw`` untouched);
    each copy's ``meta["recompute_of"]`` names the node it copies.
    """
    recompute, block_of_seq, grad_at = plan_times(g, schedule, joint)
    if not any(len(p) > 1 for p in recompute.values()):
        return 0
    tags = {n.name: n.meta.get("partitioner_tag", "") for n in joint.graph.nodes}
    graph = bw.graph
    times = _consumer_times(bw, g, block_of_seq, grad_at, tags, len(schedule.ops))
    made = {}

    def resolve(a, t, tag, before):
        """The copy of recomputed node ``a`` read at time ``t`` in episode ``tag`` (None: the
        partition's own)."""
        if a.op != "call_function" or tags.get(a.name) != "is_forward":
            return a                      # saved, an input, or a backward value
        starts = recompute.get(a.name)
        if starts:                        # a planned block: its own episodes
            k = max(bisect.bisect_left(starts, t) - 1, 0)
            t, tag = starts[k], (a.name, k) if k else None
        ins = {b: resolve(b, t, tag, before) for b in a.all_input_nodes}
        if tag is None and all(b is c for b, c in ins.items()):
            if a > before:                # read first in an earlier piece: emit it there
                before.prepend(a)
            return a
        key = (a.name, tag, tuple(c.name for c in ins.values()))
        if key not in made:
            with graph.inserting_before(before):
                made[key] = graph.node_copy(a, lambda b: ins[b])
            made[key].meta["recompute_of"] = a.name
        return made[key]

    for u in [n for n in graph.nodes if n in times]:
        t = times[u]
        for a in list(u.all_input_nodes):
            c = resolve(a, t, None, u)
            if c is not a:
                u.replace_input_with(a, c)
    if made:
        graph.eliminate_dead_code()
        graph.lint()
        bw.recompile()
    return len(made)
