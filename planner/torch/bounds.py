"""Lower bounds on a keep set's step price, from the joint graph alone (no partition built).

Pricing a candidate exactly (:func:`planner.torch.front._measured`) partitions the joint graph
into fx modules: three graph copies, a reordering and an fx module per candidate, most of a
front's time on a deep model. Which candidate a budget picks needs exact prices only for the
few that can still win; the rest are ruled out by bounds no partition can beat:

* recomputed FLOPs: the forward ops the backward must run again, walked back from the
  backward ops that reach its outputs through the values not saved (as
  :func:`planner.torch.partition.saved_nodes` walks), each at least once in the partition;
  random ops (whose replay :func:`planner.torch.partition.functionalize_rng` renames), views
  and ``getitem`` left out, as :func:`planner.torch.measure.recompute_flops` leaves them.
* step peak: the forward's liveness replay (:func:`planner.torch.measure._replay`'s rules:
  a storage allocated by its first producer, freed after its last reader, outputs live to
  the end) over the ops the forward module must contain (the ancestors of its outputs and of
  the values saved), and the backward's replay over its backward ops, in the order torch's
  reordering runs them (:meth:`JointIndex._backward_order`: the same for every keep set):
  what they make, exactly, and each saved storage until the last backward op that reads it,
  plus what the backward holds throughout (:func:`planner.torch.measure._held`). The modules
  torch builds hold at least these ops, readers and storages (recomputations, later last
  reads, the RNG states saved beside random ops), and a replay only grows with them: a bound,
  never above the exact price, and equal to it where the backward's peak is set by its own
  ops and the saved tensors (every candidate of examples/torch/gpt.py and mobilenet.py).

:class:`JointIndex` reads the graph once (NumPy arrays of producers, readers and storages);
:meth:`JointIndex.bounds` prices one keep set.
"""

from __future__ import annotations

import operator

import numpy as np

__all__ = ["JointIndex"]


class JointIndex:
    """The joint graph of a training step as arrays, for :meth:`bounds` of many keep sets."""

    def __init__(self, joint, num_fwd_outputs: int):
        from planner.torch.costs import node_flops
        from planner.torch.measure import _storages
        from planner.torch.model_graph import is_random, is_view

        nodes = list(joint.graph.nodes)
        self.nodes = nodes
        self.index = index = {n: i for i, n in enumerate(nodes)}
        n = len(nodes)
        self.tag = [nd.meta.get("partitioner_tag", "") for nd in nodes]
        self.inputs = [[index[a] for a in nd.all_input_nodes] for nd in nodes]
        self.is_placeholder = np.array([nd.op == "placeholder" for nd in nodes], dtype=bool)
        self.names = [nd.name for nd in nodes]
        # flops the exact price counts for a recomputed op (0: an op it never counts)
        self.flops = np.array([node_flops(nd) if (nd.op == "call_function"
                                                  and self.tag[i] == "is_forward"
                                                  and nd.target is not operator.getitem
                                                  and not is_view(nd) and not is_random(nd))
                               else 0 for i, nd in enumerate(nodes)], dtype=np.int64)
        self.view = [nd.op == "call_function" and is_view(nd) for nd in nodes]
        from planner.torch.partition import _saved_random

        self.saved_random = [nd.op == "call_function" and _saved_random(nd) for nd in nodes]
        # storages: ids per node, their bytes; placeholders' storages (parameters, inputs,
        # tangents and views of them) never count
        ids, sizes, node_st = {}, [], []
        for nd in nodes:
            st = []
            for k, b in _storages(nd.meta.get("val")):
                if k not in ids:
                    ids[k] = len(sizes)
                    sizes.append(b)
                st.append(ids[k])
            node_st.append(st)
        self.node_st = node_st
        self.size = np.array(sizes, dtype=np.int64)
        self.free_st = np.zeros(len(sizes), dtype=bool)
        for i in np.flatnonzero(self.is_placeholder):
            self.free_st[node_st[i]] = True
        # (node, storage) pairs: each node produces its own storages, reads its inputs'
        prod = [(i, s) for i in range(n) for s in node_st[i]]
        read = [(i, s) for i in range(n) for a in self.inputs[i] for s in node_st[a]]
        self.prod_node, self.prod_st = (np.array([p[k] for p in prod], dtype=np.int64)
                                        for k in (0, 1))
        self.read_node, self.read_st = (np.array([p[k] for p in read], dtype=np.int64)
                                        for k in (0, 1))
        out = nodes[-1]
        outs = [index[a] if hasattr(a, "op") else None for a in out.args[0]]
        self.fwd_outputs = [i for i in outs[:num_fwd_outputs] if i is not None]
        bwd_outputs = [i for i in outs[num_fwd_outputs:] if i is not None]
        # tangents: autograd holds the root gradient, the caller the loss (measure._held)
        tangent_st = {s for i, nd in enumerate(nodes) if nd.op == "placeholder"
                      and nd.name.startswith("tangents") for s in node_st[i]}
        self.held = 2 * int(self.size[list(tangent_st)].sum()) if tangent_st else 0
        # backward ops that reach the backward's outputs: the partition keeps them all
        live = self._ancestors(bwd_outputs)
        self.live_backward = [i for i in live if nodes[i].op == "call_function"
                              and self.tag[i] == "is_backward"]
        grads = {s for i in bwd_outputs if self.tag[i] == "is_backward"
                 and nodes[i].op == "call_function" for s in node_st[i]}
        grads = [s for s in grads if not self.free_st[s]]
        self.grad_bytes = int(self.size[grads].sum()) if grads else 0
        self._backward_order(grads)

    def _backward_order(self, grads) -> None:
        """The order the partitioned backward runs its backward ops in, and what it holds.

        ``reordering_to_mimic_autograd_engine`` walks the nodes from the first reader of a
        tangent on, inserting each with the ancestors not inserted yet, by graph order: an op
        runs in the batch of its first descendant walked (a ``copy_`` before that point runs
        first), so the backward ops run by (that descendant's position, their own). A
        backward op's descendants are backward ops only, so this order holds whatever the keep
        set, and the recomputations and episode copies placed between them move no backward
        op. Kept here: each backward op's storages live at each position (made by backward
        ops, exact), and the last position a backward op reads each storage (a saved one is
        live until then at least, :meth:`bounds`)."""
        import torch

        nodes, index = self.nodes, self.index
        rows = sorted(self.live_backward)
        inb = set(rows)
        firsts = [index[u] for i, nd in enumerate(nodes) if nd.op == "placeholder"
                  and nd.name.startswith("tangents") for u in nd.users if index[u] in inb]
        first = min(firsts, default=0)
        turn = {}
        for i in reversed(rows):
            t = i if i >= first else len(nodes)
            if i < first and nodes[i].target is torch.ops.aten.copy_.default and firsts:
                t = -1
            for u in nodes[i].users:
                if index[u] in turn:
                    t = min(t, turn[index[u]])
            turn[i] = t
        rows_arr = np.array(rows, dtype=np.int64)
        ranked = rows_arr[np.lexsort((rows_arr, np.array([turn[i] for i in rows],
                                                          dtype=np.int64)))]
        pos = {int(i): k for k, i in enumerate(ranked)}
        m = len(rows)
        made_fwd = np.zeros(len(self.size), dtype=bool)
        for i, nd in enumerate(nodes):
            if i not in inb:
                made_fwd[self.node_st[i]] = True
        first_at = np.full(len(self.size), m, dtype=np.int64)
        last_read = np.full(len(self.size), -1, dtype=np.int64)
        for i in rows:
            k = pos[i]
            for st in self.node_st[i]:
                first_at[st] = min(first_at[st], k)
            for a in self.inputs[i]:
                for st in self.node_st[a]:
                    last_read[st] = max(last_read[st], k)
        last = last_read.copy()
        last[list(grads)] = m
        own = np.flatnonzero((first_at < m) & ~made_fwd & ~self.free_st)
        delta = np.zeros(m + 2, dtype=np.int64)
        np.add.at(delta, first_at[own], self.size[own])
        np.add.at(delta, np.maximum(last[own], first_at[own]) + 1, -self.size[own])
        self.backward_live = np.cumsum(delta)[:m]
        self.backward_last_read = last_read

    def _ancestors(self, start) -> set:
        """Nodes ``start`` reads, directly or not, and ``start`` itself."""
        seen, stack = set(), list(start)
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            stack.extend(self.inputs[i])
        return seen

    def bounds(self, keep) -> tuple:
        """(step peak, recomputed FLOPs) no partition keeping ``keep`` (fx node names) goes
        below (the module docstring says why)."""
        tag, nodes = self.tag, self.nodes
        stack = [a for i in self.live_backward for a in self.inputs[i]
                 if tag[a] == "is_forward"
                 or (self.is_placeholder[a] and not self.names[a].startswith("tangents"))]
        seen, saved, again = set(), [], []
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            if (self.is_placeholder[i] or (self.names[i] in keep and not self.view[i])
                    or self.saved_random[i]):
                saved.append(i)
            else:
                again.append(i)
                stack.extend(self.inputs[i])
        flops = int(self.flops[again].sum()) if again else 0
        saved_st = {s for i in saved if not self.is_placeholder[i] for s in self.node_st[i]}
        saved_st = [s for s in saved_st if not self.free_st[s]]
        saved_bytes = int(self.size[saved_st].sum()) if saved_st else 0
        ends = self.fwd_outputs + [i for i in saved if not self.is_placeholder[i]]
        fw = np.zeros(len(nodes), dtype=bool)
        fw[[i for i in self._ancestors(ends) if not self.is_placeholder[i]
            and nodes[i].op != "output"]] = True
        fw_peak = self._replay(fw, ends)
        bw_peak = max(saved_bytes, self.grad_bytes)
        m = len(self.backward_live)
        if m and saved_st:
            at = self.backward_last_read[saved_st]
            read = at >= 0
            later = np.zeros(m + 1, dtype=np.int64)
            np.add.at(later, at[read], self.size[saved_st][read])
            later = np.cumsum(later[::-1])[::-1]        # saved bytes read at or after each op
            bw_peak = max(bw_peak, int((later[:m] + self.backward_live).max()))
        bw_peak += self.held
        return max(fw_peak, bw_peak), flops

    def _replay(self, mask, ends) -> int:
        """Peak of :func:`planner.torch.measure._replay`'s rules over the nodes in ``mask``
        (joint order), the storages of ``ends`` live to the end."""
        n = len(self.nodes)
        m = len(self.size)
        pm = mask[self.prod_node] & ~self.free_st[self.prod_st]
        first = np.full(m, n, dtype=np.int64)
        np.minimum.at(first, self.prod_st[pm], self.prod_node[pm])
        rm = mask[self.read_node]
        last = np.full(m, -1, dtype=np.int64)
        np.maximum.at(last, self.read_st[rm], self.read_node[rm])
        end_st = [s for i in ends for s in self.node_st[i]]
        last[end_st] = n
        made = first < n
        free = np.maximum(last[made], first[made])
        delta = np.zeros(n + 2, dtype=np.int64)
        np.add.at(delta, first[made], self.size[made])
        np.add.at(delta, free + 1, -self.size[made])
        return int(np.cumsum(delta)[:n + 1].max(initial=0))
