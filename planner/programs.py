"""The planner's graph analyses as vertex programs on :mod:`hgraph` (distributed over ``tasks``).

Four analyses scale with the graph, so they run on the engine; the DP recurrences then run on
the driver over what they computed:

* :func:`levels` — longest-path topological level of each activation (``max`` combiner);
* :func:`lower_set_stats` — for every ``L_v = {v} ∪ ancestors(v)`` (the approximate DP's family):
  ``|L_v|``, ``m(L_v)``, ``t(L_v)``, the boundary ``∂L_v`` with ``t(∂L_v)``/``m(∂L_v)`` and
  ``m(A(L_v)) + m(B(L_v))`` (FORMAT.md §4.2) — everything :class:`planner.dp_families.Family`
  holds; :func:`approx_family` orders them into the DP's family;
* :func:`liveness` — birth, last use and death of every value (forward value or gradient) of a
  schedule;
* :func:`timeline` — live bytes after every op of a schedule, summed by an aggregator.

**Why descendants, not ancestors.** ``m(L_v)`` is not a combinable quantity (paths overlap), so
sets are bitsets. Holding them *by column* makes every statistic local: vertex ``u`` carries
``D_u`` = the set of ``v`` with ``u ∈ L_v`` (its descendants and itself), and

* ``u ∈ ∂L_v``  ⇔ ``v ∈ D_u`` and ``v ∉ D_w`` for some successor ``w``: ``D_u & OR_w ~D_w``;
* ``w ∈ A(L_v)`` ⇔ ``v ∉ D_w`` and ``v ∈ D_u`` for some predecessor ``u``: ``~D_w & OR_u D_u``;
* ``u ∈ B(L_v)`` ⇔ ``v ∉ D_u`` and ``w ∈ A(L_v)`` for some successor ``w``: ``~D_u & OR_w A_w``;

all with ``np.bitwise_or`` combiners. Per-set sums (``m(L_v) = Σ_u m_u [v ∈ D_u]`` …) are
array aggregators (exact int64 sums, elementwise). Columns are processed in chunks of
``chunk_words`` uint64 words so that memory stays bounded on big graphs.

Every result is identical for any ``tasks``, ``blocks`` and message ``mode`` (bitwise OR and
integer sums do not depend on grouping); tests check them against NumPy references.

Example::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph
    >>> from planner import programs
    >>> g = DPGraph(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]),
    ...             src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]))   # a diamond
    >>> programs.levels(g, tasks=2).tolist()
    [0, 1, 1, 2]
    >>> programs.lower_set_stats(g, tasks=2).mL.tolist()
    [4, 6, 6, 9]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import hgraph
from planner.dp_families import DPGraph, Family

__all__ = ["Levels", "levels", "LowerSetStats", "lower_set_stats", "approx_family",
           "Liveness", "liveness", "timeline", "EngineOptions"]

_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass(frozen=True)
class EngineOptions:
    """How analyses run on the engine (passed through to :func:`hgraph.run`)."""

    tasks: int = 1
    blocks: int = 1
    mode: str = "hybrid"
    runtime: str = "local"
    address: str | None = None
    checkpoint_every: int | None = None
    inject_failure: int | None = None

    def run(self, program, graph):
        return hgraph.run(program, graph, tasks=self.tasks, blocks=self.blocks, mode=self.mode,
                          runtime=self.runtime, address=self.address,
                          checkpoint_every=self.checkpoint_every,
                          inject_failure=self.inject_failure)


def _opts(opts, tasks, blocks, mode, runtime, address) -> EngineOptions:
    if opts is not None:
        return opts
    return EngineOptions(tasks=tasks, blocks=blocks, mode=mode, runtime=runtime, address=address)


# --------------------------------------------------------------------------------- levels
class Levels(hgraph.VertexProgram):
    """Longest-path level: a vertex's level is 1 + the largest level of its predecessors."""

    value_dtype = message_dtype = np.int64
    combiner = np.maximum

    def init(self, block):
        return np.zeros(block.size, np.int64), np.ones(block.size, bool)

    def update(self, ctx, block, values, inbox, has_message):
        higher = has_message & (inbox > values)
        return hgraph.Update(np.where(higher, inbox, values), respond=higher)

    def message(self, src_values, weights):
        return src_values + 1


def levels(g: DPGraph, *, opts: EngineOptions | None = None, tasks=1, blocks=1, mode="hybrid",
           runtime="local", address=None, with_supersteps: bool = False):
    """int64 [n]: topological level of each node of the activation graph ``g`` (src -> dst).

    Runs :class:`BlockLevels` (block-local relaxation, a few supersteps instead of the depth);
    ``with_supersteps=True`` returns ``(levels, supersteps)``.
    """
    o = _opts(opts, tasks, blocks, mode, runtime, address)
    eg = hgraph.Graph.from_edges(g.src, g.dst, n=g.n,
                                 columns={"preds": _padded_preds(g.n, g.src, g.dst)})
    res = o.run(BlockLevels(), eg)
    lv = np.asarray(res.values, dtype=np.int64)
    return (lv, res.supersteps) if with_supersteps else lv


# --------------------------------------------------------------------------- lower sets
class _Descendants(hgraph.VertexProgram):
    """Bitset of descendants-or-self restricted to node columns ``[c0, c0 + 64·words)``.

    Runs on the *reversed* activation graph: a vertex ORs in what its successors hold.
    """

    value_dtype = message_dtype = np.uint64
    combiner = np.bitwise_or

    def __init__(self, c0: int, words: int, n: int):
        self.c0, self.words, self.n = c0, words, n
        self.value_shape = self.message_shape = (words,)

    def init(self, block):
        vals = np.zeros((block.size, self.words), np.uint64)
        col = block.ids - self.c0
        mine = (col >= 0) & (col < 64 * self.words)
        rows = np.flatnonzero(mine)
        vals[rows, col[rows] // 64] = np.uint64(1) << (col[rows] % 64).astype(np.uint64)
        return vals, mine

    def update(self, ctx, block, values, inbox, has_message):
        new = values | np.where(has_message[:, None], inbox, np.uint64(0))
        changed = np.any(new != values, axis=1)
        return hgraph.Update(new, respond=changed)

    def message(self, src_values, weights):
        return src_values


#: Layout of :class:`_SetStats` values: six sections of ``words`` uint64 each.
_D, _OUT_REV, _OUT_FWD, _BND, _A, _B = range(6)


class _SetStatsBase(hgraph.VertexProgram):
    """What both lower-set statistics programs share: six bitset sections per vertex
    (``words`` uint64 each), OR-combined two-section messages, three supersteps, and the
    per-set sums as array aggregators."""

    value_dtype = message_dtype = np.uint64
    combiner = np.bitwise_or
    always_update = True
    max_supersteps = 3
    aggregators = {"size": "sum", "mL": "sum", "tL": "sum", "t_bnd": "sum", "m_bnd": "sum",
                   "mAB": "sum"}

    def __init__(self, words: int):
        self.words = words
        self.value_shape = (6 * words,)
        self.message_shape = (2 * words,)

    def _sec(self, values, k):
        return values[:, k * self.words:(k + 1) * self.words]


class _SetStats(_SetStatsBase):
    """Three supersteps over the bidirectional graph (weight 1: reverse edge, 2: forward edge).

    0: send ``~D`` backwards and ``D`` forwards; 1: ``∂`` and ``A`` columns, send ``A``
    backwards; 2: ``B`` columns and the per-set sums as array aggregators.
    """

    def __init__(self, words: int, width: int):
        super().__init__(words)
        self.width = width
        self._valid = _valid_mask(words, width)

    def init(self, block):
        w = self.words
        vals = np.zeros((block.size, 6 * w), np.uint64)
        d = block.columns["desc"]
        vals[:, :w] = d
        vals[:, w:2 * w] = ~d & self._valid
        vals[:, 2 * w:3 * w] = d
        return vals, np.ones(block.size, bool)

    def update(self, ctx, block, values, inbox, has_message):
        w = self.words
        new = values.copy()
        d = self._sec(values, _D)
        inbox = np.where(has_message[:, None], inbox, np.uint64(0))
        if ctx.superstep == 1:
            bnd = d & inbox[:, :w]
            a = ~d & inbox[:, w:] & self._valid
            new[:, _BND * w:(_BND + 1) * w] = bnd
            new[:, _A * w:(_A + 1) * w] = a
            new[:, _OUT_REV * w:(_OUT_REV + 1) * w] = a
            new[:, _OUT_FWD * w:(_OUT_FWD + 1) * w] = 0
            return hgraph.Update(new, respond=np.ones(block.size, bool))
        if ctx.superstep == 2:
            b = ~d & inbox[:, :w] & self._valid
            new[:, _B * w:(_B + 1) * w] = b
            m, t = block.columns["m"], block.columns["t"]
            dbits = _unpack(d, self.width)
            bbits = _unpack(self._sec(new, _BND), self.width)
            ab = _unpack(self._sec(new, _A), self.width).astype(np.int64) + _unpack(b, self.width)
            aggs = {"size": dbits.sum(axis=0, dtype=np.int64), "mL": m @ dbits, "tL": t @ dbits,
                    "t_bnd": t @ bbits, "m_bnd": m @ bbits, "mAB": m @ ab}
            return hgraph.Update(new, respond=np.zeros(block.size, bool), aggregates=aggs)
        return hgraph.Update(new, respond=np.ones(block.size, bool))

    def message(self, src_values, weights):
        w = self.words
        out = np.zeros((src_values.shape[0], 2 * w), np.uint64)
        rev = weights == 1.0
        out[rev, :w] = src_values[rev, _OUT_REV * w:(_OUT_REV + 1) * w]
        out[~rev, w:] = src_values[~rev, _OUT_FWD * w:(_OUT_FWD + 1) * w]
        return out


def _valid_mask(words: int, width: int) -> np.ndarray:
    """uint64 [words]: the bits of the first ``width`` columns."""
    bits = np.zeros(words * 64, bool)
    bits[:width] = True
    return np.packbits(bits, bitorder="little").view("<u8").astype(np.uint64)


def _unpack(bits: np.ndarray, width: int) -> np.ndarray:
    """uint64 [r, words] -> int64 0/1 [r, width] (bit k of word w is column 64w + k)."""
    as_bytes = np.ascontiguousarray(bits).astype("<u8").view(np.uint8).reshape(bits.shape[0], -1)
    return np.unpackbits(as_bytes, axis=1, bitorder="little")[:, :width].astype(np.int64)


def _transpose_bits(cols: np.ndarray, width: int, n: int) -> np.ndarray:
    """Column bitsets (``n`` rows over ``width`` columns) -> row bitsets [width, ceil(n/64)]."""
    as_bytes = np.ascontiguousarray(cols).astype("<u8").view(np.uint8).reshape(cols.shape[0], -1)
    mat = np.unpackbits(as_bytes, axis=1, bitorder="little")[:, :width]      # [n, width] 0/1
    words = max(1, (n + 63) // 64)
    padded = np.zeros((width, words * 64), np.uint8)
    padded[:, :n] = mat.T
    return np.packbits(padded, axis=1, bitorder="little").view("<u8").astype(np.uint64)


@dataclass
class LowerSetStats:
    """Per-node statistics of ``L_v`` (row ``v``), all computed on the engine.

    ``sets``/``bnd``: uint64 [n, words] row bitsets of ``L_v`` and ``∂L_v``; ``size``, ``mL``,
    ``tL``, ``t_bnd``, ``m_bnd``, ``mAB``: int64 [n]; ``supersteps``: engine supersteps used.
    """

    sets: np.ndarray
    bnd: np.ndarray
    size: np.ndarray
    mL: np.ndarray
    tL: np.ndarray
    t_bnd: np.ndarray
    m_bnd: np.ndarray
    mAB: np.ndarray
    supersteps: int = 0
    chunks: int = 0


def default_chunk_words(n: int, budget_bytes: int = 256 * 2**20) -> int:
    """Words per column chunk so that one chunk's unpacked bits (``n × 64·words`` bytes) fit."""
    return int(max(1, min((n + 63) // 64, budget_bytes // max(1, 64 * n))))


def lower_set_stats(g: DPGraph, *, opts: EngineOptions | None = None, tasks=1, blocks=1,
                    mode="hybrid", runtime="local", address=None,
                    chunk_words: int | None = None, keep_sets: bool = True) -> LowerSetStats:
    """Statistics of every ``L_v`` of the activation graph ``g``, chunk by chunk of columns.

    ``keep_sets=False`` drops the row bitsets (``sets``/``bnd`` become empty), for statistics
    on graphs whose n² bits would not fit.
    """
    o = _opts(opts, tasks, blocks, mode, runtime, address)
    n = g.n
    words_total = max(1, (n + 63) // 64)
    cw = chunk_words or default_chunk_words(n)
    rev = hgraph.Graph.from_edges(g.dst, g.src, n=n)
    both_src = np.concatenate([g.dst, g.src])
    both_dst = np.concatenate([g.src, g.dst])
    both_w = np.concatenate([np.ones(g.src.size), np.full(g.src.size, 2.0)])
    out = {k: np.zeros(n, np.int64) for k in ("size", "mL", "tL", "t_bnd", "m_bnd", "mAB")}
    sets = np.zeros((n, words_total) if keep_sets else (0, words_total), np.uint64)
    bnd = np.zeros_like(sets)
    supersteps = chunks = 0
    for w0 in range(0, words_total, cw):
        words = min(cw, words_total - w0)
        c0 = 64 * w0
        width = min(64 * words, n - c0)
        r1 = o.run(_Descendants(c0, words, n), rev)
        desc = np.asarray(r1.values, dtype=np.uint64).reshape(n, words)
        both = hgraph.Graph.from_edges(both_src, both_dst, weights=both_w, n=n,
                                       columns={"desc": desc, "m": g.m, "t": g.t})
        r2 = o.run(_SetStats(words, width), both)
        for k in out:
            out[k][c0:c0 + width] = np.asarray(r2.aggregates[k], dtype=np.int64)
        if keep_sets:
            vals = np.asarray(r2.values, dtype=np.uint64).reshape(n, 6 * words)
            sets[c0:c0 + width] = _transpose_bits(desc, width, n)
            bnd[c0:c0 + width] = _transpose_bits(vals[:, _BND * words:(_BND + 1) * words], width, n)
        supersteps += r1.supersteps + r2.supersteps
        chunks += 1
    return LowerSetStats(sets=sets, bnd=bnd, supersteps=supersteps, chunks=chunks, **out)


def approx_family(g: DPGraph, stats: LowerSetStats | None = None, **engine) -> Family:
    """The approximate DP's family (∅ plus every ``L_v`` by (m(L), |L|, v)) from engine statistics.

    Equal, array for array, to :func:`planner.dp_families.approx_family` (tested).
    """
    sinks = np.flatnonzero(np.bincount(g.src, minlength=g.n) == 0)
    if sinks.size != 1:
        from hgraph.errors import HGraphError

        raise HGraphError(f"the approximate DP needs a single sink (the loss); this graph has "
                          f"{sinks.size} nodes without successors")
    if stats is None:
        stats = lower_set_stats(g, **engine)
    W = stats.sets.shape[1]
    z64 = np.zeros(1, np.int64)
    sets = np.vstack([np.zeros((1, W), np.uint64), stats.sets])
    bnd = np.vstack([np.zeros((1, W), np.uint64), stats.bnd])
    size = np.r_[z64, stats.size]
    mL = np.r_[z64, stats.mL]
    order = np.lexsort((np.arange(size.size), size, mL))
    cols = dict(sets=sets[order], size=size[order], mL=mL[order], bnd=bnd[order],
                t_bnd=np.r_[z64, stats.t_bnd][order], m_bnd=np.r_[z64, stats.m_bnd][order],
                mAB=np.r_[z64, stats.mAB][order])
    fields = Family.__dataclass_fields__
    if "tL" in fields:
        cols["tL"] = np.r_[z64, stats.tL][order]
    if "node" in fields:               # the v of L_v: the DP's one-bit subset test
        cols["node"] = np.arange(-1, g.n, dtype=np.int64)[order]
    return Family(kind="approx", **cols)


# --------------------------------------------------------------------- liveness, timeline
@dataclass
class Liveness:
    """Lifetimes of the values of a schedule, one row per lifetime (a value may live twice).

    ``var`` and ``which`` (0 forward value, 1 gradient) name the value; ``birth`` is the op that
    created it, ``last_use`` the last op that read it (``birth`` if none did), ``death`` the op
    that freed it (``num_ops`` if never), ``bytes`` its size. Live after op ``s`` ⇔
    ``birth ≤ s < death``.
    """

    var: np.ndarray
    which: np.ndarray
    birth: np.ndarray
    last_use: np.ndarray
    death: np.ndarray
    bytes: np.ndarray
    num_ops: int


def _events(g, ops):
    """Value events of a schedule (vectorized where it matters): creations, frees and reads."""
    nf = len(g.forward)
    fwd_out = np.array([f.outputs[0] for f in g.forward], dtype=np.int64)
    is_act = g.is_activation
    ev_step, ev_key, ev_kind = [], [], []            # kind 1 = create, 0 = free
    rd_step, rd_key = [], []
    nvar = g.num_vars
    for step, op in enumerate(ops):
        if op.kind == "compute":
            f = op.index
            if f < nf:
                ev_step.append(step)
                ev_key.append(int(fwd_out[f]))
                ev_kind.append(1)
                for a, _ in g.forward[f].inputs:
                    if is_act[a]:
                        rd_step.append(step)
                        rd_key.append(a)
            else:
                bw = g.functions[f]
                for j in op.grads:
                    ev_step.append(step)
                    ev_key.append(nvar + bw.outputs[j])
                    ev_kind.append(1)
                for a, tag in bw.inputs:
                    if tag == "gradient":
                        rd_step.append(step)
                        rd_key.append(nvar + a)
                    elif is_act[a]:
                        rd_step.append(step)
                        rd_key.append(a)
        else:
            ev_step.append(step)
            ev_key.append(op.index + (nvar if op.which == "backward" else 0))
            ev_kind.append(0)
    as64 = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
    return as64(ev_step), as64(ev_key), as64(ev_kind), as64(rd_step), as64(rd_key)


class _LastUse(hgraph.VertexProgram):
    """Op vertices send their step to the lifetimes they read; a lifetime keeps the max."""

    value_dtype = message_dtype = np.int64
    combiner = np.maximum
    max_supersteps = 2

    def __init__(self, num_ops: int):
        self.num_ops = num_ops

    def init(self, block):
        vals = block.columns["init"].copy()
        return vals, block.ids < self.num_ops

    def update(self, ctx, block, values, inbox, has_message):
        later = has_message & (inbox > values)
        return hgraph.Update(np.where(later, inbox, values), respond=np.zeros(block.size, bool))

    def message(self, src_values, weights):
        return src_values


class _Timeline(hgraph.VertexProgram):
    """Each lifetime adds its bytes to the steps it is live; the ``live`` aggregator sums them."""

    value_dtype = message_dtype = np.int64
    always_update = True
    max_supersteps = 2
    aggregators = {"live": "sum"}

    def __init__(self, num_ops: int):
        self.num_ops = num_ops

    def init(self, block):
        return np.zeros(block.size, np.int64), np.ones(block.size, bool)   # awake for superstep 1

    def update(self, ctx, block, values, inbox, has_message):
        c = block.columns
        diff = np.zeros(self.num_ops + 1, np.int64)
        np.add.at(diff, c["birth"], c["bytes"])
        np.add.at(diff, c["death"], -c["bytes"])
        return hgraph.Update(values, respond=np.zeros(block.size, bool),
                             aggregates={"live": np.cumsum(diff[:-1])})

    def message(self, src_values, weights):
        return src_values


def liveness(g, schedule, *, opts: EngineOptions | None = None, tasks=1, blocks=1,
             mode="hybrid", runtime="local", address=None) -> Liveness:
    """Lifetimes of every forward value and gradient of ``schedule`` on the cg graph ``g``.

    Set semantics as the reference's ``eval()``: a compute of a live value creates nothing, a
    forget of a dead one frees nothing. Last uses come from an engine run over the bipartite
    graph op -> lifetime (``max`` combiner).
    """
    o = _opts(opts, tasks, blocks, mode, runtime, address)
    ops = schedule.ops if hasattr(schedule, "ops") else list(schedule)
    S = len(ops)
    ev_step, ev_key, ev_kind, rd_step, rd_key = _events(g, ops)
    order = np.lexsort((ev_step, ev_key))
    step, key, kind = ev_step[order], ev_key[order], ev_kind[order]
    new_key = np.r_[True, key[1:] != key[:-1]]
    prev_create = np.r_[False, kind[:-1] == 1] & ~new_key
    births = np.flatnonzero((kind == 1) & ~prev_create)
    deaths = np.flatnonzero((kind == 0) & prev_create)
    # births and deaths alternate within a key: a birth dies at the next death of its key
    cand = np.searchsorted(deaths, births)
    safe = deaths[np.minimum(cand, max(deaths.size - 1, 0))] if deaths.size else births
    dies = (cand < deaths.size) & (key[safe] == key[births])
    death = np.where(dies, step[safe], S)
    lk, lb = key[births], step[births]
    nvar = g.num_vars
    var = lk % nvar
    which = lk // nvar
    # map reads to the lifetime live at that step: the last birth of the key at or before it
    lt_order = np.lexsort((lb, lk))
    lk_s, lb_s = lk[lt_order], lb[lt_order]
    span = S + 1
    pos = np.searchsorted(lk_s * span + lb_s, rd_key * span + rd_step, side="right") - 1
    ok = (pos >= 0)
    ok[ok] &= lk_s[pos[ok]] == rd_key[ok]
    life = lt_order[pos[ok]]
    n_life = lk.size
    eg = hgraph.Graph.from_edges(rd_step[ok], S + life, n=S + n_life,
                                 columns={"init": np.r_[np.arange(S, dtype=np.int64), lb]})
    vals = np.asarray(o.run(_LastUse(S), eg).values, dtype=np.int64)
    return Liveness(var=var, which=which, birth=lb, last_use=vals[S:], death=death,
                    bytes=np.asarray(g.var_bytes, np.int64)[var], num_ops=S)


def timeline(g, schedule=None, *, live: Liveness | None = None, opts: EngineOptions | None = None,
             tasks=1, blocks=1, mode="hybrid", runtime="local", address=None) -> np.ndarray:
    """int64 [num_ops]: live bytes after each op (the reference's accounting), via an aggregator."""
    o = _opts(opts, tasks, blocks, mode, runtime, address)
    if live is None:
        live = liveness(g, schedule, opts=o)
    n = live.var.size
    if n == 0:
        return np.zeros(live.num_ops, np.int64)
    eg = hgraph.Graph.from_edges(np.zeros(0, np.int64), np.zeros(0, np.int64), n=n,
                                 columns={"birth": live.birth, "death": live.death,
                                          "bytes": live.bytes})
    res = o.run(_Timeline(live.num_ops), eg)
    return np.asarray(res.aggregates["live"], dtype=np.int64)


# ------------------------------------------------------ scale: block-local levels, separators
def _local_longest(preds: np.ndarray, start: int, vals: np.ndarray) -> np.ndarray:
    """Longest-path relaxation inside one block (Kahn waves over its in-block edges).

    ``preds``: int64 [size, dmax] global predecessor ids (-1 padded); ``vals``: the levels the
    block starts from (its own and what other blocks sent). Returns ``max(vals, level(u) + 1)``
    propagated along every in-block path — one NumPy step per wave, no per-vertex loop.
    """
    size = vals.size
    rows, cols = np.nonzero((preds >= start) & (preds < start + size))
    if rows.size == 0:
        return vals
    src = preds[rows, cols] - start
    dst = rows
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    ptr = np.searchsorted(src, np.arange(size + 1))
    indeg = np.bincount(dst, minlength=size)
    vals = vals.copy()
    frontier = np.flatnonzero(indeg == 0)
    while frontier.size:
        starts, stops = ptr[frontier], ptr[frontier + 1]
        cnt = stops - starts
        total = int(cnt.sum())
        if total == 0:
            break
        idx = np.repeat(starts - np.cumsum(cnt) + cnt, cnt) + np.arange(total)
        tgt = dst[idx]
        np.maximum.at(vals, tgt, np.repeat(vals[frontier] + 1, cnt))
        np.subtract.at(indeg, tgt, 1)
        frontier = np.unique(tgt[indeg[tgt] == 0])
    return vals


class BlockLevels(hgraph.VertexProgram):
    """Longest-path levels, block-centric: each block relaxes its own edges to a fixpoint in
    one superstep (:func:`_local_longest`), and only what crosses blocks travels as messages.

    Supersteps: how often a longest path crosses from one block to a later-updated one (a few
    when ids follow the topological order, as synthetic graphs' do), not the graph's depth.
    Column ``preds``: int64 [n, dmax], predecessors padded with -1.
    """

    value_dtype = message_dtype = np.int64
    combiner = np.maximum

    def init(self, block):
        vals = _local_longest(block.columns["preds"], block.start, np.zeros(block.size, np.int64))
        return vals, np.ones(block.size, bool)

    def update(self, ctx, block, values, inbox, has_message):
        start = np.where(has_message, np.maximum(values, inbox), values)
        if not np.any(start > values):
            return hgraph.Update(values, respond=np.zeros(block.size, bool))
        new = _local_longest(block.columns["preds"], block.start, start)
        return hgraph.Update(new, respond=new > values)

    def message(self, src_values, weights):
        return src_values + 1


def _padded_preds(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """int64 [n, max in-degree] (at least one column): predecessors of each node, -1 padded."""
    deg = np.bincount(dst, minlength=n)
    dmax = max(1, int(deg.max(initial=0)))
    out = np.full((n, dmax), -1, np.int64)
    if src.size:
        order = np.lexsort((src, dst))
        d = dst[order]
        first = np.searchsorted(d, d)
        out[d, np.arange(d.size) - first] = src[order]
    return out


class _MaxSuccPos(hgraph.VertexProgram):
    """On the reversed graph: every vertex sends its topological position (column ``pos``) to
    its predecessors, which keep the largest (-1: no successor). Two supersteps."""

    value_dtype = message_dtype = np.int64
    combiner = np.maximum
    max_supersteps = 2
    always_update = True

    def init(self, block):
        return block.columns["pos"].copy(), np.ones(block.size, bool)

    def update(self, ctx, block, values, inbox, has_message):
        return hgraph.Update(np.where(has_message, inbox, -1), respond=np.zeros(block.size, bool))

    def message(self, src_values, weights):
        return src_values


@dataclass
class Segments:
    """Strict separators of the activation graph and the segments between them.

    ``pos``: int64 [n] topological position (by (level, id)); ``node_at``: its inverse;
    ``sep``: bool [n] (by node) — ``c`` is a separator when every node before it (in ``pos``
    order) is an ancestor, every node after it a descendant, and no edge jumps over it. Then
    ``L_c`` is exactly the positions ``≤ pos(c)`` and ``∂L_c = {c}``. ``sstart``: int64 [n] the
    position where a node's segment starts (its own for a separator, 0 before the first);
    ``loc = pos − sstart``; ``width``: the widest segment; ``words``: uint64 words per local set.
    """

    pos: np.ndarray
    node_at: np.ndarray
    sep: np.ndarray
    sstart: np.ndarray
    loc: np.ndarray
    width: int
    words: int
    supersteps: int = 0


def segments(g: DPGraph, *, opts: EngineOptions | None = None, tasks=1, blocks=1,
             mode="hybrid", runtime="local", address=None, level=None) -> Segments:
    """Topological positions and strict separators (engine: levels, then successor positions)."""
    o = _opts(opts, tasks, blocks, mode, runtime, address)
    n = g.n
    steps = 0
    if level is None:
        res = o.run(BlockLevels(), hgraph.Graph.from_edges(
            g.src, g.dst, n=n, columns={"preds": _padded_preds(n, g.src, g.dst)}))
        level, steps = np.asarray(res.values, np.int64), res.supersteps
    node_at = np.lexsort((np.arange(n), level))
    pos = np.empty(n, np.int64)
    pos[node_at] = np.arange(n)
    res = o.run(_MaxSuccPos(), hgraph.Graph.from_edges(g.dst, g.src, n=n, columns={"pos": pos}))
    steps += res.supersteps
    maxsucc = np.asarray(res.values, np.int64)            # by node; -1 without successors
    # separator at position p: no edge from before p lands after p, and no source after p
    ms_by_pos = maxsucc[node_at]
    reach_before = np.r_[-1, np.maximum.accumulate(ms_by_pos)[:-1]]   # max over positions < p
    indeg = np.bincount(g.dst, minlength=n)
    src_by_pos = (indeg[node_at] == 0)
    last_source = int(np.flatnonzero(src_by_pos).max(initial=0))
    p = np.arange(n)
    sep_pos = (reach_before <= p) & (p >= last_source)
    sep = np.zeros(n, bool)
    sep[node_at[sep_pos]] = True
    starts_by_pos = np.where(sep_pos, p, 0)
    sstart_pos = np.maximum.accumulate(starts_by_pos)
    sstart = sstart_pos[pos]
    loc = pos - sstart
    ends = np.r_[np.flatnonzero(sep_pos), n]
    begins = np.r_[0, np.flatnonzero(sep_pos)]
    width = int((ends - begins).max(initial=1)) + 1
    return Segments(pos=pos, node_at=node_at, sep=sep, sstart=sstart, loc=loc, width=width,
                    words=max(1, (width + 63) // 64), supersteps=steps)


class _LocalDescendants(hgraph.VertexProgram):
    """Descendants-or-self within a segment, as bits over the segment's local positions.

    Runs on the reversed graph; an edge whose weight is 0 comes from the separator that ends
    the receiver's segment (a different segment's columns) and carries nothing. Supersteps:
    the longest path inside one segment, not the graph's depth.
    """

    value_dtype = message_dtype = np.uint64
    combiner = np.bitwise_or

    def __init__(self, words: int):
        self.words = words
        self.value_shape = self.message_shape = (words,)

    def init(self, block):
        vals = np.zeros((block.size, self.words), np.uint64)
        loc = block.columns["loc"]
        vals[np.arange(block.size), loc // 64] = np.uint64(1) << (loc % 64).astype(np.uint64)
        return vals, np.ones(block.size, bool)

    def update(self, ctx, block, values, inbox, has_message):
        new = values | np.where(has_message[:, None], inbox, np.uint64(0))
        return hgraph.Update(new, respond=np.any(new != values, axis=1))

    def message(self, src_values, weights):
        return np.where((weights != 0)[:, None], src_values, np.uint64(0))


#: Edge kinds of :class:`_LocalSetStats`' bidirectional graph (edge weights).
_REV, _FWD, _REV_X, _FWD_X = 1.0, 2.0, 3.0, 4.0


class _LocalSetStats(_SetStatsBase):
    """:class:`_SetStats` over segment-local columns: ``∂``, ``A``, ``B`` of every ``L_v``.

    A separator plays two roles: first node of its own segment (columns of that segment) and
    successor of the previous one's nodes (edges ``_FWD_X``/``_REV_X``; there its ``D`` is
    empty, so it sends all ones backwards and collects ``A`` for the previous segment's
    columns). Per-column sums go to array aggregators indexed by topological position
    (column ``base`` + bit; ``abase`` for ``A``, which for a separator is the previous
    segment's base).
    """

    def __init__(self, words: int, n: int):
        super().__init__(words)
        self.n = n

    def init(self, block):
        w = self.words
        vals = np.zeros((block.size, 6 * w), np.uint64)
        d = block.columns["desc"]
        valid = block.columns["valid"]
        vals[:, :w] = d
        vals[:, w:2 * w] = ~d & valid
        vals[:, 2 * w:3 * w] = d
        return vals, np.ones(block.size, bool)

    def _sums(self, bits, base, weights):
        """int64 [n] by position: Σ weights[r] over set bits b of row r, at base[r] + b."""
        out = np.zeros(self.n, np.int64)
        as_bytes = np.ascontiguousarray(bits).astype("<u8").view(np.uint8).reshape(bits.shape[0], -1)
        r, b = np.nonzero(np.unpackbits(as_bytes, axis=1, bitorder="little"))
        if r.size:
            np.add.at(out, base[r] + b, weights[r])
        return out

    def update(self, ctx, block, values, inbox, has_message):
        w = self.words
        new = values.copy()
        d = self._sec(values, _D)
        valid = block.columns["valid"]
        sep = block.columns["sep"]
        inbox = np.where(has_message[:, None], inbox, np.uint64(0))
        if ctx.superstep == 1:
            bnd = d & inbox[:, :w]
            a = np.where(sep[:, None], inbox[:, w:], ~d & inbox[:, w:] & valid)
            new[:, _BND * w:(_BND + 1) * w] = bnd
            new[:, _A * w:(_A + 1) * w] = a
            new[:, _OUT_REV * w:(_OUT_REV + 1) * w] = a
            new[:, _OUT_FWD * w:(_OUT_FWD + 1) * w] = 0
            return hgraph.Update(new, respond=np.ones(block.size, bool))
        if ctx.superstep == 2:
            b = ~d & inbox[:, :w] & valid
            new[:, _B * w:(_B + 1) * w] = b
            c = block.columns
            m, t, base, abase = c["m"], c["t"], c["base"], c["abase"]
            one = np.ones(block.size, np.int64)
            aggs = {"size": self._sums(d, base, one), "mL": self._sums(d, base, m),
                    "tL": self._sums(d, base, t),
                    "t_bnd": self._sums(self._sec(new, _BND), base, t),
                    "m_bnd": self._sums(self._sec(new, _BND), base, m),
                    "mAB": self._sums(self._sec(new, _A), abase, m) + self._sums(b, base, m)}
            return hgraph.Update(new, respond=np.zeros(block.size, bool), aggregates=aggs)
        return hgraph.Update(new, respond=np.ones(block.size, bool))

    def message(self, src_values, weights):
        w = self.words
        out = np.zeros((src_values.shape[0], 2 * w), np.uint64)
        rev = weights == _REV
        revx = weights == _REV_X
        fwd = (weights == _FWD) | (weights == _FWD_X)
        out[rev, :w] = src_values[rev, _OUT_REV * w:(_OUT_REV + 1) * w]
        # a separator towards the previous segment: ~D = all ones in superstep 0, then its A
        rx = src_values[revx, _OUT_REV * w:(_OUT_REV + 1) * w]
        first = np.any(src_values[revx, _OUT_FWD * w:(_OUT_FWD + 1) * w] != 0, axis=1)  # step 0
        out[revx, :w] = np.where(first[:, None], _ALL, rx)
        out[fwd, w:] = src_values[fwd, _OUT_FWD * w:(_OUT_FWD + 1) * w]
        return out


@dataclass
class LocalStats:
    """Per-node statistics of ``L_v`` from segment-local sets (row = node ``v``).

    ``L_v`` = the positions before ``seg.sstart[v]`` plus ``lloc[v]`` (bits over local positions
    of ``v``'s segment, the start separator at bit 0); ``bndloc[v]``: ``∂L_v`` likewise (it has
    nothing before the segment start). ``size``, ``mL``, ``tL``, ``t_bnd``, ``m_bnd``, ``mAB``:
    int64 [n], the same numbers :class:`LowerSetStats` holds.
    """

    seg: Segments
    lloc: np.ndarray
    bndloc: np.ndarray
    size: np.ndarray
    mL: np.ndarray
    tL: np.ndarray
    t_bnd: np.ndarray
    m_bnd: np.ndarray
    mAB: np.ndarray
    supersteps: int = 0


def _transpose_local(cols: np.ndarray, seg: Segments, words: int) -> np.ndarray:
    """Column bits (row u: the local columns v with bit) -> row bits (row v: the local u)."""
    n = seg.pos.size
    as_bytes = np.ascontiguousarray(cols).astype("<u8").view(np.uint8).reshape(n, -1)
    u, b = np.nonzero(np.unpackbits(as_bytes, axis=1, bitorder="little"))
    v = seg.node_at[seg.sstart[u] + b]
    out = np.zeros((n, words), np.uint64)
    lu = seg.loc[u]
    np.bitwise_or.at(out, (v, lu // 64), np.uint64(1) << (lu % 64).astype(np.uint64))
    return out


def local_stats(g: DPGraph, *, opts: EngineOptions | None = None, tasks=1, blocks=1,
                mode="hybrid", runtime="local", address=None, seg: Segments | None = None,
                level=None) -> LocalStats:
    """Statistics of every ``L_v`` in O(n · segment width) memory and few supersteps.

    Between two strict separators every set is the prefix before the segment plus a local
    part, so bitsets only span a segment (:class:`Segments`): local descendants on the
    reversed graph (supersteps = longest path inside a segment), then :class:`_LocalSetStats`
    (3 supersteps). Results equal :func:`lower_set_stats`' for any tasks/blocks/mode.
    """
    o = _opts(opts, tasks, blocks, mode, runtime, address)
    n = g.n
    if seg is None:
        seg = segments(g, opts=o, level=level)
    W = seg.words
    steps = seg.supersteps
    # an edge into a separator from its predecessors crosses into the next segment
    cross = seg.sep[g.dst] & (seg.sstart[g.dst] != seg.sstart[g.src])
    rev = hgraph.Graph.from_edges(g.dst, g.src, weights=np.where(cross, 0.0, 1.0), n=n,
                                  columns={"loc": seg.loc})
    r1 = o.run(_LocalDescendants(W), rev)
    steps += r1.supersteps
    desc = np.asarray(r1.values, dtype=np.uint64).reshape(n, W)
    # valid columns: the node's own segment width (next separator's position − start)
    sep_pos = np.flatnonzero(seg.sep[seg.node_at])
    nxt = np.r_[sep_pos, n]
    seg_end = nxt[np.searchsorted(sep_pos, seg.sstart, side="right")]
    width = seg_end - seg.sstart
    bits = np.zeros((n, 64 * W), bool)
    bits[np.arange(64 * W)[None, :] < width[:, None]] = True
    valid = np.packbits(bits, axis=1, bitorder="little").view("<u8").astype(np.uint64).reshape(n, W)
    prev_start = np.r_[0, sep_pos][np.maximum(np.searchsorted(sep_pos, seg.sstart), 0)]
    abase = np.where(seg.sep, prev_start, seg.sstart)
    both_src = np.concatenate([g.dst, g.src])
    both_dst = np.concatenate([g.src, g.dst])
    both_w = np.concatenate([np.where(cross, _REV_X, _REV), np.where(cross, _FWD_X, _FWD)])
    both = hgraph.Graph.from_edges(both_src, both_dst, weights=both_w, n=n, columns={
        "desc": desc, "valid": valid, "sep": seg.sep, "m": g.m, "t": g.t,
        "base": seg.sstart, "abase": abase})
    r2 = o.run(_LocalSetStats(W, n), both)
    steps += r2.supersteps
    vals = np.asarray(r2.values, dtype=np.uint64).reshape(n, 6 * W)
    agg = {k: np.asarray(r2.aggregates[k], dtype=np.int64)[seg.pos] for k in _LocalSetStats.aggregators}
    m_by_pos, t_by_pos = g.m[seg.node_at], g.t[seg.node_at]
    pm = np.r_[0, np.cumsum(m_by_pos)]
    pt = np.r_[0, np.cumsum(t_by_pos)]
    return LocalStats(seg=seg, lloc=_transpose_local(desc, seg, W),
                      bndloc=_transpose_local(vals[:, _BND * W:(_BND + 1) * W], seg, W),
                      size=seg.sstart + agg["size"], mL=pm[seg.sstart] + agg["mL"],
                      tL=pt[seg.sstart] + agg["tL"], t_bnd=agg["t_bnd"], m_bnd=agg["m_bnd"],
                      mAB=agg["mAB"], supersteps=steps)


def dense_lower_set_stats(ls: LocalStats, n: int) -> LowerSetStats:
    """:class:`LowerSetStats` (row bitsets and all) from :func:`local_stats` — equal to what
    :func:`lower_set_stats` computes, at a few supersteps instead of the graph's depth."""
    from planner.approx_scale import dense_sets

    sets, bnd = dense_sets(ls, n)
    return LowerSetStats(sets=sets, bnd=bnd, size=ls.size, mL=ls.mL, tL=ls.tL, t_bnd=ls.t_bnd,
                         m_bnd=ls.m_bnd, mAB=ls.mAB, supersteps=ls.supersteps, chunks=1)
