"""Graph: vertices ``0..n-1``, directed weighted edges and named vertex columns, all NumPy.

The edge arrays are kept in two CSR orders: out-edges (sorted by source, for push) and in-edges
(sorted by destination). Edges keep their input order among edges of the same source (a stable
sort), so anything that folds over a vertex's out-edges does it in a fixed order.

Example::

    >>> import hgraph
    >>> g = hgraph.Graph.from_edges([0, 0, 1], [1, 2, 2], weights=[4.0, 1.0, 2.0])
    >>> g.n, g.num_edges
    (3, 3)
    >>> g.out_degree
    array([2, 1, 0])
    >>> g.out_indices[g.out_indptr[0]:g.out_indptr[1]]      # vertex 0's successors
    array([1, 2])
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from hgraph.common.errors import HGraphError


def _stable_order(keys: np.ndarray) -> np.ndarray:
    """A stable argsort of vertex ids: already-sorted input costs one pass; otherwise one
    (key, position) int64 sort, which is several times faster than NumPy's stable argsort."""
    m = len(keys)
    if m == 0 or bool(np.all(keys[1:] >= keys[:-1])):
        return np.arange(m, dtype=np.int64)
    if m < 2**31 and int(keys.max()) < 2**31:
        packed = (keys.astype(np.int64) << 32) | np.arange(m, dtype=np.int64)
        packed.sort()
        return packed & 0xFFFFFFFF
    return np.argsort(keys, kind="stable")


def _csr(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, stable order) grouping edge positions by ``keys`` (vertex ids in ``0..n-1``)."""
    order = _stable_order(keys)
    counts = np.bincount(keys, minlength=n)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, order


class Graph:
    """A directed graph on vertices ``0..n-1`` with float64 edge weights and vertex columns.

    Attributes: ``n``, ``num_edges``; the edge list ``src``, ``dst``, ``weights`` (input order);
    CSR of out-edges ``out_indptr``/``out_indices``/``out_weights`` and of in-edges
    ``in_indptr``/``in_indices``/``in_weights``; ``out_degree``, ``in_degree``; ``columns``
    (name -> array of length ``n``).
    """

    def __init__(self, src, dst, weights=None, n: int | None = None,
                 columns: Mapping[str, np.ndarray] | None = None):
        src = np.asarray(src)
        dst = np.asarray(dst)
        if src.shape != dst.shape or src.ndim != 1:
            raise HGraphError(f"src and dst must be 1-D arrays of one length, got shapes "
                              f"{src.shape} and {dst.shape}")
        if len(src) and (src.dtype.kind not in "iu" or dst.dtype.kind not in "iu"):
            if not (np.all(np.mod(src, 1) == 0) and np.all(np.mod(dst, 1) == 0)):
                raise HGraphError("vertex ids must be integers")
        src = src.astype(np.int64, copy=False)
        dst = dst.astype(np.int64, copy=False)
        if weights is None:
            weights = np.ones(len(src), dtype=np.float64)
        else:
            weights = np.asarray(weights, dtype=np.float64)
            if weights.shape != src.shape:
                raise HGraphError(f"weights has shape {weights.shape}, expected {src.shape}")
        top = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
        if n is None:
            n = top
        n = int(n)
        if len(src) and (min(int(src.min()), int(dst.min())) < 0 or top > n):
            raise HGraphError(f"edge endpoints must lie in 0..{n - 1}")
        self.n = n
        self.src, self.dst, self.weights = src, dst, weights
        self.out_indptr, order = _csr(src, n)
        self.out_indices = dst[order]
        self.out_weights = weights[order]
        self.out_edge_ids = order
        self.out_degree = np.diff(self.out_indptr)
        self.in_degree = np.bincount(dst, minlength=n)
        self._in = None
        self.columns: dict[str, np.ndarray] = {}
        for name, column in (columns or {}).items():
            column = np.asarray(column)
            if len(column) != n:
                raise HGraphError(f"column {name!r} has {len(column)} rows, the graph has {n} vertices")
            self.columns[name] = column

    @classmethod
    def from_edges(cls, src, dst, weights=None, n: int | None = None,
                   columns: Mapping[str, np.ndarray] | None = None) -> "Graph":
        """The graph of edges ``src[i] -> dst[i]`` (weight ``weights[i]``, default 1.0)."""
        return cls(src, dst, weights=weights, n=n, columns=columns)

    def _in_csr(self):
        if self._in is None:
            indptr, order = _csr(self.dst, self.n)
            self._in = (indptr, self.src[order], self.weights[order])
        return self._in

    @property
    def in_indptr(self) -> np.ndarray:
        """CSR of in-edges (built on first use): sources of ``v`` are
        ``in_indices[in_indptr[v]:in_indptr[v+1]]`` in input order."""
        return self._in_csr()[0]

    @property
    def in_indices(self) -> np.ndarray:
        return self._in_csr()[1]

    @property
    def in_weights(self) -> np.ndarray:
        return self._in_csr()[2]

    @property
    def num_edges(self) -> int:
        return len(self.src)

    def with_columns(self, **columns) -> "Graph":
        """The same graph with more (or replaced) vertex columns; the edge arrays are shared."""
        g = object.__new__(Graph)
        g.__dict__.update(self.__dict__)
        g.columns = dict(self.columns)
        for name, column in columns.items():
            column = np.asarray(column)
            if len(column) != self.n:
                raise HGraphError(f"column {name!r} has {len(column)} rows, the graph has {self.n} vertices")
            g.columns[name] = column
        return g

    def __repr__(self) -> str:
        cols = f", columns={sorted(self.columns)}" if self.columns else ""
        return f"Graph(n={self.n}, num_edges={self.num_edges}{cols})"
