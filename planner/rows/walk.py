"""The step list of a row-centric training step, and the buffers it holds at each step.

One list drives both the prediction (:func:`build`: live bytes after every step, from shapes
alone) and the execution (``planner.execute.rows_exec`` runs the same steps with real kernels and
a tracked allocator), so the two cannot drift apart.

Steps (``Step.kind``):

* ``fwd`` / ``bwd`` -- one op on whole tensors (forward; backward with the VJP of ``ops``); a
  ``fwd`` step of phase ``re`` recomputes, in the backward, a whole op the recomputation DP
  dropped after the forward (``RowPlan.recompute``, :mod:`planner.rows.with_dp`), into ``("rv",
  var)``, right before the first backward step that reads it;
* ``band`` -- one region op on the rows of one band, ``phase`` ``b`` (forward sweep), ``r`` (the
  backward's recomputation, in backward phase ``level``) or ``c`` (a region of
  ``RowPlan.resweep`` swept again in the backward to remake its outputs as ``("rv", var)``);
  under ``share`` the rows before ``fresh`` come from the tail; a batch norm normalises its band
  with the statistics ``("st", op)`` its region's whole forward kept;
* ``tail`` -- ``share``: keep the rows of this band the next band needs;
* ``store`` -- copy a region output's owned rows into its whole tensor;
* ``seed`` -- start a band's backward: the owned rows of a region output's whole gradient;
* ``bandbwd`` -- one region op's backward on one band; gradients accumulate into the producers'
  band gradients, the region inputs' whole gradients and the parameter gradients;
* ``bnsink`` -- a batch norm in a backward phase before its own: its band's output gradient goes
  into the whole ``("gw", op)`` and its two per-channel sums into ``("s", op)`` (and the
  parameter gradients);
* ``bnseed`` -- a batch norm in its own phase: its input gradient on the rows the band owns.

Buffer keys: ``("v", var)`` / ``("g", var)`` whole value / gradient, ``("rv", var)`` a
recomputed whole value, ``("pg", var)`` parameter
gradient (kept: the step's result), ``(phase, op, band)`` band values, ``(phase + "t", op,
band)`` tails, ``("bg", op, band)`` band gradients (band keys carry the backward phase as a
fourth element), ``("st", op)`` / ``("s", op)`` / ``("gw", op)`` a batch norm's statistics,
gradient sums and whole output gradient. A buffer is allocated at its first write and
freed right after its last use (recycling after last use, as the plain executor with
``recycle=True``).
"""

from __future__ import annotations

import dataclasses
import graphlib
import math

import numpy as np

from planner.ops import OPS


@dataclasses.dataclass
class Step:
    """One step of a row plan's walk (the module's docstring), with its buffer events: a step
    of :class:`planner.walk.Walker`'s list (a row step frees nothing before it runs)."""

    frees_before = ()
    kind: str
    op: int
    band: int = -1
    phase: str = ""
    level: int = 0           # backward phase (planner.rows.plan.RowPlan.phases)
    reads: list = dataclasses.field(default_factory=list)
    inputs: dict = dataclasses.field(default_factory=dict)    # input position -> key (-1: own output)
    writes: list = dataclasses.field(default_factory=list)     # (key, "set" | "acc")
    allocs: list = dataclasses.field(default_factory=list)
    frees_after: list = dataclasses.field(default_factory=list)

    @property
    def frees(self) -> list:
        """``frees_after``, by the name an older revision's row executor reads
        (``bench/rows_ab.py`` runs one against this walk)."""
        return self.frees_after


@dataclasses.dataclass
class Walk:
    steps: list
    shapes: dict             # key -> (shape, dtype)
    nbytes: dict             # key -> bytes
    live: np.ndarray         # int64 [steps]: bytes held during each step
    peak_bytes: int
    param_grad_bytes: int
    span: dict = None        # key -> (first step, last step) it is held
    #: rows_exec's compiled form of the steps (slices, keys, kernels resolved once per plan,
    #: not per step of every run): built at the first run, reused by the next ones
    program: object = dataclasses.field(default=None, compare=False, repr=False)

    def held_at(self, s: int) -> list:
        """Keys held during step ``s``."""
        return [k for k, (a, b) in self.span.items() if a <= s <= b]


def _units(p) -> list:
    """Forward execution units in a topological order: ("op", i) or ("region", r)."""
    unit_of = [("region", int(r)) if r >= 0 else ("op", i) for i, r in enumerate(p.region.tolist())]
    deps = {u: set() for u in unit_of}
    for s, d in zip(p.layers.src.tolist(), p.layers.dst.tolist()):
        if unit_of[s] != unit_of[d]:
            deps[unit_of[d]].add(unit_of[s])
    return list(graphlib.TopologicalSorter(deps).static_order())


def _steps(p) -> list:
    """The step list of plan ``p``: the forward units in topological order, then their
    backwards in reverse, with the recomputations and re-sweeps inserted where first read."""
    return _Steps(p).build()


class _Steps:
    """:func:`_steps`' tables (each region's ops, each var's producer) and its step makers:
    a band sweep, a band's backward phase, a whole op's forward and backward."""

    def __init__(self, p):
        self.p, self.ly, self.act = p, p.layers, p.graph.is_activation
        self.members = {r: np.flatnonzero(p.region == r).tolist() for r in range(p.num_regions)}
        self.producer = {int(v): i for i, v in enumerate(self.ly.out_var.tolist())}
        self.share = p.policy == "share"

    def source(self, i, a, j, phase, lv):
        """Key of activation input ``a`` of region op ``i`` in band ``j`` of phase ``lv``."""
        q = self.producer[a]
        return (phase, q, j, lv) if self.p.region[q] == self.p.region[i] else ("v", a)

    def has_rows(self, i, j, lv):
        return self.p.phase_ranges[lv, i, j, 0] < self.p.phase_ranges[lv, i, j, 1]

    def band_inputs(self, st, i, j, phase, lv, positions):
        ly = self.ly
        st.inputs = {k: self.source(i, ly.in_vars[i][k], j, phase, lv) for k in positions
                     if self.act[ly.in_vars[i][k]]}
        st.reads += list(st.inputs.values()) + ([("st", i)] if ly.norm[i] else [])

    def sweep(self, r, j, phase, lv):
        """Band ``j`` of region ``r`` forward (``phase`` b), recomputed (r) or re-swept (c)."""
        p, ly, out = self.p, self.ly, []
        for i in self.members[r]:
            if not self.has_rows(i, j, lv) or (lv and p.seeds[lv, i]):
                continue            # a phase's seeds start from their whole gradient
            st = Step("band", i, j, phase, lv, writes=[((phase, i, j, lv), "set")])
            self.band_inputs(st, i, j, phase, lv, range(len(ly.in_vars[i])))
            if p.phase_fresh[lv, i, j] > p.phase_ranges[lv, i, j, 0]:
                st.reads.append((phase + "t", i, j - 1, lv))
            out.append(st)
            if phase in ("b", "c") and p.outputs[i]:       # c: a re-sweep (RowPlan.resweep)
                out.append(Step("store", i, j, phase, reads=[(phase, i, j, lv)],
                                writes=[(("v" if phase == "b" else "rv", int(ly.out_var[i])), "acc")]))
            if self.share and j + 1 < p.bands and \
                    p.phase_fresh[lv, i, j + 1] > p.phase_ranges[lv, i, j + 1, 0]:
                out.append(Step("tail", i, j, phase, lv, reads=[(phase, i, j, lv)],
                                writes=[((phase + "t", i, j, lv), "set")]))
        return out

    def grad_key(self, i, a, j, lv):
        if not self.act[a]:
            return ("pg", a)
        q = self.producer[a]
        return ("bg", q, j, lv) if self.p.region[q] == self.p.region[i] else ("g", a)

    def phase_steps(self, r, j, lv):
        """Band ``j`` of backward phase ``lv`` of region ``r``."""
        p, ly = self.p, self.ly
        out = self.sweep(r, j, "r", lv)
        if lv == 0:
            for i in self.members[r]:
                if p.outputs[i] and self.has_rows(i, j, 0):
                    out.append(Step("seed", i, j, reads=[("g", int(ly.out_var[i]))],
                                    writes=[(("bg", i, j, 0), "acc")]))
        for i in reversed(self.members[r]):
            if self.has_rows(i, j, lv):
                st = self.band_backward(i, j, lv)
                if st is not None:
                    out.append(st)
        return out

    def band_backward(self, i, j, lv):
        """Region op ``i``'s backward on band ``j`` of phase ``lv`` (None: it carries none)."""
        p, ly = self.p, self.ly
        x, gamma, beta = (ly.in_vars[i] + [None] * 3)[:3]
        if lv and p.seeds[lv, i]:            # batch norm: its input gradient, own rows
            st = Step("bnseed", i, j, "r", lv, reads=[("gw", i), ("s", i)],
                      writes=[(self.grad_key(i, x, j, lv), "acc")])
            self.band_inputs(st, i, j, "r", lv, [0])
        elif p.carriers[lv, i] and ly.norm[i]:   # batch norm: sums and whole output gradient
            st = Step("bnsink", i, j, "r", lv, reads=[("bg", i, j, lv)],
                      writes=[(("gw", i), "acc"), (("s", i), "acc"), (("pg", gamma), "acc"),
                              (("pg", beta), "acc")])
            self.band_inputs(st, i, j, "r", lv, [0])
        elif p.carriers[lv, i]:
            opdef = OPS[ly.ops[i]]
            st = Step("bandbwd", i, j, "r", lv, reads=[("bg", i, j, lv)])
            self.band_inputs(st, i, j, "r", lv, opdef.saves_inputs)
            st.reads += [("r", i, j, lv)] if opdef.saves_output else []
            st.writes = [(self.grad_key(i, a, j, lv), "acc") for a in ly.in_vars[i]
                         if self.act[a] or _is_param(p.graph, a)]
        else:
            return None
        return st

    def whole_backward(self, u, consumed):
        """The backward of whole op ``u`` (its output's gradient read if anything consumed it)."""
        ly, act = self.ly, self.act
        opdef = OPS[ly.ops[u]]
        st = Step("bwd", u)
        y = int(ly.out_var[u])
        st.inputs = {k: ("v", ly.in_vars[u][k]) for k in opdef.saves_inputs
                     if act[ly.in_vars[u][k]]}
        if opdef.saves_output:
            st.inputs[-1] = ("v", y)
        st.reads = ([("g", y)] if y in consumed else []) + list(st.inputs.values())
        st.writes = [(("g", a) if act[a] else ("pg", a), "acc") for a in ly.in_vars[u]
                     if act[a] or _is_param(self.p.graph, a)]
        return st

    def build(self) -> list:
        p, ly, act = self.p, self.ly, self.act
        consumed = {a for vs in ly.in_vars for a in vs}
        forward, backward = [], []
        for kind, u in _units(p):
            if kind == "op":
                forward.append(_whole_forward(ly, act, u, "v"))
                backward.append([self.whole_backward(u, consumed)])
                continue
            if p.whole_forward[u]:           # batch norms: whole maps, layer by layer, statistics kept
                for i in self.members[u]:
                    st = _whole_forward(ly, act, i, "v")
                    st.writes += [(("st", i), "set")] if ly.norm[i] else []
                    forward.append(st)
            else:
                for j in range(p.bands):
                    forward.extend(self.sweep(u, j, "b", 0))
            levels = [lv for lv in range(p.phases) if lv == 0 or p.seeds[lv, self.members[u]].any()]
            backward.append([st for lv in levels for j in range(p.bands)
                             for st in self.phase_steps(u, j, lv)])
        steps = [st for unit in reversed(backward) for st in unit]
        resweeps = {r: [st for j in range(p.bands) for st in self.sweep(r, j, "c", 0)]
                    for r in p.resweep}
        return forward + _recomputed(p, steps, resweeps)


def _whole_forward(ly, act, i, out_kind, phase="") -> Step:
    """The forward of whole op ``i`` writing ``(out_kind, var)``."""
    st = Step("fwd", i, phase=phase, writes=[((out_kind, int(ly.out_var[i])), "set")])
    st.inputs = {k: ("v", a) for k, a in enumerate(ly.in_vars[i]) if act[a]}
    st.reads = list(st.inputs.values())
    return st


def _recomputed(p, backward: list, resweeps: dict) -> list:
    """``backward`` with the whole ops of ``p.recompute`` recomputed, and the regions of
    ``p.resweep`` swept again (``resweeps``: region -> its sweep steps), where first read.

    Their forward values are then last read in the forward and freed there; every backward read
    of one goes to its recomputation ``("rv", var)``, made (after the recomputations of its own
    inputs, in topological order) right before the first backward step that reads it.
    """
    ly, act = p.layers, p.graph.is_activation
    again = {int(ly.out_var[i]): ("op", int(i)) for i in sorted(p.recompute)}
    again.update({int(ly.out_var[i]): ("region", int(p.region[i]))
                  for i in np.flatnonzero(p.outputs & np.isin(p.region, list(p.resweep))).tolist()})
    if not again:
        return backward

    def rename(key):
        return ("rv", key[1]) if key[0] == "v" and key[1] in again else key

    def renamed(st):
        st.reads = [rename(k) for k in st.reads]
        st.inputs = {k: rename(key) for k, key in st.inputs.items()}
        return st

    out, done = [], set()

    def ensure(a):
        unit = again[a]
        if unit in done:
            return
        kind, u = unit
        made = [_whole_forward(ly, act, u, "rv", phase="re")] if kind == "op" else resweeps[u]
        for st in made:
            for key in st.reads:
                if key[0] == "v" and key[1] in again:
                    ensure(key[1])
        out.extend(renamed(st) for st in made)
        done.add(unit)

    for st in backward:
        for key in st.reads:
            if key[0] == "v" and key[1] in again:
                ensure(key[1])
        out.append(renamed(st))
    return out


def _is_param(g, v) -> bool:
    return g.var_names[v].startswith("/")


#: Keys of whole tensors: (kind, var) or, for batch norm op ``i``, (kind, i).
WHOLE = ("v", "rv", "g", "pg", "gw", "st", "s")


def _shape(p, key) -> tuple:
    ly = p.layers
    if key[0] in ("v", "rv", "g", "pg"):
        return tuple(ly.var_shape[key[1]]), ly.var_dtype[key[1]]
    if key[0] == "gw":
        return tuple(ly.out_shapes[key[1]]), ly.dtypes[key[1]]
    if key[0] in ("st", "s"):
        return (2, int(ly.out_shapes[key[1]][1])), ly.dtypes[key[1]]
    kind, i, j, lv = key
    lo, hi = p.phase_ranges[lv, i, j]
    if kind.endswith("t"):
        lo, hi = p.phase_ranges[lv, i, j + 1, 0], p.phase_ranges[lv, i, j, 1]
    shape = list(ly.out_shapes[i])
    shape[2] = int(hi - lo)
    return tuple(shape), ly.dtypes[i]


def build(p) -> Walk:
    """Steps of plan ``p`` with their allocations and frees, and the predicted live bytes."""
    steps = _steps(p)
    shapes, first, last = {}, {}, {}
    for s, st in enumerate(steps):
        for key in st.reads:
            last[key] = s
        for key, _ in st.writes:
            if key not in first:
                first[key] = s
                shapes[key] = _shape(p, key)
            last[key] = max(last.get(key, s), s)
    for key, s in first.items():
        steps[s].allocs.append(key)
    for key, s in last.items():
        if key[0] != "pg":
            steps[s].frees_after.append(key)
    nbytes = {k: int(math.prod(sh)) * np.dtype(dt).itemsize for k, (sh, dt) in shapes.items()}
    delta = np.zeros(len(steps) + 1, dtype=np.int64)
    for key, s in first.items():
        delta[s] += nbytes[key]
        if key[0] != "pg":
            delta[last[key] + 1] -= nbytes[key]
    live = np.cumsum(delta)[:-1]
    pg = sum(b for k, b in nbytes.items() if k[0] == "pg")
    span = {k: (s, last[k] if k[0] != "pg" else len(steps)) for k, s in first.items()}
    return Walk(steps, shapes, nbytes, live, int(live.max(initial=0)), int(pg), span)
