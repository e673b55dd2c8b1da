"""A row plan's whole step, predicted while planning: what a whole-step budget of a row plan holds.

:func:`predict_rows` is :func:`planner.whole_step.predict` for a row plan
(:class:`planner.rows.plan.RowPlan`): its walk's buffers through the pool's free list
(:class:`planner.pool.BestFit`), the leaves, and every step's temporaries as the row executor
(:mod:`planner.execute.rows_exec`) runs it on NumPy with the ``pool`` allocator: padded band
inputs, a band kernel's result before it is copied into the band buffer, the whole-op kernels'
(:func:`planner.ops.kernel_temp_bytes`) and the band kernels' (:mod:`planner.band_kernels`)
own; the same parts as a schedule's step (:data:`planner.whole_step.PARTS`).

Why here: :func:`planner.rows_api.plan_rows` budgets row plans with it, and planning never
imports the executor (``tests/test_layering.py``); the executor's decisions it prices are
functions of the plan (:mod:`planner.rows.band_steps`), shared with the executor.

>>> from planner.execute import export, zoo
>>> from planner.rows import plan as rows_plan
>>> g = export.to_cg(zoo.build("vgg16", width=4, depth=1, image=32))
>>> step = predict_rows(g, rows_plan.plan(g, 4, "share"))
>>> sum(step.breakdown[part] for part in PARTS) == step.step_peak_bytes
True
"""

from __future__ import annotations

import functools

import numpy as np

from planner import band_kernels
from planner.backend_costs import NUMPY, BackendCosts
from planner.ops import CONV_WORKSPACE_BYTES, OPS, _bufs, kernel_temp_bytes
from planner.rows import band_steps as bs
from planner.rows import layers as L
from planner.walk import PoolWalker
from planner.whole_step import PARTS, StepPeak, leaf_bytes  # noqa: F401  (PARTS: the example's)

__all__ = ["predict_rows"]


def _pad_shape(shape, cut) -> tuple:
    n, c, _, w = shape
    return (n, c, cut.r1 - cut.r0 + cut.top + cut.bottom, w + 2 * cut.side)


def _band_args(run_ly, g, st, i, lo, hi):
    """(band input shapes as the kernel sees them, bytes of the padded copies made, cut) of
    region op ``i`` computing output rows ``[lo, hi)`` (as ``rows_exec._Run._band_inputs``)."""
    cut = bs.cut(run_ly, i, lo, hi)
    shapes, copies = [], 0
    for k, a in enumerate(run_ly.in_vars[i]):
        whole = tuple(run_ly.in_shapes[i][k])
        if g.var_names[a].startswith("/"):
            shapes.append(whole)
            continue
        key = st.inputs.get(k) if g.is_activation[a] else ("v", a)
        shape = _pad_shape(whole, cut)
        if key is not None and (cut.top or cut.bottom or cut.side):
            copies += int(np.prod(shape, dtype=np.int64)) * np.dtype(run_ly.var_dtype[a]).itemsize
        shapes.append(shape)
    return shapes, copies, cut


def _conv1x1_temp(g, p, st, i, phase, shapes, cut, want, e) -> int:
    """A 1x1 convolution's band kernel (``band_kernels.conv1x1_forward`` / ``_backward``), with
    what ``rows_exec._Compiler.bandbwd`` decides: whether the step fills the weight gradient and
    the input gradient's rows, and whether the band input and those rows are whole buffers."""
    ly = p.layers
    s = int(ly.s[i])
    if phase == "forward":               # into the band buffer: all of it without tail rows
        lo, hi = (int(v) for v in p.phase_ranges[st.level, i, st.band])
        out_whole = int(p.phase_fresh[st.level, i, st.band]) == lo and \
            p.walk.shapes[st.writes[0][0]][0][2] == hi - lo
        return band_kernels.conv1x1_temp_bytes(phase, shapes[0], shapes[1], s, e,
                                               out_whole=out_whole)
    keys = [key for key, _ in st.writes]
    first = functools.partial(bs.first_write, st)      # allocated here, written once: set

    def whole(key):                      # the band's input rows are all of buffer ``key``
        rows = p.walk.shapes[key][0][2] if key in p.walk.shapes else ly.in_shapes[i][0][2]
        return cut.r0 == bs.buffer_offset(p, key) and cut.r1 - cut.r0 == rows

    a = int(ly.in_vars[i][0])
    xkey = st.inputs.get(0) if g.is_activation[a] else ("v", a)      # a model input: whole
    dx_key = next(iter(keys)) if 0 in want else None
    return band_kernels.conv1x1_temp_bytes(
        phase, shapes[0], shapes[1], s, e, want=want, dw_fill=first(("pg", int(ly.in_vars[i][1]))),
        dx_fill=dx_key is not None and first(dx_key), x_whole=xkey is not None and whole(xkey),
        dx_whole=dx_key is not None and whole(dx_key))


def _rows_temp(g, p, st, whole_sums=frozenset()) -> int:
    """Kernel temporaries of one row step (``planner.execute.rows_exec``'s step kinds);
    ``whole_sums``: the bnseed steps (by id) that take a batch norm's deferred sum over its whole
    output gradient (``bs.deferred_sums``)."""
    ly, i = p.layers, st.op
    name = ly.ops[i]
    e = np.dtype(ly.dtypes[i]).itemsize
    out = tuple(ly.out_shapes[i])
    ins = [tuple(s) for s in ly.in_shapes[i]]
    want = [k for k, a in enumerate(ly.in_vars[i]) if g.is_activation[a] or g.var_names[a].startswith("/")]
    nb = int(np.prod(out, dtype=np.int64)) * e
    if st.kind == "fwd":                 # a kernel that fills its output writes the buffer
        into = (-1,) if OPS[name].fills_out else ()
        return kernel_temp_bytes(name, "forward", ins, out, ly.attrs[i], e, into=into)
    if st.kind == "bwd":
        ones = nb if ("g", int(ly.out_var[i])) not in st.reads else 0
        keys = {k: ("g", a) if g.is_activation[a] else ("pg", a)
                for k, a in enumerate(ly.in_vars[i]) if k in want}
        into = bs.first_writes(OPS[name], keys, st)
        return ones + kernel_temp_bytes(name, "backward", ins, out, ly.attrs[i], e, want=want,
                                        into=into)
    if st.kind in ("band", "bandbwd"):
        lv, j = st.level, st.band
        lo, hi = (int(v) for v in p.phase_ranges[lv, i, j])
        if st.kind == "band":
            lo = max(lo, int(p.phase_fresh[lv, i, j]))
            if lo >= hi:
                return 0
        shapes, copies, cut = _band_args(ly, g, st, i, lo, hi)
        attrs = bs.band_attrs(ly, i)
        band_out, _ = OPS[name].infer(shapes, [ly.dtypes[i]] * len(shapes), attrs)
        phase = "forward" if st.kind == "band" else "backward"
        if bs.conv1x1_band(ly, i):                     # planner.band_kernels
            return copies + _conv1x1_temp(g, p, st, i, phase, shapes, cut, want, e)
        if bs.conv_pm_band(p, i, st.phase if st.kind == "band" else "bwd", cut):
            # the band's rows read in place
            return band_kernels.conv_pm_temp_bytes(phase, shapes[0], shapes[1], e,
                                                   (cut.top, cut.bottom, cut.side), want)
        if bs.conv_band(p, i, st.phase if st.kind == "band" else "bwd", cut):
        
            return copies + band_kernels.conv_temp_bytes(
                phase, shapes[0], shapes[1], int(ly.s[i]), e, want,
                dw_fill=bs.first_write(st, ("pg", int(ly.in_vars[i][1]))))
        if st.kind == "band":            # a kernel writing the band buffer holds no result
            direct = bs.writes_band_directly(p, st)
            if ly.norm[i]:
                return copies + _bufs(1, band_out, e)
            return copies + kernel_temp_bytes(name, "forward", shapes, band_out, attrs, e,
                                              into=(-1,) if direct else ()) + _bufs(1, band_out, e)
        full = 0
        if ly.kind[i] == L.UPSAMPLE:
            full = int(np.prod(shapes[0][:2], dtype=np.int64)) * shapes[0][2] * shapes[0][3] * \
                int(ly.s[i]) ** 2 * e
        return copies + full + kernel_temp_bytes(name, "backward", shapes, band_out, attrs, e,
                                                 want=want) + _bufs(1, shapes[0], e)
    if st.kind in ("bnsink", "bnseed"):
        lv, j = st.level, st.band
        rng = p.phase_ranges if st.kind == "bnsink" else p.phase_own
        lo, hi = (int(v) for v in rng[lv, i, j])
        n, c, _, w = out
        band = n * c * max(0, hi - lo) * w * e
        # bnsink: the normalised band; bnseed: that and its result, unless it writes the result
        # straight into the rows of a buffer it writes first
        held = 1 if st.kind == "bnsink" or bs.first_write(st, st.writes[0][0]) else 2
        # the whole gradient's sum: its ones and partial sums (sums of planner.ops)
        whole = (out[2] * w + n * c + n + c) * e if id(st) in whole_sums else 0
        return held * band + 16 * c * e + whole + _bufs(2, (n, c, hi - lo, w), e)
    if st.kind in ("seed", "store", "tail"):
        n, c, _, w = out
        return _bufs(3, (n, c, max(1, int(p.ranges[i, max(st.band, 0), 1] - p.ranges[i, max(st.band, 0), 0])), w), e)
    return 0


def predict_rows(g, p, *, costs: BackendCosts = NUMPY) -> StepPeak:
    """The whole-step peak of row plan ``p`` (:class:`planner.rows.plan.RowPlan`) as
    :func:`planner.execute.rows_exec.run` runs it on NumPy with the ``pool`` allocator: its walk's
    buffers through the pool's free list, the leaves, every step's temporaries (padded band
    inputs, a band kernel's result before it is copied into the band buffer, the kernels' own)."""
    w = p.walk
    params, inputs = leaf_bytes(g)
    deferred, whole_sums = bs.deferred_sums(w.steps), set()
    for st in w.steps:                   # each deferred batch norm's first bnseed
        if st.kind == "bnseed" and st.op in deferred:
            whole_sums.add(id(st))
            deferred.discard(st.op)
    return _RowsHeld(g, p, params, inputs, costs, whole_sums).walk(w.steps)


def _part(key) -> int:
    """The part of row buffer ``key``: 0 values, 1 gradients, 2 parameters' gradients."""
    return 2 if key[0] == "pg" else 1 if key[0] in ("g", "bg", "gw", "s") else 0


class _RowsHeld(PoolWalker):
    """:func:`predict_rows`'s visitor of a row plan's walk (:mod:`planner.walk`): the pool's
    bookkeeping, and at each step the kernel's temporaries; the peak's parts."""

    def __init__(self, g, p, params: int, inputs: int, costs: BackendCosts, whole_sums):
        super().__init__(p.walk.nbytes.__getitem__, _part, costs)
        self.g, self.p, self.whole_sums = g, p, whole_sums
        self.params, self.inputs = params, inputs
        self.curve = np.zeros(len(p.walk.steps), np.int64)
        self.best, self.at = -1, None

    def visit(self, s: int, st) -> None:
        temp = _rows_temp(self.g, self.p, st, self.whole_sums)
        self.computes += st.kind not in ("tail", "store", "seed")
        objects = self.objects()
        total = self.params + self.inputs + self.reserved + temp + objects
        self.curve[s] = total
        if total > self.best:
            self.best = total
            v, gr, pg = self.live_by
            self.at = {"parameters": self.params, "inputs": self.inputs, "activations": v,
                       "gradients": gr, "param_gradients": pg,
                       "allocator": self.reserved - (v + gr + pg), "temporaries": temp,
                       "interpreter": objects,
                       "op": f"{self.p.layers.ops[st.op]} {st.kind} (op {st.op}"
                             + (f", band {st.band})" if st.band >= 0 else ")"), "step": s + 1}

    def finish(self, n: int) -> StepPeak:
        return StepPeak(int(max(self.best, 0)), self.at or {}, CONV_WORKSPACE_BYTES, self.curve)
