"""Graph loaders: edge-list text and HybridGraph adjacency text, parsed with vectorized NumPy.

Formats:

* **edge list** — one edge per line, ``src dst [weight]`` separated by spaces or tabs; ``#``
  starts a comment; blank lines are ignored; a missing weight is 1.0;
* **adjacency** (HybridGraph) — one vertex per line, ``vid<TAB>dst:dst:...``, or weighted
  ``vid<TAB>dst:w:dst:w:...``; a vertex may have no neighbours (``vid`` alone). The weighted form
  is recognised when a neighbour list holds a non-integer token (``4.0``) — use
  ``fmt="adjacency-weighted"`` / ``"adjacency-unweighted"`` to say it explicitly.

Vertices are ``0..max id`` (or the ``n`` given): ids are dense, so the largest id sizes every
per-vertex array. Without ``n``, an id of more than :data:`ID_SPACE_PER_ID` times the number of
ids in the file (and at least :data:`MIN_ID_SPACE`) is refused: it is almost surely a stray
value, and would otherwise allocate memory for every id below it. A malformed file raises
:class:`hgraph.common.errors.InputError` naming the file, the line and the problem.

Parsing does not loop in Python per line: the bytes are scanned with NumPy to find the tokens and
their lines, and the numbers are read by one ``np.fromstring`` call, so a 10M-edge file loads in
seconds.

Example (the repository's ``examples/tiny.edges`` and ``examples/tiny.adj`` load the same way)::

    >>> import os, tempfile
    >>> import hgraph
    >>> path = os.path.join(tempfile.mkdtemp(), "g.edges")
    >>> _ = open(path, "w").write("# src dst\\n0 1\\n0 2\\n1 2\\n")
    >>> g = hgraph.io.load(path)
    >>> g.n, g.num_edges
    (3, 3)
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np

from hgraph.common.errors import InputError
from hgraph.graph import Graph

FORMATS = ("auto", "edgelist", "adjacency", "adjacency-weighted", "adjacency-unweighted")

_COMMENT = re.compile(rb"#[^\n]*")


class _Tokens:
    """Numbers of a text and where they are: ``values`` (float64), the ``line`` (0-based) of
    each token, and per line its first token index and token count."""

    def __init__(self, path, data: bytes, separators: bytes):
        self.path = path
        self.data = data
        buf = np.frombuffer(data, dtype=np.uint8)
        sep = np.zeros(256, dtype=bool)
        sep[list(b" \t\r\n\v\f" + separators)] = True
        is_sep = sep[buf]
        starts = np.flatnonzero(~is_sep & np.concatenate(([True], is_sep[:-1])))
        newlines = np.flatnonzero(buf == 10)
        self.num_lines = len(newlines) + 1
        self.token_pos = starts
        self.line = np.searchsorted(newlines, starts)
        self.count = np.bincount(self.line, minlength=self.num_lines)
        self.first = np.concatenate(([0], np.cumsum(self.count)[:-1]))
        self.line_starts = np.concatenate(([0], newlines + 1))
        if separators:
            table = bytes.maketrans(separators, b" " * len(separators))
            data = data.translate(table)
        text = data.decode("ascii", errors="replace")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values = np.fromstring(text, dtype=np.float64, sep=" ") if starts.size else np.empty(0)
        except ValueError:
            values = None
        if values is None or len(values) != len(starts):
            self.fail_token(self._first_bad_token(), "not a number")
        self.values = values

    def _first_bad_token(self) -> int:
        """The index of the first token that is not a number (error path only)."""
        buf = np.frombuffer(self.data, dtype=np.uint8)
        ok = np.zeros(256, dtype=bool)
        ok[list(b" \t\r\n\v\f:0123456789+-.eEinfatyINFATY")] = True
        odd = np.flatnonzero(~ok[buf])
        if len(odd):
            return max(int(np.searchsorted(self.token_pos, odd[0], side="right")) - 1, 0)
        for index in range(len(self.token_pos)):
            try:
                float(self.token_text(index))
            except ValueError:
                return index
        return len(self.token_pos) - 1

    def token_text(self, index: int) -> str:
        pos = int(self.token_pos[index])
        end = pos
        stop = len(self.data)
        while end < stop and self.data[end:end + 1] not in (b" ", b"\t", b"\r", b"\n", b":"):
            end += 1
        return self.data[pos:end].decode("utf-8", errors="replace")

    def fail_token(self, index: int, problem: str):
        raise InputError(self.path, int(self.line[index]) + 1, f"{problem}: {self.token_text(index)!r}")

    def fail_line(self, line: int, problem: str):
        raise InputError(self.path, int(line) + 1, problem)


def _read(path) -> bytes:
    data = Path(path).read_bytes()
    if b"\0" in data[:4096]:
        raise InputError(path, None, "binary data, expected a text graph file")
    return data


def _strip_comments(data: bytes) -> bytes:
    # Replace the comment text but keep the newlines, so that line numbers stay right.
    return _COMMENT.sub(lambda m: b" " * len(m.group(0)), data) if b"#" in data else data


def _check_ids(tokens: _Tokens, index: np.ndarray, what: str) -> np.ndarray:
    ids = tokens.values[index]
    bad = ~((ids >= 0) & (ids == np.floor(ids)) & (ids < 2.0 ** 62))
    if bad.any():
        tokens.fail_token(int(index[np.argmax(bad)]), f"{what} must be a non-negative integer")
    return ids.astype(np.int64)


def _check_weights(tokens: _Tokens, index: np.ndarray) -> np.ndarray:
    weights = tokens.values[index]
    bad = np.isnan(weights)
    if bad.any():
        tokens.fail_token(int(index[np.argmax(bad)]), "weight is not a number")
    return weights


#: Vertex ids are dense: a file whose largest id is ``k`` makes the ``k + 1`` vertices ``0..k``,
#: each with its slots in every per-vertex array, whether the file names it or not. So that a
#: stray huge id is one clear line instead of an allocation of terabytes, the largest id may be at
#: most :data:`ID_SPACE_PER_ID` times the number of ids the file names (which keeps the vertex
#: arrays within a constant factor of the file), and any id below :data:`MIN_ID_SPACE` is fine.
ID_SPACE_PER_ID = 16
MIN_ID_SPACE = 2**20


def _check_id_space(tokens: _Tokens, index: np.ndarray, ids: np.ndarray) -> None:
    """Refuse, naming the line, an id that would size the graph far beyond what the file holds
    (``index``: the token index of each of ``ids``, every vertex id the file names)."""
    limit = max(MIN_ID_SPACE, ID_SPACE_PER_ID * len(ids))
    if len(ids) == 0 or int(ids.max()) < limit:
        return
    at = int(np.argmax(ids))
    top = int(ids[at])
    tokens.fail_line(int(tokens.line[index[at]]),
                     f"vertex id {top} would make {top + 1:,} vertices (ids are dense: every id "
                     f"0..{top} gets a vertex); a file naming {len(ids):,} ids may use ids below "
                     f"{limit:,} ({ID_SPACE_PER_ID} per id named, at least {MIN_ID_SPACE:,}): "
                     f"renumber the vertices 0..n-1")


def _graph(path, src, dst, weights, n):
    top = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
    if n is not None and top > n:
        raise InputError(path, None, f"vertex id {top - 1} is out of range for n={n}")
    return Graph(src, dst, weights=weights, n=n if n is not None else top)


def load_edgelist(path, n: int | None = None) -> Graph:
    """An edge-list file (``src dst [weight]`` per line, ``#`` comments)."""
    tokens = _Tokens(path, _strip_comments(_read(path)), b"")
    used, first, src, dst, weights, _ = _edge_lines(tokens)
    if n is None:
        _check_id_space(tokens, np.concatenate((first, first + 1)), np.concatenate((src, dst)))
    return _graph(path, src, dst, weights, n)


def _edge_lines(tokens):
    """``(used, first, src, dst, weights, weighted)`` of an edge list's tokens: the lines that
    hold an edge, their first token, the ids, the weights (1 where a line names none) and
    which lines name one. A line of other than 2 or 3 fields, a bad id or weight, is refused
    naming its line (the whole file's reader and a shard's share it)."""
    count = tokens.count
    bad = (count != 0) & (count != 2) & (count != 3)
    if bad.any():
        line = int(np.argmax(bad))
        tokens.fail_line(line, f"expected 'src dst [weight]', got {int(count[line])} fields")
    used = np.flatnonzero(count)
    first = tokens.first[used]
    src = _check_ids(tokens, first, "source id")
    dst = _check_ids(tokens, first + 1, "destination id")
    weighted = count[used] == 3
    weights = np.ones(len(used))
    if weighted.any():
        weights[weighted] = _check_weights(tokens, first[weighted] + 2)
    return used, first, src, dst, weights, weighted


def _looks_weighted(data: bytes) -> bool:
    """Whether adjacency lists hold non-integer tokens (``dst:w`` pairs with float weights)."""
    for line in data.splitlines()[:1000]:
        _, _, rest = line.partition(b"\t")
        if re.search(rb"[.eEnN]", rest.replace(b"\t", b"")):
            return True
    return False


def load_adjacency(path, weighted: bool | None = None, n: int | None = None) -> Graph:
    """A HybridGraph adjacency file: ``vid<TAB>dst:dst:...`` or ``vid<TAB>dst:w:dst:w:...``."""
    data = _strip_comments(_read(path))
    if weighted is None:
        weighted = _looks_weighted(data)
    tokens = _Tokens(path, data, b":")
    count = tokens.count
    used = np.flatnonzero(count)
    first = tokens.first[used]
    neighbours = count[used] - 1
    if weighted:
        odd = (neighbours % 2) == 1
        if odd.any():
            tokens.fail_line(int(used[np.argmax(odd)]),
                             "weighted adjacency needs dst:weight pairs, got an odd number of fields")
    vids = _check_ids(tokens, first, "vertex id")
    order = np.argsort(vids, kind="stable")
    dup = vids[order][1:] == vids[order][:-1]
    if dup.any():
        line = int(used[order[1:][np.argmax(dup)]])
        tokens.fail_line(line, f"vertex {int(vids[order][1:][np.argmax(dup)])} is listed twice")
    per = neighbours // 2 if weighted else neighbours
    stride = 2 if weighted else 1
    total = int(per.sum())
    owner = np.repeat(np.arange(len(used)), per)
    k = np.arange(total) - np.repeat(np.cumsum(per) - per, per)
    dst_index = first[owner] + 1 + stride * k
    src = vids[owner]
    dst = _check_ids(tokens, dst_index, "neighbour id")
    weights = _check_weights(tokens, dst_index + 1) if weighted else None
    if n is None:
        _check_id_space(tokens, np.concatenate((first, dst_index)), np.concatenate((vids, dst)))
    top = int(max(vids.max(initial=-1), dst.max(initial=-1))) + 1
    return _graph(path, src, dst, weights, n if n is not None else top)


def detect_format(path) -> str:
    """``adjacency`` when the first data line is ``vid<TAB>...:...`` or the name ends in .adj."""
    p = Path(path)
    if p.suffix in (".adj", ".al"):
        return "adjacency"
    with open(p, "rb") as handle:
        for raw in handle:
            line = raw.split(b"#", 1)[0].strip()
            if not line:
                continue
            head, tab, rest = line.partition(b"\t")
            if tab and (b":" in rest or (rest and len(rest.split()) == 1 and len(line.split()) == 2
                                         and b":" in rest)):
                return "adjacency"
            return "edgelist"
    return "edgelist"


def load(path, fmt: str = "auto", n: int | None = None) -> Graph:
    """Load a graph file; ``fmt`` is one of :data:`FORMATS` (``auto`` looks at the file)."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "edgelist":
        return load_edgelist(path, n=n)
    weighted = {"adjacency": None, "adjacency-weighted": True, "adjacency-unweighted": False}[fmt]
    return load_adjacency(path, weighted=weighted, n=n)


def edgelist_piece(path, start: int, stop: int, line: int, n: int):
    """Bytes ``start:stop`` of an edge-list file (beginning at 1-based line ``line``) as a
    :class:`hgraph.shards.Piece`: its edges, no vertex rows (the loader of
    :func:`edgelist_source`; a worker runs it on its shard). Errors name the file's line."""
    from hgraph.shards import Piece

    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read(stop - start)
    try:
        tokens = _Tokens(path, _strip_comments(data), b"")
        used, _, src, dst, weights, weighted = _edge_lines(tokens)
        top = int(max(src.max(initial=-1), dst.max(initial=-1)))
        if top >= n:
            at = int(np.argmax(np.maximum(src, dst) >= n))
            tokens.fail_line(int(used[at]), f"vertex id {top} is out of range for n={n}")
    except InputError as err:        # the shard's line -> the file's
        raise InputError(path, None if err.line is None else err.line + line - 1,
                         err.problem) from None
    return Piece(ids=np.zeros(0, np.int64), src=src, dst=dst,
                 weights=weights if weighted.any() else None)


def edgelist_source(path, n: int, parts: int):
    """An edge-list file as a :class:`hgraph.shards.ShardedSource` of ``n`` vertices cut into
    at most ``parts`` shards at line starts (one streaming scan: the driver never holds the
    text); :meth:`hgraph.Session.load` has the workers read it."""
    import os

    from hgraph.shards import ShardedSource, cut_lines

    cuts = cut_lines(path, None, 0, os.path.getsize(path), parts)
    ranges = tuple((a, b, ln) for (a, ln), (b, _) in zip(cuts[:-1], cuts[1:]) if b > a)
    return ShardedSource(str(path), int(n), ranges, edgelist_piece, args=(("n", int(n)),))

