"""Run a row-centric training step (a :class:`planner.rows.plan.RowPlan`) for real.

The plan's step list (:mod:`planner.rows.walk`) is executed with the kernels of
:mod:`planner.ops` on NumPy or CuPy: whole-tensor ops as the plain executor runs them,
region ops on one band of rows at a time. A band kernel is the whole kernel on a slice: the input
rows the band reads are cut out of the producer's band (or whole) value, the rows outside the map
are padded as the whole map's padding (zeros, or -inf before a max pool) and the op runs with
padding 0 on the rows; its VJP's input gradient is cropped back and added at the rows it came
from. Every buffer the plan names is allocated through one :class:`TrackedAllocator` at the step
that first writes it and freed after its last use, so ``tracked_peak_bytes`` is the exact peak of
what the plan holds, by the plan's own count (kernel temporaries are not plan buffers).
``measured_peak_bytes`` is what a meter outside the plan saw over the step (``meter``): the
``tracemalloc`` peak on NumPy, the CuPy pool's used-bytes peak (``device_peak_bytes``) on CuPy;
both count from after parameters and inputs are built, kernel temporaries included;
``measured_step_peak_bytes`` counts from before (the whole step).

>>> from planner.execute import export, zoo
>>> from planner.rows import plan as rows_plan
>>> g = export.to_cg(zoo.build("vgg16", dtype="float64"))
>>> r = run(g, rows_plan.plan(g, 4, "share"))
>>> r.tracked_peak_bytes <= r.predicted_peak_bytes, r.meter
(True, 'tracemalloc')
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from hgraph.errors import HGraphError
from planner.execute import backend as backend_mod
from planner.execute import executor
from planner.execute.allocator import TrackedAllocator
from planner.ops import OPS, dots, norm_statistics, pad_map, sums
from planner.rows import layers as L
from planner.rows import walk as walk_mod


@dataclasses.dataclass
class RowsResult:
    tracked_peak_bytes: int            # the plan's count: peak of the plan's live buffers
    measured_peak_bytes: int | None    # the independent meter's step peak (``meter``); None: run(meter=False)
    meter: str                         # "tracemalloc" (NumPy) | "cupy pool used bytes" (CuPy)
    predicted_peak_bytes: int
    activation_peak_bytes: int         # tracked peak minus the parameter gradients
    param_grad_bytes: int
    device_peak_bytes: int | None
    backend: str
    seconds: float
    loss: float | None
    param_grads: dict
    #: the meter's peak counted from before the parameters and inputs were built: the whole
    #: step, as :func:`planner.execute.step_memory.predict_rows` predicts it
    measured_step_peak_bytes: int | None = None


@dataclasses.dataclass
class _Cut:
    """How a band of output rows ``[lo, hi)`` reads one input map."""

    r0: int          # first input row read
    r1: int          # one past the last
    top: int         # padding rows added above / below / columns each side
    bottom: int
    side: int
    crop: int        # upsample: first wanted row of the computed output


def _cut(ly, i, lo, hi) -> _Cut:
    kind, k, s, p, h = (int(ly.kind[i]), int(ly.k[i]), int(ly.s[i]), int(ly.p[i]), int(ly.h_in[i]))
    if kind == L.WINDOW:
        a, b = lo * s - p, (hi - 1) * s - p + k
        r0, r1 = max(0, a), min(h, b)
        return _Cut(r0, r1, r0 - a, b - r1, p, 0)
    if kind == L.UPSAMPLE:
        r0, r1 = lo // s, (hi - 1) // s + 1
        return _Cut(r0, r1, 0, 0, 0, lo - r0 * s)
    return _Cut(lo, hi, 0, 0, 0, 0)


def _band_attrs(ly, i) -> dict:
    attrs = dict(ly.attrs[i])
    if "pad" in attrs:
        attrs["pad"] = 0           # the band is padded explicitly (rows only where the map ends)
    return attrs


class _Run:
    def __init__(self, g, plan, be, alloc, leaf):
        self.g, self.p, self.ly, self.be, self.xp = g, plan, plan.layers, be, be.xp
        self.alloc, self.leaf = alloc, leaf
        self.w = plan.walk
        self.ids = {k: n for n, k in enumerate(self.w.shapes)}
        self.arrays = {}
        self.loss = None
        self.act = g.is_activation

    # ------------------------------------------------------------ buffers
    def _new(self, key, zero):
        shape, dtype = self.w.shapes[key]
        raw = self.alloc.alloc(self.ids[key], self.w.nbytes[key])
        arr = raw.view(dtype).reshape(shape)
        if zero:
            arr[...] = 0
        self.arrays[key] = arr

    def value(self, a):
        return self.leaf[a] if a in self.leaf else self.arrays[("v", a)]

    def get(self, key):
        if key[0] == "v":
            return self.value(key[1])
        return self.arrays[key]

    def offset(self, key) -> int:
        """First map row held by a band buffer (0 for whole tensors)."""
        if key[0] in walk_mod.WHOLE:
            return 0
        return int(self.p.phase_ranges[key[3], key[1], key[2], 0])

    def stats(self, i):
        """(mean, inv) of batch norm ``i`` shaped to broadcast over its map."""
        st = self.arrays[("st", i)]
        return st[0].reshape(1, -1, 1, 1), st[1].reshape(1, -1, 1, 1)

    def band_rows(self, key, lo, hi):
        """Rows ``[lo, hi)`` of the map held by ``key``."""
        off = self.offset(key)
        return self.get(key)[:, :, lo - off:hi - off]

    # ------------------------------------------------------------ steps
    def run(self):
        for st in self.w.steps:
            for key in st.allocs:
                self._new(key, zero=any(k == key and m == "acc" for k, m in st.writes))
            getattr(self, "_" + st.kind)(st)
            for key in st.frees:
                self.alloc.free(self.ids[key])
                del self.arrays[key]
        grads = {k[1]: a for k, a in self.arrays.items() if k[0] == "pg"}   # copied out by run()
        return self.loss, grads

    def _arg(self, st, k):
        """Input ``k`` of whole op ``st.op`` (``-1``: its output): the step's key, else a leaf."""
        key = st.inputs.get(k)
        return self.get(key) if key is not None else self.value(self.ly.in_vars[st.op][k])

    def _fwd(self, st):
        i, ly = st.op, self.ly
        y = OPS[ly.ops[i]].forward(self.xp, [self._arg(st, k) for k in range(len(ly.in_vars[i]))],
                                   ly.attrs[i])
        key = st.writes[0][0]
        self.arrays[key][...] = y
        if len(st.writes) > 1:           # a batch norm of a row region: keep its statistics
            mean, inv = norm_statistics(self.xp, self._arg(st, 0), ly.attrs[i], (0, 2, 3))
            self.arrays[st.writes[1][0]][...] = self.xp.stack([mean.reshape(-1), inv.reshape(-1)])
        if ly.ops[i] == "softmax_cross_entropy" and st.phase != "re":
            self.loss = float(self.be.to_numpy(self.arrays[key]))

    def _bwd(self, st):
        i, ly, xp = st.op, self.ly, self.xp
        opdef, y = OPS[ly.ops[i]], int(ly.out_var[i])
        gy = self.arrays[("g", y)] if ("g", y) in st.reads else \
            xp.ones(tuple(ly.out_shapes[i]), dtype=ly.dtypes[i])
        saved = {k: self._arg(st, k) for k in opdef.saves_inputs}
        out = self._arg(st, -1) if opdef.saves_output else None
        want = [k for k, a in enumerate(ly.in_vars[i]) if self.act[a] or _param(self.g, a)]
        keys = {k: ("g", a) if self.act[a] else ("pg", a)
                for k, a in enumerate(ly.in_vars[i]) if k in want}
        into = _first_writes(opdef, keys, st)
        args = (xp, gy, saved, out, ly.attrs[i], [tuple(s) for s in ly.in_shapes[i]], want)
        grads = opdef.backward(*args, out={k: self.arrays[keys[k]] for k in into}) if into else \
            opdef.backward(*args)
        for k in want:
            if k in into:                # the kernel wrote the buffer (or handed back its own)
                if grads[k] is not self.arrays[keys[k]]:
                    self.arrays[keys[k]][...] = grads[k]
            else:
                self.arrays[keys[k]] += grads[k]

    def _band_inputs(self, st, lo, hi):
        """(inputs, cut) of region op ``st.op`` computing output rows ``[lo, hi)``.

        A map input the step does not read (a VJP that needs only its shape) is ``None``.
        """
        i, ly, xp = st.op, self.ly, self.xp
        cut = _cut(ly, i, lo, hi)
        fill = -np.inf if ly.ops[i] == "max_pool" else 0.0
        xs = []
        for k, a in enumerate(ly.in_vars[i]):
            if _param(self.g, a):
                xs.append(self.value(a))
                continue
            key = st.inputs.get(k) if self.act[a] else ("v", a)       # a model input: whole
            if key is None:
                xs.append(None)
                continue
            off = self.offset(key)
            x = self.get(key)[:, :, cut.r0 - off:cut.r1 - off]
            if cut.top or cut.bottom or cut.side:
                x = pad_map(xp, x, cut.top, cut.bottom, cut.side, fill)
            xs.append(x)
        return xs, cut

    def _band_shapes(self, i, xs, cut) -> list:
        """Shapes of the band inputs as the VJP sees them (padded rows and columns included)."""
        out = []
        for k, x in enumerate(xs):
            if x is not None:
                out.append(tuple(x.shape))
                continue
            n, c, _, w = self.ly.in_shapes[i][k]
            out.append((n, c, cut.r1 - cut.r0 + cut.top + cut.bottom, w + 2 * cut.side))
        return out

    def _band(self, st):
        i, j, lv, ly = st.op, st.band, st.level, self.ly
        lo, hi = (int(v) for v in self.p.phase_ranges[lv, i, j])
        fresh = int(self.p.phase_fresh[lv, i, j])
        out = self.arrays[st.writes[0][0]]
        if fresh > lo:
            out[:, :, :fresh - lo] = self.arrays[(st.phase + "t", i, j - 1, lv)]
        if fresh >= hi:
            return
        xs, cut = self._band_inputs(st, fresh, hi)
        if ly.norm[i]:                   # normalised with the whole map's statistics
            mean, inv = self.stats(i)
            y = xs[0] - mean                 # the forward's order, in place: the same bits
            y *= inv
            y *= xs[1].reshape(mean.shape)
            y += xs[2].reshape(mean.shape)
        else:
            y = OPS[ly.ops[i]].forward(self.xp, xs, _band_attrs(ly, i))
        out[:, :, fresh - lo:] = y[:, :, cut.crop:cut.crop + hi - fresh]

    def _tail(self, st):
        i, j, rng = st.op, st.band, self.p.phase_ranges[st.level]
        lo = int(rng[i, j, 0])
        self.arrays[st.writes[0][0]][...] = self.arrays[st.reads[0]][:, :, int(rng[i, j + 1, 0]) - lo:]

    def _store(self, st):
        i, j = st.op, st.band
        a, b = (int(v) for v in self.p.own[i, j])
        lo = int(self.p.ranges[i, j, 0])
        self.arrays[st.writes[0][0]][:, :, a:b] = self.arrays[st.reads[0]][:, :, a - lo:b - lo]

    def _seed(self, st):
        i, j = st.op, st.band
        a, b = (int(v) for v in self.p.own[i, j])
        lo = int(self.p.ranges[i, j, 0])
        self.arrays[st.writes[0][0]][:, :, a - lo:b - lo] += self.arrays[st.reads[0]][:, :, a:b]

    def _xhat(self, st, lo, hi):
        """Batch norm ``st.op``'s normalised input on rows ``[lo, hi)`` (recomputed band; a new
        array the caller may overwrite)."""
        mean, inv = self.stats(st.op)
        xhat = self.band_rows(st.inputs[0], lo, hi) - mean
        xhat *= inv
        return xhat, inv

    def _bnsink(self, st):
        """A band's share of batch norm's output gradient: into the whole gradient, and its two
        per-channel sums (= the parameter gradients) into ``("s", op)`` and the parameters'."""
        i, j, lv = st.op, st.band, st.level
        lo, hi = (int(v) for v in self.p.phase_ranges[lv, i, j])
        gy = self.arrays[("bg", i, j, lv)]
        xhat, _ = self._xhat(st, lo, hi)
        sums_ = self.xp.stack([sums(self.xp, gy, (0, 2, 3), keepdims=False),
                               dots(self.xp, gy, xhat, (0, 2, 3), keepdims=False)])
        (gw, _), (s, _), (gamma, _), (beta, _) = st.writes
        self.arrays[gw][:, :, lo:hi] += gy
        self.arrays[s] += sums_
        self.arrays[gamma] += sums_[1]
        self.arrays[beta] += sums_[0]

    def _bnseed(self, st):
        """Batch norm's input gradient on the rows band ``st.band`` owns, from its whole output
        gradient and the two sums: ``inv / m * (m * dxhat - sum dxhat - xhat * sum dxhat xhat)``."""
        i, j, lv, ly = st.op, st.band, st.level, self.ly
        a, b = (int(v) for v in self.p.phase_own[lv, i, j])
        xhat, inv = self._xhat(st, a, b)
        gamma = self.value(ly.in_vars[i][1]).reshape(inv.shape)
        s = self.arrays[("s", i)]
        n, _, h, w = ly.out_shapes[i]
        m = np.float32(n * h * w)
        t = xhat                         # in place: gamma * s0 + xhat * gamma * s1
        t *= gamma * s[1].reshape(inv.shape)
        t += gamma * s[0].reshape(inv.shape)
        dx = self.arrays[("gw", i)][:, :, a:b] * (gamma * m)        # m * dxhat
        dx -= t
        dx *= inv / m
        key = st.writes[0][0]
        off = self.offset(key)
        self.arrays[key][:, :, a - off:b - off] += dx

    def _bandbwd(self, st):
        i, j, lv, ly, xp = st.op, st.band, st.level, self.ly, self.xp
        lo, hi = (int(v) for v in self.p.phase_ranges[lv, i, j])
        opdef = OPS[ly.ops[i]]
        xs, cut = self._band_inputs(st, lo, hi)
        shapes = self._band_shapes(i, xs, cut)
        gy = self.arrays[("bg", i, j, lv)]
        if ly.kind[i] == L.UPSAMPLE:
            f = int(ly.s[i])
            full = xp.zeros(shapes[0][:2] + (shapes[0][2] * f, shapes[0][3] * f), dtype=gy.dtype)
            full[:, :, cut.crop:cut.crop + hi - lo] = gy
            gy = full
        y = self.arrays[("r", i, j, lv)] if opdef.saves_output else None
        want = [k for k, a in enumerate(ly.in_vars[i]) if self.act[a] or _param(self.g, a)]
        grads = opdef.backward(xp, gy, {k: xs[k] for k in opdef.saves_inputs}, y, _band_attrs(ly, i),
                               shapes, want)
        targets = iter(st.writes)
        for k in want:
            key = next(targets)[0]
            gk = grads[k]
            if not self.act[ly.in_vars[i][k]]:
                self.arrays[key] += gk
                continue
            rows = cut.r1 - cut.r0
            gk = gk[:, :, cut.top:cut.top + rows, cut.side:gk.shape[3] - cut.side]
            off = self.offset(key)
            self.arrays[key][:, :, cut.r0 - off:cut.r1 - off] += gk


def _param(g, v) -> bool:
    return g.var_names[v].startswith("/")


def _first_writes(opdef, keys: dict, st) -> list:
    """Gradient positions of a whole op's backward step whose buffers this step allocates (its
    first write): a kernel that fills its gradients writes them there itself, instead of into an
    array of its own added afterwards -- a second copy of, say, fc6's weight gradient at the FC
    backward, the peak of a batch-1 VGG-16 row step."""
    if not opdef.fills_grads:
        return []
    vals = list(keys.values())       # an input read twice sums two gradients: added, not filled
    return [k for k, key in keys.items() if key in st.allocs and vals.count(key) == 1]


def run(g, plan, *, backend=None, seed: int = 0, allocator: str = "pool", meter: bool = True) -> RowsResult:
    """Execute row plan ``plan`` on zoo graph ``g``; the result carries the tracked and the
    measured peak (``meter=False``: no independent meter, ``measured_peak_bytes`` None -- for
    timing without tracemalloc's overhead)."""
    be = backend if isinstance(backend, backend_mod.Backend) else backend_mod.get(backend)
    if not executor.has_real_ops(g):
        raise HGraphError("row execution needs a zoo graph (operator arguments in the details)")
    alloc = TrackedAllocator(be, allocator, alignment=256 if be.is_gpu else 64)
    executor._warm(be.xp)
    with alloc.tracking(meter):
        leaf = executor.leaves(g, be.xp, seed)
        alloc.leaves_built()
        t0 = time.perf_counter()
        r = _Run(g, plan, be, alloc, leaf)
        loss, grads = r.run()
        be.synchronize()
    seconds = time.perf_counter() - t0
    grads = {v: be.to_numpy(a).copy() for v, a in grads.items()}   # after the step: not its memory
    alloc.release()
    peak = int(alloc.peak_bytes)
    return RowsResult(peak, alloc.measured_peak_bytes, alloc.meter, int(plan.predicted_peak_bytes),
                      peak - int(plan.param_grad_bytes),
                      int(plan.param_grad_bytes), alloc.device_peak_bytes, be.name, seconds, loss, grads,
                      alloc.measured_step_peak_bytes)


def relative_error(a: dict, b: dict, norm: bool = False) -> float:
    """Largest over parameters of max |a - b| / max |b| (``norm``: ||a - b||_2 / ||b||_2);
    inf when the parameter sets differ."""
    if a.keys() != b.keys():
        return float("inf")
    worst = 0.0
    for k in a:
        d, ref = a[k].astype(np.float64) - b[k], b[k].astype(np.float64)
        if norm:
            err = float(np.linalg.norm(d)) / (float(np.linalg.norm(ref)) or 1.0)
        else:
            err = float(np.abs(d).max()) / (float(np.abs(ref).max()) or 1.0)
        worst = max(worst, err)
    return worst
