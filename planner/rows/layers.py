"""The layer table of a training graph, as row-centric planning sees it.

Every forward function of a zoo export (``planner.execute.export``: its details carry the op,
attributes and shapes) becomes one row of :class:`Layers`: its row geometry (how many input rows
an output row reads) and whether it can run on a band of rows at all.

Row-wise ops (``ROWWISE``) map a band of output rows to a band of input rows of the same image:

* ``conv2d``, ``max_pool``, non-global ``avg_pool`` -- kernel ``k``, stride ``s``, padding ``p``:
  output rows ``[a, b)`` read input rows ``[a*s - p, (b-1)*s - p + k)`` (clipped to the map; the
  clipped part is the zero / -inf padding of the whole map, never a band boundary);
* ``upsample`` by ``f`` -- output rows ``[a, b)`` read ``[a // f, (b-1) // f + 1)``;
* ``relu``, ``gelu``, ``add``, ``bias`` and ``concat`` over channels -- the same rows.

Batch norm (``batch_norm`` over the channel axis of a map) runs inside row regions too, exact:
its output rows are its input rows (``SAME``), and ``norm`` marks it so that the row plan gives
it what its batch statistics need (:mod:`planner.rows.plan`, :mod:`planner.rows.walk`): the
forward of a region holding batch norms runs layer by layer on whole maps (each freed after its
last forward use, so only the region outputs and per-channel statistics outlive it), which
computes every mean and variance exactly as a plain step does; the backward's band
recomputation normalises each band with those statistics (elementwise, so the same numbers), and
the two per-channel sums of batch norm's input gradient (``sum dy`` and ``sum dy * xhat``) are
summed band by band in one backward *phase* before the next phase uses them band by band.

Everything else stops row-wise computation (a *barrier*, run on whole tensors) and why:

* global pooling (``avg_pool`` whose kernel covers the map), ``reshape`` (flatten), ``matmul``
  (fully connected), ``attention``, ``layer_norm`` and the loss -- every output value reads every
  row;
* any op on a map with fewer rows than bands (a band would own no row of it).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from hgraph.common.errors import HGraphError
from planner.ops import OPS

#: Row geometry kinds (the ``kind`` column of the engine programs).
BARRIER, SAME, WINDOW, UPSAMPLE = 0, 1, 2, 3
ELEMENTWISE = ("relu", "gelu", "add", "bias", "concat")
WINDOWED = ("conv2d", "max_pool", "avg_pool")


@dataclasses.dataclass
class Layers:
    """One entry per forward function (op), arrays of length ``n``.

    ``kind``: BARRIER / SAME / WINDOW / UPSAMPLE; ``k``, ``s``, ``p``: kernel, stride, padding
    (``f`` for upsample in ``s``); ``h_in``, ``h_out``: rows of the first activation input and of
    the output (0 when not an NCHW map); ``flops``: forward FLOPs; ``out_bytes``.
    ``src``/``dst``: producer op -> consumer op edges (through activations).
    """

    ops: list               # op names
    attrs: list             # attribute dicts
    in_vars: list           # var ids per op (all inputs, params included)
    out_var: np.ndarray     # int64 [n]
    in_shapes: list
    out_shapes: list
    dtypes: list
    kind: np.ndarray
    k: np.ndarray
    s: np.ndarray
    p: np.ndarray
    h_in: np.ndarray
    h_out: np.ndarray
    flops: np.ndarray
    out_bytes: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    edge_saved: np.ndarray  # bool per edge: the consumer's VJP reads this input
    saves_output: np.ndarray  # bool [n]: the op's VJP reads its own output
    norm: np.ndarray        # bool [n]: batch norm over the channels of a map (runs in regions)
    var_shape: dict         # var id -> shape (every op input and output)
    var_dtype: dict

    @property
    def n(self) -> int:
        return len(self.ops)


def _details(f) -> dict:
    try:
        d = json.loads(f.details) if isinstance(f.details, str) else dict(f.details)
    except ValueError:
        d = {}
    if "op" not in d or "in_shapes" not in d:
        raise HGraphError(f"{f.type} (forward function {f.index}): no operator arguments in its "
                          f"details; row plans need a zoo graph (hgraph graph zoo NAME)")
    return d


def _geometry(op: str, attrs: dict, in_shapes: list, out_shape: list) -> tuple:
    """(kind, k, s, p) of one op."""
    four_d = len(out_shape) == 4 and all(len(sh) == 4 for sh in in_shapes[:1])
    if not four_d:
        return BARRIER, 1, 1, 0
    if op in ("bias", "concat") and attrs.get("axis", -1) % 4 != 1:
        return BARRIER, 1, 1, 0
    if op in ELEMENTWISE:
        return SAME, 1, 1, 0
    if op in WINDOWED:
        k = in_shapes[1][2] if op == "conv2d" else attrs["kernel"]
        if op == "avg_pool" and k >= in_shapes[0][2]:
            return BARRIER, 1, 1, 0            # global pooling
        return WINDOW, int(k), int(attrs["stride"]), int(attrs.get("pad", 0))
    if op == "upsample":
        return UPSAMPLE, 1, int(attrs["factor"]), 0
    if _is_map_norm(op, attrs):
        return SAME, 1, 1, 0
    return BARRIER, 1, 1, 0


def _is_map_norm(op: str, attrs: dict) -> bool:
    return op == "batch_norm" and attrs.get("kind") == "batch" and attrs.get("axis", 1) % 4 == 1


def read(g) -> Layers:
    """The layer table of a zoo cg graph (``planner.cg.ComputationalGraph``)."""
    ops, attrs, in_vars, outs, in_shapes, out_shapes, dtypes, geo, flops = ([] for _ in range(9))
    var_shape, var_dtype = {}, {}
    for f in g.forward:
        d = _details(f)
        for (a, _), shape, dtype in zip(f.inputs, d["in_shapes"], d["in_dtypes"]):
            var_shape[int(a)], var_dtype[int(a)] = tuple(shape), dtype
        var_shape[int(f.outputs[0])], var_dtype[int(f.outputs[0])] = tuple(d["out_shape"]), d["out_dtype"]
        ops.append(d["op"])
        attrs.append(d.get("attrs", {}))
        in_vars.append([int(a) for a, _ in f.inputs])
        outs.append(int(f.outputs[0]))
        in_shapes.append([list(s) for s in d["in_shapes"]])
        out_shapes.append(list(d["out_shape"]))
        dtypes.append(d["out_dtype"])
        geo.append(_geometry(d["op"], d.get("attrs", {}), d["in_shapes"], d["out_shape"]))
        flops.append(int(d.get("flops", 0)))
    geo = np.asarray(geo, dtype=np.int64).reshape(-1, 4)
    h_out = np.asarray([s[2] if len(s) == 4 else 0 for s in out_shapes], dtype=np.int64)
    h_in = np.asarray([s[0][2] if len(s[0]) == 4 else 0 for s in in_shapes], dtype=np.int64)
    flat = np.asarray([v for vs in in_vars for v in vs], dtype=np.int64)
    consumer = np.repeat(np.arange(len(in_vars)), [len(vs) for vs in in_vars])
    producer = np.asarray(g.producer, dtype=np.int64)[flat]
    position = np.concatenate([np.arange(len(vs)) for vs in in_vars]) if in_vars else np.zeros(0, int)
    names, code = np.unique(np.asarray(ops, dtype=object).astype(str), return_inverse=True)
    table = np.zeros((len(names), int(position.max(initial=0)) + 1), dtype=bool)
    for row, name in enumerate(names.tolist()):          # one row per op type
        table[row, list(OPS[name].saves_inputs)] = True
    saved = table[code[consumer], position]
    src, dst = producer[producer >= 0], consumer[producer >= 0]
    out_var = np.asarray(outs, dtype=np.int64)
    return Layers(ops, attrs, in_vars, out_var, in_shapes, out_shapes, dtypes,
                  geo[:, 0], geo[:, 1], geo[:, 2], geo[:, 3], h_in, h_out,
                  np.asarray(flops, dtype=np.int64),
                  np.asarray(g.var_bytes, dtype=np.int64)[out_var],
                  src.astype(np.int64), dst.astype(np.int64), saved[producer >= 0],
                  np.asarray([OPS[op].saves_output for op in ops], dtype=bool),
                  np.asarray([geo[i, 0] == SAME and _is_map_norm(op, attrs[i]) for i, op in enumerate(ops)],
                             dtype=bool), var_shape, var_dtype)


def input_rows(kind, k, s, p, h_in, lo, hi):
    """Input rows ``[lo', hi')`` that output rows ``[lo, hi)`` read (arrays broadcast; clipped to
    ``[0, h_in)``; empty ranges, ``lo >= hi``, stay empty)."""
    win_lo, win_hi = lo * s - p, (hi - 1) * s - p + k
    up_lo, up_hi = lo // np.maximum(s, 1), (hi - 1) // np.maximum(s, 1) + 1
    new_lo = np.where(kind == WINDOW, win_lo, np.where(kind == UPSAMPLE, up_lo, lo))
    new_hi = np.where(kind == WINDOW, win_hi, np.where(kind == UPSAMPLE, up_hi, hi))
    new_lo, new_hi = np.clip(new_lo, 0, h_in), np.clip(new_hi, 0, h_in)
    empty = lo >= hi
    return np.where(empty, lo, new_lo), np.where(empty, hi, new_hi)
