"""Checkmate's MILP (Jain et al., MLSys 2020) in the DP's own memory and cost model, on HiGHS.

Why: the DP of Kusumoto et al. is optimal only over its family (chains of lower sets, each
block's interior recomputed once before its backward). A MILP over per-stage recompute / keep
decisions covers more schedules and proves optimality (or gives HiGHS's dual bound at the time
limit), so it checks the DP (tests/test_milp.py) and certifies plans (:mod:`planner.certificate`).

**Stages.** Stage ``t = 0 … T-1`` runs the backward of one block; stage 0 runs first (it holds
the loss). ``D[t, v] = 1`` when node ``v``'s backward ran before stage ``t`` (``D[0] = 0``,
``D[T] = 1``, non-decreasing in ``t``); the stage's block is ``P[t] = D[t+1] − D[t]`` and
``L_t = {D[t] = 0}`` is the lower set still to do (``D[t, u] ≤ D[t, v]`` for each edge
``u → v``: backward runs against the edges). Stage ``t`` is the DP's transition
``L_{t+1} → L_t``; the stages of a solution are a chain of lower sets (``groups``), emitted by
:func:`planner.emit.emit_groups`.

**Checkmate's decisions,** on the nodes still to do (``v ∈ L_t``):

* ``R[t, v]``: ``v`` is (re)computed in stage ``t`` (cost ``t_v`` each time; any node of
  ``L_t``, not only the stage's own block, and it may be kept for later stages);
* ``S[t, v]``: ``v``'s value is resident when stage ``t`` starts (``S[0]``: kept from the
  forward pass); ``S[t+1, v] ≤ S[t, v] + R[t, v]`` — a value is kept or it was recomputed; a
  value not kept is FREEd at the end of the stage (Checkmate's ``FREE``; here implicit);
* the block's own values are present: ``P[t, v] ≤ S[t, v] + R[t, v]``; a recomputation reads
  resident inputs: ``R[t, v] ≤ S[t, u] + R[t, u]`` for ``u → v``; the backward of a node
  ``w ∈ A(L_t)`` reads every input ``u`` still to do: ``S[t, u] + R[t, u] ≥ a[t, w]``, and so
  does the backward of any ``w`` with an input in the block (``q[t, w] ≥ P[t, x]`` for
  ``x → w``, ``S[t, u] + R[t, u] ≥ q[t, w] − D[t, u]``): the emitter runs a function's
  backward in every stage that holds one of its inputs;
* ``U[t]``: the stage's memory, Checkmate's ``U`` per stage in the DP's accounting
  (FORMAT.md §4.2): resident values ``Σ m (S + R)`` over ``L_t`` (the checkpoints of the
  blocks still to do, and the block's values), the block's gradients ``m(P[t])``, and
  ``m(A(L_t)) + m(B(L_t))`` (``a``/``b``: continuous, ``a[t,w] ≥ D[t,w] − D[t,u]`` and
  ``b[t,u] ≥ a[t,w] + D[t,u] − 1`` per edge ``u → w``; ``A ∩ B`` counted twice as the
  reference does); ``U[t] ≤ budget``.

Objective: ``Σ t_v R[t, v]`` (the DP's ``model_recompute_cost``). Stages are compacted (an
empty stage only after empty ones), so stage 0 is non-empty and holds the loss.

``family="chains"`` restricts it to the DP's family: ``c_v`` (binary) is 1 exactly when a
successor's block runs before ``v``'s (``v ∈ ∂L_i ∩ V_i``); resident values are exactly the
checkpoints (``S[t, v] = c_v`` on ``L_t``) and a node is recomputed only in its own stage when
it is not one. Every chain then costs ``Σ t(V_i \\ ∂L_i)`` and peaks at ``ckpt + 2·m(V_i) +
m(A) + m(B)``: the exact DP's optimum is this MILP's (tests/test_milp.py). ``family="all"``
(default) is the unrestricted model, a superset: a chain's canonical schedule is one of its
solutions (checkpoints resident in every stage up to their own, the interior recomputed in its
stage), so its optimum is never above the DP's.

``T = n`` stages cover every chain (a chain has at most ``n`` blocks); ``stages`` below ``n``
restricts the model (fewer blocks) and is for the solver only, never for a bound. ``groups``
(a chain) fixes the stages to its blocks, leaving HiGHS Checkmate's keep / recompute / free
decisions only: ``--solver milp`` starts from the DP's chain that way (its canonical schedule
is one of the solutions, so the result never costs more than the DP's), which HiGHS solves in
seconds where the free order finds no schedule in a minute (bench/NOTES_certificate.md).

Example (a diamond; at 12 no chain fits, but forgetting the checkpoint 0 during the first
stage and recomputing it for its own does)::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph
    >>> g = DPGraph(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]),
    ...             src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]))
    >>> r = solve(g, 12)
    >>> r.status, r.cost, r.optimal, r.groups.tolist(), r.peak
    ('OK', 10, True, [0, 1, 1, 2], 12)
    >>> solve(g, 12, family="chains").status, solve(g, 13, family="chains").cost
    ('IMPOSSIBLE', 1)
    >>> relaxation(g, 12).bound <= 10
    True
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

__all__ = ["MILPResult", "LPBound", "build", "solve", "relaxation", "FAMILIES",
           "DEFAULT_TIME_LIMIT", "DEFAULT_SOLVER_STAGES"]

FAMILIES = ("all", "chains")
#: Seconds HiGHS may spend on one MILP (``--milp-time-limit``).
DEFAULT_TIME_LIMIT = 60.0
#: Stages ``--solver milp`` uses unless ``--milp-stages`` says (at most one per activation):
#: with one per activation HiGHS finds no schedule in a minute past ~40 activations
#: (bench/NOTES_certificate.md); fewer stages restrict the model (chains of at most that many
#: blocks), and the solution is still a schedule of the full model.
DEFAULT_SOLVER_STAGES = 16
#: Solves with the budget lowered by the excess when HiGHS's solution, summed exactly in
#: integers, exceeds the budget by its feasibility tolerance (a few units in 10^7).
FIT_TRIES = 4


@dataclass
class MILPResult:
    """A solved (or not) MILP. ``status``: ``"OK"`` (a schedule; ``optimal`` says whether HiGHS
    proved it), ``"IMPOSSIBLE"`` (proven infeasible) or ``"TIMEOUT"`` (no schedule within the
    time limit). ``cost``: the schedule's ``Σ t R``; ``dual_bound``: HiGHS's bound on the
    optimum (the cost itself when optimal; None when HiGHS gave none); ``groups``: chain
    block of every node (0 = first in the forward, the last block holds the loss);
    ``keep``/``recompute``/``retain``: what :func:`planner.emit.emit_groups` needs (per block
    ``i``: nodes recomputed in its stage, nodes kept into the next stage, block ``i − 1``);
    ``stage_peaks``: ``U`` per block (DP units); ``stopped``: ``"time limit"`` (HiGHS stopped
    at it), ``"killed"`` (it overran and its process was killed at the limit: no dual bound)
    or None (it finished)."""

    status: str
    family: str
    stages: int
    seconds: float
    cost: int | None = None
    optimal: bool = False
    dual_bound: float | None = None
    groups: np.ndarray | None = None
    keep: np.ndarray | None = None
    recompute: list = field(default_factory=list)
    retain: list = field(default_factory=list)
    stage_peaks: np.ndarray | None = None
    variables: int = 0
    constraints: int | None = 0
    nodes: int = 0
    free_order: bool = True
    stopped: str | None = None

    @property
    def full_model(self) -> bool:
        """Whether this was the whole model (free order, one stage per node): only then is
        ``dual_bound`` a bound for every schedule of the model."""
        return self.free_order and self.stages == self.nodes

    @property
    def blocks(self) -> int:
        return int(self.groups.max()) + 1 if self.groups is not None and self.groups.size else 0

    @property
    def peak(self) -> int:
        return int(self.stage_peaks.max(initial=0)) if self.stage_peaks is not None else 0


@dataclass
class LPBound:
    """The LP relaxation's optimum (``bound``, a lower bound on the MILP's optimum when
    ``status == "OK"``), or why there is none (``"TIMEOUT"``, ``"IMPOSSIBLE"``: the relaxation
    is infeasible, so is every schedule of the model); ``stopped`` as :class:`MILPResult`'s."""

    status: str
    bound: float | None
    seconds: float
    variables: int = 0
    constraints: int = 0
    stopped: str | None = None


class _Layout:
    """Where each variable block sits in the flat vector (row-major ``[t, v]``)."""

    def __init__(self, n: int, T: int, chains: bool):
        self.n, self.T = n, T
        sizes = [("D", (T + 1) * n), ("S", T * n), ("R", T * n), ("a", T * n), ("b", T * n),
                 ("q", T * n), ("U", T), ("c", n if chains else 0)]
        self.start, pos = {}, 0
        for name, size in sizes:
            self.start[name] = pos
            pos += size
        self.size = pos

    def __call__(self, name: str, t, v=None) -> np.ndarray:
        """Indices of ``name[t, v]`` (broadcast), of ``U[t]`` or ``c[v]`` (one index array)."""
        if name == "U":
            return self.start["U"] + np.asarray(t)
        if name == "c":
            return self.start["c"] + np.asarray(t)
        return self.start[name] + np.asarray(t) * self.n + np.asarray(v)


class _Rows:
    """Sparse constraint rows ``lo ≤ A x ≤ hi`` collected block by block (COO, vectorized)."""

    def __init__(self):
        self.r, self.c, self.v, self.lo, self.hi = [], [], [], [], []
        self.count = 0

    def add(self, cols, coefs, lo, hi) -> None:
        """``len(cols)`` terms per row: ``cols[j]`` the j-th term's variable index per row (all
        the same length K, or scalars), ``coefs[j]`` its coefficient (scalar or length K)."""
        cols = [np.atleast_1d(np.asarray(c, dtype=np.int64)) for c in cols]
        K = max(c.size for c in cols)
        if K == 0:
            return
        rows = self.count + np.arange(K)
        for c, a in zip(cols, coefs):
            self.r.append(rows)
            self.c.append(np.broadcast_to(c, (K,)))
            self.v.append(np.broadcast_to(np.asarray(a, dtype=np.float64), (K,)))
        self.lo.append(np.broadcast_to(np.asarray(lo, dtype=np.float64), (K,)))
        self.hi.append(np.broadcast_to(np.asarray(hi, dtype=np.float64), (K,)))
        self.count += K

    def add_wide(self, cols, coefs, lo, hi) -> None:
        """Rows with many terms each: ``cols``/``coefs`` are ``[K, terms]`` arrays."""
        cols = np.asarray(cols, dtype=np.int64)
        K = cols.shape[0]
        self.r.append(np.repeat(self.count + np.arange(K), cols.shape[1]))
        self.c.append(cols.ravel())
        self.v.append(np.broadcast_to(np.asarray(coefs, np.float64), cols.shape).ravel())
        self.lo.append(np.broadcast_to(np.asarray(lo, dtype=np.float64), (K,)))
        self.hi.append(np.broadcast_to(np.asarray(hi, dtype=np.float64), (K,)))
        self.count += K

    def matrix(self, nvars: int):
        from scipy import sparse

        A = sparse.csr_matrix((np.concatenate(self.v), (np.concatenate(self.r),
                                                        np.concatenate(self.c))),
                              shape=(self.count, nvars))
        return A, np.concatenate(self.lo), np.concatenate(self.hi)


@dataclass
class Model:
    """One built model: objective ``cost``, ``integrality``, bounds, the constraint matrix."""

    layout: _Layout
    cost: np.ndarray
    integrality: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    A: object
    lo: np.ndarray
    hi: np.ndarray
    family: str


def build(g, budget: int, family: str = "all", stages: int | None = None,
          groups=None) -> Model:
    """The model of the module docstring for ``g`` (a :class:`planner.dp_families.DPGraph`:
    memory ``m`` in the budget's units, cost ``t``) at ``budget`` with ``stages`` stages
    (default ``n``: every chain), as sparse matrices built a constraint family at a time.
    ``groups`` (a chain: block of every node) fixes the stages to that chain's blocks."""
    if groups is not None:
        groups = np.asarray(groups, np.int64)
        stages = int(groups.max()) + 1
    if family not in FAMILIES:
        raise ValueError(f"unknown MILP family {family!r}; expected one of {', '.join(FAMILIES)}")
    n = int(g.n)
    T = n if stages is None else max(1, min(int(stages), n))
    chains = family == "chains"
    L = _Layout(n, T, chains)
    grid = _Grid(L, n, T, np.asarray(g.src, np.int64), np.asarray(g.dst, np.int64))
    rows = _Rows()
    _stage_rows(rows, grid)
    _memory_rows(rows, grid, np.asarray(g.m, np.float64))
    if chains:
        _chain_rows(rows, grid)
    A, lo, hi = rows.matrix(L.size)
    lb, ub = _bounds(grid, groups, budget)
    cost = np.zeros(L.size)
    cost[L("R", grid.tt, grid.vv)] = np.asarray(g.t, np.float64)[grid.vv]
    integrality = np.ones(L.size, np.uint8)
    integrality[L.start["a"]:L.start["c"]] = 0           # a, b, q, U continuous
    return Model(L, cost, integrality, lb, ub, A, lo, hi, family)


class _Grid:
    """Every (stage, node) and (stage, edge ``u -> w``) of a model: the index arrays its
    constraint families are built on, and the variables' column lookups (:meth:`columns`)."""

    def __init__(self, L, n: int, T: int, src, dst):
        self.L, self.n, self.T, self.src, self.dst = L, n, T, src, dst
        self.E = E = src.size
        self.tt, self.vv = np.divmod(np.arange(T * n), n)            # every (stage, node)
        te, ee = np.divmod(np.arange(T * E), E) if E else (np.zeros(0, np.int64),) * 2
        self.te, self.eu, self.ew = te, src[ee], dst[ee]             # every (stage, edge)
        self.t_grid = np.repeat(np.arange(T), n).reshape(T, n)
        self.v_grid = np.tile(np.arange(n), (T, 1))

    def columns(self):
        """(D, S, R, a, b, q): each ``(stage, node) -> column``."""
        L = self.L
        return tuple((lambda t, v, k=k: L(k, t, v)) for k in "DSRabq")


def _stage_rows(rows, grid: _Grid) -> None:
    """Lower sets growing stage by stage; what is resident (S), recomputed (R), in A and B; the
    backward's inputs resident; a valid cut."""
    D, S, R, a, b, q = grid.columns()
    tt, vv, te, eu, ew, T, n = grid.tt, grid.vv, grid.te, grid.eu, grid.ew, grid.T, grid.n
    # D non-decreasing; lower sets: D[t,u] <= D[t,w]
    rows.add([D(tt, vv), D(tt + 1, vv)], [1, -1], -np.inf, 0)
    rows.add([D(te, eu), D(te, ew)], [1, -1], -np.inf, 0)
    # S, R only on nodes still to do; retention; the block's values; recomputation's inputs
    rows.add([S(tt, vv), D(tt, vv)], [1, 1], -np.inf, 1)
    rows.add([R(tt, vv), D(tt, vv)], [1, 1], -np.inf, 1)
    keep = tt < T - 1
    rows.add([S(tt[keep] + 1, vv[keep]), S(tt[keep], vv[keep]), R(tt[keep], vv[keep])],
             [1, -1, -1], -np.inf, 0)
    rows.add([D(tt + 1, vv), D(tt, vv), S(tt, vv), R(tt, vv)], [1, -1, -1, -1], -np.inf, 0)
    rows.add([R(te, ew), S(te, eu), R(te, eu)], [1, -1, -1], -np.inf, 0)
    # a valid cut (tightens the relaxation): a value not kept from the forward pass is
    # recomputed at least once (its own stage needs it and S only carries R forward)
    rows.add_wide(np.concatenate([S(0, np.arange(n))[:, None], R(grid.t_grid, grid.v_grid).T],
                                 axis=1), 1.0, 1, np.inf)
    # A(L_t) and B(L_t); inputs of A's backward still to do are resident
    rows.add([D(te, ew), D(te, eu), a(te, ew)], [1, -1, -1], -np.inf, 0)
    rows.add([a(te, ew), D(te, eu), b(te, eu)], [1, 1, -1], -np.inf, 1)
    rows.add([a(te, ew), D(te, eu), S(te, eu), R(te, eu)], [1, -1, -1, -1], -np.inf, 0)
    # the backward of w runs in every stage holding one of its inputs (q[t,w] >= P[t,u]) and
    # reads all of them: those still to do are resident then
    rows.add([D(te + 1, eu), D(te, eu), q(te, ew)], [1, -1, -1], -np.inf, 0)
    rows.add([q(te, ew), D(te, eu), S(te, eu), R(te, eu)], [1, -1, -1, -1], -np.inf, 0)


def _memory_rows(rows, grid: _Grid, m) -> None:
    """Each stage's memory ``U[t]``, and the stages compacted (no empty stage before a full
    one)."""
    D, S, R, a, b, _ = grid.columns()
    t_grid, v_grid, T, n = grid.t_grid, grid.v_grid, grid.T, grid.n
    # U[t] = Σ m (S + R + D[t+1] − D[t] + a + b)
    cols = np.concatenate([S(t_grid, v_grid), R(t_grid, v_grid), D(t_grid + 1, v_grid),
                           D(t_grid, v_grid), a(t_grid, v_grid), b(t_grid, v_grid),
                           grid.L("U", np.arange(T))[:, None]], axis=1)
    coefs = np.concatenate([m, m, m, -m, m, m, [-1.0]])
    rows.add_wide(cols, coefs[None, :], 0, 0)
    # compaction: stage t+1 non-empty only if stage t is (Σ P[t+1] <= n Σ P[t])
    if T > 1:
        t2 = np.repeat(np.arange(T - 1), n).reshape(T - 1, n)
        v2 = np.tile(np.arange(n), (T - 1, 1))
        rows.add_wide(np.concatenate([D(t2 + 2, v2), D(t2 + 1, v2), D(t2, v2)], axis=1),
                      np.concatenate([np.ones(n), np.full(n, -1.0 - n), np.full(n, float(n))])
                      [None, :], -np.inf, 0)


def _chain_rows(rows, grid: _Grid) -> None:
    """The ``chains`` family: checkpoints ``c`` are the resident values, recomputation only in
    the own stage (the DP's model)."""
    D, S, R, _, _, _ = grid.columns()
    L, tt, vv, te, eu, ew = grid.L, grid.tt, grid.vv, grid.te, grid.eu, grid.ew
    T, n, E, src, dst = grid.T, grid.n, grid.E, grid.src, grid.dst
    c = lambda v: L("c", v)                                      # noqa: E731
    # c_v >= [a successor's block runs first]; c_v <= Σ_w Σ_t (D[t,w] − D[t,v])
    rows.add([D(te, ew), D(te, eu), c(eu)], [1, -1, -1], -np.inf, 0)
    tw = np.arange(1, T)
    k = np.repeat(np.arange(E), tw.size)
    tk = np.tile(tw, E)
    rows.r.append(rows.count + np.concatenate([np.arange(n), src[k], src[k]]))
    rows.c.append(np.concatenate([c(np.arange(n)), D(tk, dst[k]), D(tk, src[k])]))
    rows.v.append(np.concatenate([np.ones(n), -np.ones(k.size), np.ones(k.size)]))
    rows.lo.append(np.full(n, -np.inf))
    rows.hi.append(np.zeros(n))
    rows.count += n
    # resident values are the checkpoints: S[t,v] <= c_v, S[t,v] >= c_v − D[t,v];
    # recomputation only in the own stage: R[t,v] <= D[t+1,v] − D[t,v]
    rows.add([S(tt, vv), c(vv)], [1, -1], -np.inf, 0)
    rows.add([c(vv), D(tt, vv), S(tt, vv)], [1, -1, -1], -np.inf, 0)
    rows.add([R(tt, vv), D(tt + 1, vv), D(tt, vv)], [1, -1, 1], -np.inf, 0)


def _bounds(grid: _Grid, groups, budget):
    """(lower, upper) bounds of every column: nothing done before stage 0, all after the last,
    a fixed chain's stages, the loss in stage 0 when compacted, each stage within ``budget``."""
    L, n, T = grid.L, grid.n, grid.T
    lb = np.zeros(L.size)
    ub = np.ones(L.size)
    ub[L("D", 0, np.arange(n))] = 0
    lb[L("D", T, np.arange(n))] = 1
    if groups is not None:                               # D[t, v] = [t > stage of v]
        stage_of = T - 1 - groups
        done = np.arange(T + 1)[:, None] > stage_of[None, :]
        lb[L.start["D"]:L.start["S"]] = done.ravel()
        ub[L.start["D"]:L.start["S"]] = done.ravel()
    sinks = np.flatnonzero(np.bincount(grid.src, minlength=n) == 0)
    if sinks.size == 1 and groups is None:               # compacted: the loss runs in stage 0
        lb[L("D", 1, sinks)] = 1
    ub[L("U", np.arange(T))] = float(budget)
    return lb, ub


def _highs(model: Model, integral: bool, time_limit: float):
    from scipy.optimize import Bounds, LinearConstraint, milp

    with _stdout_to_stderr():
        return milp(model.cost, integrality=model.integrality if integral else None,
                    bounds=Bounds(model.lb, model.ub),
                    constraints=LinearConstraint(model.A, model.lo, model.hi),
                    options={"time_limit": float(time_limit), "disp": False, "presolve": True})


@contextlib.contextmanager
def _stdout_to_stderr():
    """HiGHS's C++ code prints the odd line to file descriptor 1 even with ``disp`` off;
    stdout may carry a schedule (``--out -``), so descriptor 1 points at stderr meanwhile."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def solve(g, budget: int, family: str = "all", stages: int | None = None,
          time_limit: float = DEFAULT_TIME_LIMIT, groups=None) -> MILPResult:
    """Solve the MILP with HiGHS (``scipy.optimize.milp``) within ``time_limit`` seconds of
    wall time, model building and re-solves included (``groups``: on that chain's stages
    only, :func:`build`).

    Why a child process: HiGHS checks its time limit only between phases, and on big models
    its presolve and set-up alone overran a 1 s limit by 20-30 s (densenet on its DP chain:
    3.1 M rows; bench/NOTES_certificate.md, "Time limits"). The solve runs in a forked child
    (:func:`_bounded`) that is killed at the limit; then the result is ``TIMEOUT`` with
    ``stopped="killed"`` and no dual bound."""
    t0 = time.perf_counter()
    T = int(groups.max()) + 1 if groups is not None else \
        (int(g.n) if stages is None else max(1, min(int(stages), int(g.n))))
    out = _bounded(time_limit, _solve_here, g, budget, family, stages, time_limit, groups, t0)
    if out is None:
        out = MILPResult(status="TIMEOUT", family=family, stages=T, seconds=0.0,
                         variables=_Layout(int(g.n), T, family == "chains").size,
                         constraints=None, nodes=int(g.n), free_order=groups is None,
                         stopped="killed")
    out.seconds = time.perf_counter() - t0
    return out


def _solve_here(g, budget, family, stages, time_limit, groups, t0) -> MILPResult:
    """:func:`solve`'s work, in this process. A re-solve at a lowered budget (HiGHS's
    tolerance let a stage exceed ``budget`` by a few units) proves things about the lowered
    model only: its dual bound may exceed the optimum at ``budget`` (a smaller feasible set
    has a higher optimum), so the result keeps the first solve's dual bound, the one for
    ``budget``, and calls a re-solved schedule optimal only when it meets that bound."""
    model = build(g, budget, family, stages, groups)
    L = model.layout
    U = L("U", np.arange(L.T))
    out = MILPResult(status="TIMEOUT", family=family, stages=L.T, seconds=0.0,
                     variables=L.size, constraints=model.A.shape[0], nodes=L.n,
                     free_order=groups is None)
    for k in range(FIT_TRIES):
        left = time_limit - (time.perf_counter() - t0)
        if left <= 0:
            out.stopped = "time limit"
            break
        res = _highs(model, True, left)
        if res.status == 1:
            out.stopped = "time limit"
        bound = getattr(res, "mip_dual_bound", None)
        if k == 0:                      # the bound at ``budget``; later solves' are not
            out.dual_bound = None if bound is None or not np.isfinite(bound) else float(bound)
        if res.status == 2:     # after a re-solve: none fits but within HiGHS's tolerance,
            out.status = "IMPOSSIBLE"       # as sure as HiGHS's own first answer
        elif res.x is not None:
            _read(out, res.x, L, g)
            out.status = "OK"
            out.optimal = res.status == 0 and (k == 0 or (
                out.dual_bound is not None and out.cost <= np.ceil(out.dual_bound - 1e-6)))
            over = out.peak - int(budget)
            if over > 0:        # HiGHS's feasibility tolerance let a stage exceed by a few
                model.ub[U] -= over                     # units: ask for that much less
                out.status, out.optimal = "TIMEOUT", False
                continue
            if out.optimal:
                out.dual_bound = float(out.cost)
        break
    return out


#: Seconds past its time limit a HiGHS child gets to hand its result back before it is
#: killed, on top of :data:`KILL_GRACE_SHARE` of the limit: a solve that stops at its limit
#: still reads and sends its schedule (milliseconds on the reference graphs' chains); the
#: limit is kept within 10 % and a constant (bench/NOTES_certificate.md, "Time limits").
KILL_GRACE = 0.05
KILL_GRACE_SHARE = 0.05


def _bounded(seconds: float, fn, *args):
    """``fn(*args)`` run in a forked child, or None when it has not answered within
    ``seconds`` (plus :data:`KILL_GRACE`): then it is killed (SIGKILL) and reaped by a
    daemon thread, so a big model's teardown does not count either. An exception in the
    child is raised here. Where ``os.fork`` is missing it runs here, unbounded."""
    import pickle
    import signal
    import threading

    if not hasattr(os, "fork"):
        return fn(*args)
    deadline = time.perf_counter() + seconds * (1 + KILL_GRACE_SHARE) + KILL_GRACE
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                         # the child: never returns
        code = 0
        try:
            os.close(r)
            os.dup2(2, 1)            # HiGHS's stray lines go to stderr; Python's buffered
            try:                     # stdout (the parent's copy) is never flushed: _exit
                payload = pickle.dumps(("ok", fn(*args)), pickle.HIGHEST_PROTOCOL)
            except BaseException as e:                   # noqa: BLE001 (sent to the parent)
                payload = pickle.dumps(("error", e))
            with os.fdopen(w, "wb") as f:
                f.write(payload)
        except BaseException:                            # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    import select

    chunks = []
    try:
        with os.fdopen(r, "rb", buffering=0) as f:
            while True:
                left = deadline - time.perf_counter()
                if left <= 0 or not select.select([f], [], [], left)[0]:
                    os.kill(pid, signal.SIGKILL)
                    threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True).start()
                    return None
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
    except BaseException:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        raise
    _, status = os.waitpid(pid, 0)
    if not chunks:
        raise RuntimeError(f"HiGHS's process ended without a result (wait status {status})")
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "error":
        raise value
    return value


def _read(out: MILPResult, x: np.ndarray, L: _Layout, g) -> None:
    """The schedule of an integral solution ``x``: chain, keeps, recomputations, stage peaks."""
    n, T = L.n, L.T
    blk = lambda k, rows: np.rint(x[L.start[k]:L.start[k] + rows * n]).reshape(rows, n) > 0.5  # noqa: E731
    D, S, R = blk("D", T + 1).astype(np.int64), blk("S", T), blk("R", T)
    stage = (D[1:] - D[:-1]).argmax(axis=0)             # the stage of each node's backward
    k = int(stage.max()) + 1                            # compacted: stages 0 … k−1 non-empty
    out.groups = (k - 1 - stage).astype(np.int64)
    out.keep = np.flatnonzero(S[0])
    out.recompute = [np.flatnonzero(R[k - 1 - i]) for i in range(k)]
    out.retain = [np.flatnonzero(S[k - i]) if k - i < T else np.zeros(0, np.int64)
                  for i in range(k)]
    out.cost = int(np.asarray(g.t, np.int64)[np.nonzero(R)[1]].sum())
    out.stage_peaks = _stage_peaks(g, D[:k + 1], S[:k], R[:k])[::-1]


def _stage_peaks(g, D, S, R) -> np.ndarray:
    """Each stage's memory in the model (``U`` without slack in ``a``/``b``), by stage."""
    m = np.asarray(g.m, np.int64)
    todo = D[:-1] == 0                                   # [k, n]: L_t
    vals = ((S | R) & todo) @ m + (D[1:] - D[:-1]) @ m
    A = np.zeros_like(todo)
    B = np.zeros_like(todo)
    if g.src.size:
        hit = ~todo[:, g.dst] & todo[:, g.src]           # edge u -> w with w done, u to do
        tt, e = np.nonzero(hit)
        A[tt, g.dst[e]] = True
        tt, e = np.nonzero(A[:, g.dst] & ~todo[:, g.src])
        B[tt, g.src[e]] = True
    return vals + A @ m + B @ m


def relaxation(g, budget: int, time_limit: float = DEFAULT_TIME_LIMIT,
               family: str = "all") -> LPBound:
    """The LP relaxation of the full model (``n`` stages, so every schedule of the model is a
    point of it): its optimum is a lower bound on the MILP's, and on every chain's cost.
    Within ``time_limit`` seconds of wall time, building included (:func:`_bounded`)."""
    t0 = time.perf_counter()
    out = _bounded(time_limit, _relaxation_here, g, budget, family, time_limit, t0)
    if out is None:
        out = LPBound("TIMEOUT", None, 0.0, _Layout(int(g.n), int(g.n), family == "chains").size,
                      stopped="killed")
    out.seconds = time.perf_counter() - t0
    return out


def _relaxation_here(g, budget, family, time_limit, t0) -> LPBound:
    model = build(g, budget, family, None)
    left = time_limit - (time.perf_counter() - t0)
    if left <= 0:
        return LPBound("TIMEOUT", None, 0.0, model.layout.size, model.A.shape[0],
                       stopped="time limit")
    res = _highs(model, False, left)
    status = {0: "OK", 2: "IMPOSSIBLE"}.get(res.status, "TIMEOUT")
    return LPBound(status, float(res.fun) if status == "OK" else None, 0.0, model.layout.size,
                   model.A.shape[0], stopped="time limit" if status == "TIMEOUT" else None)
