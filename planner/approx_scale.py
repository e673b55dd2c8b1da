"""The approximate DP (Kusumoto et al., DP2 with a strict order) on graphs of 10^5 nodes.

Same family, same order, same recurrence and tie-breaks as :func:`planner.dp.run_dp` on the
approximate family (∅ plus every ``L_v`` by (m(L), |L|, v)); what changes is how sets are held.
:func:`planner.programs.local_stats` cuts the graph at strict separators, so every ``L_v`` is
"all positions before its segment" plus a few local bits; the subset test ``L_i ⊆ L_j`` and
the boundary term ``∂L_j ∩ L_i`` then read a position and at most a segment's bits, never an
n-bit row. Memory is O(n · segment width) instead of O(n²).

**Exactness and the two scale options.** With ``window=None`` and ``front_cap=None`` (the
default) the fronts, the chain and every model number equal :func:`planner.dp.run_dp`'s
(tested on the reference graphs and synthetic ones). That DP is inherently quadratic in
*time*, though: the Pareto front of a state holds up to ~n/4 (saved, ckpt) entries on a deep
transformer at half the activation memory (measured: mean n/4, max n/2) and the feasible
source window spans a quarter of the graph, so n = 100,000 means ~10^9 front entries and far
more candidate relaxations. For such graphs :func:`plan_options` turns on two explicit,
reported approximations (``dp_window``, ``dp_front_cap`` in the plan's report):

* ``window = W``: a state is reached only from the ``W`` states just before it in the family
  order (blocks of at most ~W nodes on near-chain graphs — the optimum's blocks are a few nodes);
* ``front_cap = K``: each front keeps at most K entries — always its cheapest and its
  largest-saved one, and either entries spread over its checkpoint range or those with the
  best Lagrangian score ``saved − λ·ckpt``; :func:`solve` runs a pass of each kind (a few λ)
  and keeps the best chain.

Measured on synthetic transformers at a 50 % budget (model recompute, share of T(V)): exact
45.6 % at 2,000 and 4,000 nodes; window 8 / cap 32: the exact optimum at 2,000 nodes (922;
at 30 % / 80 %: 1,306 / 777 against 1,302 / 777), 45.6 % at 8,000 and ~45.7 % at 100,000.

Every chain the capped DP returns is still a chain of the approximate family whose every
transition passed the reference's peak test, so the plan is valid and the replay checks it;
only optimality (within the family) is given up.

Example::

    >>> import numpy as np
    >>> from planner.dp_families import DPGraph
    >>> from planner import approx_scale
    >>> g = DPGraph(m=np.array([4, 2, 2, 1]), t=np.array([10, 1, 1, 1]),
    ...             src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]))   # a diamond
    >>> fam = approx_scale.family(g)
    >>> r = approx_scale.solve(fam, g, budget=20)
    >>> r.status, r.groups.tolist()
    ('OK', [0, 0, 1, 1])
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hgraph.errors import HGraphError
from planner.dp import _best_per_saved, expand_fronts
from planner.dp_families import DPGraph

__all__ = ["ScaleFamily", "family", "run_dp", "solve", "ScaleResult", "plan_options",
           "EXACT_LIMIT", "DEFAULT_WINDOW", "DEFAULT_FRONT_CAP"]

#: Graphs up to this many activations run the exact approximate DP (no window, no cap): the
#: reference's own limit (MAX_N = 2500); the exact DP takes ~10 s there, ~2 min at 4,000.
EXACT_LIMIT = 2500
DEFAULT_WINDOW = 8
DEFAULT_FRONT_CAP = 32
#: Memory-centric plans want blocks as large as the budget allows: a wide window, thin fronts
#: (synthetic transformer at 40 %: the exact chain at 2,000 nodes; 6 blocks at 8,000).
MEMORY_WINDOW = 4096
MEMORY_FRONT_CAP = 4
_INF = np.iinfo(np.int64).max // 4


def plan_options(n: int, window=None, front_cap=None,
                 strategy: str = "time") -> tuple[int | None, int | None]:
    """``(window, front_cap)`` for an ``n``-node graph: given values win; "auto" (None) means
    exact up to :data:`EXACT_LIMIT` nodes and the strategy's defaults above it; 0 means off."""
    big = n > EXACT_LIMIT
    dw, dk = (DEFAULT_WINDOW, DEFAULT_FRONT_CAP) if strategy == "time" else \
        (MEMORY_WINDOW, MEMORY_FRONT_CAP)
    w = (dw if big else None) if window is None else (int(window) or None)
    k = (dk if big else None) if front_cap is None else (int(front_cap) or None)
    return w, k


@dataclass
class ScaleFamily:
    """The approximate family in DP order (id 0 is ∅, the last is V), sets held segment-locally.

    ``node``: the v of ``L_v`` (-1 for ∅); per-set sums as :class:`planner.dp_families.Family`;
    ``stats``: the per-node :class:`planner.programs.LocalStats` behind the sets.
    """

    node: np.ndarray
    size: np.ndarray
    mL: np.ndarray
    tL: np.ndarray
    t_bnd: np.ndarray
    m_bnd: np.ndarray
    mAB: np.ndarray
    stats: object
    kind: str = "approx"
    fell_back: bool = False

    @property
    def num_sets(self) -> int:
        return int(self.node.size)


def family(g: DPGraph, stats=None, **engine) -> ScaleFamily:
    """∅ plus every ``L_v`` by (m(L), |L|, v), from :func:`planner.programs.local_stats`."""
    from planner import programs

    sinks = np.flatnonzero(np.bincount(g.src, minlength=g.n) == 0)
    if sinks.size != 1:
        raise HGraphError(f"the approximate DP needs a single sink (the loss); this graph has "
                          f"{sinks.size} nodes without successors")
    if stats is None:
        stats = programs.local_stats(g, **engine)
    z = np.zeros(1, np.int64)
    size = np.r_[z, stats.size]
    mL = np.r_[z, stats.mL]
    order = np.lexsort((np.arange(size.size), size, mL))
    return ScaleFamily(node=np.arange(-1, g.n, dtype=np.int64)[order], size=size[order],
                       mL=mL[order], tL=np.r_[z, stats.tL][order],
                       t_bnd=np.r_[z, stats.t_bnd][order], m_bnd=np.r_[z, stats.m_bnd][order],
                       mAB=np.r_[z, stats.mAB][order], stats=stats)


def dense_sets(stats, n: int) -> tuple[np.ndarray, np.ndarray]:
    """uint64 [n, ⌈n/64⌉] row bitsets of ``L_v`` and ``∂L_v`` (for checks on small graphs)."""
    seg = stats.seg
    W = max(1, (n + 63) // 64)
    out = []
    for local, prefix in ((stats.lloc, True), (stats.bndloc, False)):
        x = np.zeros((n, 64 * W), bool)
        if prefix:
            x[:, :n] = seg.pos[seg.node_at][None, :] < seg.sstart[:, None]   # positions before
            x[:, :n] = x[:, :n][:, seg.pos]                                  # by node
        as_bytes = np.ascontiguousarray(local).astype("<u8").view(np.uint8).reshape(n, -1)
        v, b = np.nonzero(np.unpackbits(as_bytes, axis=1, bitorder="little"))
        x[v, seg.node_at[seg.sstart[v] + b]] = True
        out.append(np.packbits(x, axis=1, bitorder="little").view("<u8").astype(np.uint64)
                   .reshape(n, W))
    return out[0], out[1]


# ----------------------------------------------------------------------------- fronts
@dataclass
class _Fronts:
    """All Pareto fronts, appended state by state (entry order = (state, saved) order)."""

    s: np.ndarray
    c: np.ndarray
    pred: np.ndarray
    state: np.ndarray
    ptr: np.ndarray
    glob: np.ndarray
    span: int = 1
    size: int = 0

    @classmethod
    def empty(cls, n_states: int, capacity: int = 1 << 16):
        z = lambda: np.zeros(capacity, np.int64)  # noqa: E731
        return cls(z(), z(), z(), z(), np.zeros(n_states + 1, np.int64), z())

    def append(self, j: int, s, c, pred):
        k = np.size(s)
        if self.size + k > self.s.size:
            cap = max(2 * self.s.size, self.size + k)
            for name in ("s", "c", "pred", "state", "glob"):
                arr = getattr(self, name)
                new = np.zeros(cap, np.int64)
                new[:self.size] = arr[:self.size]
                setattr(self, name, new)
        sl = slice(self.size, self.size + k)
        self.s[sl], self.c[sl], self.pred[sl], self.state[sl] = s, c, pred, j
        self.glob[sl] = j * self.span + c
        self.size += k
        self.ptr[j + 1] = self.size


def _thin(nc: np.ndarray, cap: int) -> np.ndarray:
    """Indices of at most ~``cap`` entries of a front (``nc`` ascending), spread over its ckpt
    range: for each of ``cap`` levels the largest entry at or below it. Levels are denser
    towards the large-ckpt (large-saved) end, where time-centric chains run (on a 2,000-node
    synthetic transformer at 50 %: recompute 936 with window 32 / cap 128 against the exact
    922; evenly spaced levels gave 1,036 at 32 / 64)."""
    x = np.linspace(0.0, 1.0, cap) ** 0.5          # denser towards the largest-saved end
    levels = int(nc[0]) + x * (int(nc[-1]) - int(nc[0]))
    idx = np.searchsorted(nc, levels, side="right") - 1
    return np.unique(np.r_[0, np.clip(idx, 0, nc.size - 1), nc.size - 1])


def _thin_lagrange(ns: np.ndarray, nc: np.ndarray, cap: int, lam: float) -> np.ndarray:
    """Indices of at most ``cap`` entries of a front: ``cap/2`` with the largest Lagrangian
    score ``saved − lam·ckpt`` (additive along a chain, so the chain that is best for ``lam``
    stays in every front it passes through) and ``cap/2`` spread as :func:`_thin` does (so a
    ``lam`` that checkpoints too eagerly still leaves cheaper entries to continue from)."""
    score = ns - lam * nc.astype(np.float64)
    keep = np.zeros(ns.size, bool)
    half = cap // 2
    keep[np.argpartition(-score, half - 1)[:half]] = True
    keep[_thin(nc, cap - half)] = True
    return np.flatnonzero(keep)


def run_dp(fam: ScaleFamily, g: DPGraph, budget: int, window: int | None = None,
           front_cap: int | None = None, lam: float | None = None) -> _Fronts:
    """Pareto fronts of every state (DP units), as :func:`planner.dp.run_dp` on the approximate
    family; ``window``/``front_cap`` as in the module docstring (None: off, exact).

    ``lam``: a capped front keeps, besides its cheapest and its largest-saved entry, the
    entries with the largest ``saved − lam·ckpt`` (see :func:`solve`); None: :func:`_thin`.
    """
    st = fam.stats
    seg = st.seg
    pos, sstart, loc = seg.pos, seg.sstart, seg.loc
    lloc, bndloc = st.lloc, st.bndloc
    t_pos, m_pos = g.t[seg.node_at], g.m[seg.node_at]
    L = fam.num_sets
    fronts = _Fronts.empty(L)
    span = int(g.m.sum()) + 1
    if span * L >= (1 << 62):
        raise HGraphError("graph too large for the DP's 64-bit front keys")
    fronts.span = span
    fronts.append(0, np.zeros(1, np.int64), np.zeros(1, np.int64), np.full(1, -1, np.int64))
    key = np.full(L, _INF, dtype=np.int64)          # min ckpt − 2·m(L), for the break test
    key[0] = -2 * int(fam.mL[0])
    two_mL = 2 * fam.mL
    node = fam.node
    one = np.uint64(1)
    for j in range(1, L):
        thr = budget - int(two_mL[j]) - int(fam.mAB[j])
        lo = int(np.searchsorted(two_mL, -thr, side="left"))
        if window is not None:
            lo = max(lo, j - window)
        src = lo + np.flatnonzero(key[lo:j] <= thr)
        if src.size == 0:
            fronts.ptr[j + 1] = fronts.size
            continue
        vj = int(node[j])
        sj = int(sstart[vj])
        v = node[src]
        vv = np.maximum(v, 0)
        same = (v >= 0) & (sstart[vv] == sj)
        lv = loc[vv]
        bit = ((lloc[vj][lv // 64] >> (lv % 64).astype(np.uint64)) & one) == one
        sub = (v < 0) | (pos[vv] <= sj) | (same & bit)
        src, v, same = src[sub], vv[sub], same[sub]
        if src.size == 0:
            fronts.ptr[j + 1] = fronts.size
            continue
        # dt, dm: ∂Lj minus what Li holds (only a source of the same segment holds any of it)
        dt = np.full(src.size, int(fam.t_bnd[j]), np.int64)
        dm = np.full(src.size, int(fam.m_bnd[j]), np.int64)
        bw = bndloc[vj]
        if same.any() and bw.any():
            bn = np.flatnonzero(np.unpackbits(bw.astype("<u8").view(np.uint8), bitorder="little"))
            rows = v[same]
            member = ((lloc[rows[:, None], (bn // 64)[None, :]] >> (bn % 64).astype(np.uint64))
                      & one).astype(np.int64)
            dt[same] -= member @ t_pos[sj + bn]
            dm[same] -= member @ m_pos[sj + bn]
        room = thr + two_mL[src]                      # c must satisfy c ≤ B − peak
        starts = fronts.ptr[src]
        stops = np.minimum(fronts.ptr[src + 1],
                           np.searchsorted(fronts.glob[:fronts.size], src * span + room,
                                           side="right"))
        cnt = stops - starts
        keep = cnt > 0
        if not keep.all():
            starts, cnt, dt, dm = starts[keep], cnt[keep], dt[keep], dm[keep]
        total = int(cnt.sum())
        if total == 0:
            fronts.ptr[j + 1] = fronts.size
            continue
        e, ns, nc = expand_fronts(fronts, starts, cnt, dt, dm)
        ns, nc, e = _best_per_saved(ns, nc, e)
        later_min = np.empty_like(nc)
        later_min[-1] = _INF
        later_min[:-1] = np.minimum.accumulate(nc[:0:-1])[::-1]
        pareto = nc < later_min
        ns, nc, e = ns[pareto], nc[pareto], e[pareto]
        if front_cap is not None and ns.size > front_cap:
            k = (_thin(nc, front_cap) if lam is None or front_cap < 4
                 else _thin_lagrange(ns, nc, front_cap, lam))
            ns, nc, e = ns[k], nc[k], e[k]
        fronts.append(j, ns, nc, e)
        key[j] = int(nc[0]) - int(two_mL[j])
    return fronts


# ----------------------------------------------------------------------------- result
@dataclass
class ScaleResult:
    """A solved (or impossible) DP: the chain as ``groups`` (block index of every node)."""

    status: str
    family: str = "approx"
    n_lower_sets: int = 0
    forward_cost: int = 0
    comp_ratio: int = 1
    chain_ids: list = field(default_factory=list)
    groups: np.ndarray | None = None
    blocks: int = 0
    saved: int = 0
    model_recompute_cost: int = 0
    model_peak_bytes: int = 0
    ckpt_bytes: int = 0
    fell_back: bool = False
    window: int | None = None
    front_cap: int | None = None


def member(stats, nodes: np.ndarray, v) -> np.ndarray:
    """bool: ``nodes[k] ∈ L_{v[k]}`` (broadcast), from positions and local bits only."""
    seg = stats.seg
    v = np.asarray(v)
    u = np.asarray(nodes)
    sj = seg.sstart[v]
    lu = seg.loc[u]
    bit = ((stats.lloc[v, lu // 64] >> (lu % 64).astype(np.uint64)) & np.uint64(1)) == 1
    return (seg.pos[u] <= sj) | ((seg.sstart[u] == sj) & bit)


def chain_groups(fam: ScaleFamily, states: list, n: int) -> np.ndarray:
    """Block index (0-based) of every node for a chain of family states ∅ ⊊ L1 ⊊ … ⊊ V:
    the first set holding it, by a vectorized binary search over the chain (membership is
    monotone along a chain)."""
    vs = fam.node[np.asarray(states[1:], dtype=np.int64)]
    k = vs.size
    lo = np.zeros(n, np.int64)
    hi = np.full(n, k - 1, np.int64)
    nodes = np.arange(n)
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        inside = member(fam.stats, nodes, vs[mid])
        hi = np.where(inside, mid, hi)
        lo = np.where(inside, lo, mid + 1)
    return lo


#: Lagrange multipliers tried by a capped time-centric solve, in units of T(V)/m(V).
LAMBDAS = (0.1, 0.25, 0.6, 1.5)


def _path(fronts: _Fronts, entry: int) -> list:
    entries = []
    while entry >= 0:
        entries.append(entry)
        entry = int(fronts.pred[entry])
    return entries[::-1]


def _end_entry(fam, fronts, strategy):
    end = fam.num_sets - 1
    lo, hi = fronts.ptr[end], fronts.ptr[end + 1]
    if hi <= lo:
        return None
    return int(hi - 1) if strategy == "time" else int(lo)


def solve(fam: ScaleFamily, g: DPGraph, budget: int, strategy: str = "time", comp_ratio: int = 1,
          window: int | None = None, front_cap: int | None = None) -> ScaleResult:
    """The DP at ``budget`` (DP units): chain, groups and the model numbers of :mod:`planner.dp`.

    With a ``front_cap``, a time-centric solve runs one pass with fronts thinned over their
    ckpt range (:func:`_thin`, the only pass of a memory-centric solve) and one per multiplier
    of :data:`LAMBDAS` (× T(V)/m(V)) with half of every front chosen by Lagrangian score
    (:func:`_thin_lagrange`), and keeps the best chain (most saved, then least ckpt). Every pass's chains pass the peak test, so
    each is a valid plan. (On synthetic transformers at 50 %: the exact optimum at 4,000
    nodes; 45.7 % recompute at 100,000 nodes where the exact DP measures 45.6 % up to 8,000.)
    Without a cap there is one exact pass.
    """
    budget = int(budget)
    fronts = run_dp(fam, g, budget, window=window, front_cap=front_cap)
    entry = _end_entry(fam, fronts, strategy)
    if front_cap is not None and front_cap >= 4 and strategy == "time":
        lam0 = float(g.t.sum()) / max(1.0, float(g.m.sum()))
        for mult in LAMBDAS:
            f2 = run_dp(fam, g, budget, window=window, front_cap=front_cap, lam=mult * lam0)
            e2 = _end_entry(fam, f2, strategy)
            if e2 is not None and (entry is None or (f2.s[e2], -f2.c[e2]) >
                                   (fronts.s[entry], -fronts.c[entry])):
                fronts, entry = f2, e2
    res = ScaleResult(status="IMPOSSIBLE", n_lower_sets=fam.num_sets,
                      forward_cost=int(g.t.sum()), comp_ratio=comp_ratio, window=window,
                      front_cap=front_cap)
    if entry is None:
        return res
    entries = _path(fronts, entry)
    states = [int(fronts.state[e]) for e in entries]
    ent = np.asarray(entries)
    st = fronts.state[ent]
    steps = fronts.c[ent[:-1]] + 2 * (fam.mL[st[1:]] - fam.mL[st[:-1]]) + fam.mAB[st[1:]]
    res.status = "OK"
    res.chain_ids = states
    res.groups = chain_groups(fam, states, g.n)
    res.blocks = len(states) - 1
    res.saved = int(fronts.s[entries[-1]])
    res.model_recompute_cost = res.forward_cost - res.saved
    res.model_peak_bytes = int(steps.max(initial=0)) * comp_ratio
    res.ckpt_bytes = int(fronts.c[entries[-1]]) * comp_ratio
    return res


def groups_to_chain(groups: np.ndarray) -> list:
    """The chain as sorted node arrays (∅ first), for comparison with :mod:`planner.dp`."""
    k = int(groups.max(initial=-1)) + 1
    return [np.zeros(0, np.int64)] + [np.flatnonzero(groups <= i) for i in range(k)]
