"""Row analysis as vertex programs on the engine: row regions and the rows each band needs.

The vertices are the forward ops of a training graph (:mod:`planner.rows.layers`), the edges the
producer -> consumer edges through activations. Two programs, each vectorised per VBlock:

* :class:`BarrierDepth` -- the largest number of barrier ops (ops that cannot run on a band of
  rows) on any path from a model input to each op. Row-wise ops joined by an edge and at the
  same depth form one *row region*; a path that leaves a region through a barrier arrives at a
  larger depth, so no path leaves a region and comes back (a region runs as one unit).
* :class:`RowRanges` -- backward propagation of row ranges. Each region output (an op whose value
  leaves its region) owns rows ``[j*H/R, (j+1)*H/R)`` in band ``j``; on the reversed edges every
  op learns the hull of the rows its consumers read from it in each band and derives the rows it
  reads from its own inputs (:func:`planner.rows.layers.input_rows`: halo growth through
  kernels, strides, pooling and upsampling). All ``R`` bands travel together in one value.

Ranges are half-open and encoded ``(-lo, hi)`` so that one ``np.maximum`` combiner takes the hull.
"""

from __future__ import annotations

import numpy as np

import hgraph
from planner.analyses.engine import run_program
from planner.rows.layers import input_rows

#: Encoded empty range: lo = +BIG, hi = -BIG.
BIG = np.int64(2**40)


class BarrierDepth(hgraph.VertexProgram):
    """Longest path counting region ends: an edge weighs 1 when its source ends a region (a
    barrier, or a downsampling op when regions stop at each resolution), else 0; a vertex's
    value is the largest weighted path length into it."""

    value_dtype = message_dtype = np.int64
    combiner = np.maximum

    def init(self, block):
        return np.zeros(block.size, np.int64), np.ones(block.size, bool)

    def update(self, ctx, block, values, inbox, has_message):
        higher = has_message & (inbox > values)
        return hgraph.Update(np.where(higher, inbox, values), respond=higher)

    def message(self, src_values, weights):
        return src_values + weights.astype(np.int64)


class RowRanges(hgraph.VertexProgram):
    """Per op and band: rows of its output the band computes, and rows it reads of its inputs.

    Value ``[2, R, 2]``: ``[0]`` its output rows, ``[1]`` its input rows, each ``(-lo, hi)``.
    Columns: ``kind``, ``k``, ``s``, ``p``, ``h_in`` (:mod:`planner.rows.layers`) and ``own``
    (``[R, 2]`` encoded: the rows a region output owns, empty for other ops).
    """

    value_dtype = message_dtype = np.int64
    combiner = np.maximum

    def __init__(self, bands: int):
        self.value_shape = (2, bands, 2)
        self.message_shape = (bands, 2)

    @staticmethod
    def _with_inputs(block, out):
        c = block.columns
        col = [c[name][:, None] for name in ("kind", "k", "s", "p", "h_in")]
        lo, hi = input_rows(*col, -out[..., 0], out[..., 1])
        return np.stack([out, np.stack([-lo, hi], axis=-1)], axis=1)

    def init(self, block):
        own = block.columns["own"]
        return self._with_inputs(block, own), np.any(own[..., 1] > -BIG, axis=1)

    def update(self, ctx, block, values, inbox, has_message):
        out = np.where(has_message[:, None, None], np.maximum(values[:, 0], inbox), values[:, 0])
        changed = np.any(out != values[:, 0], axis=(1, 2))
        return hgraph.Update(self._with_inputs(block, out), respond=changed)

    def message(self, src_values, weights):
        return src_values[:, 1]


def barrier_depth(layers, ends: np.ndarray, opts) -> np.ndarray:
    """int64 [n]: region ends on the longest path into each op (``opts``: EngineOptions)."""
    return longest_path(layers.src, layers.dst, ends[layers.src], layers.n, opts)


def longest_path(src, dst, weights, n: int, opts) -> np.ndarray:
    """int64 [n]: the largest total weight (0/1 per edge) of a path into each vertex."""
    eg = hgraph.Graph.from_edges(src, dst, weights=np.asarray(weights, dtype=np.float64), n=n)
    return np.asarray(run_program(opts, BarrierDepth(), eg).values, dtype=np.int64)


def row_ranges(layers, region: np.ndarray, own: np.ndarray, opts) -> tuple[np.ndarray, int]:
    """(int64 [n, R, 2] output rows ``[lo, hi)`` per op and band, supersteps).

    ``region``: int64 [n] region id (-1 outside any); ``own``: int64 [n, R, 2] owned rows of the
    region outputs (lo >= hi elsewhere). Ops outside regions get empty ranges.
    """
    inside = (region[layers.src] >= 0) & (region[layers.src] == region[layers.dst])
    bands = own.shape[1]
    enc = np.stack([-own[..., 0], own[..., 1]], axis=-1)
    empty = own[..., 0] >= own[..., 1]
    enc[empty] = (-BIG, -BIG)
    cols = {"kind": layers.kind, "k": layers.k, "s": layers.s, "p": layers.p, "h_in": layers.h_in,
            "own": enc}
    eg = hgraph.Graph.from_edges(layers.dst[inside], layers.src[inside], n=layers.n, columns=cols)
    res = run_program(opts, RowRanges(bands), eg)
    out = np.asarray(res.values, dtype=np.int64)[:, 0]
    return np.stack([-out[..., 0], out[..., 1]], axis=-1), res.supersteps
