"""Computational graphs in the NeurIPS'19 reference text format (``cg_*.txt``).

The format (spec: ``docs/FORMAT.md`` §1) is a header ``N M``, N variable lines
``<id> <bytes> <name>`` and M function blocks: the first M/2 are ``forward`` blocks, block
``i + M/2`` is the ``backward`` block of forward block ``i``. Each block is

    forward | backward
    k p
    <var> <tag>      (k input lines; tag "_" forward, gradient|input|output backward)
    <var>            (p output lines)
    <FunctionType>
    <JSON details>   (one line)

The reader is strict: any deviation raises :class:`hgraph.common.errors.InputError` naming file, line and
what was expected, so a plan is never computed from a half-understood file. Because it accepts
only the canonical spelling of every line, :func:`dumps` reproduces an accepted file byte for byte.

Example::

    >>> from planner import cg, synth
    >>> text = cg.dumps(synth.build(layers=2, heads=2))     # a file's text (cg.read reads a path)
    >>> g = cg.loads(text)
    >>> g.num_vars, len(g.forward), cg.dumps(g) == text
    (79, 40, True)
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass, field

import numpy as np

from hgraph.common.errors import InputError
from hgraph.common.fileio import write_text
from planner.units import function_cost

__all__ = ["Function", "FunctionColumns", "ComputationalGraph", "TAGS", "read", "loads", "write",
           "dumps"]

FORWARD_TAGS = ("_",)
BACKWARD_TAGS = ("gradient", "input", "output")


@dataclass
class Function:
    """One function block of the file.

    ``index`` is the block's position (0..M-1); forward blocks come first. ``inputs`` is a list of
    ``(var, tag)`` pairs, ``outputs`` a list of var ids, ``details`` the raw JSON line (kept verbatim so
    the file round-trips), ``line`` the 1-based line number of the direction line.
    """

    index: int
    direction: str
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    type: str = ""
    details: str = "{}"
    line: int = 0

    def tagged(self, tag: str) -> list:
        """Var ids of the inputs carrying ``tag`` (e.g. ``"gradient"``)."""
        return [v for v, t in self.inputs if t == tag]


#: Input tags, in the order of :attr:`FunctionColumns.in_tag`'s codes.
TAGS = ("_", "gradient", "input", "output")
GRADIENT = TAGS.index("gradient")


@dataclass
class FunctionColumns:
    """The function blocks as flat arrays: what the planner reads, without an object per block.

    ``k``/``p``: int64 [M] inputs/outputs per block; ``in_var``/``in_tag``: every block's input
    vars in file order and their tags (uint8 codes into :data:`TAGS`); ``out_var``: every output
    var; ``types``: object [M] the function type per block; ``details``: list[str] [M] the raw
    JSON lines; ``line``: int64 [M] the 1-based line of each direction line (0 when built in
    memory). ``in_ptr``/``out_ptr`` (int64 [M + 1]) index block ``b``'s inputs/outputs.
    """

    k: np.ndarray
    p: np.ndarray
    in_var: np.ndarray
    in_tag: np.ndarray
    out_var: np.ndarray
    types: np.ndarray
    details: list
    line: np.ndarray

    def __post_init__(self):
        self.in_ptr = np.concatenate(([0], np.cumsum(self.k))).astype(np.int64)
        self.out_ptr = np.concatenate(([0], np.cumsum(self.p))).astype(np.int64)

    @property
    def num_forward(self) -> int:
        return int(self.k.size) // 2

    def input_sums(self, values: np.ndarray) -> np.ndarray:
        """int64 [M]: per block, the sum of ``values`` (one number per input, ``in_var`` order)."""
        cs = np.concatenate(([0], np.cumsum(values, dtype=np.int64)))
        return cs[self.in_ptr[1:]] - cs[self.in_ptr[:-1]]

    @property
    def in_grad(self) -> np.ndarray:
        return self.in_tag == GRADIENT

    @property
    def in_block(self) -> np.ndarray:
        """int64 [Σk]: the block of every input."""
        return np.repeat(np.arange(self.k.size, dtype=np.int64), self.k)

    @classmethod
    def of(cls, functions) -> "FunctionColumns":
        """From :class:`Function` blocks (built in memory, or the line-by-line reader's)."""
        ins = [x for f in functions for x in f.inputs]
        code = {t: i for i, t in enumerate(TAGS)}
        return cls(k=np.array([len(f.inputs) for f in functions], dtype=np.int64),
                   p=np.array([len(f.outputs) for f in functions], dtype=np.int64),
                   in_var=np.array([v for v, _ in ins], dtype=np.int64),
                   in_tag=np.array([code.get(t, 255) for _, t in ins], dtype=np.uint8),
                   out_var=np.array([v for f in functions for v in f.outputs], dtype=np.int64),
                   types=np.array([f.type for f in functions], dtype=object),
                   details=[f.details for f in functions],
                   line=np.array([f.line for f in functions], dtype=np.int64))

    def functions(self) -> list:
        """The blocks as :class:`Function` objects (what the columns were built from)."""
        half = self.num_forward
        ins = list(zip(self.in_var.tolist(), [TAGS[t] for t in self.in_tag.tolist()]))
        outs = self.out_var.tolist()
        ki, pi = self.in_ptr.tolist(), self.out_ptr.tolist()
        return [Function(b, "forward" if b < half else "backward", ins[ki[b]:ki[b + 1]],
                         outs[pi[b]:pi[b + 1]], t, d, ln)
                for b, (t, d, ln) in enumerate(zip(self.types.tolist(), self.details,
                                                   self.line.tolist()))]


class ComputationalGraph:
    """A parsed cg.txt: variables (bytes, names) and forward/backward function blocks.

    Attributes: ``var_bytes`` (int64 [N]), ``var_names`` (list[str]), ``columns`` (the M blocks
    as flat arrays, :class:`FunctionColumns`), ``functions`` (M :class:`Function` objects, file
    order), ``forward`` / ``backward`` (the halves; ``backward[i]`` belongs to ``forward[i]``),
    ``producer`` (int64 [N], the forward index producing a var, -1 for parameters and inputs),
    ``is_activation`` (bool [N]), ``path`` (where it was read from, or None).

    **Why columns.** A graph read from a file holds its blocks as :class:`FunctionColumns`
    only; the :class:`Function` objects are built the first time ``functions``/``forward``/
    ``backward`` is read. At 10^6 activations they would be 2·10^6 objects (~2 GB): the
    planner's scale path (activation graph, emit, replay, report) reads the columns instead.
    """

    def __init__(self, var_bytes, var_names, functions=None, path=None, *, columns=None):
        self.var_bytes = np.asarray(var_bytes, dtype=np.int64)
        self.var_names = var_names
        if columns is None:
            functions = list(functions if functions is not None else [])
            columns = FunctionColumns.of(functions)
            self._functions = functions
        self.columns = columns
        self.path = path
        half = columns.num_forward
        n = len(self.var_bytes)
        self.producer = np.full(n, -1, dtype=np.int64)
        counts = columns.p[:half]
        outs = columns.out_var[:int(counts.sum())]
        # a var produced twice (the reader rejects that) keeps its last producer, as a loop would
        self.producer[outs] = np.repeat(np.arange(half, dtype=np.int64), counts)
        self.is_activation = self.producer >= 0

    @property
    def var_names(self) -> list:
        """The N variable names (a graph read in shards reads them from its file when first
        asked: :mod:`planner.cg_shards`)."""
        names = self.__dict__["_var_names"]
        if callable(names):
            names = self.__dict__["_var_names"] = list(names())
        return names

    @var_names.setter
    def var_names(self, names) -> None:
        self.__dict__["_var_names"] = names if callable(names) else list(names)

    @property
    def functions(self) -> list:
        """The M blocks as :class:`Function` objects (built from ``columns`` when first read)."""
        if "_functions" not in self.__dict__:
            self._functions = self.columns.functions()
        return self._functions

    @property
    def forward(self) -> list:
        """The first M/2 blocks; sliced once (callers index it inside loops over blocks)."""
        if "_forward" not in self.__dict__:
            self._forward = self.functions[:self.num_forward]
        return self._forward

    @property
    def backward(self) -> list:
        """The last M/2 blocks; sliced once, as :attr:`forward`."""
        if "_backward" not in self.__dict__:
            self._backward = self.functions[self.num_forward:]
        return self._backward

    @property
    def num_forward(self) -> int:
        """M/2: the number of forward (and of backward) blocks."""
        return self.columns.num_forward

    @property
    def forward_output(self) -> np.ndarray:
        """int64 [M/2]: the (first) output var of each forward block."""
        c = self.columns
        return c.out_var[c.out_ptr[:self.num_forward]]

    @property
    def forward_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """``(a, y)`` int64 var ids: every input ``a`` of every forward block, beside that
        block's output ``y``, in the file's order (the data-flow edges ``a → y``)."""
        c, half = self.columns, self.num_forward
        return c.in_var[:c.in_ptr[half]], np.repeat(self.forward_output, c.k[:half])

    @property
    def loss_mask(self) -> np.ndarray:
        """bool [num_vars]: the forward outputs whose gradient no backward block produces — the
        loss (its gradient is the ``ones`` the step starts from, so no block writes it)."""
        c = self.columns
        produced = np.zeros(self.num_vars, bool)
        produced[c.out_var[c.out_ptr[self.num_forward]:]] = True
        fwd_out = self.forward_output
        mask = np.zeros(self.num_vars, bool)
        mask[fwd_out[~produced[fwd_out]]] = True
        return mask

    @property
    def costs(self):
        """int64 [M/2] per-forward-function costs from the details' ``"cost"`` key, or None.

        Graphs imported from PyTorch carry measured costs (FLOPs) there; reference graphs do not,
        and then the reference's cost model applies (:attr:`forward_costs`).
        """
        if "_costs" not in self.__dict__:
            own = None
            # the first line alone says no (a graph read in shards keeps only it here)
            if self.num_forward and '"cost"' in self.columns.details[0]:
                vals = [json.loads(d).get("cost") for d in self.columns.details[:self.num_forward]]
                if all(isinstance(v, int) and v >= 0 for v in vals):
                    own = np.asarray(vals, dtype=np.int64)
            self._costs = own
        return self._costs

    @property
    def forward_costs(self) -> np.ndarray:
        """int64 [M/2]: the cost of each forward function, what the planner minimises.

        The graph's own costs where it carries them (:attr:`costs`, e.g. FLOPs from
        :mod:`planner.torch`), otherwise the reference's model
        (:func:`planner.units.function_cost`: 10 for a convolution, 1 for anything else).
        """
        if "_forward_costs" not in self.__dict__:
            own = self.costs
            if own is None:
                types = self.columns.types[:self.num_forward].tolist()
                cost = {t: function_cost(t) for t in set(types)}
                own = np.fromiter(map(cost.__getitem__, types), dtype=np.int64,
                                  count=len(types))
            self._forward_costs = own
        return self._forward_costs

    @property
    def ops(self) -> tuple | None:
        """The op each forward function runs (its details' ``"op"``), or None.

        Graphs written by the zoo, a trace or the PyTorch bridge name every forward block's op
        with its argument shapes (``"in_shapes"``): only they can run on real kernels or have
        their whole step budgeted (:mod:`planner.whole_step`). The reference's graphs
        do not, and are None here.
        """
        if "_ops" not in self.__dict__:
            ops = None
            details = (self.columns.details[:self.num_forward]
                       if self.num_forward and '"in_shapes"' in self.columns.details[0] else ())
            if details and all('"in_shapes"' in d for d in details):
                parsed = [_parse_details(d) for d in details]
                if all("in_shapes" in d and "op" in d for d in parsed):
                    ops = tuple(d["op"] for d in parsed)
            self._ops = ops
        return self._ops

    @property
    def num_vars(self) -> int:
        return len(self.var_bytes)

    @property
    def num_functions(self) -> int:
        return int(self.columns.k.size)

    @property
    def activations(self) -> np.ndarray:
        """Activation var ids in ascending order (the DP graph's node order)."""
        return np.flatnonzero(self.is_activation)

    @property
    def name(self) -> str:
        """A short name: the file stem without the ``cg_`` prefix (``vgg19``)."""
        if self.path is None:
            return "graph"
        stem = os.path.splitext(os.path.basename(str(self.path)))[0]
        return stem[3:] if stem.startswith("cg_") else stem

    def __repr__(self) -> str:
        return (f"ComputationalGraph({self.name!r}, vars={self.num_vars}, "
                f"functions={self.num_functions})")


class _Lines:
    """A cursor over the file's lines that raises InputError with the right line number."""

    def __init__(self, lines, path):
        self.lines, self.path, self.pos = lines, path, 0

    def fail(self, problem, lineno=None):
        raise InputError(self.path, lineno if lineno is not None else self.pos, problem)

    def next(self, what: str) -> str:
        if self.pos >= len(self.lines):
            raise InputError(self.path, len(self.lines) + 1 if self.lines else 1,
                             f"unexpected end of file, expected {what}")
        line = self.lines[self.pos]
        self.pos += 1
        return line

    def ints(self, what: str, count: int, names: str) -> list:
        line = self.next(what)
        parts = line.split(" ")
        if len(parts) != count:
            self.fail(f"expected {what} ({names}), got {line[:60]!r}")
        out = []
        for p in parts:
            out.append(self.canonical_int(p, what))
        return out

    def canonical_int(self, token: str, what: str) -> int:
        if not token.isdigit() or not token.isascii() or (len(token) > 1 and token[0] == "0"):
            if token.startswith("-") and token[1:].isdigit():
                self.fail(f"expected a non-negative integer in {what}, got {token!r}")
            self.fail(f"expected an integer in {what}, got {token!r}")
        return int(token)


def loads(text, path="<string>") -> ComputationalGraph:
    """Parse cg.txt content (``str`` or ``bytes``); raises InputError on any deviation."""
    raw = None
    if isinstance(text, (bytes, bytearray)):
        if b"\0" in text:
            line = text[: text.index(b"\0")].count(b"\n") + 1
            raise InputError(path, line, "expected text, found binary data (NUL byte)")
        try:
            raw, text = bytes(text), bytes(text).decode("utf-8")
        except UnicodeDecodeError as err:
            line = bytes(text)[: err.start].count(b"\n") + 1
            raise InputError(path, line, "expected UTF-8 text, found binary data") from None
    if not text:
        raise InputError(path, 1, "empty file, expected header 'N M'")
    if "\r" in text:
        line = text[: text.index("\r")].count("\n") + 1
        raise InputError(path, line, "expected LF line endings, found a carriage return")
    if not text.endswith("\n"):
        raise InputError(path, text.count("\n") + 1, "expected a newline at the end of the "
                                                     "last line (truncated file?)")
    head = text.index("\n")
    n, m = _Lines([text[:head]], path).ints("header 'N M'", 2, "N variables, M functions")
    if m % 2:
        raise InputError(path, 1, f"expected an even function count M (forward + backward "
                                  f"blocks), got {m}")
    if text.isascii():
        fast = _fast_parse(text, raw if raw is not None else text.encode("ascii"), n, m,
                           head + 1)
        if fast is not None:
            g = ComputationalGraph(fast[0], fast[1], path=path, columns=fast[2])
            _check_structure(g, path, fast[2])
            return g

    lines = text.split("\n")
    lines.pop()
    cur = _Lines(lines, path)
    cur.pos = 1
    var_bytes = np.zeros(n, dtype=np.int64)
    names = []
    limit = np.iinfo(np.int64).max
    for i in range(n):
        line = cur.next(f"variable line {i} of {n} '<id> <bytes> <name>'")
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2]:
            if _is_block_start(line):
                cur.fail(f"expected variable line {i} of {n}, found a function block "
                         f"(header says N={n})")
            cur.fail(f"expected variable line '<id> <bytes> <name>', got {line[:60]!r}")
        vid = cur.canonical_int(parts[0], "variable id")
        if vid != i:
            cur.fail(f"expected variable id {i} (ids in order 0..N-1), got {vid}")
        size = cur.canonical_int(parts[1], "variable bytes")
        if size > limit:
            cur.fail(f"expected variable bytes below 2^63, got {size}")
        var_bytes[i] = size
        names.append(parts[2])

    half = m // 2
    functions = []
    for b in range(m):
        functions.append(_read_block(cur, b, half, n))
    if cur.pos != len(lines):
        cur.pos += 1
        cur.fail(f"expected end of file after {m} function blocks (header says M={m}), "
                 f"got {lines[cur.pos - 1][:60]!r}")

    g = ComputationalGraph(var_bytes, names, functions, path=path)
    _check_structure(g, path, g.columns)
    return g


_NAT = "(?:0|[1-9][0-9]*)"
_VAR_LINE = f"{_NAT} {_NAT} [^ \n]+\n"
_BLOCK = re.compile(
    f"((forward|backward)\n({_NAT}) ({_NAT})\n((?:{_NAT} (?:_|gradient|input|output)\n)*)"
    f"((?:{_NAT}\n)*)([A-Za-z_][!-~]*)\n([^\n]*)\n)")
#: Runs of digits as JSON's number grammar splits them (a leading "0" is a run of its own).
_DIGITS = re.compile("0|[1-9][0-9]*")
#: Characters of block text the fast reader matches at once (a few MB: bounded temporaries).
_CHUNK = 1 << 22
_TAG_CODE = {t: i for i, t in enumerate(TAGS)}


def _nats(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """int64 values of the canonical decimal numbers ``buf[starts[i]:ends[i]]`` (ASCII digits,
    already matched), or None when one is 2^63 or more. One NumPy pass per digit count."""
    lens = ends - starts
    out = np.zeros(starts.size, np.int64)
    if not lens.size:
        return out
    if lens.max() > 19:
        return None
    for length in np.flatnonzero(np.bincount(lens)).tolist():
        rows = np.flatnonzero(lens == length)
        val = np.zeros(rows.size, np.uint64)
        for j in range(length):
            val = val * np.uint64(10) + (buf[starts[rows] + j] - 48).astype(np.uint64)
        if length == 19 and np.any(val >= np.uint64(2**63)):
            return None
        out[rows] = val.astype(np.int64)
    return out


def _ints(tokens) -> np.ndarray:
    return np.array(list(map(int, tokens)), dtype=np.int64)


def _json_shapes(details, shapes: set, escaped: set) -> None:
    """Add the *shapes* of these detail lines to ``shapes`` (lines with a backslash, as they
    are, to ``escaped``): :func:`_json_objects` parses each distinct shape once.

    Replacing every digit run (as the number grammar splits them: ``0`` alone, else
    ``[1-9][0-9]*``) by ``0`` keeps a line valid or invalid — digits appear in JSON only in
    numbers, where each run keeps its place in the grammar, and in strings, where any run is
    valid; ``\\uXXXX`` escapes are the exception, so lines with a backslash are kept as they
    are. The reference's details differ mostly in numbers (``"rank": 17``), so a file has a few
    shapes, not one per block.
    """
    plain = [d for d in details if "\\" not in d]
    escaped.update(d for d in details if "\\" in d)
    if plain:
        shapes.update(_DIGITS.sub("0", "\n".join(plain)).split("\n"))


def _json_objects(shapes) -> bool:
    """Whether every line of ``shapes`` is a one-line JSON object."""
    for d in shapes:
        try:
            if not isinstance(json.loads(d), dict):
                return False
        except ValueError:
            return False
    return True


def _parse_vars(text: str, raw: bytes, start: int, n: int, first: int = 0,
                names: bool = True):
    """``(var_bytes, names, end)`` of the ``n`` variable lines from ``start`` (ids ``first``,
    ``first + 1``, ...), or None; ``names=False``: no names (None; a shard's reader)."""
    m = re.compile(f"(?:{_VAR_LINE}){{{n}}}").match(text, start)
    if m is None:
        return None
    end = m.end()
    if n == 0:
        return np.zeros(0, np.int64), [], end
    buf = np.frombuffer(raw, np.uint8, end - start, start)
    nl = np.flatnonzero(buf == 10)
    sp = np.flatnonzero(buf == 32).reshape(n, 2)          # names hold no space: two a line
    ls = np.concatenate(([0], nl[:-1] + 1))
    ids = _nats(buf, ls, sp[:, 0])
    sizes = _nats(buf, sp[:, 0] + 1, sp[:, 1])
    if ids is None or sizes is None or not np.array_equal(ids, np.arange(first, first + n)):
        return None
    if not names:
        return sizes, None, end
    names = [text[a:b] for a, b in zip((start + sp[:, 1] + 1).tolist(), (start + nl).tolist())]
    return sizes, names, end


def _parse_blocks(text: str, pos: int, stop: int, forward: int):
    """The function blocks tiling ``text[pos:stop]`` exactly, the first ``forward`` of them
    forward blocks and the rest backward ones: ``(k, p, in_var, in_tag, out_var, types,
    details)`` (arrays, then tuples of str), or None at the first doubt (a block that does not
    match, a direction out of place, line counts that differ from a block's header)."""
    found = _BLOCK.findall(text, pos, stop)
    if not found or sum(map(len, (x[0] for x in found))) != stop - pos:
        return None                                  # the blocks do not tile the text exactly
    _, dirs, kt, pt, ins, outs, tps, dts = zip(*found)
    nb = len(found)
    fw = min(max(forward, 0), nb)
    if dirs[:fw].count("forward") != fw or dirs[fw:].count("backward") != nb - fw:
        return None
    k, p = _ints(kt), _ints(pt)
    if (not np.array_equal(k, np.fromiter(map(str.count, ins, ["\n"] * nb), np.int64, nb))
            or not np.array_equal(p, np.fromiter(map(str.count, outs, ["\n"] * nb),
                                                 np.int64, nb))):
        return None
    in_tokens = "".join(ins).replace("\n", " ").split(" ")[:-1]
    in_var = _ints(in_tokens[0::2])
    in_tag = np.fromiter(map(_TAG_CODE.__getitem__, in_tokens[1::2]), np.uint8,
                         len(in_tokens) // 2)
    return k, p, in_var, in_tag, _ints("".join(outs).split("\n")[:-1]), tps, dts


def _fast_parse(text: str, raw: bytes, n: int, m: int, start: int):
    """The common case, quickly: an ASCII file parsed with whole-text regexes and NumPy.

    Returns ``(var_bytes, names, columns)`` or None at the first doubt, in which case the
    line-by-line parser (the authority, with the precise error messages) runs instead. It
    never accepts what that parser rejects: every pattern here is a subset of what it accepts,
    the blocks must tile the text exactly (matched a few MB at a time, so the temporaries stay
    small at any size), and each block's line counts must match its header.
    """
    found_vars = _parse_vars(text, raw, start, n)
    if found_vars is None:
        return None
    sizes, names, pos = found_vars
    half = m // 2
    ks, ps, in_vars, in_tags, out_vars, types, details = [], [], [], [], [], [], []
    shapes, escaped, interned = set(), set(), {}
    done = 0
    while pos < len(text):
        stop = len(text)
        if pos + _CHUNK < stop:          # cut before a direction line (tiling checks the cut)
            cuts = [c for c in (text.find("\nforward\n", pos + _CHUNK, pos + 2 * _CHUNK),
                                text.find("\nbackward\n", pos + _CHUNK, pos + 2 * _CHUNK))
                    if c >= 0]
            stop = min(cuts) + 1 if cuts else stop
        parsed = _parse_blocks(text, pos, stop, half - done)   # forward blocks first
        if parsed is None:
            return None
        k, p, in_var, in_tag, out_var, tps, dts = parsed
        ks.append(k)
        ps.append(p)
        in_vars.append(in_var)
        in_tags.append(in_tag)
        out_vars.append(out_var)
        types.extend(interned.setdefault(t, t) for t in tps)
        details.extend(dts)
        _json_shapes(dts, shapes, escaped)
        done += k.size
        pos = stop
    if done != m or not _json_objects(shapes | escaped):
        return None
    cat = (lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt))
    k, p = cat(ks, np.int64), cat(ps, np.int64)
    in_var, in_tag, out_var = cat(in_vars, np.int64), cat(in_tags, np.uint8), cat(out_vars, np.int64)
    if (in_var.size and in_var.max() >= n) or (out_var.size and out_var.max() >= n):
        return None
    # forward blocks take only "_" inputs, backward blocks never
    if not np.array_equal(in_tag == 0, np.repeat(np.arange(m) < half, k)):
        return None
    line = n + 2 + np.concatenate(([0], np.cumsum(4 + k + p)[:-1])) if m else k
    cols = FunctionColumns(k=k, p=p, in_var=in_var, in_tag=in_tag, out_var=out_var,
                           types=np.array(types, dtype=object), details=details, line=line)
    return sizes, names, cols


def _is_block_start(line: str) -> bool:
    return line in ("forward", "backward")


def _read_block(cur: _Lines, b: int, half: int, n: int) -> Function:
    direction = "forward" if b < half else "backward"
    line = cur.next(f"direction line '{direction}' of block {b}")
    start = cur.pos
    if line != direction:
        cur.fail(f"expected direction line '{direction}' for function block {b}, got {line[:60]!r}")
    k, p = cur.ints(f"block {b} counts 'k p'", 2, "inputs, outputs")
    tags = FORWARD_TAGS if direction == "forward" else BACKWARD_TAGS
    inputs = []
    for _ in range(k):
        line = cur.next(f"input line '<var> <tag>' of block {b}")
        parts = line.split(" ")
        if len(parts) != 2:
            cur.fail(f"expected input line '<var> <tag>' ({k} inputs in block {b}), "
                     f"got {line[:60]!r}")
        v = cur.canonical_int(parts[0], "input var id")
        if v >= n:
            cur.fail(f"expected a var id below N={n}, got unknown id {v}")
        if parts[1] not in tags:
            cur.fail(f"expected input tag {' or '.join(repr(t) for t in tags)} in a {direction} "
                     f"block, got {parts[1]!r}")
        inputs.append((v, parts[1]))
    outputs = []
    for _ in range(p):
        line = cur.next(f"output line '<var>' of block {b}")
        if " " in line:
            cur.fail(f"expected output line '<var>' ({p} outputs in block {b}), got {line[:60]!r}")
        v = cur.canonical_int(line, "output var id")
        if v >= n:
            cur.fail(f"expected a var id below N={n}, got unknown id {v}")
        outputs.append(v)
    ftype = cur.next(f"function type of block {b}")
    if not ftype or " " in ftype or not ftype.isprintable() or ftype[0].isdigit():
        cur.fail(f"expected a function type name (e.g. ReLU), got {ftype[:60]!r}")
    details = cur.next(f"JSON details line of block {b}")
    try:
        obj = json.loads(details)
    except ValueError:
        cur.fail(f"expected a one-line JSON object of details, got {details[:60]!r}")
    if not isinstance(obj, dict):
        cur.fail(f"expected a one-line JSON object of details, got {details[:60]!r}")
    return Function(b, direction, inputs, outputs, ftype, details, start)


def _check_structure(g: ComputationalGraph, path, cols: FunctionColumns) -> None:
    """Cross-block checks: one output per forward block, unique producers, pairing, no cycles.

    Vectorised over ``cols``; the first failing block (in the order a loop over the blocks
    would meet it) is then re-checked on its own to word the error.
    """
    half = g.num_forward
    k_fw, p_fw = cols.k[:half], cols.p[:half]
    not_one = np.flatnonzero(p_fw != 1)
    limit = int(not_one[0]) if not_one.size else half
    out_fw = cols.out_var[np.concatenate(([0], np.cumsum(p_fw)[:-1]))[:limit]] if limit else \
        np.zeros(0, dtype=np.int64)
    _, first = np.unique(out_fw, return_index=True)
    repeated = np.ones(limit, dtype=bool)       # the blocks that are not a var's first producer
    repeated[first] = False                     # (np.setdiff1d would import numpy.ma)
    again = np.flatnonzero(repeated)
    if again.size:
        i = int(again[0])
        v = int(out_fw[i])
        raise InputError(path, g.forward[i].line, f"expected each variable produced once, var {v} "
                                                  f"is also produced by forward block "
                                                  f"{int(np.flatnonzero(out_fw == v)[0])}")
    if limit < half:
        f = g.forward[limit]
        raise InputError(path, f.line + 1, f"expected exactly 1 output in forward block "
                                           f"{f.index}, got {len(f.outputs)}")
    # backward block i: exactly one gradient input, forward i's output
    k_bw, p_bw = cols.k[half:], cols.p[half:]
    n_fw_in = int(k_fw.sum())
    bw_block = np.repeat(np.arange(half), k_bw)
    grad = cols.in_grad[n_fw_in:]
    n_grad = np.bincount(bw_block[grad], minlength=half)
    grad_var = np.full(half, -1, dtype=np.int64)
    grad_var[bw_block[grad]] = cols.in_var[n_fw_in:][grad]
    bad = (n_grad != 1) | (grad_var != out_fw)
    # backward block i's outputs: forward i's input vars, in order
    same_count = np.flatnonzero(p_bw == k_fw)
    bad |= p_bw != k_fw
    lengths = k_fw[same_count]
    rep = np.repeat(same_count, lengths)
    offs = np.arange(rep.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    fw_start = np.concatenate(([0], np.cumsum(k_fw)[:-1]))
    bw_start = int(cols.p[:half].sum()) + np.concatenate(([0], np.cumsum(p_bw)[:-1]))
    differ = cols.in_var[fw_start[rep] + offs] != cols.out_var[bw_start[rep] + offs]
    bad[rep[differ]] = True
    bad |= cols.types[half:] != cols.types[:half]
    if bad.any():
        _pair_error(g, int(np.flatnonzero(bad)[0]), path)
    src = g.producer[cols.in_var[:n_fw_in]]
    dst = np.repeat(np.arange(half), k_fw)
    cycle = _find_cycle(half, src[src >= 0], dst[src >= 0])
    if cycle is not None:
        f = g.forward[cycle]
        raise InputError(path, f.line, f"cycle among forward functions through block {cycle} "
                                       f"(output var {f.outputs[0]}); expected a DAG")


def _pair_error(g: ComputationalGraph, i: int, path) -> None:
    """Raise the error of forward block ``i`` and its backward block (one is known to fail)."""
    f, bw = g.forward[i], g.backward[i]
    grads = bw.tagged("gradient")
    if grads != f.outputs:
        raise InputError(path, bw.line, f"expected backward block {bw.index} to take the "
                                        f"gradient of var {f.outputs[0]} (output of forward "
                                        f"block {i}), got {grads}")
    fin = [v for v, _ in f.inputs]
    if bw.outputs != fin:
        raise InputError(path, bw.line, f"expected backward block {bw.index} outputs to be "
                                        f"forward block {i}'s inputs {fin}, got {bw.outputs}")
    raise InputError(path, bw.line, f"expected function type {f.type!r} (as forward "
                                    f"block {i}), got {bw.type!r}")


def _find_cycle(nf: int, src: np.ndarray, dst: np.ndarray):
    """Index of a forward function on a cycle, or None (Kahn's algorithm over forward functions;
    ``src → dst`` are the producer → consumer edges)."""
    if nf == 0 or np.all(src < dst):        # file order already topological: the common case
        return None
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(nf + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=nf), out=indptr[1:])
    succ = dst[order].tolist()
    ptr = indptr.tolist()
    indeg = np.bincount(dst, minlength=nf).tolist()
    stack = [i for i in range(nf) if indeg[i] == 0]
    done = 0
    while stack:
        u = stack.pop()
        done += 1
        for w in succ[ptr[u]:ptr[u + 1]]:
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(w)
    if done == nf:
        return None
    return min(i for i in range(nf) if indeg[i] > 0)


def read(path) -> ComputationalGraph:
    """Read and validate a cg.txt file."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as err:
        raise InputError(path, None, f"cannot read: {err.strerror}") from None
    return loads(data, path=str(path))


def dumps(g: ComputationalGraph) -> str:
    """The file text of ``g``; equal to the input for any file :func:`read` accepted."""
    out = [f"{g.num_vars} {g.num_functions}"]
    out.extend(f"{i} {b} {name}" for i, (b, name) in enumerate(zip(g.var_bytes.tolist(),
                                                                    g.var_names)))
    for f in g.functions:
        out.append(f.direction)
        out.append(f"{len(f.inputs)} {len(f.outputs)}")
        out.extend(f"{v} {t}" for v, t in f.inputs)
        out.extend(str(v) for v in f.outputs)
        out.append(f.type)
        out.append(f.details)
    out.append("")
    return "\n".join(out)


def write(g: ComputationalGraph, path) -> None:
    """Write ``g`` atomically in the reference format."""
    write_text(path, dumps(g))


def details_of(f) -> dict:
    """A function's details as a dict (shared between calls: read, never modify it): what the
    executor's kernels and the whole-step prediction read of every step."""
    d = f.details
    if isinstance(d, dict):
        return d
    return _parse_details(d)


@functools.lru_cache(maxsize=1 << 16)
def _parse_details(text: str) -> dict:
    """The JSON of a details string, parsed once (every step of every run reads it); not JSON:
    no details ({})."""
    try:
        return json.loads(text)
    except ValueError:
        return {}

