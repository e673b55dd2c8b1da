"""Row bitsets as ``uint64`` words: bit ``k`` of word ``w`` is column ``64·w + k``.

The DP's lower sets and the engine analyses' per-vertex sets are all held this way; these are
the only conversions between words and booleans, so an empty matrix (no rows, as a block of a
partition can be) is handled once, here.

Example::

    >>> import numpy as np
    >>> words = pack(np.array([[True, False, True], [False, False, False]]))
    >>> words.tolist(), unpack(words, 3).tolist(), nodes(words[0]).tolist()
    ([[5], [0]], [[True, False, True], [False, False, False]], [0, 2])
    >>> unpack(np.zeros((0, 2), np.uint64), 100).shape
    (0, 100)
"""

from __future__ import annotations

import numpy as np

__all__ = ["words_for", "pack", "unpack", "nodes"]


def words_for(width: int) -> int:
    """uint64 words per row for ``width`` columns (at least one)."""
    return max(1, (int(width) + 63) // 64)


def unpack(words: np.ndarray, width: int) -> np.ndarray:
    """uint64 [r, W] -> bool [r, width] (``width`` ≤ 64·W)."""
    words = np.ascontiguousarray(words)
    as_bytes = words.astype("<u8", copy=False).view(np.uint8)       # no copy little-endian
    as_bytes = as_bytes.reshape(words.shape[0], 8 * words.shape[1])
    return np.unpackbits(as_bytes, axis=1, bitorder="little", count=width).view(bool)


def pack(bits: np.ndarray, words: int | None = None) -> np.ndarray:
    """bool [r, width] -> uint64 [r, W] (``W`` = ``words`` or :func:`words_for` ``(width)``)."""
    r, width = bits.shape
    W = words_for(width) if words is None else words
    padded = np.zeros((r, 64 * W), np.uint8)
    padded[:, :width] = bits
    packed = np.packbits(padded, axis=1, bitorder="little")
    return packed.view("<u8").astype(np.uint64, copy=False)


def nodes(row: np.ndarray) -> np.ndarray:
    """Sorted column indices of the set bits of one row of words."""
    bits = np.unpackbits(np.ascontiguousarray(row).astype("<u8", copy=False).view(np.uint8),
                         bitorder="little")
    return np.flatnonzero(bits)
