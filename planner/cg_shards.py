"""A cg.txt read in shards by the engine's workers (issue 37: the driver stays small).

Why: read whole on the driver, a graph's text, its tokens and the parse's lists peak at
~1.3 KB an activation (bench/NOTES_scale.md), and the graph it keeps holds one Python string
per block's details and per variable's name (~250 of its ~400 bytes an activation), which
the planner's scale path never reads. Here the driver finds the cuts in one streaming pass
(:mod:`hgraph.shards`) and each worker parses its byte range (:func:`piece`): variable lines
give their bytes, function blocks their columns (what :class:`planner.cg.FunctionColumns`
holds, without details), and forward blocks also the vertices and edges of the *variable
graph* (vertex = variable id, edge ``a -> y`` for each input ``a`` of the block making ``y``,
column ``preds``: the block's inputs, ``floor``: 0 for an activation, -1 elsewhere). That graph
stays on the workers (:class:`hgraph.shards.ShardedGraph`) for the analyses that run on it
(:func:`planner.analyses.levels.var_levels`); only the compact columns come to the driver.

The graph :func:`read` returns is :func:`planner.cg.read`'s: the same columns, the same
checks (:func:`planner.cg._check_structure` on the driver); its details and names are read
from the file when first asked (never on the scale path). A shard the fast reader doubts (a
non-canonical spelling, a bad line, a worker that cannot open the file: on a cluster the path
must name the same file on every node) makes :func:`read` return None, and the caller reads
the file whole: the authority for every error message.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import numpy as np

import hgraph
from planner import cg as C

_shards = hgraph.shards        # the engine's sharded sources (the planner takes its public API)

__all__ = ["source", "piece", "read", "SHARD_BYTES"]

#: Bytes of text a shard holds at most (a worker's parse temporaries are a few times it).
SHARD_BYTES = 16 << 20


def header(path) -> tuple[int, int] | None:
    """``(N, M)`` from the file's first line, or None when it is not the canonical header."""
    try:
        with open(path, "rb") as fh:
            head = fh.readline(64)
    except OSError:
        return None
    parts = head.rstrip(b"\n").split(b" ")
    if not head.endswith(b"\n") or len(parts) != 2 or not all(
            x.isdigit() and (x == b"0" or not x.startswith(b"0")) for x in parts):
        return None
    return int(parts[0]), int(parts[1])


def source(path, tasks: int):
    """The cg.txt at ``path`` as a :class:`hgraph.shards.ShardedSource` over its variable ids:
    the variable lines, the forward blocks and the backward blocks each cut into near-equal
    byte ranges (at least ``tasks``, at most :data:`SHARD_BYTES` each) at line / block starts.
    None for a file whose header or layout is not the canonical one."""
    head = header(path)
    if head is None or head[1] == 0 or head[0] == 0:
        return None
    n = head[0]
    size = os.path.getsize(path)
    parts = max(int(tasks), -(-size // SHARD_BYTES))
    var_start = len(f"{head[0]} {head[1]}\n")
    fwd, fwd_line = _shards.find_line(path, b"forward", var_start, 2)
    bwd, bwd_line = _shards.find_line(path, b"backward", fwd, fwd_line)
    if bwd >= size:
        return None
    cuts = (_shards.cut_lines(path, None, var_start, fwd, parts, 2)
            + _shards.cut_lines(path, b"forward", fwd, bwd, parts, fwd_line)
            + _shards.cut_lines(path, b"backward", bwd, size, parts, bwd_line))
    ranges = tuple((a, b, ln) for (a, ln), (b, _) in zip(cuts[:-1], cuts[1:]) if b > a)
    return _shards.ShardedSource(str(path), n, ranges, piece, args=(("n", n),),
                         fills=(("preds", -1), ("floor", -1)))


def _doubt(why: str):
    return _shards.Piece(ids=np.zeros(0, np.int64), extra={"kind": "doubt", "why": why})


def piece(path, start: int, stop: int, line: int, n: int):
    """Bytes ``start:stop`` of a cg.txt (from 1-based line ``line``) parsed by the fast reader's
    patterns: variable lines -> their bytes; function blocks -> their columns, and forward
    blocks also the variable graph's rows and edges (the module docstring). A range the fast
    reader doubts gives a piece whose ``extra`` says so (the driver then reads whole)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            raw = fh.read(stop - start)
    except OSError as err:      # a worker on a node that does not see the driver's file
        return _doubt(f"cannot read {path} on a worker: {err.strerror}")
    if len(raw) != stop - start or not raw.isascii() or b"\r" in raw or not raw.endswith(b"\n"):
        return _doubt(f"line {line}: not plain ASCII lines")
    text = raw.decode("ascii")
    if text.startswith(("forward\n", "backward\n")):
        return _blocks(text, n, line, forward=text.startswith("forward\n"))
    first = text[:text.find(" ")]
    lines = text.count("\n")
    found = C._parse_vars(text, raw, 0, lines, int(first) if first.isdigit() else -1,
                          names=False) if first.isdigit() else None
    if found is None or found[2] != len(text):
        return _doubt(f"line {line}: variable lines")
    return _shards.Piece(ids=np.zeros(0, np.int64),
                         extra={"kind": "vars", "first": int(first), "bytes": found[0]})


def _blocks(text: str, n: int, line: int, forward: bool):
    parsed = C._parse_blocks(text, 0, len(text), len(text) if forward else 0)
    if parsed is None:
        return _doubt(f"line {line}: function blocks")
    k, p, in_var, in_tag, out_var, tps, dts = parsed
    if (in_var.size and in_var.max() >= n) or (out_var.size and out_var.max() >= n):
        return _doubt(f"line {line}: a variable id past N")
    shapes, escaped = set(), set()
    C._json_shapes(dts, shapes, escaped)
    names, codes = np.unique(np.array(tps, dtype=object), return_inverse=True)
    extra = {"kind": "forward" if forward else "backward", "k": k, "p": p, "in_var": in_var,
             "in_tag": in_tag, "out_var": out_var, "type_names": names.tolist(),
             "types": codes.astype(np.int32), "first_details": dts[0],
             "json": C._json_objects(shapes | escaped)}
    if not forward or not np.all(p == 1):
        return _shards.Piece(ids=np.zeros(0, np.int64), extra=extra)
    width = max(1, int(k.max(initial=0)))
    preds = np.full((k.size, width), -1, np.int64)
    owner = np.repeat(np.arange(k.size), k)
    preds[owner, np.arange(in_var.size) - np.repeat(np.cumsum(k) - k, k)] = in_var
    return _shards.Piece(ids=out_var, src=in_var, dst=out_var[owner], extra=extra,
                         columns={"preds": preds, "floor": np.zeros(k.size, np.int64)})


class _FileDetails(Sequence):
    """The blocks' details lines of a graph read in shards: the first kept (what
    :attr:`planner.cg.ComputationalGraph.costs` and ``ops`` look at first), the rest read
    from the file, whole, when first asked."""

    def __init__(self, path: str, count: int, first: str):
        self.path, self.count, self.first = path, count, first
        self._all = None

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        if isinstance(index, int) and index in (0, -self.count):
            return self.first
        if self._all is None:
            self._all = C.read(self.path).columns.details
        return self._all[index]


def _names(path: str) -> list:
    return C.read(path).var_names


def read(session, path):
    """``(graph, sharded)``: the cg.txt at ``path`` read in shards by ``session``'s workers —
    the :class:`planner.cg.ComputationalGraph` :func:`planner.cg.read` gives, and the variable
    graph left on the workers (:class:`hgraph.shards.ShardedGraph`) — or None where the fast
    reader doubts a shard or the layout (the caller reads whole, which words any error)."""
    head, src = header(path), source(path, session.engine.tasks)
    if src is None:
        return None
    sharded = session.load(src, reverse=True)       # the separators read it reversed
    extras, sharded.extras = sharded.extras, None
    made = _assemble(str(path), head, extras)
    if made is None:
        return None
    g = C.ComputationalGraph(made[0], functools.partial(_names, str(path)), path=str(path),
                             columns=made[1])
    C._check_structure(g, str(path), made[1])
    return g, sharded


def _assemble(path: str, head, extras):
    """``(var_bytes, columns)`` from the shards' extras in file order, or None at a doubt or
    when they do not add up to the header's N variables and M blocks."""
    n, m = head
    if any(e["kind"] == "doubt" for e in extras):
        return None
    var = [e for e in extras if e["kind"] == "vars"]
    blocks = [e for e in extras if e["kind"] in ("forward", "backward")]
    firsts = np.cumsum([0] + [e["bytes"].size for e in var])
    if firsts[-1] != n or any(e["first"] != f for e, f in zip(var, firsts[:-1].tolist())):
        return None
    half = m // 2
    fw = sum(e["k"].size for e in blocks if e["kind"] == "forward")
    if m % 2 or fw != half or sum(e["k"].size for e in blocks) != m:
        return None
    if not all(e["json"] for e in blocks):
        return None
    cat = (lambda key: np.concatenate([e[key] for e in blocks]))
    k, p = cat("k"), cat("p")
    in_tag = cat("in_tag")
    if not np.array_equal(in_tag == 0, np.repeat(np.arange(m) < half, k)):
        return None
    interned = {}
    types = np.concatenate([np.array([interned.setdefault(t, t) for t in e["type_names"]],
                                     dtype=object)[e["types"]] for e in blocks])
    line = n + 2 + np.concatenate(([0], np.cumsum(4 + k + p)[:-1]))
    cols = C.FunctionColumns(k=k, p=p, in_var=cat("in_var"), in_tag=in_tag,
                             out_var=cat("out_var"), types=types,
                             details=_FileDetails(path, m, blocks[0]["first_details"]),
                             line=line)
    return np.concatenate([e["bytes"] for e in var]), cols
