"""The whole step's peak of what the executor runs beyond a schedule: row plans, and executions.

The prediction of a schedule's whole step, the choice of a plan whose step fits a budget and
:func:`planner.plan`'s whole-step hook are the planner's (:mod:`planner.whole_step`: planning
never imports the executor); they are re-exported here under their old names. What stays needs
the executor's own decisions:

* :func:`predict_rows`: the whole-step peak of a row plan's walk (:mod:`planner.execute.rows_exec`'s
  steps: padded band inputs, band kernels' results before they are copied into band buffers,
  the band kernels' temporaries of :mod:`planner.execute.band_kernels`), through the same pool
  free list and the same parts (:data:`planner.whole_step.PARTS`);
* :func:`evaluate`: an execution's report with the whole step beside it;
* :func:`metered_ops`: the op table with every kernel metered, to check the temporaries' model.

>>> from planner.execute import export, zoo, executor
>>> from planner.rows import plan as rows_plan
>>> g = export.to_cg(zoo.build("vgg16", width=4, depth=1, image=32))
>>> rows = predict_rows(g, rows_plan.plan(g, 4, "share"))
>>> rows.step_peak_bytes < predict(g, executor.plain_schedule(g)).step_peak_bytes
True
>>> sum(rows.breakdown[part] for part in PARTS) == rows.step_peak_bytes
True
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from planner.execute import executor
from planner.ops import CONV_WORKSPACE_BYTES, OPS, kernel_temp_bytes
from planner.pool import BestFit
from planner.whole_step import (ACTIVATIONS, LADDER, MIN_WORKSPACE_BYTES,  # noqa: F401
                                OBJECT_BYTES, PARTS, PYTHON_BYTES, STEP_BYTES, WHOLE_STEP, Fit,
                                Pricer, StepPeak, applies, candidates, fit, leaf_bytes, plan,
                                predict, predict_caps, smallest_step, workspaces)


def evaluate(g, schedule, *, workspace: int | None = None, **kwargs) -> dict:
    """:func:`planner.execute.executor.evaluate` with the whole step beside it: for a graph with
    op arguments whose first allocator is the pool on NumPy, ``accounting`` "whole-step",
    ``step_peak_bytes`` and ``step_peak_breakdown`` (:func:`predict`), ``workspace_bytes``,
    ``measured_over_step_peak`` and ``step_within_prediction`` (tracemalloc's whole step at most
    the prediction); otherwise ``accounting`` "activations" (the reference's)."""
    report = executor.evaluate(g, schedule, workspace=workspace, **kwargs)
    if not (applies(g) and report["allocator"] == "pool" and report["backend"] == "numpy"):
        report["accounting"] = ACTIVATIONS
        return report
    pred = predict(g, schedule, recycle=report["recycle"], workspace=workspace)
    report.update(pred.report())
    m = report.get("measured_step_peak_bytes")
    report["measured_over_step_peak"] = None if m is None else round(m / max(pred.step_peak_bytes, 1), 4)
    report["step_within_prediction"] = m is not None and m <= pred.step_peak_bytes
    return report


# ---------------------------------------------------------------- row plans
def _pad_shape(shape, cut) -> tuple:
    n, c, _, w = shape
    return (n, c, cut.r1 - cut.r0 + cut.top + cut.bottom, w + 2 * cut.side)


def _band_args(run_ly, g, st, i, lo, hi):
    """(band input shapes as the kernel sees them, bytes of the padded copies made, cut) of
    region op ``i`` computing output rows ``[lo, hi)`` (as ``rows_exec._Run._band_inputs``)."""
    from planner.execute import rows_exec

    cut = rows_exec._cut(run_ly, i, lo, hi)
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
    from planner.execute import band_kernels, rows_exec

    ly = p.layers
    s = int(ly.s[i])
    if phase == "forward":               # into the band buffer: all of it without tail rows
        lo, hi = (int(v) for v in p.phase_ranges[st.level, i, st.band])
        out_whole = int(p.phase_fresh[st.level, i, st.band]) == lo and \
            p.walk.shapes[st.writes[0][0]][0][2] == hi - lo
        return band_kernels.conv1x1_temp_bytes(phase, shapes[0], shapes[1], s, e,
                                               out_whole=out_whole)
    keys = [key for key, _ in st.writes]
    first = functools.partial(rows_exec._first, st)      # allocated here, written once: set

    def whole(key):                      # the band's input rows are all of buffer ``key``
        rows = p.walk.shapes[key][0][2] if key in p.walk.shapes else ly.in_shapes[i][0][2]
        return cut.r0 == rows_exec.buffer_offset(p, key) and cut.r1 - cut.r0 == rows

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
    output gradient (``rows_exec._deferred_sums``)."""
    from planner.execute import rows_exec
    from planner.ops import _bufs

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
        into = rows_exec._first_writes(OPS[name], keys, st)
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
        attrs = rows_exec._band_attrs(ly, i)
        band_out, _ = OPS[name].infer(shapes, [ly.dtypes[i]] * len(shapes), attrs)
        phase = "forward" if st.kind == "band" else "backward"
        if rows_exec.conv1x1_band(ly, i):                     # planner.execute.band_kernels
            return copies + _conv1x1_temp(g, p, st, i, phase, shapes, cut, want, e)
        if rows_exec.conv_pm_band(p, i, st.phase if st.kind == "band" else "bwd", cut):
            from planner.execute import band_kernels      # the band's rows read in place

            return band_kernels.conv_pm_temp_bytes(phase, shapes[0], shapes[1], e,
                                                   (cut.top, cut.bottom, cut.side), want)
        if rows_exec.conv_band(p, i, st.phase if st.kind == "band" else "bwd", cut):
            from planner.execute import band_kernels

            return copies + band_kernels.conv_temp_bytes(
                phase, shapes[0], shapes[1], int(ly.s[i]), e, want,
                dw_fill=rows_exec._first(st, ("pg", int(ly.in_vars[i][1]))))
        if st.kind == "band":            # a kernel writing the band buffer holds no result
            direct = rows_exec.writes_band_directly(p, st)
            if ly.norm[i]:
                return copies + _bufs(1, band_out, e)
            return copies + kernel_temp_bytes(name, "forward", shapes, band_out, attrs, e,
                                              into=(-1,) if direct else ()) + _bufs(1, band_out, e)
        full = 0
        if ly.kind[i] == rows_exec.L.UPSAMPLE:
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
        held = 1 if st.kind == "bnsink" or rows_exec._first(st, st.writes[0][0]) else 2
        # the whole gradient's sum: its ones and partial sums (sums of planner.ops)
        whole = (out[2] * w + n * c + n + c) * e if id(st) in whole_sums else 0
        return held * band + 16 * c * e + whole + _bufs(2, (n, c, hi - lo, w), e)
    if st.kind in ("seed", "store", "tail"):
        n, c, _, w = out
        return _bufs(3, (n, c, max(1, int(p.ranges[i, max(st.band, 0), 1] - p.ranges[i, max(st.band, 0), 0])), w), e)
    return 0


def predict_rows(g, p, *, alignment: int = 64) -> StepPeak:
    """The whole-step peak of row plan ``p`` (:class:`planner.rows.plan.RowPlan`) as
    :func:`planner.execute.rows_exec.run` runs it on NumPy with the ``pool`` allocator: its walk's
    buffers through the pool's free list, the leaves, every step's temporaries (padded band
    inputs, a band kernel's result before it is copied into the band buffer, the kernels' own)."""
    w = p.walk
    params, inputs = leaf_bytes(g)
    pool = BestFit(alignment)
    from planner.execute import rows_exec

    deferred, whole_sums = rows_exec._deferred_sums(w.steps), set()
    for st in w.steps:                   # each deferred batch norm's first bnseed
        if st.kind == "bnseed" and st.op in deferred:
            whole_sums.add(id(st))
            deferred.discard(st.op)
    blocks = {}
    reserved = nblocks = computes = 0
    parts = {"v": 0, "g": 0, "pg": 0}
    part_of = {}
    curve = np.zeros(len(w.steps), np.int64)
    best, at = -1, None
    for s, st in enumerate(w.steps):
        for key in st.allocs:
            size = pool.take(w.nbytes[key])
            if size is None:
                size = pool.block_size(w.nbytes[key])
                reserved += size
                nblocks += 1
            blocks[key] = size
            part = "pg" if key[0] == "pg" else "g" if key[0] in ("g", "bg", "gw", "s") else "v"
            part_of[key] = part
            parts[part] += w.nbytes[key]
        temp = _rows_temp(g, p, st, whole_sums)
        computes += st.kind not in ("tail", "store", "seed")
        live = sum(parts.values())
        objects = PYTHON_BYTES + OBJECT_BYTES * (nblocks + len(blocks)) + STEP_BYTES * computes
        total = params + inputs + reserved + temp + objects
        curve[s] = total
        if total > best:
            best = total
            at = {"parameters": params, "inputs": inputs, "activations": parts["v"],
                  "gradients": parts["g"], "param_gradients": parts["pg"],
                  "allocator": reserved - live, "temporaries": temp, "interpreter": objects,
                  "op": f"{p.layers.ops[st.op]} {st.kind} (op {st.op}"
                        + (f", band {st.band})" if st.band >= 0 else ")"), "step": s + 1}
        for key in st.frees:
            pool.give(blocks.pop(key))
            parts[part_of.pop(key)] -= w.nbytes[key]
    return StepPeak(int(max(best, 0)), at or {}, CONV_WORKSPACE_BYTES, curve)


def metered_ops(rec: list) -> dict:
    """The op table (:data:`planner.ops.OPS`) with every kernel metered by tracemalloc, to
    check :func:`planner.ops.kernel_temp_bytes` against what each call really allocates: per
    call, ``(op, phase, input shapes, output shape, attrs, itemsize, want, into, bytes)`` goes
    to ``rec``, ``bytes`` being tracemalloc's peak during the call above what was traced when it
    started. tracemalloc must be tracing; run a step with the table in place of
    ``executor.OPS``."""
    import tracemalloc

    table = dict(OPS)
    for k, od in list(table.items()):
        def fwd(xp, xs, a, out=None, _f=od.forward, _k=k):
            c0 = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            y = _f(xp, xs, a, out=out) if out is not None else _f(xp, xs, a)
            rec.append((_k, "forward", [x.shape for x in xs], y.shape, a, y.dtype.itemsize, (),
                        (-1,) if out is not None else (), tracemalloc.get_traced_memory()[1] - c0))
            return y

        def bwd(xp, gy, saved, y, a, shapes, want, out=None, _f=od.backward, _k=k):
            c0 = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            got = _f(xp, gy, saved, y, a, shapes, want, out=out) if out is not None else \
                _f(xp, gy, saved, y, a, shapes, want)
            rec.append((_k, "backward", shapes, gy.shape, a, gy.dtype.itemsize, tuple(want),
                        tuple(out or ()), tracemalloc.get_traced_memory()[1] - c0))
            return got

        table[k] = dataclasses.replace(od, forward=fwd, backward=bwd)
    return table
