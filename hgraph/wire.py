"""Message blocks on the wire: msgpack maps whose payloads are raw NumPy buffers.

One block carries every message one worker (task) sends to another in one superstep. Arrays
travel as msgpack ``bin`` (packed from a memoryview, no copy through Python lists, no pickle)
plus explicit dtype and shape fields; decoding is ``np.frombuffer`` (zero-copy, read-only).

Two encodings, one per message mode:

* ``push`` — sparse: the global ids of the destination vertices and one value per id;
* ``pull`` — one part per destination VBlock (the reply to that block's pull request): a bitmap
  over the block's vertices saying which receive a message, then the values of the set bits in
  vertex order. Dense in the block, so it wins when many of the block's vertices get a message.

When the combiner is order-sensitive (a float sum) messages are not combined at the sender (see
:mod:`hgraph.worker`), ids may repeat, and both modes carry them sparsely.

Example::

    >>> import numpy as np
    >>> from hgraph import wire
    >>> data = wire.encode_push(0, 1, 3, np.array([5, 9]), np.array([1.5, 2.5]))
    >>> wire.decode(data)
    (array([5, 9]), array([1.5, 2.5]))
"""

from __future__ import annotations

import msgpack
import numpy as np

VERSION = 1

#: The msgpack overhead (field names, small ints, length prefixes) of a push block, of a pull
#: block without parts and of one pull part, as measured on the encoders below (a few bytes more
#: once a count or a length needs a wider msgpack int). The cost model counts both modes' bytes
#: with them, so the running mode's estimate matches the bytes actually sent.
PUSH_BLOCK_HEADER_BYTES = 80
PULL_BLOCK_HEADER_BYTES = 66
PART_HEADER_BYTES = 34


def _bin(array: np.ndarray) -> memoryview:
    array = np.ascontiguousarray(array)
    return memoryview(array).cast("B") if array.size else memoryview(b"")


def id_dtype(n: int) -> np.dtype:
    """The narrowest id type for a graph of ``n`` vertices (ids cost bytes on the wire)."""
    return np.dtype("<i4") if n <= np.iinfo(np.int32).max else np.dtype("<i8")


def encode_push(src: int, dst: int, step: int, ids: np.ndarray, values: np.ndarray,
                n: int | None = None) -> bytes:
    """A sparse block: message ``values[i]`` for global vertex ``ids[i]``."""
    idt = id_dtype(n if n is not None else (int(ids.max()) + 1 if len(ids) else 0))
    return msgpack.packb({
        "v": VERSION, "kind": "push", "src": src, "dst": dst, "step": step, "n": len(ids),
        "dtype_id": idt.str, "dtype_val": values.dtype.str, "shape": list(values.shape[1:]),
        "ids": _bin(ids.astype(idt, copy=False)), "vals": _bin(values),
    }, use_bin_type=True)


def encode_pull(src: int, dst: int, step: int, parts, dtype: np.dtype, shape: tuple,
                sparse: bool = False) -> bytes:
    """A block of pull replies; ``parts`` is a list of ``(start, size, ids, values)`` per VBlock
    (``ids`` global, sorted). Dense parts carry a bitmap, sparse ones block offsets."""
    encoded = []
    for start, size, ids, values in parts:
        offsets = ids - start
        part = {"start": int(start), "size": int(size), "n": len(ids), "vals": _bin(values)}
        if sparse:
            part["offsets"] = _bin(offsets.astype("<u4" if size < 2**32 else "<u8"))
        else:
            mask = np.zeros(size, dtype=bool)
            mask[offsets] = True
            part["bitmap"] = _bin(np.packbits(mask))
        encoded.append(part)
    return msgpack.packb({
        "v": VERSION, "kind": "pull", "src": src, "dst": dst, "step": step,
        "dtype_val": np.dtype(dtype).str, "shape": list(shape), "sparse": sparse, "parts": encoded,
    }, use_bin_type=True)


def decode(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """``(global ids int64, values)`` of a block, parts in the order they were packed."""
    block = msgpack.unpackb(data, raw=False)
    if block.get("v") != VERSION:
        raise ValueError(f"unknown message block version {block.get('v')!r}")
    dtype = np.dtype(block["dtype_val"])
    shape = tuple(block["shape"])
    if block["kind"] == "push":
        ids = np.frombuffer(block["ids"], dtype=block["dtype_id"]).astype(np.int64)
        values = np.frombuffer(block["vals"], dtype=dtype).reshape((-1, *shape))
        return ids, values
    all_ids, all_values = [], []
    for part in block["parts"]:
        if block["sparse"]:
            dt = "<u4" if part["size"] < 2**32 else "<u8"
            offsets = np.frombuffer(part["offsets"], dtype=dt).astype(np.int64)
        else:
            bits = np.unpackbits(np.frombuffer(part["bitmap"], dtype=np.uint8), count=part["size"])
            offsets = np.flatnonzero(bits)
        all_ids.append(offsets + part["start"])
        all_values.append(np.frombuffer(part["vals"], dtype=dtype).reshape((-1, *shape)))
    if not all_ids:
        return np.empty(0, np.int64), np.empty((0, *shape), dtype)
    return np.concatenate(all_ids), np.concatenate(all_values)


def pack_arrays(meta: dict, arrays: dict[str, np.ndarray]) -> bytes:
    """A msgpack map of named arrays (dtype, shape, raw buffer) plus plain metadata: the format
    of worker state in checkpoints."""
    return msgpack.packb({
        "v": VERSION, "meta": meta,
        "arrays": {name: {"dtype": a.dtype.str, "shape": list(a.shape), "data": _bin(a)}
                   for name, a in arrays.items()},
    }, use_bin_type=True)


def unpack_arrays(data: bytes) -> tuple[dict, dict[str, np.ndarray]]:
    """Inverse of :func:`pack_arrays` (arrays are writable copies)."""
    obj = msgpack.unpackb(data, raw=False)
    arrays = {name: np.frombuffer(a["data"], dtype=a["dtype"]).reshape(a["shape"]).copy()
              for name, a in obj["arrays"].items()}
    return obj["meta"], arrays
