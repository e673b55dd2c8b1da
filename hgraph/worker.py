"""One task's share of a job: its VBlocks, their values and flags, and one superstep at a time.

The same class runs in-process (:mod:`hgraph.runtime.local`) and inside a Ray actor
(:mod:`hgraph.runtime.ray_actors`). A superstep is one call, :meth:`Worker.step`, which gets every
message block addressed to this task (one per sender task, from the previous superstep) and returns
one block per destination task plus a small stats dict — the driver is the only barrier and
workers never wait on each other.

Inside a step:

1. **receive** — decode the blocks and combine them per destination vertex into the inbox;
2. **update** — call the program's ``update`` on every block with an active vertex or a message
   (every block when ``always_update``);
3. **send** — gather the out-edges of the responding vertices (work proportional to the frontier's
   edges), compute each edge's message, **combine at the sender** per destination vertex, and
   encode per destination task: ``push`` as sparse (id, value) lists, ``pull`` as one reply per
   destination VBlock (bitmap + values, see :mod:`hgraph.wire`). In pull mode the worker answers the
   route table's requests for the next superstep at the end of this one, from the values it just
   computed — the same values HybridGraph's b-pull responder reads.

Determinism. Combiners that are exact — min, max, logical/bitwise and/or/xor, and integer sums
and products — give the same bits whatever the grouping, so they combine freely at the sender.
A floating-point sum is not associative: for it the sender does not combine across source
vertices; it ships per-edge messages sorted by destination (stable, so by source id then edge
order) and the receiver folds each destination's messages in global source order. The result is
then the same for any number of tasks, blocks and any mode.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import numpy as np

from hgraph import wire
from hgraph.common.errors import HGraphError
from hgraph.exactsum import ExactSum

_ALWAYS_EXACT = {np.minimum, np.maximum, np.fmin, np.fmax, np.logical_or, np.logical_and,
                 np.logical_xor, np.bitwise_or, np.bitwise_and, np.bitwise_xor}
_EXACT_ON_INTEGERS = {np.add, np.multiply}

AGGREGATE_OPS = {"sum": np.add, "min": np.minimum, "max": np.maximum}


def is_exact(combiner: np.ufunc, dtype) -> bool:
    """Whether ``combiner`` gives the same bits for any grouping and order of its operands."""
    if combiner in _ALWAYS_EXACT:
        return True
    return combiner in _EXACT_ON_INTEGERS and np.dtype(dtype).kind in "biu"


def combine_fill(combiner: np.ufunc, dtype):
    """The value an empty inbox slot holds: the combiner's identity (``+inf`` for min, ...)."""
    dtype = np.dtype(dtype)
    if combiner.identity is not None:
        return np.array(combiner.identity).astype(dtype)
    if combiner in (np.minimum, np.fmin):
        if dtype.kind == "f":
            return dtype.type(np.inf)
        return np.iinfo(dtype).max if dtype.kind in "iu" else dtype.type(True)
    if combiner in (np.maximum, np.fmax):
        if dtype.kind == "f":
            return dtype.type(-np.inf)
        return np.iinfo(dtype).min if dtype.kind in "iu" else dtype.type(False)
    return np.zeros((), dtype)[()]


def reduce_aggregates(kinds: Mapping[str, str], parts) -> dict:
    """Reduce aggregator partials (dicts) with each aggregator's op, elementwise for arrays."""
    out: dict[str, Any] = {}
    for part in parts:
        for name, value in part.items():
            if name not in kinds:
                raise HGraphError(f"update returned aggregate {name!r}, not one of the program's "
                                  f"aggregators {sorted(kinds)}")
            if isinstance(value, ExactSum) or isinstance(out.get(name), ExactSum):
                if kinds[name] != "sum":
                    raise HGraphError(f"aggregate {name!r}: exact_sum() partials need kind 'sum'")
                out[name] = value if name not in out else out[name] + value
                continue
            op = AGGREGATE_OPS[kinds[name]]
            value = np.asarray(value)
            out[name] = value if name not in out else op(out[name], value)
    return out


def finish_aggregates(values: Mapping[str, Any]) -> dict:
    """Global aggregates as programs see them: exact sums rounded once, 0-d arrays as scalars."""
    out = {}
    for name, value in values.items():
        if isinstance(value, ExactSum):
            out[name] = float(value)
        else:
            value = np.asarray(value)
            out[name] = value[()] if value.ndim == 0 else value
    return out


def _plain(value):
    if isinstance(value, ExactSum):
        return value
    value = np.asarray(value)
    return value.item() if value.ndim == 0 else value


def frontier_edges(indptr: np.ndarray, vertices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edge positions of the out-edges of ``vertices`` (in CSR order) and each edge's source
    (its index into ``vertices``), without a Python loop."""
    starts = indptr[vertices]
    degrees = indptr[vertices + 1] - starts
    total = int(degrees.sum())
    if total == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    owner = np.repeat(np.arange(len(vertices)), degrees)
    offsets = np.cumsum(degrees) - degrees
    edges = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets, degrees)
    return edges, owner


class BlockView:
    """What a program sees of one VBlock: ``ids`` (global, contiguous), ``start``, ``stop``,
    ``size``, ``columns`` (graph columns sliced to the block), ``out_degree``, ``in_degree``,
    and ``stash``: its worker's cache (see :class:`Worker`), the same dict for every block of
    the worker."""

    def __init__(self, index: int, start: int, stop: int, columns, out_degree, in_degree,
                 stash: dict | None = None):
        self.index, self.start, self.stop = index, start, stop
        self.size = stop - start
        self.ids = np.arange(start, stop, dtype=np.int64)
        self.columns = columns
        self.out_degree = out_degree
        self.in_degree = in_degree
        self.stash = {} if stash is None else stash

    def __repr__(self) -> str:
        return f"BlockView({self.index}, ids {self.start}..{self.stop - 1})"


class Context:
    """Per-superstep information given to ``update``: ``superstep``, ``aggregates`` (the
    previous superstep's global values), ``num_vertices``, ``mode``."""

    def __init__(self, superstep: int, aggregates: Mapping[str, Any], num_vertices: int, mode: str):
        self.superstep = superstep
        self.aggregates = dict(aggregates)
        self.num_vertices = num_vertices
        self.mode = mode


class Worker:
    """Task ``part.task`` of a job: holds its VBlocks and runs supersteps (see the module doc).

    ``stash``: a dict its blocks see as ``block.stash``, which the runtime keeps per worker
    slot across the runs of a :class:`hgraph.session.Session` (None: a fresh one). Why: a
    program run again on the same graph — a solve re-run at a slightly different parameter —
    can reuse expensive per-vertex work it did in an earlier run on this worker instead of
    redoing it. It is a cache and never required for correctness: a replacement worker after
    a failure starts with an empty one, it is in no checkpoint, it is dropped when the
    session closes, and a program must give the same values with or without its contents.
    """

    def __init__(self, program, part, stash: dict | None = None):
        self.program = program
        self.stash = {} if stash is None else stash
        self.part = part
        self.task, self.tasks, self.n = part.task, part.tasks, part.n
        self.lo, self.hi = part.start, part.stop
        size = self.hi - self.lo
        p = program
        self.vdtype, self.vshape = np.dtype(p.value_dtype), tuple(p.value_shape)
        self.mdtype, self.mshape = np.dtype(p.message_dtype), tuple(p.message_shape)
        self.combiner = p.combiner
        if not isinstance(self.combiner, np.ufunc):
            raise HGraphError(f"the combiner must be a NumPy ufunc, got {self.combiner!r}")
        self.exact = is_exact(self.combiner, self.mdtype)
        self.fill = combine_fill(self.combiner, self.mdtype)
        self.kinds = dict(p.aggregators)
        for name, kind in self.kinds.items():
            if kind not in AGGREGATE_OPS:
                raise HGraphError(f"aggregator {name!r}: unknown kind {kind!r} "
                                  f"(expected one of {sorted(AGGREGATE_OPS)})")
        out_degree = np.diff(part.out_indptr)
        self.blocks = []
        for i in range(len(part.block_bounds) - 1):
            a, b = int(part.block_bounds[i]) - self.lo, int(part.block_bounds[i + 1]) - self.lo
            self.blocks.append(BlockView(
                self.task * (len(part.block_bounds) - 1) + i, a + self.lo, b + self.lo,
                {name: col[a:b] for name, col in part.columns.items()},
                out_degree[a:b], part.in_degree[a:b], self.stash))
        self.out_degree = out_degree
        self.values = np.zeros((size, *self.vshape), self.vdtype)
        self.active = np.zeros(size, bool)
        self.respond = np.zeros(size, bool)
        self._eb = None        # EBlocks, built on the first pull
        self._scratch = None   # dense combine buffer over all destinations (exact combiners)
        self._mark = None
        self.value_bytes = self.mdtype.itemsize * int(np.prod(self.mshape, dtype=np.int64))
        self.id_bytes = wire.id_dtype(self.n).itemsize

    # ------------------------------------------------------------------ state (checkpoints)

    def state(self) -> bytes:
        """This worker's vertex state as a msgpack map of raw arrays (a checkpoint)."""
        return wire.pack_arrays({"task": self.task, "lo": self.lo, "hi": self.hi},
                                {"values": self.values, "active": self.active,
                                 "respond": self.respond})

    def restore(self, data: bytes) -> None:
        meta, arrays = wire.unpack_arrays(data)
        if (meta["task"], meta["lo"], meta["hi"]) != (self.task, self.lo, self.hi):
            raise HGraphError(f"checkpoint of task {meta['task']} does not fit task {self.task}")
        self.values, self.active, self.respond = arrays["values"], arrays["active"], arrays["respond"]

    def result(self) -> np.ndarray:
        return self.values

    # ------------------------------------------------------------------ one superstep

    def step(self, superstep: int, mode: str, aggregates: Mapping[str, Any], final: bool,
             *inbound: bytes) -> list:
        """Run superstep ``superstep``; returns ``tasks`` outbound blocks plus a stats dict."""
        t0 = time.perf_counter()
        partials = []
        updated = 0
        if superstep == 0:
            for blk in self.blocks:
                values, respond = self.program.init(blk)
                sl = slice(blk.start - self.lo, blk.stop - self.lo)
                self.values[sl] = self._check_values(values, blk, "init")
                self.respond[sl] = self._check_mask(respond, blk, "init", "respond")
            self.active[:] = self.respond
        else:
            inbox, has = self._receive(inbound)
            ctx = Context(superstep, aggregates, self.n, mode)
            for blk in self.blocks:
                sl = slice(blk.start - self.lo, blk.stop - self.lo)
                if not (self.program.always_update or self.active[sl].any() or has[sl].any()):
                    self.respond[sl] = False
                    continue
                upd = self.program.update(ctx, blk, self.values[sl], inbox[sl], has[sl])
                self.values[sl] = self._check_values(upd.values, blk, "update")
                respond = self._check_mask(upd.respond, blk, "update", "respond")
                halt = ~respond if upd.halt is None else self._check_mask(upd.halt, blk, "update", "halt")
                self.respond[sl] = respond
                self.active[sl] = ~halt
                updated += blk.size
                if upd.aggregates:
                    partials.append(upd.aggregates)
        stats = {"task": self.task, "updated": updated,
                 "active": int(np.count_nonzero(self.active)),
                 "aggregates": {k: _plain(v) for k, v in reduce_aggregates(self.kinds, partials).items()},
                 "responding_blocks": [bool(self.respond[b.start - self.lo:b.stop - self.lo].any())
                                       for b in self.blocks]}
        outbound = self._send(superstep, mode, final, stats)
        stats["seconds"] = time.perf_counter() - t0
        return [*outbound, stats]

    def _check_values(self, values, blk, where):
        values = np.asarray(values)
        if values.shape != (blk.size, *self.vshape):
            raise HGraphError(f"{type(self.program).__name__}.{where} returned values of shape "
                              f"{values.shape}, expected {(blk.size, *self.vshape)}")
        return values

    def _check_mask(self, mask, blk, where, what):
        mask = np.asarray(mask)
        if mask.shape == ():
            return np.full(blk.size, bool(mask))
        if mask.shape != (blk.size,):
            raise HGraphError(f"{type(self.program).__name__}.{where} returned {what} of shape "
                              f"{mask.shape}, expected ({blk.size},)")
        return mask.astype(bool, copy=False)

    # ------------------------------------------------------------------ receive

    def _receive(self, inbound) -> tuple[np.ndarray, np.ndarray]:
        size = self.hi - self.lo
        inbox = np.full((size, *self.mshape), self.fill, self.mdtype)
        has = np.zeros(size, bool)
        ids, vals = [], []
        for data in inbound:
            if data:
                i, v = wire.decode(data)
                ids.append(i)
                vals.append(v)
        if not ids:
            return inbox, has
        pos = np.concatenate(ids) - self.lo
        msg = np.concatenate(vals)
        if self.exact:
            self.combiner.at(inbox, pos, msg)
            has[pos] = True
        else:
            # Senders arrive in task order and each is sorted by (destination, source): a stable
            # sort by destination leaves every destination's messages in global source order.
            order = np.argsort(pos, kind="stable")
            pos, msg = pos[order], msg[order]
            starts = np.flatnonzero(np.concatenate(([True], pos[1:] != pos[:-1])))
            inbox[pos[starts]] = self.combiner.reduceat(msg, starts, axis=0)
            has[pos[starts]] = True
        return inbox, has

    # ------------------------------------------------------------------ send

    def _send(self, superstep: int, mode: str, final: bool, stats: dict) -> list[bytes]:
        out = [b""] * self.tasks
        responders = np.flatnonzero(self.respond)
        stats.update(responding=len(responders), resp_edges=0, cross_edges=0, messages=0,
                     bytes=0, push_fixed=0, push_var=0, pull_fixed=0, pull_var=0)
        if final or len(responders) == 0:
            stats["resp_edges"] = int(self.out_degree[responders].sum()) if len(responders) else 0
            return out
        if mode == "pull" and self._dense_enough(responders):
            edges, sources = self._pull_edges(stats)
        else:
            # Push, or a pull whose responders are too few for a scan of the EBlocks to pay: the
            # same edges, gathered from the adjacency lists. (Only the order of edges with one
            # destination matters downstream, and it is source order either way.)
            edges, owner = frontier_edges(self.part.out_indptr, responders)
            sources = responders[owner]
        stats["resp_edges"] = len(edges)
        if len(edges) == 0:
            return out
        dst = self.part.out_indices[edges]
        stats["cross_edges"] = int(np.count_nonzero((dst < self.lo) | (dst >= self.hi)))
        msg = self.program.message(self.values[sources], self.part.out_weights[edges])
        msg = np.asarray(msg)
        if msg.shape != (len(edges), *self.mshape):
            raise HGraphError(f"{type(self.program).__name__}.message returned shape {msg.shape}, "
                              f"expected {(len(edges), *self.mshape)}")
        msg = msg.astype(self.mdtype, copy=False)
        if self.exact:
            dst, msg = self._combine(dst, msg)
        else:
            order = np.argsort(dst, kind="stable")
            dst, msg = dst[order], msg[order]
        stats["messages"] = len(dst)
        task_cuts = np.searchsorted(dst, self.part.task_bounds)
        block_cuts = np.searchsorted(dst, self.part.all_block_bounds)
        bounds = self.part.all_block_bounds
        nblocks = (len(bounds) - 1) // self.tasks
        for t in range(self.tasks):
            a, b = task_cuts[t], task_cuts[t + 1]
            if a == b:
                continue
            # Both encodings' sizes, for the cost model (cross-worker traffic only).
            first = t * nblocks
            kb = np.diff(block_cuts[first:first + nblocks + 1])
            sizes = np.diff(bounds[first:first + nblocks + 1])
            used = kb > 0
            if self.exact:
                pull_fixed = int((wire.PART_HEADER_BYTES + (sizes[used] + 7) // 8).sum())
                pull_var = int(kb.sum()) * self.value_bytes
            else:
                pull_fixed = wire.PART_HEADER_BYTES * int(used.sum())
                pull_var = int(kb.sum()) * (4 + self.value_bytes)
            if mode == "push":
                data = wire.encode_push(self.task, t, superstep, dst[a:b], msg[a:b], n=self.n)
            else:
                parts = [(int(bounds[first + j]), int(sizes[j]),
                          dst[block_cuts[first + j]:block_cuts[first + j + 1]],
                          msg[block_cuts[first + j]:block_cuts[first + j + 1]])
                         for j in np.flatnonzero(used)]
                data = wire.encode_pull(self.task, t, superstep, parts, self.mdtype, self.mshape,
                                        sparse=not self.exact)
            out[t] = data
            if t != self.task:
                stats["bytes"] += len(data)
                stats["push_fixed"] += wire.PUSH_BLOCK_HEADER_BYTES
                stats["push_var"] += int(b - a) * (self.id_bytes + self.value_bytes)
                stats["pull_fixed"] += wire.PULL_BLOCK_HEADER_BYTES + pull_fixed
                stats["pull_var"] += pull_var
        return out

    def _eblocks(self):
        """This task's edges grouped per (destination block, local source block) — HybridGraph's
        EBlocks, fragments in source order inside each — built on the first pull."""
        if self._eb is None:
            from hgraph.graph import _stable_order
            from hgraph.partition import block_index

            part = self.part
            nb = len(self.blocks)
            edge_src = np.repeat(np.arange(self.hi - self.lo, dtype=np.int64), self.out_degree)
            block_edges = np.diff(part.out_indptr[part.block_bounds - self.lo])
            src_block = np.repeat(np.arange(nb, dtype=np.int64), block_edges)
            dst_block = block_index(part.all_block_bounds, part.out_indices)
            key = dst_block * nb + src_block
            order = _stable_order(key)
            indptr = np.zeros(len(part.all_block_bounds) * nb, np.int64)
            np.cumsum(np.bincount(key, minlength=len(indptr) - 1), out=indptr[1:])
            self._eb = (order, edge_src[order], indptr)
        return self._eb

    def _dense_enough(self, responders: np.ndarray) -> bool:
        """Whether scanning the responding blocks' EBlocks costs at most ~4x gathering the
        responders' own out-edges."""
        indptr = self.part.out_indptr
        own = int(self.out_degree[responders].sum())
        scan = 0
        for b in self.blocks:
            a, z = b.start - self.lo, b.stop - self.lo
            if self.respond[a:z].any():
                scan += int(indptr[z] - indptr[a])
        return scan <= 4 * own

    def _pull_edges(self, stats) -> tuple[np.ndarray, np.ndarray]:
        """Block-pull: for every destination block, scan the EBlocks of the local source blocks
        that have a responding vertex (the route table) and keep the responders' edges. Edges come
        out grouped by destination block, in source order inside each group."""
        order, edge_src, indptr = self._eblocks()
        nb = len(self.blocks)
        responding = [bool(self.respond[b.start - self.lo:b.stop - self.lo].any()) for b in self.blocks]
        edges, sources = [], []
        scanned = 0
        for j in range(len(self.part.all_block_bounds) - 1):
            for i in range(nb):
                a, z = indptr[j * nb + i], indptr[j * nb + i + 1]
                if not responding[i] or a == z:
                    continue
                src = edge_src[a:z]
                keep = self.respond[src]
                edges.append(order[a:z][keep])
                sources.append(src[keep])
                scanned += int(z - a)
        stats["scanned_edges"] = scanned
        if not edges:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(edges), np.concatenate(sources)

    def _combine(self, dst: np.ndarray, msg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Combine messages per destination vertex (exact combiners): sorted unique ids, values."""
        if len(dst) * 16 < self.n:
            # A small frontier: sort rather than touch an n-sized buffer.
            order = np.argsort(dst)
            dst, msg = dst[order], msg[order]
            starts = np.flatnonzero(np.concatenate(([True], dst[1:] != dst[:-1])))
            return dst[starts], self.combiner.reduceat(msg, starts, axis=0)
        if self._scratch is None:
            self._scratch = np.full((self.n, *self.mshape), self.fill, self.mdtype)
            self._mark = np.zeros(self.n, bool)
        self.combiner.at(self._scratch, dst, msg)
        self._mark[dst] = True
        ids = np.flatnonzero(self._mark)
        values = self._scratch[ids]
        self._scratch[ids] = self.fill
        self._mark[ids] = False
        return ids, values
