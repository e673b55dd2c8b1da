"""The planner's one graph type (its IR): FORMAT.md §4.1's DAG of activations, with per-node
memory m and cost t.

Every pass of :func:`planner.plan` sees this type: the engine analyses, the DP families and
loops (in the DP's memory units: :meth:`ActivationGraph.with_ratio`, a view sharing the
arrays, not a second graph), Chen's chain, the MILP, the emitter, the certificate and the
report. :class:`planner.dp_families.DPGraph` is the same type built from bare arrays (tests
and benches: node ``k`` stands for itself).

The reference builds a DAG over all variables (edge ``a -> out(f)`` for every input ``a`` of every
forward block ``f``) and deletes every node without a predecessor -- parameters, model inputs and
labels. What is left is one node per forward function. Nodes are numbered in **ascending original
variable id**; that order drives the exact DP's lower-set enumeration and tie-breaking, so it is kept
here exactly.

Sets of nodes are passed either as a bool mask of length ``n`` or as a bitset (a Python ``int``,
bit ``i`` = node ``i``); every helper accepts both and returns the same kind it was given
(bool masks for masks, ints for ints). Lower-set definitions (§4.2):

* ``boundary(L)`` -- ∂L = nodes of L with a successor outside L;
* ``above(L)``    -- A(L) = successors of L outside L;
* ``below(L)``    -- B(L) = predecessors of A(L) outside L (A ∩ B may be non-empty);
* ``mem(X)``, ``cost(X)`` -- sums of m and t.

Example::

    >>> from planner import synth
    >>> ag = ActivationGraph.from_cg(synth.build(layers=2, heads=2))
    >>> ag.n, ag.num_edges, int(ag.t.sum())
    (40, 53, 40)
"""

from __future__ import annotations

import numpy as np

from planner.arrays import csr, distinct

__all__ = ["ActivationGraph"]


class ActivationGraph:
    """Activations of a computational graph as a DAG, in ascending var-id order.

    Attributes (NumPy, length ``n`` unless noted):

    * ``var`` -- original variable id of each node (ascending);
    * ``node_of_var`` -- int64 [N]: node index of a variable, -1 for parameters/inputs;
    * ``func`` -- forward function index producing each node;
    * ``bytes`` -- exact bytes; ``m`` -- memory in the chosen units (``bytes // ratio``);
    * ``t`` -- cost (Conv = 10, else 1);
    * ``src``, ``dst`` -- the edges (deduplicated, sorted by (src, dst));
    * ``succ_indptr``/``succ_indices`` and ``pred_indptr``/``pred_indices`` -- CSR adjacency;
    * ``pred_bits``, ``succ_bits`` -- list[int]: the same adjacency as bitsets (for enumeration);
    * ``reads_output`` -- bool [n]: the node's backward function reads the node's own output
      (an ``output`` tag), so its value stays live until that backward runs;
    * ``grad_writes`` -- ``(node, var, bytes)``, int64 [P] each: every gradient of a parameter
      or model input (a non-activation) that a node's backward function writes, once per
      (node, variable). Those gradients are never freed. Both are what the replay holds beyond
      the DP's ``m(A) + m(B)`` (:mod:`planner.analyses.local_stats`, ``left_out``); a graph
      without a cg file behind it (:class:`~planner.dp_families.DPGraph`) has none.
    """

    def __init__(self, var, func, nbytes, t, src, dst, ratio: int = 1, names=None):
        self.var = np.asarray(var, dtype=np.int64)
        self.func = np.asarray(func, dtype=np.int64)
        self.bytes = np.asarray(nbytes, dtype=np.int64)
        self.t = np.asarray(t, dtype=np.int64)
        self.ratio = int(ratio)
        self.m = self.bytes // self.ratio
        self.n = len(self.var)
        n = self.n
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        if src.size:
            pairs = distinct(src * n + dst)
            src, dst = pairs // n, pairs % n
        self.src, self.dst = src, dst
        self.succ_indptr, self.succ_indices = csr(src, dst, n)
        self.pred_indptr, self.pred_indices = csr(dst, src, n)
        self.names = names
        self._pred_bits = self._succ_bits = None
        self.node_of_var = np.full(int(self.var.max()) + 1 if n else 0, -1, dtype=np.int64)
        self.node_of_var[self.var] = np.arange(n)
        self.reads_output = np.zeros(n, bool)
        self.grad_writes = tuple(np.zeros(0, np.int64) for _ in range(3))

    @classmethod
    def from_cg(cls, g, ratio: int = 1) -> "ActivationGraph":
        """Build from a :class:`planner.cg.ComputationalGraph`; ``ratio`` scales m (units.py)."""
        var = g.activations
        node_of_var = np.full(g.num_vars, -1, dtype=np.int64)
        node_of_var[var] = np.arange(len(var))
        func = g.producer[var]
        t = g.forward_costs[func]
        a, y = (node_of_var[x] for x in g.forward_edges)
        ag = cls(var, func, g.var_bytes[var], t, a[a >= 0], y[a >= 0], ratio=ratio)
        ag.node_of_var = node_of_var
        ag.reads_output, ag.grad_writes = _backward_terms(g, var, func)
        return ag

    def with_ratio(self, ratio: int) -> "ActivationGraph":
        """The same graph with memory scaled by another ratio (shares the arrays)."""
        other = object.__new__(ActivationGraph)
        other.__dict__.update(self.__dict__)
        other.ratio = int(ratio)
        other.m = self.bytes // other.ratio
        return other

    # ---- adjacency ---------------------------------------------------------------------------
    @property
    def num_edges(self) -> int:
        return int(self.src.size)

    @property
    def words(self) -> int:
        """uint64 words of an n-bit row (the DP's dense bitsets)."""
        return max(1, (self.n + 63) // 64)

    def succs_csr(self):
        """``(indptr, succs)``: node ``v``'s successors are ``succs[indptr[v]:indptr[v+1]]``."""
        return self.succ_indptr, self.succ_indices

    def successors(self, v: int) -> np.ndarray:
        return self.succ_indices[self.succ_indptr[v]:self.succ_indptr[v + 1]]

    def predecessors(self, v: int) -> np.ndarray:
        return self.pred_indices[self.pred_indptr[v]:self.pred_indptr[v + 1]]

    @property
    def pred_bits(self) -> list:
        if self._pred_bits is None:
            self._pred_bits = self._bits_of(self.pred_indptr, self.pred_indices)
        return self._pred_bits

    @property
    def succ_bits(self) -> list:
        if self._succ_bits is None:
            self._succ_bits = self._bits_of(self.succ_indptr, self.succ_indices)
        return self._succ_bits

    def _bits_of(self, indptr, indices) -> list:
        out = [0] * self.n
        ptr = indptr.tolist()
        idx = indices.tolist()
        for v in range(self.n):
            b = 0
            for u in idx[ptr[v]:ptr[v + 1]]:
                b |= 1 << u
            out[v] = b
        return out

    @property
    def sinks(self) -> np.ndarray:
        return np.flatnonzero(np.diff(self.succ_indptr) == 0)

    @property
    def all_bits(self) -> int:
        return (1 << self.n) - 1

    # ---- set conversions ---------------------------------------------------------------------
    def to_mask(self, x) -> np.ndarray:
        """bool [n] mask from a bitset int, a mask, or an iterable of node indices."""
        if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
            x = int(x)
            raw = x.to_bytes((self.n + 7) // 8 or 1, "little")
            bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")
            return bits[: self.n].astype(bool)
        arr = np.asarray(x)
        if arr.dtype == bool:
            return arr
        mask = np.zeros(self.n, dtype=bool)
        mask[arr.astype(np.int64)] = True
        return mask

    def to_bits(self, x) -> int:
        """Bitset int from a mask, an int, or an iterable of node indices."""
        if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
            return int(x)
        mask = self.to_mask(x)
        return int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")

    def _as_kind(self, mask: np.ndarray, like):
        return self.to_bits(mask) if isinstance(like, (int, np.integer)) else mask

    # ---- lower-set quantities ----------------------------------------------------------------
    def is_lower_set(self, L) -> bool:
        mask = self.to_mask(L)
        return not np.any(mask[self.dst] & ~mask[self.src])

    def boundary(self, L):
        """∂L: nodes of L with some successor outside L."""
        mask = self.to_mask(L)
        out = np.zeros(self.n, dtype=bool)
        cut = mask[self.src] & ~mask[self.dst]
        out[self.src[cut]] = True
        return self._as_kind(out, L)

    def above(self, L):
        """A(L) = δ⁺(L) \\ L: successors of L outside L."""
        mask = self.to_mask(L)
        out = np.zeros(self.n, dtype=bool)
        cut = mask[self.src] & ~mask[self.dst]
        out[self.dst[cut]] = True
        return self._as_kind(out, L)

    def below(self, L):
        """B(L) = δ⁻(A(L)) \\ L: predecessors of A(L) outside L."""
        mask = self.to_mask(L)
        a = self.to_mask(self.above(mask))
        out = np.zeros(self.n, dtype=bool)
        e = a[self.dst] & ~mask[self.src]
        out[self.src[e]] = True
        return self._as_kind(out, L)

    def mem(self, X) -> int:
        """m(X) in the graph's units."""
        return int(self.m[self.to_mask(X)].sum())

    def cost(self, X) -> int:
        """t(X)."""
        return int(self.t[self.to_mask(X)].sum())

    def boundary_matrix(self, masks: np.ndarray) -> np.ndarray:
        """∂L for many sets at once: bool [K, n] from bool [K, n] (vectorised over edges)."""
        masks = np.asarray(masks, dtype=bool)
        out = np.zeros_like(masks)
        if self.src.size == 0:
            return out
        cut = masks[:, self.src] & ~masks[:, self.dst]           # [K, E], edges sorted by src
        starts = self.succ_indptr[:-1]
        has = np.diff(self.succ_indptr) > 0
        red = np.logical_or.reduceat(cut, starts[has], axis=1)
        out[:, has] = red
        return out

    def topological_order(self) -> np.ndarray:
        """Nodes in a topological order (Kahn's algorithm; smallest ready node first is not
        promised). Linear time: one pass over the CSR lists."""
        indeg = np.diff(self.pred_indptr).tolist()
        ptr = self.succ_indptr.tolist()
        succ = self.succ_indices.tolist()
        stack = [v for v in range(self.n) if indeg[v] == 0]
        out = []
        while stack:
            u = stack.pop()
            out.append(u)
            for w in succ[ptr[u]:ptr[u + 1]]:
                indeg[w] -= 1
                if indeg[w] == 0:
                    stack.append(w)
        return np.asarray(out, dtype=np.int64)

    def chain_model(self, chain) -> dict:
        """The DP's model quantities of a chain of lower sets (FORMAT.md §4.2), in graph units.

        ``chain``: masks / bitsets / node lists, ∅ optional, ending with V. Returns ``blocks`` (k),
        ``recompute_cost`` (Σ t(Vi \\ ∂Li)), ``peak`` (max_i ckpt_<i + 2 m(Vi) + m(A(Li)) + m(B(Li)),
        A ∩ B counted twice), ``ckpt`` (Σ m(∂Li ∩ Vi)) and ``checkpoints`` (bool [n]).
        """
        masks = [self.to_mask(c) for c in chain]
        masks = [m for m in masks if m.any()]
        prev = np.zeros(self.n, dtype=bool)
        ckpt = peak = rec = 0
        cks = np.zeros(self.n, dtype=bool)
        for m in masks:
            block = m & ~prev
            w = self.to_mask(self.boundary(m)) & block
            term = (ckpt + 2 * int(self.m[block].sum()) + self.mem(self.above(m))
                    + self.mem(self.below(m)))
            peak = max(peak, term)
            rec += int(self.t[block & ~w].sum())
            ckpt += int(self.m[w].sum())
            cks |= w
            prev = m
        return {"blocks": len(masks), "recompute_cost": rec, "peak": peak, "ckpt": ckpt,
                "checkpoints": cks}


def _backward_terms(g, var: np.ndarray, func: np.ndarray):
    """``(reads_output, grad_writes)`` of :class:`ActivationGraph` from the backward function
    of each node (``func + num_forward``, FORMAT.md §4.7): one pass over those functions'
    input and output columns, no loop per node."""
    from planner.arrays import ranges
    from planner.cg import TAGS

    n, c = var.size, g.columns
    b = func + g.num_forward
    cnt = c.in_ptr[b + 1] - c.in_ptr[b]
    at = ranges(c.in_ptr[b], cnt)
    row = np.repeat(np.arange(n), cnt)
    reads = np.zeros(n, bool)
    reads[row[(c.in_tag[at] == TAGS.index("output")) & (c.in_var[at] == var[row])]] = True
    cnt = c.out_ptr[b + 1] - c.out_ptr[b]
    out = c.out_var[ranges(c.out_ptr[b], cnt)].astype(np.int64)
    row = np.repeat(np.arange(n), cnt)
    keep = ~np.asarray(g.is_activation, bool)[out]
    key = distinct(row[keep] * int(g.num_vars) + out[keep])   # (node, variable) once
    node, gvar = key // int(g.num_vars), key % int(g.num_vars)
    return reads, (node, gvar, np.asarray(g.var_bytes, np.int64)[gvar])
