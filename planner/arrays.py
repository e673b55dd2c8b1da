"""NumPy helpers the planner's hot paths share: where runs of equal keys start, distinct values,
the indices of many ranges at once.

:func:`distinct` is ``np.unique(a)`` without its cost on a short command: NumPy 2's
``np.unique`` (without ``return_index``/``return_inverse``) asks ``np.ma.is_masked``, which
imports ``numpy.ma`` — a noticeable share of planning a small graph from the command line
(bench/NOTES_scale.md).

Example::

    >>> import numpy as np
    >>> run_starts(np.array([3, 3, 5, 7, 7])).tolist(), distinct(np.array([7, 3, 7, 5])).tolist()
    ([0, 2, 3], [3, 5, 7])
    >>> ranges(np.array([10, 4, 7]), np.array([2, 0, 3])).tolist()   # 10..11, nothing, 7..9
    [10, 11, 7, 8, 9]
    >>> indptr, succ = csr(np.array([0, 0, 2]), np.array([2, 1, 1]), 3)   # edges 0→2, 0→1, 2→1
    >>> indptr.tolist(), succ.tolist()                                     # 0: 1, 2; 1: -; 2: 1
    ([0, 2, 2, 3], [1, 2, 1])
"""

from __future__ import annotations

from array import array

import numpy as np

__all__ = ["run_starts", "distinct", "ranges", "csr", "as_strided", "int_array", "byte_array"]


def run_starts(keys: np.ndarray) -> np.ndarray:
    """Indices where a run of equal consecutive ``keys`` starts (0 first, when any)."""
    if keys.size == 0:
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a 1-D array (``np.unique(values)``)."""
    v = np.sort(np.asarray(values).ravel())
    return v[run_starts(v)]


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + c) for s, c in zip(starts, counts)])`` in three NumPy
    steps: the flat indices of ragged slices (CSR rows, front segments) gathered at once."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    return np.repeat(np.asarray(starts, dtype=np.int64) - np.cumsum(counts) + counts,
                     counts) + np.arange(total)


def csr(keys: np.ndarray, vals: np.ndarray, n: int):
    """``(indptr, vals)`` grouped by ``keys`` in ``0..n-1`` (ascending ``vals`` within a
    key): key ``k``'s values are ``vals[indptr[k]:indptr[k + 1]]`` — an edge list as
    adjacency, successors with ``(src, dst)``, predecessors with ``(dst, src)``."""
    order = np.lexsort((vals, keys))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=indptr[1:])
    return indptr, np.asarray(vals)[order].astype(np.int64)


def as_strided(x, shape, strides):
    """``as_strided`` of whichever array module ``x`` belongs to (NumPy or CuPy): the kernels'
    window views (im2col columns, Winograd blocks, pooling taps) are written once for both."""
    if isinstance(x, np.ndarray):
        return np.lib.stride_tricks.as_strided(x, shape=shape, strides=strides)
    from cupy.lib.stride_tricks import as_strided as cupy_as_strided

    return cupy_as_strided(x, shape=shape, strides=strides)


def int_array(a: np.ndarray) -> array:
    """``a`` as an ``array('q')``: indexed, sliced and iterated like ``a.tolist()`` (Python
    ints) at 8 bytes an entry, where a list of ints is ~40 (its pointer and the int). Why:
    the schedule's loops (the emitter, the walk) read per-node and per-function tables one
    entry at a time; as lists they were ~0.7 KB an activation (bench/NOTES_scale.md)."""
    return array("q", np.ascontiguousarray(a, dtype=np.int64).tobytes())


def byte_array(a: np.ndarray) -> bytearray:
    """Small non-negative ints (flags, tags: below 256) as a ``bytearray``, 1 byte an entry."""
    return bytearray(np.ascontiguousarray(a, dtype=np.uint8).tobytes())
