"""The segmented DP on the engine: one vertex per segment, fronts pushed left to right.

Why: :mod:`planner.dp.segmented` cuts the scale path's DP into segments that need nothing of
each other but the front handed across a cut. Here each segment is a vertex of a chain graph
(``k → k+1`` forward, ``k+1 → k`` backward) on :func:`hgraph.run`, its inputs
(:class:`~planner.dp.segmented.SegmentDP`: its window tables, nothing of the others) a
vertex column, so each worker receives only its own segments' (the engine slices columns
by task), and runs their walks:

* superstep 0 (``init``): with ``mode="composed"`` every segment's free walk, on every
  worker at once — the DP's work, in parallel; vertex 0 takes its scan step from ∅. A
  worker keeps each free walk in its stash (``block.stash``: kept across the runs of an
  engine session), and a later run of the same segment at another budget — the plan's fit
  re-solving a few MB lower — takes it from there when it is that budget's walk too
  (:meth:`~planner.dp.segmented.SegmentDP.free_walk`): only the scan re-runs. Before the
  walks, every mode: the worker's segments' window tables and reach (the rows' alone; the
  reach of all it makes in one stacked pass) from the stash likewise, else made
  (:func:`~planner.dp.segmented.prepare`);
* then the push scan: vertex ``k`` gets the front of ``k − 1`` (the message carries its
  entries: saved, ckpt, pass), takes its scan step (:func:`~planner.dp.segmented.scan_step`;
  ``mode="handover"``: its walk seeded with it) and pushes its own front on — within a
  VBlock straight to the next segment, so the scan takes a superstep per block, not per
  segment;
* then the back-trace, right to left: the last vertex takes the strategy's end entry, reads
  its chain back and sends the incoming entry it started from to ``k − 1``, which reads its
  own, and so on (again a superstep per block).

A vertex keeps what it needs to read back in its value — its incoming front, its outgoing
one and how each outgoing entry was made — so a worker that is replaced after a failure (its
walks are not in a checkpoint) walks its segment again from the same front: the walk is
deterministic, and the plan is the same (:func:`hgraph.run`'s checkpoints hold the values).
The result, the chain of every segment, is the vertices' values; it does not depend on the
number of tasks, blocks or the message mode (one message per vertex and superstep).

Example::

    >>> from planner import synth
    >>> from planner.activation_graph import ActivationGraph
    >>> from planner.dp import segmented
    >>> g = ActivationGraph.from_cg(synth.build(layers=4, heads=2))
    >>> fam, budget = segmented.scale_family(g), int(0.5 * g.m.sum())
    >>> cuts = segmented.choose_cuts(fam, 4)
    >>> run = solve_on_engine(fam, g, budget, cuts, tasks=2)
    >>> one = segmented.solve_composed(fam, g, budget, cuts)
    >>> run.stitched.fronts.state.tolist() == one.fronts.state.tolist(), run.supersteps
    (True, 3)
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

import hgraph
from planner.analyses.engine import EngineOptions, options, run_program
from planner.dp import scale, segmented as S
from planner.dp.stacked import _best_end

__all__ = ["SegmentedDP", "EngineRun", "chain_graph", "solve_on_engine", "solve_result", "applies",
           "MODES"]


#: Seconds a worker may take per state it walks in superstep 0 before the run counts it as
#: hung: ~15× the walk's ~0.34 ms a state on one core (10^6 states in ~340 s,
#: bench/NOTES_scale.md), so that workers sharing a loaded core still finish.
WALK_SECONDS_PER_STATE = 0.005

MODES = ("composed", "handover")
_FWD, _BWD = 1.0, 2.0
_MIN = np.iinfo(np.int64).min
# value header: phase (0 waiting, 1 front out, 2 read back), outgoing front size, then the
# outgoing front (saved, ckpt, pass: C each) — the forward message is this prefix
_PHASE, _NOUT, _OUT = 0, 1, 2


class SegmentedDP(hgraph.VertexProgram):
    """The vertex program (see the module docstring). ``cap``: the most entries a front
    carries (passes × front cap); ``width``: the most states of a segment; ``strategy``:
    which end entry the plan takes; ``mode``: ``"composed"`` or ``"handover"``."""

    value_dtype = message_dtype = np.int64
    combiner = np.maximum        # one message a vertex and superstep; unused slots are −∞

    def __init__(self, cap: int, width: int, strategy: str = "time", mode: str = "composed"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.cap, self.width, self.strategy, self.mode = int(cap), int(width), strategy, mode
        C = self.cap
        self.msg = 2 + 3 * C
        r = self.msg
        # after the message prefix: kind (0 free, 1 seeded), chosen incoming entry, chosen
        # outgoing entry, incoming size, back sizes, chain length, free walk reused (1) or
        # walked (0), tables made in this run (1) or taken from the stash (0); then the
        # incoming front (saved, ckpt, pass), how each outgoing entry was made (a, b), the
        # chain's states, dt and dm
        self.KIND, self.IN_IDX, self.OUT_IDX, self.NIN, self.NA, self.NB, self.NCH, \
            self.REUSED, self.BUILT = range(r, r + 9)
        self.IN = r + 9
        self.BACK = self.IN + 3 * C
        self.CHAIN = self.BACK + 2 * C
        self.value_shape = (self.CHAIN + 3 * self.width,)
        self.message_shape = (self.msg,)

    # ---- value fields ---------------------------------------------------------------------
    def _put(self, row, at: int, *arrays):
        for k, a in enumerate(arrays):
            row[at + k * self.cap:at + k * self.cap + len(a)] = a

    def _get(self, row, at: int, n: int, count: int):
        return [row[at + k * self.cap:at + k * self.cap + n].copy() for k in range(count)]

    def _front_out(self, row, s, c, p):
        row[_PHASE], row[_NOUT] = 1, s.size
        self._put(row, _OUT, s, c, p)

    # ---- one segment's steps ----------------------------------------------------------------
    def _incoming(self, row, inbox=None):
        """The incoming front (saved, ckpt, pass), from the message or the value."""
        if inbox is not None:
            n = int(inbox[_NOUT])
            s, c, p = self._get(inbox, _OUT, n, 3)
            row[self.NIN] = n
            self._put(row, self.IN, s, c, p)
            return s, c, p
        n = int(row[self.NIN])
        return tuple(self._get(row, self.IN, n, 3))

    def _forward(self, seg, row, s_in, c_in, p_in):
        """The scan step of ``seg`` from the incoming front; fills the outgoing front and how
        each of its entries was made. False when nothing reaches the segment's end."""
        if self.mode == "handover":
            seed = None if s_in is None else (s_in, c_in, p_in)
            s, c, p = seg.solve(seed, kind="seeded")
            if s.size == 0:
                return False
            row[self.KIND] = 1
            self._front_out(row, s, c, p)
            return True
        if s_in is None:
            s_in, c_in = np.zeros(1, np.int64), np.zeros(1, np.int64)
        step = S.scan_step(seg, s_in, c_in, self.cap)
        if step is None:
            return False
        s, c, (kind, a, b) = step
        row[self.KIND] = 0 if kind == "free" else 1
        row[self.NA], row[self.NB] = a.size, b.size
        self._put(row, self.BACK, a, b)
        self._front_out(row, s, c, np.full(s.size, -1))
        return True

    def _rewalk(self, seg, row, first: bool, stash=None):
        """Walk the segment again where this worker has not kept the walk (a replacement):
        from the incoming front in the value, as the first time (tables and a free walk
        through the worker's ``stash``, so the next run finds them there)."""
        kind = "free" if row[self.KIND] == 0 else "seeded"
        if kind in seg.walks:
            return kind
        S.prepare([seg], stash)
        row[self.BUILT] |= seg.tables_built
        if kind == "free":
            seg.free_walk(stash)
            return kind
        s_in, c_in, p_in = (None, None, None) if first else self._incoming(row)
        if self.mode == "handover":
            seg.solve(None if first else (s_in, c_in, p_in), kind="seeded")
        else:
            if first:
                s_in, c_in = np.zeros(1, np.int64), np.zeros(1, np.int64)
            seed, _ = S.seeds_from(s_in, c_in, seg.passes, seg.front_cap)
            seg.solve(seed, kind="seeded")
        return kind

    def _back(self, seg, row, f: int, first: bool, stash=None):
        """Read back outgoing entry ``f``: the chain into the value, the incoming entry it
        started from into ``IN_IDX``."""
        kind = self._rewalk(seg, row, first, stash)
        if self.mode == "handover":
            states, dts, dms, idx = seg.chain(f, "seeded")
        else:
            na, nb = int(row[self.NA]), int(row[self.NB])
            a = row[self.BACK:self.BACK + na]
            b = row[self.BACK + self.cap:self.BACK + self.cap + nb]
            states, dts, dms, idx = S.read_back(seg, (kind, a, b), f)
        row[self.OUT_IDX], row[self.IN_IDX] = f, idx
        row[self.NCH] = states.size
        w = self.width
        row[self.CHAIN:self.CHAIN + states.size] = states
        row[self.CHAIN + w:self.CHAIN + w + dts.size] = dts
        row[self.CHAIN + 2 * w:self.CHAIN + 2 * w + dms.size] = dms
        row[_PHASE] = 2

    def _end_entry(self, seg, row) -> int:
        """The strategy's entry of the last segment's outgoing front."""
        if self.mode == "handover":
            last = seg.end("seeded")
            entry = _best_end(last, seg.passes, self.strategy)
            return int(np.flatnonzero(last[3] == entry)[0])
        return int(row[_NOUT]) - 1 if self.strategy == "time" else 0

    # ---- the protocol -----------------------------------------------------------------------
    def init(self, block):
        values = np.zeros((block.size, *self.value_shape), np.int64)
        segs = block.columns["seg"]
        S.prepare(segs, block.stash)                  # tables and reach: the stash's or made
        values[:, self.BUILT] = [seg.tables_built for seg in segs]
        if self.mode == "composed":
            for r, seg in enumerate(segs):            # every free walk, in parallel, and
                # what its end entries need (the stash's when an earlier run's holds)
                values[r, self.REUSED] = seg.free_walk(block.stash)
        first = {r: None for r, seg in enumerate(segs) if seg.index == 0}
        return values, self._run(block, values, first, {})

    def update(self, ctx, block, values, inbox, has_message):
        values = values.copy()
        got = np.flatnonzero(has_message)
        fwd = {int(r): inbox[r] for r in got
               if inbox[r, 0] == 1 and values[r, _PHASE] == 0}     # the front from the left
        bwd = {int(r): int(inbox[r, 1]) for r in got
               if inbox[r, 0] == 2 and values[r, _PHASE] == 1}    # the entry to read back
        return hgraph.Update(values, respond=self._run(block, values, fwd, bwd))

    def _run(self, block, values, fwd: dict, bwd: dict) -> np.ndarray:
        """The block's part of the scan and of the back-trace: from each vertex given a front
        (``fwd``: row -> message, None for segment 0), segment after segment while the next
        one is in this block — the last it reaches responds (its front goes to the next
        block), and the last segment of all starts the back-trace; then from each vertex
        given an entry to read back (``bwd``), right to left likewise. Why in one call: a
        block's segments are consecutive, so the chain needs a superstep per block, not per
        segment (the same values either way)."""
        respond = np.zeros(block.size, bool)
        segs = block.columns["seg"]
        n = int(block.columns["segments"][0]) if block.size else 0
        for r in sorted(fwd):
            msg = fwd[r]
            while True:
                seg, row = segs[r], values[r]
                s_in, c_in, p_in = (None, None, None) if msg is None else \
                    self._incoming(row, msg)
                if not self._forward(seg, row, s_in, c_in, p_in):
                    break                             # no chain: the scan ends, nothing sent
                if seg.index == n - 1:
                    bwd[r] = self._end_entry(seg, row)
                    break
                if r + 1 == block.size:
                    respond[r] = True
                    break
                msg, r = row[:self.msg].copy(), r + 1
        for r in sorted(bwd, reverse=True):
            f = bwd[r]
            while True:
                seg, row = segs[r], values[r]
                self._back(seg, row, f, seg.index == 0, block.stash)
                if seg.index == 0:
                    break
                if r == 0:
                    respond[r] = True
                    break
                f, r = int(row[self.IN_IDX]), r - 1
        return respond

    def message(self, src_values, weights):
        out = np.full((src_values.shape[0], self.msg), _MIN, np.int64)
        out[:, 0] = 0
        fwd = (weights == _FWD) & (src_values[:, _PHASE] == 1)
        out[fwd, 0] = 1
        out[fwd, 1:] = src_values[fwd, 1:self.msg]
        bwd = (weights == _BWD) & (src_values[:, _PHASE] == 2)
        out[bwd, 0] = 2
        out[bwd, 1] = src_values[bwd, self.IN_IDX]
        return out


def chain_graph(segs) -> hgraph.Graph:
    """The engine's graph of the segments: vertex ``k`` is segment ``k`` (its
    :class:`~planner.dp.segmented.SegmentDP` in column ``seg``, the count in ``segments``),
    edges ``k → k+1`` (the scan) and ``k+1 → k`` (the back-trace)."""
    n = len(segs)
    column = np.empty(n, object)
    column[:] = segs
    k = np.arange(n - 1)
    return hgraph.Graph.from_edges(np.r_[k, k + 1], np.r_[k + 1, k],
                                   weights=np.r_[np.full(n - 1, _FWD), np.full(n - 1, _BWD)],
                                   n=n, columns={"seg": column,
                                                 "segments": np.full(n, n, np.int64)})


@dataclass
class EngineRun:
    """What :func:`solve_on_engine` returns: the ``stitched`` chain (None: no chain reaches
    V), the end entry taken (``saved``, ``ckpt``: the composed front's), how many segments
    were walked seeded (``handed_over``), the engine's ``supersteps`` and ``stats``, and how
    many segments' free walks superstep 0 took from the workers' stashes (``reused``: an
    earlier run's of the session at another budget) and how many segments' window tables
    the run made (``tables_built``; the others came from the stashes)."""

    stitched: object
    saved: int
    ckpt: int
    segments: int
    handed_over: int
    supersteps: int
    stats: list
    seconds: float
    reused: int = 0
    tables_built: int = 0


def solve_on_engine(fam, g, budget: int, cuts, window: int = S.DEFAULT_WINDOW,
                    front_cap: int = S.DEFAULT_FRONT_CAP, strategy: str = "time",
                    mode: str = "composed", prune: bool = True, segs=None,
                    opts: EngineOptions | None = None, **engine) -> EngineRun:
    """The segmented DP over ``cuts`` on the engine (``opts`` or engine keywords: tasks,
    runtime, …): the same chain as :func:`~planner.dp.segmented.solve_composed`
    (``mode="composed"``) or :func:`~planner.dp.segmented.solve_handover` (``"handover"``)
    in this process, for any tasks, blocks, message mode and runtime. Each segment travels
    with its :class:`~planner.dp.segmented.TableRows` and its worker makes its window
    tables: the driver never builds the whole family's."""
    t0 = time.perf_counter()
    o = options(opts, engine)
    segs = segs if segs is not None else S.segment_dps(fam, g, budget, cuts, window,
                                                      front_cap, strategy, prune,
                                                      local_tables=True)
    n = len(segs)
    program = SegmentedDP(segs[0].passes * int(front_cap),
                          max(sg.num_states for sg in segs), strategy, mode)
    res = run_program(_walk_timeout(o, segs), program, chain_graph(segs))
    vals = np.asarray(res.values)
    done = vals[:, _PHASE] == 2
    reused = int(vals[:, program.REUSED].sum())
    built = int(vals[:, program.BUILT].sum())
    if not done.all():
        return EngineRun(None, 0, 0, n, 0, res.supersteps, res.stats,
                         time.perf_counter() - t0, reused, built)
    pr, w = program, program.width
    pieces = []
    for row in vals:
        m = int(row[pr.NCH])
        pieces.append((row[pr.CHAIN:pr.CHAIN + m], row[pr.CHAIN + w:pr.CHAIN + w + m - 1],
                       row[pr.CHAIN + 2 * w:pr.CHAIN + 2 * w + m - 1]))
    handed = int((vals[:, pr.KIND] == 1).sum())
    last, f = vals[-1], int(vals[-1, pr.OUT_IDX])
    saved, ckpt = int(last[_OUT + f]), int(last[_OUT + pr.cap + f])
    stitched = S.Stitched.from_pieces(pieces, n, handed, time.perf_counter() - t0)
    return EngineRun(stitched, saved, ckpt, n, handed, res.supersteps, res.stats,
                     stitched.seconds, reused, built)


def _walk_timeout(o: EngineOptions, segs) -> EngineOptions:
    """``o`` with a wait on the workers long enough for superstep 0, which walks every
    segment a worker holds: :data:`WALK_SECONDS_PER_STATE` for each state of the most loaded
    worker's share (the states over the tasks, at least the largest segment), never shorter
    than ``o.timeout``; None (no limit) stays None. Why: the default wait (600 s) bounds a
    hung worker, and a worker walking 250,000 states on a shared core is not hung (a 10^6
    plan on 4 workers and 2 cores ran past it: bench/NOTES_scale.md)."""
    if o.timeout is None:
        return o
    states = sum(sg.num_states for sg in segs)
    share = max(max(sg.num_states for sg in segs), -(-states // max(1, int(o.tasks))))
    return dataclasses.replace(o, timeout=max(float(o.timeout), WALK_SECONDS_PER_STATE * share))


def applies(fam, n: int, window, front_cap, strategy: str) -> bool:
    """Whether a solve of ``fam`` (``n`` activations) runs segmented: at least
    :data:`planner.dp.scale.SEGMENTED_LIMIT` activations (read when asked), the
    segment-local family and the stacked walk's options (a window and a front cap,
    time-centric)."""
    from planner.dp.stacked import STACKED_MAX_WINDOW

    return (n >= scale.SEGMENTED_LIMIT and fam.local is not None and fam.node is not None
            and window is not None and front_cap is not None and strategy == "time"
            and window <= STACKED_MAX_WINDOW)


def solve_result(fam, g, budget_units: int, strategy: str = "time", comp_ratio: int = 1,
                 units: str = "bytes", window: int = S.DEFAULT_WINDOW,
                 front_cap: int = S.DEFAULT_FRONT_CAP, segments: int = S.DEFAULT_SEGMENTS,
                 mode: str = "composed", opts: EngineOptions | None = None):
    """``(DPResult, info, supersteps)``: the segmented DP's plan as
    :func:`planner.dp.solve.solve_family` reports one, what the report says of it (``info``:
    segments, mode, segments walked seeded, the composed front's entry taken — its recompute
    and ckpt in bytes: nothing that depends on where it ran — and ``walks_reused``, the
    segments whose free walk came from the workers' stashes, which does: on the session's
    earlier runs and on failures) and the engine's supersteps."""
    cuts = S.choose_cuts(fam, segments)
    run = solve_on_engine(fam, g, budget_units, cuts, window, front_cap, strategy, mode,
                          opts=opts if opts is not None else EngineOptions())
    res = S.to_result(run.stitched, fam, g, budget_units, strategy, comp_ratio, units,
                      window, front_cap)
    info = dict(segments=int(cuts.size - 1), mode=mode, handed_over=int(run.handed_over),
                walks_reused=int(run.reused))
    if run.stitched is not None:
        info.update(composed_recompute_cost=int(g.t.sum()) - run.saved,
                    composed_ckpt_bytes=run.ckpt * int(comp_ratio))
    return res, info, int(run.supersteps)
