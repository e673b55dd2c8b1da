"""Computational graphs in the NeurIPS'19 reference text format (``cg_*.txt``).

The format (spec: ``../shared/reference/FORMAT.md`` §1) is a header ``N M``, N variable lines
``<id> <bytes> <name>`` and M function blocks: the first M/2 are ``forward`` blocks, block
``i + M/2`` is the ``backward`` block of forward block ``i``. Each block is

    forward | backward
    k p
    <var> <tag>      (k input lines; tag "_" forward, gradient|input|output backward)
    <var>            (p output lines)
    <FunctionType>
    <JSON details>   (one line)

The reader is strict: any deviation raises :class:`hgraph.errors.InputError` naming file, line and
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

import json
import os
import re
from dataclasses import dataclass, field

import numpy as np

from hgraph.errors import InputError
from hgraph.fileio import write_text

__all__ = ["Function", "ComputationalGraph", "read", "loads", "write", "dumps"]

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


class ComputationalGraph:
    """A parsed cg.txt: variables (bytes, names) and forward/backward function blocks.

    Attributes: ``var_bytes`` (int64 [N]), ``var_names`` (list[str]), ``functions`` (M blocks,
    file order), ``forward`` / ``backward`` (the halves; ``backward[i]`` belongs to ``forward[i]``),
    ``producer`` (int64 [N], the forward index producing a var, -1 for parameters and inputs),
    ``is_activation`` (bool [N]), ``path`` (where it was read from, or None).
    """

    def __init__(self, var_bytes, var_names, functions, path=None):
        self.var_bytes = np.asarray(var_bytes, dtype=np.int64)
        self.var_names = list(var_names)
        self.functions = list(functions)
        half = len(self.functions) // 2
        self.forward = self.functions[:half]
        self.backward = self.functions[half:]
        self.path = path
        n = len(self.var_bytes)
        self.producer = np.full(n, -1, dtype=np.int64)
        for f in self.forward:
            for v in f.outputs:
                self.producer[v] = f.index
        self.is_activation = self.producer >= 0

    @property
    def costs(self):
        """int64 [M/2] per-forward-function costs from the details' ``"cost"`` key, or None.

        Graphs imported from PyTorch carry measured costs (FLOPs) there; reference graphs do not,
        and then the reference's cost model applies (:func:`planner.units.forward_costs`).
        """
        if "_costs" not in self.__dict__:
            fwd = self.forward
            own = None
            if fwd and '"cost"' in fwd[0].details:
                vals = [json.loads(f.details).get("cost") for f in fwd]
                if all(isinstance(v, int) and v >= 0 for v in vals):
                    own = np.asarray(vals, dtype=np.int64)
            self._costs = own
        return self._costs

    @property
    def num_vars(self) -> int:
        return len(self.var_bytes)

    @property
    def num_functions(self) -> int:
        return len(self.functions)

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
    if isinstance(text, (bytes, bytearray)):
        if b"\0" in text:
            line = text[: text.index(b"\0")].count(b"\n") + 1
            raise InputError(path, line, "expected text, found binary data (NUL byte)")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as err:
            line = bytes(text)[: err.start].count(b"\n") + 1
            raise InputError(path, line, "expected UTF-8 text, found binary data") from None
    if not text:
        raise InputError(path, 1, "empty file, expected header 'N M'")
    if "\r" in text:
        line = text[: text.index("\r")].count("\n") + 1
        raise InputError(path, line, "expected LF line endings, found a carriage return")
    lines = text.split("\n")
    if lines[-1] != "":
        raise InputError(path, len(lines), "expected a newline at the end of the last line "
                                           "(truncated file?)")
    lines.pop()
    cur = _Lines(lines, path)

    n, m = cur.ints("header 'N M'", 2, "N variables, M functions")
    if m % 2:
        cur.fail(f"expected an even function count M (forward + backward blocks), got {m}")

    fast = _fast_parse(lines, text, n, m)
    if fast is not None:
        g = ComputationalGraph(fast[0], fast[1], fast[2], path=path)
        _check_structure(g, path)
        return g

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
    _check_structure(g, path)
    return g


_NAT = "(?:0|[1-9][0-9]*)"
_VAR = re.compile(f"({_NAT}) ({_NAT}) ([^ ]+)")
_BLOCK = re.compile(
    f"(forward|backward)\n({_NAT}) ({_NAT})\n((?:{_NAT} (?:_|gradient|input|output)\n)*)"
    f"((?:{_NAT}\n)*)([A-Za-z_][!-~]*)\n([^\n]*)\n")


def _fast_parse(lines, text, n, m):
    """The common case, quickly: a well-formed file parsed with compiled regexes.

    Returns ``(var_bytes, names, functions)`` or None at the first doubt, in which case the
    line-by-line parser (the authority, with the precise error messages) runs instead. It never
    accepts what that parser rejects: every pattern here is a subset of what it accepts.
    """
    if len(lines) < n + 1:
        return None
    matches = [_VAR.fullmatch(line) for line in lines[1:n + 1]]
    if not all(matches):
        return None
    if n and [int(x[1]) for x in matches] != list(range(n)):
        return None
    sizes = [int(x[2]) for x in matches]
    if sizes and max(sizes) >= 2**63:
        return None
    names = [x[3] for x in matches]
    # character offset of line n + 1 (the first block)
    pos = sum(len(line) + 1 for line in lines[:n + 1])
    half = m // 2
    functions = []
    seen_json = set()
    line_no = n + 2
    for b in range(m):
        x = _BLOCK.match(text, pos)
        if x is None:
            return None
        direction = "forward" if b < half else "backward"
        if x[1] != direction:
            return None
        k, p = int(x[2]), int(x[3])
        in_lines = x[4].split("\n")[:-1]
        out_lines = x[5].split("\n")[:-1]
        if len(in_lines) != k or len(out_lines) != p:
            return None
        inputs = []
        for item in in_lines:
            v, tag = item.split(" ")
            inputs.append((int(v), tag))
        outputs = [int(v) for v in out_lines]
        if any(v >= n for v, _ in inputs) or any(v >= n for v in outputs):
            return None
        tags = {tag for _, tag in inputs}
        if (direction == "forward") != (tags <= {"_"}) and tags:
            return None
        details = x[7]
        if details not in seen_json:
            try:
                if not isinstance(json.loads(details), dict):
                    return None
            except ValueError:
                return None
            seen_json.add(details)
        functions.append(Function(b, direction, inputs, outputs, x[6], details, line_no))
        line_no += 4 + k + p
        pos = x.end()
    if pos != len(text):
        return None
    return sizes, names, functions


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


def _check_structure(g: ComputationalGraph, path) -> None:
    """Cross-block checks: one output per forward block, unique producers, pairing, no cycles."""
    seen = {}
    for f in g.forward:
        if len(f.outputs) != 1:
            raise InputError(path, f.line + 1, f"expected exactly 1 output in forward block "
                                               f"{f.index}, got {len(f.outputs)}")
        v = f.outputs[0]
        if v in seen:
            raise InputError(path, f.line, f"expected each variable produced once, var {v} is "
                                           f"also produced by forward block {seen[v]}")
        seen[v] = f.index
    for i, (f, bw) in enumerate(zip(g.forward, g.backward)):
        grads = bw.tagged("gradient")
        if grads != f.outputs:
            raise InputError(path, bw.line, f"expected backward block {bw.index} to take the "
                                            f"gradient of var {f.outputs[0]} (output of forward "
                                            f"block {i}), got {grads}")
        fin = [v for v, _ in f.inputs]
        if bw.outputs != fin:
            raise InputError(path, bw.line, f"expected backward block {bw.index} outputs to be "
                                            f"forward block {i}'s inputs {fin}, got {bw.outputs}")
        if bw.type != f.type:
            raise InputError(path, bw.line, f"expected function type {f.type!r} (as forward "
                                            f"block {i}), got {bw.type!r}")
    cycle = _find_cycle(g)
    if cycle is not None:
        f = g.forward[cycle]
        raise InputError(path, f.line, f"cycle among forward functions through block {cycle} "
                                       f"(output var {f.outputs[0]}); expected a DAG")


def _find_cycle(g: ComputationalGraph):
    """Index of a forward function on a cycle, or None (Kahn's algorithm over forward functions)."""
    nf = len(g.forward)
    if nf == 0:
        return None
    src, dst = [], []
    for f in g.forward:
        for v, _ in f.inputs:
            pf = g.producer[v]
            if pf >= 0:
                src.append(pf)
                dst.append(f.index)
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if np.all(src < dst):        # file order already topological: the common case
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
