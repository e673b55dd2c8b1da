"""The capped approximate DP cut at strict separators: one walk per segment, fronts composed.

Why: on the scale path the DP is one walk over every state (:mod:`planner.dp.stacked`), held
by one process. A strict separator ``c`` (:mod:`planner.analyses.segments`) is a state every
other state is a subset or a superset of, and in the family order (``m(L)``, then ``|L|``)
the states between two separators are contiguous. A DP whose chains are *forced* through a
few evenly spaced separators (:func:`choose_cuts`; the measured cost is in
bench/NOTES_scale.md) falls apart into segments, each a walk of its own states seeded with
the front its first separator carries — so each segment can live on its own worker
(:mod:`planner.dp.segmented_engine`).

Two ways to join the segments, both here and both on the engine:

* **hand-over** (:func:`solve_handover`): segment ``k`` is walked seeded with the front
  segment ``k − 1`` ended with (every pass its own, as the one walk keeps them). This *is*
  the forced single-process DP (:func:`solve_forced`: the one walk with the cut transitions
  removed), entry for entry: the test oracle. Sequential: one segment at a time.
* **composed** (:func:`solve_composed`): every segment is walked from the empty front at
  once (``(0, 0)``: as if it started the graph), each of its end entries carrying what it
  adds — ``Δsaved``, ``Δckpt`` — and its *headroom*, the largest ``ckpt + step peak`` along
  its chain, so that it fits behind an incoming ckpt ``c`` iff ``c + headroom ≤ B``. The
  fronts are joined left to right by a min-plus scan (:func:`compose`: every pair, the least
  ckpt per saved, the Pareto cut, thinned as a front is). Where no pair fits — the memory
  test tightens towards the end of the order, where the incoming ckpt is large — that
  segment is walked seeded with the real incoming front instead (a hand-over), and the scan
  goes on from its end. The plan is valid either way (every transition of the chain passed
  the peak test with its true ckpt); it is not the forced DP's.

Either way the chain is read back right to left (:meth:`SegmentDP.chain`), each segment
from the entry the next one says its chain started from.

Example::

    >>> from planner import synth
    >>> from planner.activation_graph import ActivationGraph
    >>> g = ActivationGraph.from_cg(synth.build(layers=4, heads=2))
    >>> fam, budget = scale_family(g), int(0.5 * g.m.sum())
    >>> cuts = choose_cuts(fam, 4)
    >>> handed = solve_handover(fam, g, budget, cuts)
    >>> forced, entry = solve_forced(fam, g, budget, cuts)
    >>> handed.fronts.state.tolist() == forced.state.tolist()       # the same chain
    True
    >>> r = to_result(solve_composed(fam, g, budget, cuts), fam, g, budget)
    >>> r.status, r.model_peak_bytes <= budget
    ('OK', True)
"""

from __future__ import annotations

import hashlib
import time
from types import SimpleNamespace

import numpy as np

from hgraph.common.errors import HGraphError
from planner.dp.fronts import Fronts, best_per_saved, pareto_mask, path
from planner.dp.scale import DEFAULT_FRONT_CAP, DEFAULT_WINDOW, pass_lambdas, thin
from planner.dp.reach import reach_offsets
from planner.dp.stacked import (WalkInput, WalkTrace, _best_end, _chain_fronts, reusable,
                                room_offsets, walk, walk_limits)
from planner.dp.subsets import window_transitions

__all__ = ["SegmentDP", "TableRows", "Stitched", "choose_cuts", "separator_states",
           "segment_dps", "prepare", "solve_handover", "solve_composed", "solve_forced", "compose",
           "merge_front", "scale_family", "to_result", "DEFAULT_SEGMENTS"]

#: Segments a plan is cut into by default: the measured gap to the uncut DP stayed within
#: a fraction of a percent up to 255 cuts on the synthetic graphs (issue 37), and 64
#: segments give each of 4 workers 16 walks of ~n/64 states.
DEFAULT_SEGMENTS = 64


def scale_family(g):
    """The approximate family of ``g`` held segment-locally (the scale path's), for tests and
    benches that plan a small graph the way a big one is planned."""
    from planner.analyses.local_stats import local_stats
    from planner.dp_families import approx_family

    return approx_family(g, stats=local_stats(g), dense=False)


def separator_states(fam) -> np.ndarray:
    """Ids of the family's states ``L_c`` of strict separators ``c``, ascending (V's, the
    sink's, among them). Needs the segment-local family (``fam.local``)."""
    if fam.local is None or fam.node is None:
        raise HGraphError("a segmented DP needs the segment-local approximate family")
    node = fam.node
    return np.flatnonzero((node >= 0) & fam.local.seg.sep[np.maximum(node, 0)])


def choose_cuts(fam, segments: int) -> np.ndarray:
    """``[0, c_1, …, L − 1]``: ∅, up to ``segments − 1`` separator states spread evenly over
    the family order (each the first separator at or after an even split of the states),
    and V. Checks that each segment's states lie between its cuts in topological position
    (what makes a segment a contiguous run of states)."""
    L = fam.num_sets
    seps = separator_states(fam)
    targets = (np.arange(1, max(1, int(segments))) * (L - 1)) // max(1, int(segments))
    at = np.searchsorted(seps, targets)
    inner = np.unique(seps[at[at < seps.size]])
    cuts = np.unique(np.r_[0, inner, L - 1]).astype(np.int64)
    pos = fam.local.seg.pos
    p = np.where(fam.node >= 0, pos[np.maximum(fam.node, 0)], -1)
    k = np.searchsorted(cuts, np.arange(L), side="left")     # segment of each state
    lo = np.r_[-1, p[cuts]][k]                                # its cut's position
    hi = p[cuts][np.minimum(k, cuts.size - 1)]
    inside = (p > lo) & (p <= hi)
    inside[0] = True
    if not inside.all():
        raise HGraphError("internal error: a segment's states are not contiguous in the "
                          "family order")
    return cuts


class TableRows:
    """What one segment's window tables are made from, and nothing else: the family's rows
    of its states (and the ``W`` before its first, which its first rows' windows reach) and
    the segment-local statistics of their nodes, renumbered ``0 … |nodes| − 1``, with the
    topological positions they read cut to the span they reach. O(the segment's states);
    :meth:`tables` makes the same ``(sub, dt, dm)`` rows as
    :func:`~planner.dp.subsets.window_transitions` over the whole family gives them (every
    entry is a function of its pair of states alone), so the worker that walks a segment
    builds its tables itself and the driver never holds the whole family's ``(L, W)``
    tables nor their transient (the driver's largest at 10^5: bench/NOTES_scale.md, issue
    37 fifth session)."""

    def __init__(self, fam, t, m, a: int, z: int, window: int):
        st, W = fam.local, int(window)
        seg = st.seg
        lo = max(0, int(a) - W)
        node = fam.node[lo:z + 1]
        nodes = np.unique(node[node >= 0])
        self.node = np.where(node >= 0, np.searchsorted(nodes, np.maximum(node, 0)), -1)
        self.t_bnd, self.m_bnd = fam.t_bnd[lo:z + 1], fam.m_bnd[lo:z + 1]
        sstart = seg.sstart[nodes]
        # the positions a held sum reads, shifted by p0: from the first segment start to the
        # last node (the bits of L_v are v's ancestors and v, none after pos(v))
        p0 = int(sstart.min()) if nodes.size else 0
        p1 = int(seg.pos[nodes].max()) + 1 if nodes.size else 0
        self.pos, self.sstart, self.loc = seg.pos[nodes] - p0, sstart - p0, seg.loc[nodes]
        self.lloc, self.bndloc = st.lloc[nodes], st.bndloc[nodes]
        at = seg.node_at[p0:p1]
        self.t, self.m = np.asarray(t)[at], np.asarray(m)[at]
        self.skip, self.window = int(a) - lo, W

    def tables(self):
        """``(sub, dt, dm)``: the whole family's window-table rows of the segment's states,
        sources before its first state not yet masked."""
        view = SimpleNamespace
        seg = view(pos=self.pos, sstart=self.sstart, loc=self.loc,
                   node_at=np.arange(self.t.size))
        fam = view(num_sets=int(self.node.size), sets=None, node=self.node, t_bnd=self.t_bnd,
                   m_bnd=self.m_bnd, local=view(seg=seg, lloc=self.lloc, bndloc=self.bndloc))
        sub, dt, dm = window_transitions(fam, self.t, self.m, self.window)
        k = self.skip
        return sub[k:], dt[k:], dm[k:]


class SegmentDP:
    """The walk of one segment: states ``lo … hi`` of the family (global ids; ``lo`` its
    first separator's, ``hi`` the last one's), its window tables and ``m(L)``,
    ``m(A) + m(B)`` — everything it needs, nothing of the other segments (a worker holds it).
    The tables are given, or made from their :class:`TableRows` (``rows``) when first read:
    on the worker that walks the segment, which is sent the rows, not the tables.

    :meth:`solve` walks it from a seed (None: the empty front ``(0, 0)``); :meth:`headroom`
    says what each end entry of the free walk needs behind it; :meth:`chain` reads a chain
    back from an end entry. Walks are kept by kind (``"free"``, ``"seeded"``) for the
    read-back; a worker that lost them (a replacement after a failure) walks again with
    the same seed, which gives the same store. :meth:`free_walk` takes the free walk from a
    worker's cache when an earlier run's holds at this budget (the fit's re-solves), and
    :func:`prepare` the tables and the budget-free reach (``offsets``) likewise.
    """

    def __init__(self, index: int, lo: int, mL, mAB, sub, dt, dm, budget: int,
                 front_cap: int, lams: list, span: int, span_s: int, prune: bool = True,
                 rows: TableRows | None = None):
        self.index, self.lo = int(index), int(lo)
        self.mL, self.mAB = np.asarray(mL, np.int64), np.asarray(mAB, np.int64)
        self._tables = None if rows is not None else (sub, dt, dm)
        self.rows = rows
        self.budget, self.front_cap, self.lams = int(budget), int(front_cap), list(lams)
        self.span, self.span_s, self.prune = int(span), int(span_s), bool(prune)
        self.walks: dict = {}
        self.heads: dict = {}            # headroom of each kept walk's end entries
        self.seconds = 0.0
        self.offsets = None              # the budget-free reach (prepare), None: not made
        self.tables_built = False        # whether this object made its tables from its rows
        self._rows_key = None            # the digest of the rows (or given tables), once

    @property
    def num_states(self) -> int:
        return int(self.mL.size)

    @property
    def passes(self) -> int:
        return len(self.lams)

    def __getstate__(self):             # what travels to a worker: the inputs, no walk
        state = dict(self.__dict__)
        state["walks"], state["heads"] = {}, {}
        if self.rows is not None:        # the rows, not the tables made from them
            state["_tables"], state["offsets"], state["tables_built"] = None, None, False
        return state

    @property
    def sub(self) -> np.ndarray:
        return self._made()[0]

    @property
    def dt(self) -> np.ndarray:
        return self._made()[1]

    @property
    def dm(self) -> np.ndarray:
        return self._made()[2]

    def _made(self) -> tuple:
        """The window tables, made from :attr:`rows` on first use, the sources before the
        segment's first state masked (as :func:`segment_dps` masks sliced ones)."""
        if self._tables is None:
            sub, dt, dm = self.rows.tables()
            _mask_before(sub)
            self._tables = sub, dt, dm
            self.tables_built = True
        return self._tables

    def _input(self) -> WalkInput:
        return WalkInput(self.mL, self.mAB, self.sub, self.dt, self.dm, self.budget,
                         self.front_cap, self.lams, self.span, self.span_s, self.prune,
                         self.offsets)

    def solve(self, seed=None, kind: str | None = None, trace: WalkTrace | None = None):
        """The end front ``(saved, ckpt, pass)`` of the walk from ``seed`` (``(saved, ckpt,
        pass)`` arrays in pass, then saved, order; None: ``(0, 0)`` in every pass), kept as
        ``kind`` (default ``"free"`` without a seed, ``"seeded"`` with one); ``trace``: what
        the walk records for :func:`~planner.dp.stacked.reusable`."""
        kind = kind or ("free" if seed is None else "seeded")
        t0 = time.perf_counter()
        store, last = walk(self._input(), seed=seed, trace=trace)
        self.seconds += time.perf_counter() - t0
        if last is None:
            z = np.zeros(0, np.int64)
            last = (z, z, z, z)
        self.walks[kind] = (seed, store, last)
        self.heads.pop(kind, None)
        return last[0], last[1], last[2]

    def digest(self) -> bytes:
        """What identifies the segment's walk but its budget: a hash of every other input
        (its rows or tables, ``m(L)``, ``m(A) + m(B)``, first state, front cap, passes,
        spans, pruning). Equal digests and one budget give the same walk."""
        return _digest(self.lo, self.mL, self.mAB, self.front_cap, self.lams, self.span,
                       self.span_s, self.prune, self._rows_digest())

    def _rows_digest(self) -> bytes:
        """A digest of what the tables are made of (the rows, or the given tables), hashed
        once per object: :meth:`digest` and :meth:`tables_digest` both read it."""
        if self._rows_key is None:
            tables = vars(self.rows) if self.rows is not None else \
                dict(zip(("sub", "dt", "dm"), self._tables))
            self._rows_key = _digest(*sorted(tables.items(), key=lambda kv: kv[0]))
        return self._rows_key

    def tables_digest(self) -> bytes:
        """What identifies the segment's tables and reach offsets (:func:`prepare`): its rows,
        ``m(L)``, ``m(A) + m(B)`` (the rooms' offsets) and pruning — not the budget."""
        return _digest("tables", self.mL, self.mAB, self.prune, self._rows_digest())

    def free_walk(self, cache: dict | None = None) -> bool:
        """The free walk (:meth:`solve` from ∅) and its :meth:`headroom`, taken from
        ``cache`` (a worker's stash, :class:`hgraph.worker.Worker`) when it holds this
        segment's free walk (same :meth:`digest`) at a budget whose result
        :func:`~planner.dp.stacked.reusable` says is this budget's too; else walked (traced)
        and put there, replacing the segment's entry (one a segment: the memory stays
        bounded). Returns whether it was reused.

        Why: the plan's fit re-solves a few MB lower (:func:`planner.api._fit`) and every
        free walk would be walked again, the same; only the scan, which reads the budget
        itself, has to re-run. The result is the same with or without the cache."""
        key, digest = ("planner.dp.segmented.free", self.index), self.digest()
        got = None if cache is None else cache.get(key)
        if got is not None and got[0] == digest and reusable(got[1], walk_limits(self._input())):
            _, _, store, last, heads = got
            self.walks["free"] = (None, store, last)
            self.heads["free"] = heads
            return True
        trace = WalkTrace() if cache is not None else None
        self.solve(None, trace=trace)
        heads = self.headroom("free")
        if cache is not None:
            _, store, last = self.walks["free"]
            cache[key] = (digest, trace, store, last, heads)
        return False

    def end(self, kind: str):
        """The kept walk's end front ``(saved, ckpt, pass, store id)``."""
        return self.walks[kind][2]

    def headroom(self, kind: str = "free") -> np.ndarray:
        """For each end entry of the walk: the largest ``ckpt + step peak`` along its chain
        (the ckpt counted from the walk's seed). All entries walked back together, one
        transition a step: ``ckpt`` before a transition is the ckpt after it less its
        ``dm``. Kept with the walk (a worker computes it beside the walk, in parallel, and
        the scan only reads it)."""
        if kind not in self.heads:
            self.heads[kind] = self._headroom(kind)
        return self.heads[kind]

    def _headroom(self, kind: str) -> np.ndarray:
        _, store, (s, c, p, ids) = self.walks[kind]
        W = self.sub.shape[1]
        cur, rem = ids.astype(np.int64), c.astype(np.int64)
        peak = np.zeros(ids.size, np.int64)
        live = np.flatnonzero(store.pred[cur] >= 0) if cur.size else cur
        while live.size:
            e = cur[live]
            pe = store.pred[e].astype(np.int64)
            j = np.searchsorted(store.ptr, e, side="right") - 1
            i = np.searchsorted(store.ptr, pe, side="right") - 1
            w = i - (j - W)
            before = rem[live] - self.dm[j, w]
            step = before + 2 * (self.mL[j] - self.mL[i]) + self.mAB[j]
            peak[live] = np.maximum(peak[live], step)
            rem[live], cur[live] = before, pe
            live = live[store.pred[pe] >= 0]
        return peak

    def chain(self, end_index: int, kind: str):
        """``(states, dt, dm, seed index)`` of the chain of the walk's end entry
        ``end_index``: its states (global ids, the seed's first), each transition's terms
        and the index, in the seed arrays, of the entry it started from."""
        _, store, last = self.walks[kind]
        entries = np.asarray(path(store, int(last[3][end_index])), np.int64)
        state = np.searchsorted(store.ptr, entries, side="right") - 1
        w = state[:-1] - (state[1:] - self.sub.shape[1])
        return (state + self.lo, self.dt[state[1:], w], self.dm[state[1:], w],
                int(entries[0]))


def _digest(*parts) -> bytes:
    """A blake2b digest of ``parts`` (arrays by dtype, shape and bytes; pairs and other
    values by their ``repr``; nested one level in pairs)."""
    h = hashlib.blake2b(digest_size=20)

    def add(x):
        if isinstance(x, np.ndarray):
            h.update(f"a{x.dtype.str}{x.shape}".encode())
            h.update(np.ascontiguousarray(x).view(np.uint8).reshape(-1).data)
        else:
            h.update(f"v{x!r}".encode())
        h.update(b"|")

    for part in parts:
        for x in (part if isinstance(part, tuple) else (part,)):
            add(x)
    return h.digest()


#: The stash key prefix of a segment's tables and reach offsets (:func:`prepare`).
TABLES_KEY = "planner.dp.segmented.tables"


def prepare(segs, stash: dict | None = None) -> None:
    """Give each segment of ``segs`` its window tables and, when it prunes, its budget-free
    reach (:attr:`SegmentDP.offsets`, :func:`~planner.dp.reach.reach_offsets`): taken from
    ``stash`` (a worker's, :class:`hgraph.worker.Worker`) where it holds the segment's under
    the same :meth:`~SegmentDP.tables_digest`, else made — the tables from the segment's
    rows, the reach of all made ones in one stacked pass — and put there (one entry a
    segment, replacing: the memory stays bounded). Segments that have them already are
    left as they are.

    Why: only the budget changes between the fit's re-solves (:func:`planner.api._fit`), and
    the tables and the reach are the rows' alone (the reach up to a shift by the budget), so
    a re-solve on the same workers makes neither (counted: :attr:`SegmentDP.tables_built`).
    A cache only: a replacement worker or a new session starts empty and makes the same."""
    todo = []
    for seg in segs:
        if seg._tables is not None and (seg.offsets is not None or not seg.prune):
            continue
        key = digest = None
        if stash is not None and seg.rows is not None:
            key, digest = (TABLES_KEY, seg.index), seg.tables_digest()
            got = stash.get(key)
            if got is not None and got[0] == digest:
                seg._tables, seg.offsets = got[1], got[2]
                continue
        todo.append((seg, key, digest))
    need = [seg for seg, _, _ in todo if seg.prune and seg.offsets is None
            and not (seg.dm.size and int(seg.dm.min()) < 0)]    # (reach_offsets needs dm ≥ 0)
    W = need[0].sub.shape[1] if need else 0
    made = reach_offsets([(seg.sub, room_offsets(seg.mL, seg.mAB, W), seg.dm, None)
                          for seg in need])
    for seg, offsets in zip(need, made):
        seg.offsets = offsets
    for seg, key, digest in todo:
        if key is not None:
            stash[key] = (digest, seg._made(), seg.offsets)


def _mask_before(sub: np.ndarray) -> None:
    """Drop, in place, a segment's transitions from states before its first (row ``r``,
    column ``w``: the source ``r − W + w`` of the segment)."""
    W = sub.shape[1]
    sub &= (np.arange(sub.shape[0])[:, None] - W + np.arange(W)[None, :]) >= 0


def segment_dps(fam, g, budget: int, cuts, window: int = DEFAULT_WINDOW,
                front_cap: int = DEFAULT_FRONT_CAP, strategy: str = "time",
                prune: bool = True, tables=None, local_tables: bool = False) -> list:
    """One :class:`SegmentDP` per pair of consecutive cuts, its tables sliced from the whole
    family's window tables (``tables``, else built here) with the transitions from before
    its first cut removed; the passes and sort spans are the whole graph's, so every segment
    thins and sorts as the one walk does. ``local_tables``: each segment carries its
    :class:`TableRows` instead and makes its own tables when first walked (the same tables;
    the segmented DP on the engine's workers, so the driver never builds the whole ones)."""
    W = int(window)
    if local_tables:
        sub = dt = dm = None
    else:
        sub, dt, dm = tables if tables is not None else window_transitions(fam, g.t, g.m, W)
    lams = pass_lambdas(g.t, g.m, front_cap, strategy)
    span, span_s = int(g.m.sum()) + 1, int(g.t.sum()) + 1
    out = []
    for k, (a, z) in enumerate(zip(cuts[:-1].tolist(), cuts[1:].tolist())):
        if local_tables:
            part, rows = (None, None, None), TableRows(fam, g.t, g.m, a, z, W)
        else:
            part, rows = (sub[a:z + 1].copy(), dt[a:z + 1].copy(), dm[a:z + 1].copy()), None
            _mask_before(part[0])
        out.append(SegmentDP(k, a, fam.mL[a:z + 1], fam.mAB[a:z + 1], *part, budget,
                             front_cap, lams, span, span_s, prune, rows=rows))
    return out


class Stitched:
    """A chain read back segment by segment, as :func:`planner.dp.solve.solve_family` reads
    one: ``fronts`` (its entries: state, saved and ckpt re-added from ∅) and ``entry`` (V's),
    plus how it was made (``segments``, ``handed_over``: segments walked seeded,
    ``composed_saved``/``composed_ckpt``: the end front's entry taken)."""

    def __init__(self, fronts, entry, segments: int, handed_over: int, seconds: float):
        self.fronts, self.entry = fronts, entry
        self.segments, self.handed_over, self.seconds = segments, handed_over, seconds

    @classmethod
    def from_pieces(cls, pieces, segments: int, handed_over: int, seconds: float):
        """From each segment's ``(states, dt, dm)``, left to right."""
        states = np.concatenate([pieces[0][0][:1]] + [p[0][1:] for p in pieces])
        s = np.r_[0, np.cumsum(np.concatenate([p[1] for p in pieces]))]
        c = np.r_[0, np.cumsum(np.concatenate([p[2] for p in pieces]))]
        pred = np.arange(-1, states.size - 1)
        none = np.zeros(0, np.int64)
        fronts = Fronts(s, c, pred, states, none, none, none, size=states.size)
        return cls(fronts, states.size - 1, segments, handed_over, seconds)


def to_result(stitched, fam, g, budget_units: int, strategy: str = "time",
              comp_ratio: int = 1, units: str = "bytes", window: int | None = DEFAULT_WINDOW,
              front_cap: int | None = DEFAULT_FRONT_CAP):
    """The :class:`~planner.dp.solve.DPResult` of a stitched chain (IMPOSSIBLE for None),
    read as :func:`~planner.dp.solve.solve_family` reads its chain: groups, blocks, model
    recompute and peak from the chain's own transitions."""
    from planner.dp.solve import DPResult, _read_plan

    b = int(budget_units)
    res = DPResult(status="IMPOSSIBLE", family=fam.kind, strategy=strategy, units=units,
                   budget_bytes=b * comp_ratio, budget_units=b, comp_ratio=comp_ratio,
                   n_lower_sets=fam.num_sets, forward_cost=int(g.t.sum()),
                   fell_back=fam.fell_back, window=window, front_cap=front_cap)
    if stitched is not None:
        _read_plan(res, fam, stitched.fronts, stitched.entry, g.n)
        res.seconds = stitched.seconds
    return res


def solve_handover(fam, g, budget: int, cuts, window: int = DEFAULT_WINDOW,
                   front_cap: int = DEFAULT_FRONT_CAP, strategy: str = "time",
                   prune: bool = True, segs=None):
    """The forced DP segment by segment: each walk seeded with the last one's end front
    (every pass its own); the chain read back from the best pass's end entry. A
    :class:`Stitched`, or None when no chain reaches V."""
    t0 = time.perf_counter()
    segs = segs if segs is not None else segment_dps(fam, g, budget, cuts, window, front_cap,
                                                    strategy, prune)
    prepare(segs)
    seed = None
    for seg in segs:
        seed = seg.solve(seed, kind="seeded")
        if seed[0].size == 0:
            return None
    last = segs[-1].end("seeded")
    entry = _best_end(last, segs[-1].passes, strategy)
    idx = int(np.flatnonzero(last[3] == entry)[0])
    pieces = []
    for seg in reversed(segs):
        states, dts, dms, idx = seg.chain(idx, "seeded")
        pieces.append((states, dts, dms))
    return Stitched.from_pieces(pieces[::-1], len(segs), len(segs),
                                time.perf_counter() - t0)


def solve_forced(fam, g, budget: int, cuts, window: int = DEFAULT_WINDOW,
                 front_cap: int = DEFAULT_FRONT_CAP, strategy: str = "time",
                 prune: bool = True):
    """The one walk over every state with its chains forced through ``cuts``: transitions
    that jump over a cut removed, each cut's reach unbounded (as the segment's own end).
    The oracle :func:`solve_handover` must equal. ``(fronts, entry)`` as
    :func:`~planner.dp.stacked.run_stacked` returns them."""
    W = int(window)
    sub, dt, dm = window_transitions(fam, g.t, g.m, W)
    L = fam.num_sets
    first = cuts[np.maximum(np.searchsorted(cuts, np.arange(L), side="left") - 1, 0)]
    sub = sub & ((np.arange(L)[:, None] - W + np.arange(W)[None, :]) >= first[:, None])
    lams = pass_lambdas(g.t, g.m, front_cap, strategy)
    store, last = walk(WalkInput(fam.mL, fam.mAB, sub, dt, dm, budget, front_cap, lams,
                                 int(g.m.sum()) + 1, int(g.t.sum()) + 1, prune), ends=cuts[1:-1])
    entry = _best_end(last, len(lams), strategy)
    if entry is None:
        return Fronts.empty(0), None
    return _chain_fronts(store, entry, W, dt, dm)


def merge_front(s, c, cap: int):
    """One front of entries from several passes: the least ckpt per saved (ties to the
    first), the Pareto cut, thinned to ``cap`` (:func:`~planner.dp.scale.thin`); returns
    the kept entries' indices, in saved order."""
    if s.size == 0:
        return np.zeros(0, np.int64)
    ns, nc, e = best_per_saved(s, c, np.arange(s.size))
    keep = pareto_mask(nc)
    ns, nc, e = ns[keep], nc[keep], e[keep]
    if e.size > cap:
        e = e[thin(nc, cap)]
    return e


def compose(s_in, c_in, ds, dc, headroom, budget: int, cap: int):
    """The min-plus step of the scan: every incoming entry ``(s, c)`` joined with every end
    entry of a free walk ``(Δs, Δc)`` that fits behind it (``c + headroom ≤ budget``), the
    least ckpt per saved (ties to the least pair), cut and thinned to ``cap``. Returns
    ``(saved, ckpt, incoming index, end index)`` in saved order, or None when no pair fits."""
    ok = c_in[:, None] + headroom[None, :] <= budget
    ii, jj = np.nonzero(ok)
    if ii.size == 0:
        return None
    ns, nc = s_in[ii] + ds[jj], c_in[ii] + dc[jj]
    e = merge_front(ns, nc, cap)
    return ns[e], nc[e], ii[e], jj[e]


def seeds_from(s, c, passes: int, front_cap: int):
    """A seed for a walk from one front: every pass gets the front thinned to ``front_cap``
    (:func:`~planner.dp.scale.thin`); returns the seed arrays and, per seed entry, its index
    in the front."""
    k = thin(c, front_cap) if c.size > front_cap else np.arange(c.size)
    idx = np.tile(k, passes)
    return (s[idx], c[idx], np.repeat(np.arange(passes), k.size)), idx


def solve_composed(fam, g, budget: int, cuts, window: int = DEFAULT_WINDOW,
                   front_cap: int = DEFAULT_FRONT_CAP, strategy: str = "time",
                   prune: bool = True, segs=None):
    """Free walks of every segment joined by the min-plus scan (:func:`compose`), a segment
    no pair fits walked seeded with the incoming front instead; the chain read back. A
    :class:`Stitched`, or None when no chain reaches V. (The engine runs the same steps,
    :mod:`planner.dp.segmented_engine`.)"""
    t0 = time.perf_counter()
    segs = segs if segs is not None else segment_dps(fam, g, budget, cuts, window, front_cap,
                                                    strategy, prune)
    prepare(segs)
    cap = segs[0].passes * int(front_cap)
    s_in, c_in = np.zeros(1, np.int64), np.zeros(1, np.int64)
    backs = []
    handed = 0
    for seg in segs:
        step = scan_step(seg, s_in, c_in, cap)
        if step is None:
            return None
        s_in, c_in, back = step
        handed += back[0] == "seeded"
        backs.append(back)
    f = int(s_in.size - 1) if strategy == "time" else 0
    pieces = []
    for seg, back in zip(reversed(segs), reversed(backs)):
        states, dts, dms, f = read_back(seg, back, f)
        pieces.append((states, dts, dms))
    return Stitched.from_pieces(pieces[::-1], len(segs), handed, time.perf_counter() - t0)


def scan_step(seg: SegmentDP, s_in, c_in, cap: int):
    """One segment's step of the scan from the incoming front ``(s_in, c_in)``: ``(saved,
    ckpt, back)`` of the outgoing front, or None when nothing reaches its end. ``back``
    says how to read an outgoing entry back: ``("free", incoming index, end index)`` per
    entry, or ``("seeded", seed → incoming index, end index)``. The free walk is
    :meth:`SegmentDP.solve` without a seed (walked here unless already walked)."""
    if "free" not in seg.walks:
        seg.solve(None)
    ds, dc, _ = seg.end("free")[:3]
    hp = seg.headroom("free")
    # the passes end on the same chains often (on a 20k transformer ~5 entries of each
    # (Δs, Δc, headroom)): one of each joins, 5× fewer pairs, the same joined front
    one = np.sort(np.unique(np.stack([ds, dc, hp], axis=1), axis=0, return_index=True)[1]) \
        if ds.size else ds
    joined = compose(s_in, c_in, ds[one], dc[one], hp[one], seg.budget, cap)
    if joined is not None:
        ns, nc, ii, jj = joined
        return ns, nc, ("free", ii, one[jj])
    seed, seed_of = seeds_from(s_in, c_in, seg.passes, seg.front_cap)
    s, c, _ = seg.solve(seed, kind="seeded")
    e = merge_front(s, c, cap)
    if e.size == 0:
        return None
    return s[e], c[e], ("seeded", seed_of, e)


def read_back(seg: SegmentDP, back, f: int):
    """``(states, dt, dm, incoming index)`` of outgoing entry ``f`` of a scan step."""
    kind, a, b = back
    if kind == "free":
        states, dts, dms, _ = seg.chain(int(b[f]), "free")
        return states, dts, dms, int(a[f])
    states, dts, dms, seed_index = seg.chain(int(b[f]), "seeded")
    return states, dts, dms, int(a[seed_index])
