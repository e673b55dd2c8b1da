"""Run a row-centric training step (a :class:`planner.rows.plan.RowPlan`) for real.

The plan's step list (:mod:`planner.rows.walk`) is executed with the kernels of
:mod:`planner.ops` on NumPy or CuPy: whole-tensor ops as the plain executor runs them,
region ops on one band of rows at a time. A band kernel is the whole kernel on a slice: the input
rows the band reads are cut out of the producer's band (or whole) value, the rows outside the map
are padded as the whole map's padding (zeros, or -inf before a max pool) and the op runs with
padding 0 on the rows; its VJP's input gradient is cropped back and added at the rows it came
from. Convolutions take :mod:`planner.band_kernels` where a band's few pixels make the
whole-op kernel slow (:func:`conv1x1_band`, :func:`conv_band`): the same products, the weight
gradient added inside BLAS, in another summation order where the values only feed gradients;
on narrow maps through pixel-major columns read from the band's rows in place, without a
padded copy of them (:func:`conv_pm_band`).
Every buffer the plan names is allocated through one :class:`TrackedAllocator` at the step
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

from hgraph.common.errors import HGraphError
from planner import band_kernels
from planner.execute import backend as backend_mod
from planner.execute import executor
from planner.execute.allocator import TrackedAllocator, pool_blocks
from planner.ops import OPS, dots, norm_forward, pad_map, sums
from planner.rows import layers as L
from planner.rows import walk as walk_mod
from planner.walk import Walker
from planner.rows.band_steps import (DIRECT_BAND, Cut as _Cut,  # noqa: F401
                                     band_attrs as _band_attrs, buffer_offset, conv1x1_band,
                                     conv_band, conv_pm_band, cut as _cut,
                                     deferred_sums as _deferred_sums, first_write as _first,
                                     first_writes as _first_writes, writes_band_directly)


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
    #: step, as :func:`planner.rows.step.predict_rows` predicts it
    measured_step_peak_bytes: int | None = None


class _Run(Walker):
    """One execution of a plan's walk: a visitor of :mod:`planner.walk` over the compiled
    steps (:class:`_Compiled`). The steps run from their compiled form
    (:func:`_program`: each step's kernel, slices, keys and buffer requests resolved once per plan),
    so a step of a run is its kernels and a few dictionary look-ups: a row step has several times
    the plain step's kernel calls, and re-deriving each band's cut, offsets and keys on every call
    cost as much as the band kernels themselves at small sizes (``bench/kernels_bench.py --plans``)."""

    def __init__(self, g, plan, be, alloc, leaf):
        self.ly, self.be, self.xp = plan.layers, be, be.xp
        self.allocator = alloc
        #: leaves and plan buffers in one dict, by key (a leaf is ("v", var); no step writes one)
        self.arrays = {("v", a): x for a, x in leaf.items()}
        self.loss = None
        self.prog = _program(g, plan, alloc.alignment)
        self._stats = {}                 # op -> (its statistics buffer, mean, inv views)

    def run(self):
        self._take, self._give = requests(self.allocator)
        return self.walk(self.prog)

    def alloc(self, request) -> None:
        key, buf, nbytes, dtype, shape, zero, block = request
        arr = self._take(buf, nbytes, dtype, shape, block)
        if zero:
            arr[...] = 0
        self.arrays[key] = arr

    def free(self, request) -> None:
        key, buf = request
        self._give(buf)
        del self.arrays[key]

    def visit(self, s: int, c) -> None:
        c.fn(self, c.st, c.info)

    def finish(self, n: int):
        grads = {k[1]: a for k, a in self.arrays.items() if k[0] == "pg"}   # copied out by run()
        return self.loss, grads

    def stats(self, i):
        """(mean, inv) of batch norm ``i`` shaped to broadcast over its map."""
        st = self.arrays[("st", i)]
        got = self._stats.get(i)
        if got is None or got[0] is not st:      # views made once per buffer, not per band
            got = self._stats[i] = (st, st[0].reshape(1, -1, 1, 1), st[1].reshape(1, -1, 1, 1))
        return got[1], got[2]

    def band_inputs(self, specs):
        """The band inputs of :func:`_c_inputs`' specs: rows cut out, padded where the map ends."""
        arrays, xs = self.arrays, []
        for sp in specs:
            if sp is None:
                xs.append(None)
                continue
            key, a, b, pads, fill = sp
            x = arrays[key]
            if a is not None:
                x = x[:, :, a:b]
                if pads:
                    x = pad_map(self.xp, x, *pads, fill)
            xs.append(x)
        return xs

    # ------------------------------------------------------------ steps (st, compiled info)
    def _fwd(self, st, info):
        opdef, keys, attrs, out, stats_key, loss = info
        arrays, xp = self.arrays, self.xp
        xs = [arrays[k] for k in keys]
        if stats_key is not None:        # a batch norm of a row region: keep its statistics
            _, mean, inv = norm_forward(xp, xs, attrs, out=arrays[out])
            st = arrays[stats_key]
            st[0] = mean.reshape(-1)
            st[1] = inv.reshape(-1)
        elif opdef.fills_out:            # the kernel writes into the plan's buffer
            opdef.forward(xp, xs, attrs, out=arrays[out])
        else:
            arrays[out][...] = opdef.forward(xp, xs, attrs)
        if loss:
            self.loss = float(self.be.to_numpy(arrays[out]))

    def _bwd(self, st, info):
        opdef, gkey, oshape, dtype, saved_keys, out_key, attrs, shapes, want, keys, into = info
        arrays, xp = self.arrays, self.xp
        gy = arrays[gkey] if gkey is not None else xp.ones(oshape, dtype=dtype)
        saved = {k: arrays[key] for k, key in saved_keys}
        out = arrays[out_key] if out_key is not None else None
        args = (xp, gy, saved, out, attrs, shapes, want)
        grads = opdef.backward(*args, out={k: arrays[keys[k]] for k in into}) if into else \
            opdef.backward(*args)
        for k in want:
            dst = arrays[keys[k]]
            if k in into:                # the kernel wrote the buffer (or handed back its own)
                if grads[k] is not dst:
                    dst[...] = grads[k]
            else:
                dst += grads[k]

    def _fresh(self, out_key, tail, fresh):
        """The rows a band step computes into its band buffer (from ``fresh`` on), after the
        rows it keeps from the previous band (``tail``, the share policy) are copied in."""
        out = self.arrays[out_key]
        if tail is not None:
            out[:, :, :fresh] = self.arrays[tail]
        return out[:, :, fresh:]

    def _grad_views(self, dx, dw):
        """``(dx rows, fill, dw buffer, fill)`` of a band backward that writes its input
        gradient into the band's rows ``(key, a, b, fill)`` (None where unwanted; on its first
        write the rows outside the band zeroed) and its weight gradient into the parameter's
        buffer ``(key, fill)``."""
        arrays = self.arrays
        dxv, dx_fill = None, False
        if dx is not None:
            key, a, b, dx_fill = dx
            dxv = arrays[key][:, :, a:b]
            if dx_fill:
                _clear_outside(arrays[key], a, b)
        dwv, dw_fill = (arrays[dw[0]], dw[1]) if dw is not None else (None, False)
        return dxv, dx_fill, dwv, dw_fill

    def _band(self, st, info):
        out_key, tail, fresh, specs, crop, width, fwd, attrs, norm, direct = info
        rows = self._fresh(out_key, tail, fresh)
        if specs is None:
            return
        xs = self.band_inputs(specs)
        if norm is not None:             # normalised with the whole map's statistics
            mean, inv = self.stats(norm)
            y = self.xp.subtract(xs[0], mean, out=rows)
            if st.phase == "b":          # the forward's order, in place: the same bits
                y *= inv
                y *= xs[1].reshape(mean.shape)
            else:                        # a recomputation (values for gradients): one pass less
                y *= inv * xs[1].reshape(mean.shape)
            y += xs[2].reshape(mean.shape)
        elif direct:                     # straight into the band buffer (writes_band_directly)
            fwd(self.xp, xs, attrs, out=rows)
        else:
            y = fwd(self.xp, xs, attrs)
            rows[...] = y[:, :, crop:crop + width]

    def _band1x1(self, st, info):
        """A 1x1 convolution's band straight into the band buffer (:func:`conv1x1_band`)."""
        out_key, tail, fresh, specs, s = info
        rows = self._fresh(out_key, tail, fresh)
        x, w = self.band_inputs(specs)
        band_kernels.conv1x1_forward(self.xp, x, w, s, rows)

    def _bandpm(self, st, info):
        """A k x k convolution's band through pixel-major columns (:func:`conv_pm_band`)."""
        out_key, tail, fresh, (xkey, a, b, side, wkey) = info
        rows = self._fresh(out_key, tail, fresh)
        band_kernels.conv_pm_forward(self.xp, self.arrays[xkey], a, b, side, self.arrays[wkey],
                                     rows)

    def _bandbwdpm(self, st, info):
        """A k x k convolution's band backward through pixel-major columns
        (:func:`conv_pm_band`): the weight gradient into the parameter's buffer, the input
        gradient into the rows of its buffer that the band covers."""
        (xkey, a, b, side, wkey), gkey, dx, dw = info
        arrays = self.arrays
        dxv, dx_fill, dwv, dw_fill = self._grad_views(dx, dw)
        band_kernels.conv_pm_backward(self.xp, arrays[gkey], arrays[xkey], a, b, side,
                                      arrays[wkey], dwv, dw_fill, dxv, dx_fill)

    def _bandbwd1x1(self, st, info):
        """A 1x1 convolution's band backward (:func:`conv1x1_band`): the weight gradient into
        the parameter's buffer, the input gradient into the rows of the input's band gradient."""
        specs, gkey, s, dx, dw = info
        arrays = self.arrays
        x, w = self.band_inputs(specs)
        dxv, dx_fill, dwv, dw_fill = self._grad_views(dx, dw)
        band_kernels.conv1x1_backward(self.xp, arrays[gkey], x, w, s, dwv, dw_fill, dxv, dx_fill)

    def _bandconv(self, st, info):
        """A k x k convolution's band straight into the band buffer (:func:`conv_band`)."""
        out_key, tail, fresh, specs, s = info
        rows = self._fresh(out_key, tail, fresh)
        x, w = self.band_inputs(specs)
        band_kernels.conv_forward(self.xp, x, w, s, rows)

    def _bandbwdconv(self, st, info):
        """A k x k convolution's band backward (:func:`conv_band`): the weight gradient into
        the parameter's buffer, the input gradient cropped into the rows of its buffer."""
        specs, gkey, s, dx, dw = info
        arrays = self.arrays
        x, w = self.band_inputs(specs)
        _, _, dwv, dw_fill = self._grad_views(None, dw)
        got = band_kernels.conv_backward(self.xp, arrays[gkey], x, w, s, dwv, dw_fill, dx is not None)
        if dx is not None:
            key, (top, rows, side, a, b), fill = dx
            gk = got[:, :, top:top + rows, side:got.shape[3] - side]
            dst = arrays[key]
            if fill:                     # its first write: the rows outside the band zeroed
                _clear_outside(dst, a, b)
                dst[:, :, a:b] = gk
            else:
                dst[:, :, a:b] += gk

    def _tail(self, st, info):
        dst, src, a = info
        self.arrays[dst][...] = self.arrays[src][:, :, a:]

    def _store(self, st, info):
        dst, src, a, b, a0, b0 = info
        self.arrays[dst][:, :, a:b] = self.arrays[src][:, :, a0:b0]

    def _seed(self, st, info):
        dst, src, a0, b0, a, b, first = info
        d = self.arrays[dst]
        if first:
            _clear_outside(d, a0, b0)
            d[:, :, a0:b0] = self.arrays[src][:, :, a:b]
        else:
            d[:, :, a0:b0] += self.arrays[src][:, :, a:b]

    def _bnsink(self, st, info):
        """A band's share of batch norm's output gradient: into the whole gradient, and its two
        per-channel sums (= the parameter gradients) into ``("s", op)`` and the parameters'; the
        first sum (``deferred``, :func:`_deferred_sums`) is taken once over the whole gradient at
        the op's first bnseed instead (one pass and one call per band fewer)."""
        gkey, xkey, a, b, lo, hi, (gw, s, gamma, beta), first, deferred = info
        arrays, xp = self.arrays, self.xp
        gy = arrays[gkey]
        mean, inv = self.stats(st.op)
        xc = xp.subtract(arrays[xkey][:, :, a:b], mean)     # sum gy xhat = inv sum gy (x - mean)
        s1 = dots(xp, gy, xc, (0, 2, 3), keepdims=False)
        s1 *= inv.reshape(-1)
        if first:
            _clear_outside(arrays[gw], lo, hi)
            arrays[gw][:, :, lo:hi] = gy
        else:
            arrays[gw][:, :, lo:hi] += gy
        both = arrays[s]
        both[1] += s1
        arrays[gamma] += s1
        if not deferred:
            s0 = sums(xp, gy, (0, 2, 3), keepdims=False)
            both[0] += s0
            arrays[beta] += s0

    def _bnseed(self, st, info):
        """Batch norm's input gradient on the rows band ``st.band`` owns, from its whole output
        gradient ``gw`` and the two sums ``s0 = sum gw``, ``s1 = sum gw xhat``:
        ``inv / m * gamma * (m gw - s0 - xhat s1)`` = ``A gw + B (x - mean) + C`` per channel,
        ``A = gamma inv``, ``B = -A inv s1 / m``, ``C = -A s0 / m``: five passes over the band
        (eight before; the rounding differs). The op's first band turns its sums buffer
        ``("s", op)``, which only its bnseeds read, into ``(C, B)`` in place."""
        xkey, xa, xb, gamma_key, m, a, b, key, da, db, first, coef, beta_key = info
        arrays, xp = self.arrays, self.xp
        mean, inv = self.stats(st.op)
        gain = arrays[gamma_key].reshape(inv.shape) * inv          # A
        s = arrays[("s", st.op)]
        if coef and beta_key is not None:            # the deferred first sum, whole map
            s0 = sums(xp, arrays[("gw", st.op)], (0, 2, 3), keepdims=False)
            s[0] = s0
            arrays[beta_key] += s0
        if coef:
            s *= gain.reshape(1, -1)
            s *= -1.0 / float(m)
            s[1] *= inv.reshape(-1)
        t = xp.subtract(arrays[xkey][:, :, xa:xb], mean)
        t *= s[1].reshape(inv.shape)
        t += s[0].reshape(inv.shape)
        dst = arrays[key]
        gw = arrays[("gw", st.op)][:, :, a:b]
        if first:                        # computed in the buffer's rows
            _clear_outside(dst, da, db)
            dx = xp.multiply(gw, gain, out=dst[:, :, da:db])
        else:
            dx = gw * gain
        dx += t
        if not first:
            dst[:, :, da:db] += dx

    def _bandbwd(self, st, info):
        opdef, specs, static, gkey, up, ykey, attrs, want, targets = info
        arrays, xp = self.arrays, self.xp
        xs = self.band_inputs(specs)
        shapes = [tuple(x.shape) if x is not None else static[k] for k, x in enumerate(xs)]
        gy = arrays[gkey]
        if up is not None:
            f, crop, width = up
            full = xp.zeros(shapes[0][:2] + (shapes[0][2] * f, shapes[0][3] * f), dtype=gy.dtype)
            full[:, :, crop:crop + width] = gy
            gy = full
        y = arrays[ykey] if ykey is not None else None
        grads = opdef.backward(xp, gy, {k: xs[k] for k in opdef.saves_inputs}, y, attrs, shapes, want)
        for k, key, crop, fill in targets:
            gk = grads[k]
            if crop is not None:
                top, rows, side, a, b = crop
                gk = gk[:, :, top:top + rows, side:gk.shape[3] - side]
            dst = arrays[key] if crop is None else arrays[key][:, :, a:b]
            if fill:                     # the buffer's first write: its rows set, the rest zeroed
                if crop is not None:
                    _clear_outside(arrays[key], a, b)
                dst[...] = gk
            else:
                dst += gk


class _Compiled:
    """One compiled step: its :class:`_Run` method, the walk's step, its info and its buffer
    events (a step of :class:`planner.walk.Walker`'s list)."""

    __slots__ = ("fn", "st", "info", "allocs", "frees_after")
    frees_before = ()

    def __init__(self, fn, st, info, allocs, frees_after):
        self.fn, self.st, self.info, self.allocs, self.frees_after = fn, st, info, allocs, frees_after


def requests(alloc):
    """``(take, free)`` for :meth:`_Run.run`'s buffer requests on ``alloc``: a ``pool`` takes
    each buffer's block as :func:`_program` replayed them (``TrackedAllocator.take_block``),
    the other strategies ignore that number."""
    if alloc.strategy == "pool":
        return alloc.take_block, alloc.free_block
    return (lambda buf, nbytes, dtype, shape, block: alloc.take(buf, nbytes, dtype, shape)), \
        alloc.free


def _program(g, plan, alignment: int = 64) -> list:
    """The walk's steps compiled for :class:`_Run`: a :class:`_Compiled` (method, step, info,
    allocs, frees after) each, ``allocs`` as ``(key, buffer id, bytes, dtype, shape, zero,
    block)`` (``block``: the ``pool`` block the request gets,
    :func:`planner.execute.allocator.pool_blocks` at the allocator's ``alignment``), frees
    as ``(key, buffer id)``; cached on the walk (a plan's
    steps do not change once built), rebuilt for another graph or plan object or alignment, or
    when an op of :data:`OPS` it took was replaced since (a metered or patched kernel table)."""
    w = plan.walk
    kernels = {name: OPS[name] for name in set(plan.layers.ops)}
    if w.program is not None and w.program[0] is g and w.program[1] is plan and \
            w.program[4] == alignment and all(w.program[3].get(k) is v for k, v in kernels.items()):
        return w.program[2]
    ids = {k: n for n, k in enumerate(w.shapes)}
    c = _Compiler(g, plan)
    prog = []
    for st in w.steps:
        c.filled = set()
        fn, info = getattr(c, st.kind)(st)
        allocs = []
        for key in st.allocs:
            shape, dtype = w.shapes[key]
            zero = key not in c.filled and any(k == key and m == "acc" for k, m in st.writes)
            allocs.append([key, ids[key], int(w.nbytes[key]), np.dtype(dtype), tuple(shape), zero])
        frees = [(key, ids[key]) for key in st.frees_after]
        prog.append((fn, st, info, allocs, frees))
    events = [e for _, _, _, allocs, frees in prog
              for e in [(a[1], a[2]) for a in allocs] + [(b, None) for _, b in frees]]
    blocks = iter(pool_blocks(events, alignment))
    prog = [_Compiled(fn, st, info, [tuple(a) + (next(blocks),) for a in allocs], frees)
            for fn, st, info, allocs, frees in prog]
    w.program = (g, plan, prog, kernels, alignment)
    return prog


class _Compiler:
    """Each step kind's compiled form: ``(the _Run method that runs it, its info)`` -- what the
    step reads, writes and slices, derived from the plan once; a convolution's band steps name
    the band kernel's method. The one table from a step to what runs it (was a method name set
    on the side and looked up by the kind's name)."""

    def __init__(self, g, plan):
        self.g, self.p, self.ly = g, plan, plan.layers
        self.act = g.is_activation
        self.filled = set()              # buffers the step being compiled fills on allocation
        self.bn_state = {}               # batch norm -> "sink" / "seed": its last such step
        self.deferred = _deferred_sums(plan.walk.steps)

    def offset(self, key) -> int:
        return buffer_offset(self.p, key)

    def first(self, st, key) -> bool:
        """:func:`_first`, and the buffer is then not zeroed at its allocation."""
        if _first(st, key):
            self.filled.add(key)
            return True
        return False

    def arg(self, st, k):
        """Key of input ``k`` of whole op ``st.op`` (``-1``: its output): the step's, else a leaf."""
        key = st.inputs.get(k)
        return key if key is not None else ("v", int(self.ly.in_vars[st.op][k]))

    def inputs(self, st, lo, hi):
        """(specs, cut) of region op ``st.op`` computing output rows ``[lo, hi)``: per input
        ``(key, first row, end row, pads, fill)`` (rows None: the whole array, a parameter), or
        None for a map input the step does not read (a VJP that needs only its shape)."""
        i, ly = st.op, self.ly
        cut = _cut(ly, i, lo, hi)
        fill = -np.inf if ly.ops[i] == "max_pool" else 0.0
        pads = (cut.top, cut.bottom, cut.side) if (cut.top or cut.bottom or cut.side) else None
        specs = []
        for k, a in enumerate(ly.in_vars[i]):
            if _param(self.g, a):
                specs.append((("v", int(a)), None, None, None, fill))
                continue
            key = st.inputs.get(k) if self.act[a] else ("v", int(a))     # a model input: whole
            if key is None:
                specs.append(None)
                continue
            off = self.offset(key)
            specs.append((key, cut.r0 - off, cut.r1 - off, pads, fill))
        return specs, cut

    def fwd(self, st):
        i, ly = st.op, self.ly
        keys = [self.arg(st, k) for k in range(len(ly.in_vars[i]))]
        stats_key = st.writes[1][0] if len(st.writes) > 1 else None
        loss = ly.ops[i] == "softmax_cross_entropy" and st.phase != "re"
        return _Run._fwd, (OPS[ly.ops[i]], keys, ly.attrs[i], st.writes[0][0], stats_key, loss)

    def bwd(self, st):
        i, ly = st.op, self.ly
        opdef, y = OPS[ly.ops[i]], int(ly.out_var[i])
        gkey = ("g", y) if ("g", y) in st.reads else None
        saved = [(k, self.arg(st, k)) for k in opdef.saves_inputs]
        out_key = self.arg(st, -1) if opdef.saves_output else None
        want = [k for k, a in enumerate(ly.in_vars[i]) if self.act[a] or _param(self.g, a)]
        keys = {k: ("g", a) if self.act[a] else ("pg", a)
                for k, a in enumerate(ly.in_vars[i]) if k in want}
        into = _first_writes(opdef, keys, st)
        self.filled.update(keys[k] for k in into)      # the kernel writes them whole
        return _Run._bwd, (opdef, gkey, tuple(ly.out_shapes[i]), ly.dtypes[i], saved, out_key,
                           ly.attrs[i], [tuple(s) for s in ly.in_shapes[i]], want, keys, into)

    def band(self, st):
        i, j, lv, ly = st.op, st.band, st.level, self.ly
        lo, hi = (int(v) for v in self.p.phase_ranges[lv, i, j])
        fresh = int(self.p.phase_fresh[lv, i, j])
        tail = (st.phase + "t", i, j - 1, lv) if fresh > lo else None
        info = [st.writes[0][0], tail, fresh - lo, None, 0, 0, OPS[ly.ops[i]].forward,
                _band_attrs(ly, i), i if ly.norm[i] else None, writes_band_directly(self.p, st)]
        if fresh < hi:
            specs, cut = self.inputs(st, fresh, hi)
            info[3:6] = specs, cut.crop, hi - fresh
            if conv1x1_band(ly, i):
                return _Run._band1x1, tuple(info[:4]) + (int(ly.s[i]),)
            if conv_pm_band(self.p, i, st.phase, cut):
                return _Run._bandpm, tuple(info[:3]) + (_pm_input(specs, cut),)
            if conv_band(self.p, i, st.phase, cut):
                return _Run._bandconv, tuple(info[:4]) + (int(ly.s[i]),)
        return _Run._band, tuple(info)

    def tail(self, st):
        i, j, rng = st.op, st.band, self.p.phase_ranges[st.level]
        return _Run._tail, (st.writes[0][0], st.reads[0], int(rng[i, j + 1, 0]) - int(rng[i, j, 0]))

    def store(self, st):
        i, j = st.op, st.band
        a, b = (int(v) for v in self.p.own[i, j])
        lo = int(self.p.ranges[i, j, 0])
        return _Run._store, (st.writes[0][0], st.reads[0], a, b, a - lo, b - lo)

    def seed(self, st):
        i, j = st.op, st.band
        a, b = (int(v) for v in self.p.own[i, j])
        lo = int(self.p.ranges[i, j, 0])
        return _Run._seed, (st.writes[0][0], st.reads[0], a - lo, b - lo, a, b,
                            self.first(st, st.writes[0][0]))

    def bnsink(self, st):
        i, j, lv = st.op, st.band, st.level
        lo, hi = (int(v) for v in self.p.phase_ranges[lv, i, j])
        xkey = st.inputs[0]
        off = self.offset(xkey)
        writes = tuple(k for k, _ in st.writes)
        self.bn_state[i] = "sink"
        return _Run._bnsink, (("bg", i, j, lv), xkey, lo - off, hi - off, lo, hi, writes,
                              self.first(st, writes[0]), i in self.deferred)

    def bnseed(self, st):
        i, j, lv, ly = st.op, st.band, st.level, self.ly
        a, b = (int(v) for v in self.p.phase_own[lv, i, j])
        xkey = st.inputs[0]
        xoff = self.offset(xkey)
        n, _, h, w = ly.out_shapes[i]
        key = st.writes[0][0]
        off = self.offset(key)
        coef = self.bn_state.get(i) != "seed"          # the first band since its sums
        self.bn_state[i] = "seed"
        beta = ("pg", int(ly.in_vars[i][2])) if coef and i in self.deferred else None
        return _Run._bnseed, (xkey, a - xoff, b - xoff, ("v", int(ly.in_vars[i][1])),
                              np.float32(n * h * w), a, b, key, a - off, b - off,
                              self.first(st, key), coef, beta)

    def bandbwd(self, st):
        i, j, lv, ly = st.op, st.band, st.level, self.ly
        lo, hi = (int(v) for v in self.p.phase_ranges[lv, i, j])
        opdef = OPS[ly.ops[i]]
        specs, cut = self.inputs(st, lo, hi)
        static = []
        for k, sp in enumerate(specs):
            n, c, _, w = ly.in_shapes[i][k] if sp is None else (0, 0, 0, 0)
            static.append((n, c, cut.r1 - cut.r0 + cut.top + cut.bottom, w + 2 * cut.side)
                          if sp is None else None)
        up = (int(ly.s[i]), cut.crop, hi - lo) if ly.kind[i] == L.UPSAMPLE else None
        ykey = ("r", i, j, lv) if opdef.saves_output else None
        want = [k for k, a in enumerate(ly.in_vars[i]) if self.act[a] or _param(self.g, a)]
        targets = []
        writes = iter(st.writes)
        for k in want:
            key = next(writes)[0]
            # a gradient buffer this step allocates and writes once: its rows set (the rest
            # zeroed), not zeroed and added to (a parameter's at its first band, a producer's
            # band gradient, a region input's whole gradient)
            first = self.first(st, key)
            if not self.act[ly.in_vars[i][k]]:
                targets.append((k, key, None, first))
                continue
            off = self.offset(key)
            a, b = cut.r0 - off, cut.r1 - off
            targets.append((k, key, (cut.top, cut.r1 - cut.r0, cut.side, a, b), first))
        if conv1x1_band(ly, i):
            dx = next(((key, crop[3], crop[4], fill) for k, key, crop, fill in targets if k == 0), None)
            dw = next(((key, fill) for k, key, crop, fill in targets if k == 1), None)
            return _Run._bandbwd1x1, (specs, ("bg", i, j, lv), int(ly.s[i]), dx, dw)
        if conv_pm_band(self.p, i, "bwd", cut):
            dx = next(((key, crop[3], crop[4], fill) for k, key, crop, fill in targets if k == 0), None)
            dw = next(((key, fill) for k, key, crop, fill in targets if k == 1), None)
            return _Run._bandbwdpm, (_pm_input(specs, cut), ("bg", i, j, lv), dx, dw)
        if conv_band(self.p, i, "bwd", cut):
            dx = next(((key, crop, fill) for k, key, crop, fill in targets if k == 0), None)
            dw = next(((key, fill) for k, key, crop, fill in targets if k == 1), None)
            return _Run._bandbwdconv, (specs, ("bg", i, j, lv), int(ly.s[i]), dx, dw)
        return _Run._bandbwd, (opdef, specs, static, ("bg", i, j, lv), up, ykey, _band_attrs(ly, i),
                               want, targets)


def _pm_input(specs, cut) -> tuple:
    """``(input key, a, b, side, weight key)`` of a :func:`conv_pm_band` step: rows ``[a, b)``
    of the input's buffer, past its ends by the band's top / bottom padding (which can only
    happen where the buffer ends at the map's edge), and the side padding."""
    (key, r0, r1, _, _), (wkey, *_) = specs
    return key, r0 - cut.top, r1 + cut.bottom, cut.side, wkey


def _clear_outside(d, a: int, b: int) -> None:
    """Zero the rows of band / whole buffer ``d`` outside ``[a, b)``: a step that writes a buffer
    first (allocated there, written once) sets rows ``[a, b)`` instead of adding them to zeros,
    so the rest is all the allocation has to clear (110 MB of zero fills a resnet50 width-64
    128x128 row step before, most of them rows the step then wrote)."""
    if a > 0:
        d[:, :, :a] = 0
    if b < d.shape[2]:
        d[:, :, b:] = 0


def _param(g, v) -> bool:
    return g.var_names[v].startswith("/")


def run(g, plan, *, backend=None, seed: int = 0, allocator: str = "pool", meter: bool = True) -> RowsResult:
    """Execute row plan ``plan`` on zoo graph ``g``; the result carries the tracked and the
    measured peak (``meter=False``: no independent meter, ``measured_peak_bytes`` None -- for
    timing without tracemalloc's overhead)."""
    be = backend if isinstance(backend, backend_mod.Backend) else backend_mod.get(backend)
    if not executor.has_real_ops(g):
        raise HGraphError("row execution needs a zoo graph (operator arguments in the details)")
    alloc = TrackedAllocator(be, allocator, alignment=be.costs.alignment)
    executor._warm(be.xp)
    _program(g, plan, alloc.alignment)   # compiled (once per plan) before the meters: plan data
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
