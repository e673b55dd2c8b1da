"""Families of lower sets of an :class:`~planner.activation_graph.ActivationGraph`.

* :func:`all_lower_sets` -- the exact family (DP.cpp ``make_cut_graph``, FORMAT.md §4.4): every set
  closed under predecessors. Enumerated by the reference's stack-based DFS (pop a set, try nodes
  ``0..n-1`` in order, give each new child the next id and push it), so ``dfs_id`` reproduces the
  reference's discovery ids; the returned family is **sorted by size |L|** (the DPfix order), ties
  kept in discovery order (a stable sort). ∅ is row 0 and V is the last row.
* :func:`articulation_sets` -- Chen's family (§4.6): the lower sets with one boundary node.

This enumeration reproduces the reference's DFS discovery ids (Chen's chain depends on them);
the DP's own families are :mod:`planner.dp_families`, with the same default limit.

Both return a :class:`LowerSets`: ``masks`` (bool [K, n]), ``bits`` (list of Python-int bitsets),
``size``, ``m`` and ``t`` sums (int64 [K]) and ``dfs_id`` (the reference id).

Example (a diamond 0 -> {1, 2} -> 3)::

    >>> from planner.activation_graph import ActivationGraph
    >>> import numpy as np
    >>> ag = ActivationGraph([0, 1, 2, 3], [0, 1, 2, 3], [1, 2, 3, 4], [1, 1, 1, 1],
    ...                      np.array([0, 0, 1, 2]), np.array([1, 2, 3, 3]))
    >>> fam = all_lower_sets(ag)
    >>> [sorted(np.flatnonzero(r).tolist()) for r in fam.masks]
    [[], [0], [0, 1], [0, 2], [0, 1, 2], [0, 1, 2, 3]]
    >>> fam.m.tolist()
    [0, 1, 3, 4, 6, 10]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hgraph.common.errors import HGraphError
from planner.options import DEFAULT_MAX_LOWER_SETS

__all__ = ["LowerSets", "all_lower_sets", "articulation_sets", "DEFAULT_MAX_LOWER_SETS",
           "TooManyLowerSets"]



class TooManyLowerSets(HGraphError):
    """A graph has more lower sets than the caller's limit: the exact family is not built.

    Its own type so that a caller that only *prefers* the exact DP (the PyTorch plan front)
    can skip it without swallowing other errors."""


@dataclass
class LowerSets:
    """A family of lower sets: row k is one set. See the module docstring."""

    masks: np.ndarray
    bits: list
    size: np.ndarray
    m: np.ndarray
    t: np.ndarray
    dfs_id: np.ndarray

    def __len__(self) -> int:
        return len(self.bits)

    def words(self) -> np.ndarray:
        """uint64 [K, ceil(n/64)] packed bitsets (bit i of word i // 64 is node i)."""
        k, n = self.masks.shape
        packed = np.packbits(self.masks, axis=1, bitorder="little")
        pad = (-packed.shape[1]) % 8
        if pad:
            packed = np.pad(packed, ((0, 0), (0, pad)))
        return np.ascontiguousarray(packed).view("<u8").reshape(k, -1)


def _dfs_enumerate(ag, limit):
    """Lower sets as bitsets in the reference's DFS discovery order."""
    n = ag.n
    pred = ag.pred_bits
    succ = ag.succ_bits
    sources = 0
    for v in range(n):
        if pred[v] == 0:
            sources |= 1 << v
    seen = {0: 0}
    order = [0]
    stack = [(0, sources)]           # (set, addable nodes)
    while stack:
        L, addable = stack.pop()
        a = addable
        while a:
            low = a & -a
            a ^= low
            C = L | low
            if C in seen:
                continue
            seen[C] = len(order)
            order.append(C)
            if limit is not None and len(order) > limit:
                raise TooManyLowerSets(f"more than {limit} lower sets; raise the lower-set limit "
                                  f"or use the approximate solver", exit_code=3)
            v = low.bit_length() - 1
            new = addable ^ low
            s = succ[v]
            while s:
                lw = s & -s
                s ^= lw
                w = lw.bit_length() - 1
                if pred[w] & ~C == 0:
                    new |= lw
            stack.append((C, new))
    return order


#: Largest bool matrix (sets x nodes, bytes) a family may occupy.
MAX_MATRIX_BYTES = 2 * 2**30


def _family(ag, bits, dfs_id):
    k = len(bits)
    if k * max(ag.n, 1) > MAX_MATRIX_BYTES:
        raise HGraphError(f"{k} lower sets of {ag.n} nodes need {k * ag.n / 2**30:.1f} GiB as a "
                          f"matrix; use the approximate solver", exit_code=3)
    nbytes = (ag.n + 7) // 8 or 1
    raw = b"".join(b.to_bytes(nbytes, "little") for b in bits)
    masks = np.unpackbits(np.frombuffer(raw, dtype=np.uint8).reshape(k, nbytes), axis=1,
                          bitorder="little")[:, : ag.n].astype(bool)
    size = masks.sum(axis=1).astype(np.int64)
    m = masks.astype(np.int64) @ ag.m if ag.n else np.zeros(k, dtype=np.int64)
    t = masks.astype(np.int64) @ ag.t if ag.n else np.zeros(k, dtype=np.int64)
    return LowerSets(masks, list(bits), size, m.astype(np.int64), t.astype(np.int64),
                     np.asarray(dfs_id, dtype=np.int64))


def all_lower_sets(ag, limit: int | None = DEFAULT_MAX_LOWER_SETS,
                   order: str = "size") -> LowerSets:
    """Every lower set of ``ag``; ``order="size"`` (DPfix, stable) or ``"dfs"`` (DP.cpp ids).

    Raises HGraphError (exit 3) when there are more than ``limit`` sets (``None``: no limit).
    """
    dfs = _dfs_enumerate(ag, limit)
    ids = np.arange(len(dfs), dtype=np.int64)
    fam = _family(ag, dfs, ids)
    if order == "dfs":
        return fam
    if order != "size":
        raise ValueError(f"order must be 'size' or 'dfs', got {order!r}")
    perm = np.argsort(fam.size, kind="stable")
    return LowerSets(fam.masks[perm], [dfs[i] for i in perm.tolist()], fam.size[perm],
                     fam.m[perm], fam.t[perm], ids[perm])


def articulation_sets(ag, family: LowerSets | None = None) -> LowerSets:
    """∅, V and every lower set with exactly one boundary node (Chen.cpp, §4.6), family order."""
    fam = family if family is not None else all_lower_sets(ag, order="dfs")
    nb = ag.boundary_matrix(fam.masks).sum(axis=1)
    keep = (nb == 1) | (fam.size == 0) | (fam.size == ag.n)
    idx = np.flatnonzero(keep)
    return LowerSets(fam.masks[idx], [fam.bits[i] for i in idx.tolist()], fam.size[idx],
                     fam.m[idx], fam.t[idx], fam.dfs_id[idx])
