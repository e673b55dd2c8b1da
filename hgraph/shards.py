"""Sharded sources: a graph the workers read from a file themselves, a byte range each.

Why: at scale the driver should not hold a graph's text, its tokens or any array as long as the
graph (bench/NOTES_scale.md, issue 37). Here the driver only finds where to cut the file (one
streaming pass, :func:`find_line` / :func:`cut_lines`: a few MiB in memory at any size) and
each worker parses its byte range with a loader the caller names (a module-level function, so
it pickles to a Ray actor; the engine knows no file format). A loader returns a :class:`Piece`:
the vertex rows it read (ids and column values) and its edges, in global vertex ids. The
engine then moves every row and edge to the task that owns it (:func:`split_piece`, on the
worker that read it) and each task builds its :class:`hgraph.partition.TaskSlice` from the
pieces addressed to it (:func:`assemble_slice`, where the task runs). The driver gets only
each piece's summary: its block-pair edge counts (the partition's ``pair_edges``: O(blocks²))
and its columns' widths, dtypes and fills.

The slice a task builds is :class:`hgraph.partition.Partition`'s ``task_slice`` of the same
graph read whole (edges in file order, stably grouped by source; columns filled where no row
names a vertex), so a run on a sharded graph is a run on the whole graph, bit for bit, for any
number of shards and tasks (tests/test_shards.py).

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:       # the edges after a 5-byte head,
    ...     path = os.path.join(folder, "g.txt")            # in 2 ranges: (offset, line) cuts
    ...     _ = open(path, "wb").write(b"head\\nE 0 1\\nE 1 2\\nE 2 0\\n")
    ...     cut_lines(path, None, 5, 23, 2, line=2)
    [(5, 2), (17, 4), (23, 5)]
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hgraph.common.errors import HGraphError, InputError
from hgraph.graph import _stable_order
from hgraph.partition import Partition, TaskSlice, block_index, even_bounds

__all__ = ["Piece", "ShardedSource", "ShardedGraph", "find_line", "cut_lines", "split_piece",
           "piece_summary", "assemble_slice", "read_split", "weigh"]

#: Bytes read at a time by the streaming scans (the most the driver holds of the file).
SCAN_CHUNK = 1 << 22


@dataclass
class Piece:
    """What a loader read of its byte range: vertex rows ``ids`` (int64, distinct) with their
    ``columns`` (name -> array, one row an id; a 2-D column's width may differ between pieces:
    narrower ones are padded with the column's fill) and edges ``src -> dst`` (global ids, in
    file order; ``weights`` None: 1.0). ``in_dst``: the destinations of edges whose sources
    another task owns (a split piece's in-degree share), else empty. ``extra``: what the
    loader read besides the graph that the caller wants on the driver (a dict of arrays,
    say); it travels with the piece's summary, is not split, and is None unless given."""

    ids: np.ndarray
    columns: dict = field(default_factory=dict)
    src: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    dst: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    weights: np.ndarray | None = None
    in_dst: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    extra: Any = None


@dataclass(frozen=True)
class ShardedSource:
    """A graph of ``n`` vertices read by the workers: shard ``k`` is bytes
    ``ranges[k][0]:ranges[k][1]`` of ``path``, starting at 1-based line ``ranges[k][2]``, read by
    ``loader(path, start, stop, line, **args)`` (a module-level function) into a
    :class:`Piece`. ``fills``: per column, the value of a vertex no piece names (0 unless
    given)."""

    path: str
    n: int
    ranges: tuple
    loader: Callable[..., Piece]
    args: tuple = ()
    fills: tuple = ()

    def load(self, k: int) -> Piece:
        start, stop, line = self.ranges[k]
        return self.loader(self.path, int(start), int(stop), int(line), **dict(self.args))


def _lines_of(path, start: int, stop: int):
    """``(offset, chunk)`` pairs covering bytes ``start:stop`` of ``path``, a chunk ending at a
    newline (the last one at ``stop``), so a line is never split between two chunks."""
    try:
        fh = open(path, "rb")
    except OSError as err:
        raise InputError(path, None, f"cannot read: {err.strerror}") from None
    with fh:
        fh.seek(start)
        pos, rest = start, b""
        while pos < stop:
            data = fh.read(min(SCAN_CHUNK, stop - pos))
            if not data:
                break
            pos += len(data)
            data = rest + data
            cut = data.rfind(b"\n") + 1 if pos < stop else len(data)
            if cut == 0:
                rest = data
                continue
            yield pos - len(data), data[:cut]
            rest = data[cut:]
        if rest:
            yield pos - len(rest), rest


def _matches(chunk: bytes, marker: bytes | None) -> np.ndarray:
    """Offsets (in ``chunk``) of the lines equal to ``marker`` (None: of every line), found
    with NumPy (a block-structured file has a marker line every few lines)."""
    buf = np.frombuffer(chunk, np.uint8)
    newlines = np.flatnonzero(buf == 10)
    starts = np.r_[0, newlines + 1].astype(np.int64)
    starts = starts[starts < len(chunk)]        # (a chunk ends at a newline but the file's last)
    if marker is None:
        return starts
    ends = np.r_[newlines, len(chunk)][:starts.size]       # each line's newline (or the end)
    hits = starts[(ends - starts) == len(marker)]
    for j, byte in enumerate(marker):                       # a few bytes: a pass each
        hits = hits[buf[hits + j] == byte]
    return hits


def find_line(path, marker: bytes, start: int = 0, line: int = 1) -> tuple[int, int]:
    """``(offset, line)`` of the first line equal to ``marker`` at or after byte ``start``
    (which begins 1-based line ``line``), or ``(size, lines + 1)`` past the end: one
    streaming pass."""
    size = os.path.getsize(path)
    for offset, chunk in _lines_of(path, start, size):
        hits = _matches(chunk, marker)
        if hits.size:
            return offset + int(hits[0]), line + chunk.count(b"\n", 0, int(hits[0]))
        line += chunk.count(b"\n")
    return size, line


def cut_lines(path, marker: bytes | None, start: int, stop: int, parts: int,
              line: int = 1) -> list[tuple[int, int]]:
    """Cuts of bytes ``start:stop`` (``start`` at 1-based line ``line``) into at most
    ``parts`` ranges of near-equal bytes, each beginning at a line equal to ``marker`` (None:
    at any line; the first at ``start``): ``[(offset, line), ...]`` ending with ``(stop, its
    line)``. One streaming pass; a range with no marker line in it merges into the one
    before."""
    targets = [start + (stop - start) * k // parts for k in range(1, parts)]
    cuts, t = [(start, line)], 0
    for offset, chunk in _lines_of(path, start, stop):
        hits = _matches(chunk, marker) + offset
        while t < len(targets):
            after = hits[hits > max(targets[t], cuts[-1][0])]
            if not after.size:
                break
            at = int(after[0])
            cuts.append((at, line + chunk.count(b"\n", 0, at - offset)))
            t += 1
            while t < len(targets) and targets[t] <= at:
                t += 1
        line += chunk.count(b"\n")
    cuts.append((stop, line))
    return cuts


def split_piece(piece: Piece, task_bounds: np.ndarray) -> list[Piece]:
    """``piece`` cut by owner: task ``t`` gets the rows with ids in its range, the edges whose
    source it owns (file order kept) and, as ``in_dst``, the destinations it owns of the
    edges it does not (for its in-degrees)."""
    tasks = len(task_bounds) - 1
    row_task = block_index(task_bounds, piece.ids)
    src_task = block_index(task_bounds, piece.src)
    dst_task = block_index(task_bounds, piece.dst)
    out = []
    for t in range(tasks):
        rows = row_task == t
        mine = src_task == t
        out.append(Piece(ids=piece.ids[rows],
                         columns={k: v[rows] for k, v in piece.columns.items()},
                         src=piece.src[mine], dst=piece.dst[mine],
                         weights=None if piece.weights is None else piece.weights[mine],
                         in_dst=piece.dst[(dst_task == t) & ~mine]))
    return out


def piece_summary(piece: Piece, block_bounds: np.ndarray) -> dict:
    """What the driver needs of a piece: edges per (source block, destination block) pair
    (summed over pieces: the partition's ``pair_edges``) and each column's trailing shape and
    dtype (the widest one wins)."""
    total = len(block_bounds) - 1
    key = block_index(block_bounds, piece.src) * total + block_index(block_bounds, piece.dst)
    return {"pair_edges": np.bincount(key, minlength=total * total).reshape(total, total),
            "columns": {k: (v.shape[1:], v.dtype.str) for k, v in piece.columns.items()},
            "rows": int(piece.ids.size), "edges": int(piece.src.size), "extra": piece.extra}


def merge_columns(summaries) -> dict:
    """Column name -> (trailing shape, dtype) over all pieces' summaries: the widest shape;
    pieces must agree on a column's dtype and number of dimensions."""
    out: dict[str, tuple] = {}
    for s in summaries:
        for name, (shape, dtype) in s["columns"].items():
            if name not in out:
                out[name] = (tuple(shape), dtype)
                continue
            had, had_dtype = out[name]
            if had_dtype != dtype or len(had) != len(shape):
                raise HGraphError(f"column {name!r}: pieces disagree on its dtype or shape "
                                  f"({had_dtype} {had} against {dtype} {tuple(shape)})")
            out[name] = (tuple(max(a, b) for a, b in zip(had, shape)), dtype)
    return out


def assemble_slice(meta: dict, pieces) -> TaskSlice:
    """Task ``meta["task"]``'s :class:`TaskSlice` from the pieces addressed to it, in shard
    order: out-edges stably grouped by source (file order within a source, as
    :class:`hgraph.Graph`), in-degrees from every edge into its range, columns filled with
    their fill where no row names a vertex and padded to their full width."""
    task, tasks, blocks = meta["task"], meta["tasks"], meta["blocks"]
    groups = meta.get("groups", ())
    bounds = np.asarray(meta["block_bounds"], np.int64)
    task_bounds = bounds[::blocks]
    lo, hi = int(task_bounds[task]), int(task_bounds[task + 1])
    size = hi - lo
    cat = (lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt))
    src = cat([p.src for p in pieces], np.int64).astype(np.int64, copy=False)
    dst = cat([p.dst for p in pieces], np.int64).astype(np.int64, copy=False)
    weighted = any(p.weights is not None for p in pieces)
    weights = (cat([np.ones(p.src.size) if p.weights is None else p.weights for p in pieces],
                   np.float64) if weighted else np.ones(src.size))
    order = _stable_order(src - lo)
    group = None
    if groups:
        per_piece = np.repeat(np.arange(len(groups)), [count for count, _ in groups])
        group = np.repeat(per_piece, [p.src.size for p in pieces])[order].astype(np.int8)
    indptr = np.zeros(size + 1, np.int64)
    np.cumsum(np.bincount(src - lo, minlength=size), out=indptr[1:])
    mine = dst[(dst >= lo) & (dst < hi)]
    in_degree = np.bincount(np.concatenate([mine] + [p.in_dst for p in pieces]) - lo,
                            minlength=size)
    columns = {}
    fills = dict(meta.get("fills", ()))
    for name, (shape, dtype) in meta["columns"].items():
        col = np.full((size, *shape), fills.get(name, 0), dtype=np.dtype(dtype))
        for p in pieces:
            if name in p.columns and p.ids.size:
                rows = p.columns[name]
                index = (p.ids - lo,) + tuple(slice(0, w) for w in rows.shape[1:])
                col[index] = rows
        columns[name] = col
    return TaskSlice(task=task, tasks=tasks, n=int(meta["n"]),
                     block_bounds=bounds[task * blocks:(task + 1) * blocks + 1].copy(),
                     task_bounds=task_bounds.copy(), all_block_bounds=bounds.copy(),
                     out_indptr=indptr, out_indices=dst[order], out_weights=weights[order],
                     in_degree=in_degree, columns=columns, edge_group=group,
                     weight_rules=tuple(rule for _, rule in groups))


def weigh(part: TaskSlice) -> TaskSlice:
    """``part`` with its edges weighed by its view's rules, once every column is in (the
    kept ones too): part ``j``'s rule ``(column, table)`` gives an edge the weight
    ``table[column[its source]]`` (a column of small ints or bools), ``(None, w)`` the weight
    ``w``, None the file's. Its sources are local, so no worker needs another's values."""
    if not part.weight_rules:
        return part
    weights = part.out_weights.copy()
    source = np.repeat(np.arange(part.stop - part.start), np.diff(part.out_indptr))
    for j, rule in enumerate(part.weight_rules):
        if rule is None:
            continue
        mask = part.edge_group == j
        column, table = rule
        if column is None:
            weights[mask] = table
        else:
            key = np.asarray(part.columns[column])[source[mask]].astype(np.int64)
            weights[mask] = np.asarray(table, np.float64)[key]
    part.out_weights = weights
    return part


def read_split(source: ShardedSource, k: int, task_bounds, block_bounds,
               reverse: bool = False) -> list:
    """Shard ``k`` read and cut by owner: the pieces for each task, with ``reverse`` then
    those of the reversed graph (every edge turned round, the same rows), then the summary
    (what a worker returns from reading a shard)."""
    piece = source.load(k)
    for what in ("ids", "src", "dst"):
        ids = np.asarray(getattr(piece, what), np.int64)
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= source.n):
            raise HGraphError(f"{source.path}: shard {k} (from line {source.ranges[k][2]}) "
                              f"names vertex ids outside 0..{source.n - 1}")
        setattr(piece, what, ids)
    summary = piece_summary(piece, np.asarray(block_bounds, np.int64))
    task_bounds = np.asarray(task_bounds, np.int64)
    out = split_piece(piece, task_bounds)
    if reverse:
        out += split_piece(Piece(ids=piece.ids, columns=piece.columns, src=piece.dst,
                                 dst=piece.src, weights=piece.weights), task_bounds)
    return [*out, summary]


class ShardedGraph(Partition):
    """A graph read by the workers (:meth:`hgraph.Session.load`), as the partition its runs
    use: bounds, ``pair_edges`` and ``dependency`` as :class:`Partition`'s, no edge array on
    the driver. ``pieces[k][t]``: shard ``k``'s piece for task ``t`` (a driver-owned Ray
    reference, or the :class:`Piece` in-process), kept for as long as this object lives, so a
    replacement worker rebuilds its slice from them; ``columns``: name -> (trailing shape,
    dtype) of the vertex columns the pieces give; ``extras``: what each shard's loader sent
    the driver (:attr:`Piece.extra`)."""

    def __init__(self, source: ShardedSource, tasks: int, blocks: int, pieces, summaries,
                 reversed_pieces=None):
        self.requested = (int(tasks), int(blocks))
        self.tasks, self.blocks = int(tasks), int(blocks)
        self.graph = None
        self.n = int(source.n)
        self.source = source
        self.block_bounds = even_bounds(self.n, self.tasks * self.blocks)
        self.task_bounds = self.block_bounds[:: self.blocks].copy()
        self.pair_edges = sum(s["pair_edges"] for s in summaries)
        self.dependency = self.pair_edges > 0
        self.columns = merge_columns(summaries)
        self.fills = dict(source.fills)
        self.pieces = pieces
        self.num_edges = int(sum(s["edges"] for s in summaries))
        #: each shard's :attr:`Piece.extra`, in shard order (the driver's to drop)
        self.extras = [s["extra"] for s in summaries]
        self._reversed = reversed_pieces

    def reversed(self) -> "ShardedGraph":
        """The same graph with every edge turned round (read with ``reverse=True``: its
        pieces were cut by the other end's owner when the shards were read)."""
        return self.view([("reversed", None)])

    def meta(self, task: int) -> dict:
        """The small dict task ``task`` needs besides its pieces to build its slice."""
        return {"task": task, "tasks": self.tasks, "blocks": self.blocks, "n": self.n,
                "block_bounds": self.block_bounds, "columns": self.columns,
                "fills": tuple(sorted(self.fills.items())),
                "groups": tuple((len(rows), rule) for rows, rule in self._groups())}

    def _groups(self) -> list:
        """``[(pieces, rule)]``: this graph's edges as parts, each with its weight rule."""
        return getattr(self, "groups", None) or [(self.pieces, None)]

    def pieces_for(self, task: int) -> list:
        """Task ``task``'s pieces, part by part and in shard order within a part (handles,
        resolved where it runs)."""
        return [row[task] for rows, _ in self._groups() for row in rows]

    def task_slice(self, task: int) -> TaskSlice:
        """Task ``task``'s slice built here (in-process pieces only: on Ray the worker builds
        it from :meth:`pieces_for`)."""
        return assemble_slice(self.meta(task), self.pieces_for(task))

    def view(self, parts) -> "ShardedGraph":
        """A graph of the same vertices whose edges are ``parts``: ``("forward", rule)`` or
        ``("reversed", rule)`` each (the reversed needs ``reverse=True`` at load), with its
        weight rule (:func:`weigh`: None, ``(None, w)`` or ``(column, table)``); one part
        ``("reversed", None)`` is :meth:`reversed`. Nothing is read or moved: each worker
        builds its slice of the view from the pieces it is handed."""
        groups, pair = [], np.zeros_like(self.pair_edges)
        for direction, rule in parts:
            if direction == "reversed" and self._reversed is None:
                raise HGraphError("this sharded graph was loaded without its reversed edges "
                                  "(Session.load(source, reverse=True))")
            rows = self._reversed if direction == "reversed" else self.pieces
            groups.append((rows, rule))
            pair = pair + (self.pair_edges.T if direction == "reversed" else self.pair_edges)
        other = object.__new__(ShardedGraph)
        other.__dict__.update(self.__dict__)
        other.groups, other._reversed, other.extras = groups, None, None
        other.pair_edges, other.dependency = pair, pair > 0
        other.num_edges = self.num_edges * len(groups)
        return other

    def __repr__(self) -> str:
        return (f"ShardedGraph(n={self.n}, num_edges={self.num_edges}, shards="
                f"{len(self.pieces)}, tasks={self.tasks}, columns={sorted(self.columns)})")
