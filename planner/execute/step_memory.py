"""The whole step's peak, predicted: what a budget for a graph with op arguments is checked against.

A plan's ``peak_bytes`` counts activations and gradients as the reference does. The step the
NumPy executor (:mod:`planner.execute.executor`: lazy allocation, the ``pool`` allocator, freed
after last use) really runs holds more, and a meter outside the plan sees all of it:

* **parameters and inputs** (``parameters``, ``inputs``): built before the step, held throughout;
* the plan's **buffers**, split into ``activations``, ``gradients`` (of activations) and
  ``param_gradients`` (parameters' and inputs': the step's results, kept to its end);
* the **allocator** (``allocator``): the pool rounds each block up to its alignment and keeps
  freed blocks for reuse, a request taking the smallest free block large enough, whole; its
  reserved bytes are replayed here through the allocator's own free list
  (:class:`planner.execute.allocator.BestFit`), request for request;
* each **kernel's temporaries** (``temporaries``): im2col tiles (under the convolution workspace
  cap, ``workspace_bytes``), padded slabs, masks, statistics, NumPy's ufunc buffers, and a
  gradient a kernel returns in an array of its own before it is copied or added into the plan's
  buffer (the transient second copy while a gradient accumulates):
  :func:`planner.ops.kernel_temp_bytes`, next to the kernels;
* Python's own objects (``interpreter``): arrays' headers and table entries per buffer
  (:data:`OBJECT_BYTES`), what a kernel call creates (:data:`PYTHON_BYTES`) and the free
  lists' growth over the steps (:data:`STEP_BYTES`).

:func:`predict` replays a schedule's buffer timeline (:func:`planner.execute.executor.timeline`)
and returns the peak over the steps of the sum, the parts at that moment and the op at the peak.
:func:`predict_rows` does the same for a row plan's walk (:mod:`planner.execute.rows_exec`'s
steps: padded band inputs, band kernels' results before they are copied into band buffers).
:func:`fit` chooses, among candidates fixed by the graph (a ladder of activation budgets times the
convolution workspace caps), the plan whose predicted whole step fits a budget, or names the
smallest reachable one; :func:`plan` is :func:`planner.plan`'s hook for graphs with op
arguments; :func:`evaluate` adds the whole step to an execution's report.

>>> from planner.execute import export, zoo, executor
>>> g = export.to_cg(zoo.build("mlp"))
>>> s = executor.plain_schedule(g)
>>> p = predict(g, s)
>>> r = executor.run(g, s)
>>> 0.9 * p.step_peak_bytes <= r.measured_step_peak_bytes <= p.step_peak_bytes
True
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from hgraph.common.errors import HGraphError, InfeasibleError
from hgraph.common.formatting import format_bytes
from planner.budget import Budget
from planner.execute import executor
from planner.execute.allocator import BestFit
from planner.ops import CONV_WORKSPACE_BYTES, OPS, kernel_temp_bytes

#: Bytes of Python objects (arrays' headers, views, lists, a generator's frame) a step's kernel
#: and the executor's loop hold at once beside the arrays' data, bounded from above (measured
#: under tracemalloc on the zoo: at most ~5 KiB per kernel call).
PYTHON_BYTES = 32 << 10

#: Bytes of Python objects per pool block and per live buffer (the block's array, the view the
#: allocator hands out, the typed array the executor keeps, their table entries): measured under
#: tracemalloc, ~350-420 B per buffer of a zoo step.
OBJECT_BYTES = 448

#: Bytes the interpreter's free lists (tuples, lists, dicts, frames a kernel call creates and
#: frees: kept for reuse, still counted by tracemalloc) may grow by per compute step, bounded from
#: above (measured: ~90 B a step over a 288-step recomputing resnet50 schedule).
STEP_BYTES = 128

#: Whole-step accounting (graphs with op arguments) and the reference's (cg.txt dumps).
WHOLE_STEP, ACTIVATIONS = "whole-step", "activations"

#: The smallest convolution workspace cap :func:`fit` tries (a tile is at least one output row).
MIN_WORKSPACE_BYTES = 64 << 10

#: Parts of :attr:`StepPeak.breakdown`, in report order.
PARTS = ("parameters", "inputs", "activations", "gradients", "param_gradients", "allocator",
         "temporaries", "interpreter")


@dataclasses.dataclass
class StepPeak:
    step_peak_bytes: int
    breakdown: dict            # PARTS -> bytes at the peak moment, and "op": the op running then
    workspace_bytes: int       # the convolution workspace cap the kernels run under
    curve: np.ndarray          # int64 [steps]: predicted bytes during each schedule step

    def report(self) -> dict:
        """The report's fields (``accounting``, ``step_peak_bytes``, ``step_peak_breakdown``,
        ``workspace_bytes``)."""
        return {"accounting": WHOLE_STEP, "step_peak_bytes": int(self.step_peak_bytes),
                "step_peak_breakdown": dict(self.breakdown),
                "workspace_bytes": int(self.workspace_bytes)}


def applies(g) -> bool:
    """Whether ``g`` carries op arguments (zoo, traced, torch exports): whole-step accounting."""
    return executor.has_real_ops(g)


def leaf_bytes(g) -> tuple[int, int]:
    """(parameters, inputs): bytes of the leaves :func:`planner.execute.executor.leaves` builds
    (parameters are named by path)."""
    seen, params, inputs = set(), 0, 0
    for f in g.forward:
        d = executor._details(f)
        for pos, (a, _) in enumerate(f.inputs):
            if g.is_activation[a] or a in seen:
                continue
            seen.add(a)
            nbytes = int(np.prod(d["in_shapes"][pos], dtype=np.int64)) * np.dtype(d["in_dtypes"][pos]).itemsize
            if g.var_names[a].startswith("/"):
                params += nbytes
            else:
                inputs += nbytes
    return params, inputs


def _step_temp(g, step, nf, workspace) -> tuple[int, str]:
    """(kernel temporaries, the op's name) of one timeline step of the executor."""
    op = step.op
    if op.kind != "compute":
        return 0, "forget"
    f = op.index
    i = f if f < nf else f - nf
    d = executor._details(g.forward[i])
    name, opdef = d["op"], OPS[d["op"]]
    attrs = executor.with_workspace(d["attrs"], name, workspace)
    e = np.dtype(d["out_dtype"]).itemsize
    if f < nf:
        into = (-1,) if opdef.fills_out else ()
        return kernel_temp_bytes(name, "forward", d["in_shapes"], d["out_shape"], attrs, e,
                                 into=into), f"{name} forward (function {i})"
    want = [j for j, _, _ in step.writes]
    into = [j for j, _, acc in step.writes if not acc] if opdef.fills_grads else []
    ones = 0 if step.grad_in is not None else int(np.prod(d["out_shape"], dtype=np.int64)) * e
    return ones + kernel_temp_bytes(name, "backward", d["in_shapes"], d["out_shape"], attrs, e,
                                    want=want, into=into), \
        f"{name} backward (function {nf + i})"


def predict(g, schedule, *, recycle: bool = True, alignment: int = 64,
            workspace: int | None = None) -> StepPeak:
    """The whole-step peak of ``schedule`` on ``g`` as :func:`planner.execute.executor.run`
    runs it on NumPy with the ``pool`` allocator (``recycle``: freed after last use;
    ``workspace``: the convolution workspace cap, None: :data:`planner.ops.CONV_WORKSPACE_BYTES`)."""
    if not applies(g):
        raise HGraphError("whole-step prediction needs a graph with op arguments (zoo, traced)")
    tl = executor.timeline(g, schedule, recycle=recycle)
    nf = len(g.forward)
    params, inputs = leaf_bytes(g)
    is_act = g.is_activation
    kind = np.where(tl.grad, np.where(is_act[tl.var], 1, 2), 0) if tl.var.size else \
        np.zeros(0, np.int64)        # 0 activation value, 1 activation gradient, 2 param gradient
    pool = BestFit(alignment)
    blocks = {}
    reserved = live = nblocks = computes = 0
    live_by = np.zeros(3, np.int64)
    n = len(tl.steps)
    curve = np.zeros(n, np.int64)
    best, at = -1, None
    for s, step in enumerate(tl.steps):
        for b in step.frees_before:
            pool.give(blocks.pop(b))
            live_by[kind[b]] -= tl.nbytes[b]
        for _, b, acc in step.writes:
            if acc:
                continue
            size = pool.take(int(tl.nbytes[b]))
            if size is None:
                size = pool.block_size(int(tl.nbytes[b]))
                reserved += size
                nblocks += 1
            blocks[b] = size
            live_by[kind[b]] += tl.nbytes[b]
        temp, name = _step_temp(g, step, nf, workspace)
        live = int(live_by.sum())
        computes += step.op.kind == "compute"
        objects = PYTHON_BYTES + OBJECT_BYTES * (nblocks + len(blocks)) + STEP_BYTES * computes
        total = params + inputs + reserved + temp + objects
        curve[s] = total
        if total > best:
            best = total
            at = {"parameters": params, "inputs": inputs, "activations": int(live_by[0]),
                  "gradients": int(live_by[1]), "param_gradients": int(live_by[2]),
                  "allocator": reserved - live, "temporaries": temp,
                  "interpreter": objects, "op": name, "step": s + 1}
        for b in step.frees_after:
            pool.give(blocks.pop(b))
            live_by[kind[b]] -= tl.nbytes[b]
    cap = CONV_WORKSPACE_BYTES if workspace is None else int(workspace)
    return StepPeak(int(max(best, 0)), at or {}, cap, curve)


# ---------------------------------------------------------------- choosing a plan that fits
def workspaces(top: int = CONV_WORKSPACE_BYTES):
    """The convolution workspace caps :func:`fit` tries, largest (fastest) first."""
    cap = int(top)
    while cap >= MIN_WORKSPACE_BYTES:
        yield cap
        cap //= 2


def smallest_step(g, schedule) -> StepPeak:
    """The lowest whole-step peak of ``schedule`` over the workspace caps."""
    return min((predict(g, schedule, workspace=cap) for cap in workspaces()),
               key=lambda p: p.step_peak_bytes)


#: Activation budgets :func:`fit` plans at between the activations' smallest plan and keeping
#: everything (evenly spaced; each distinct schedule is a candidate).
LADDER = 8


def candidates(plan_at, g) -> list:
    """[(activation budget, plan, {workspace cap: StepPeak})]: the plans :func:`fit` chooses
    from, fixed by the graph alone (not by the budget asked): keeping everything, the
    activations' smallest plan and :data:`LADDER` plans between, each with every workspace cap
    (a cap above a step's largest im2col tile changes nothing: kept once)."""
    base = plan_at("100%")
    lowest, low_arg = _lowest_plan(plan_at)
    top = int(base.peak_bytes)
    bottom = int(lowest.budget_bytes if low_arg else lowest.peak_bytes)
    args = ["100%", low_arg] + sorted({int(bottom + (top - bottom) * k / (LADDER + 1))
                                       for k in range(1, LADDER + 1)}, reverse=True)
    out, seen = [], set()
    for arg in args:
        p = base if arg == "100%" else lowest if arg == low_arg else plan_at(arg)
        text = p.schedule.dumps()
        if text in seen:
            continue
        seen.add(text)
        steps, last = {}, None
        for cap in workspaces():
            got = predict(g, p.schedule, workspace=cap)
            if last is None or got.step_peak_bytes != last:
                steps[cap] = got
            last = got.step_peak_bytes
        out.append((arg, p, steps))
    return out


def fit(plan_at, g, budget, *, strategy: str = "time") -> "Fit":
    """The plan whose predicted whole step fits ``budget`` (a :class:`Fit`).

    ``plan_at(activation_budget)`` plans ``g``'s activations (:func:`planner.plan` with the
    reference accounting) at a budget in bytes or text; ``budget``: bytes or text as
    ``--budget`` takes it, a percentage of the no-recomputation *step*. Among
    :func:`candidates` (plan, workspace cap) whose predicted step fits, time-centric takes the
    least recomputation, then the largest cap (fastest kernels), then the lowest step;
    memory-centric the lowest step first. The candidates do not depend on the budget, so a
    lower budget never gets a higher predicted step (the choice is a minimum over a shrinking
    set). None fits: :class:`hgraph.common.errors.InfeasibleError` naming the lowest candidate
    step, the smallest reachable budget.
    """
    cands = candidates(plan_at, g)
    base_step = cands[0][2][max(cands[0][2])]
    b = budget if isinstance(budget, Budget) else Budget.parse(budget)
    budget_bytes = b.resolve(base_step.step_peak_bytes)
    rows = []
    for n, (arg, p, steps) in enumerate(cands):
        for cap, st in steps.items():
            rows.append(((p.recompute_cost, -cap, st.step_peak_bytes, n) if strategy == "time"
                         else (st.step_peak_bytes, p.recompute_cost, -cap, n), arg, p, st))
    fits = [r for r in rows if r[3].step_peak_bytes <= budget_bytes]
    if fits:
        _, arg, p, st = min(fits, key=lambda r: r[0])
        return Fit(arg, p, st, budget_bytes, base_step)
    smallest = min(r[3].step_peak_bytes for r in rows)
    err = InfeasibleError(
        f"budget {budget_bytes:,} bytes ({format_bytes(budget_bytes)}) is infeasible for the whole "
        f"step on {g.name}; the smallest reachable budget is {smallest:,} bytes "
        f"({format_bytes(smallest)}, {100 * smallest / max(1, base_step.step_peak_bytes):.1f}% of "
        f"the no-recomputation step: parameters, gradients, kernel temporaries included)")
    err.min_budget_bytes = smallest
    raise err


def _lowest_plan(plan_at):
    """(the activations' plan at their smallest feasible budget, that budget)."""
    try:
        return plan_at(0), 0
    except InfeasibleError as err:
        return plan_at(int(err.min_budget_bytes)), int(err.min_budget_bytes)


@dataclasses.dataclass
class Fit:
    """What :func:`fit` chose: the activation budget it planned at, the plan, its step, the
    whole-step budget in bytes and the no-recomputation step."""

    activation_budget: object
    plan: object
    step: StepPeak
    budget_bytes: int
    baseline: StepPeak


def plan(plan_fn, g, args: dict):
    """:func:`planner.plan` under whole-step accounting (its hook for graphs with op arguments):
    ``plan_fn(**overrides)`` plans the activations with ``args`` (the call's arguments) but
    ``overrides``. The budget is the whole step's (:func:`fit`); Chen's chain ignores it, as
    with activations, and reports its step. The report gains ``accounting`` ("whole-step"),
    ``step_peak_bytes``, ``step_peak_breakdown``, ``workspace_bytes`` (the convolution
    workspace cap the plan runs under), ``activation_budget_bytes`` (what the activations
    were planned at) and ``step_baseline_peak_bytes`` (the no-recomputation step)."""
    import time

    t0 = time.perf_counter()
    certify = args["certify"]
    if args["solver"] == "chen":
        p = plan_fn()
        base = predict(g, plan_fn(solver="approx", budget="100%", certify="off").schedule)
        b = args["budget"] if isinstance(args["budget"], Budget) else Budget.parse(args["budget"])
        chosen = Fit(p.budget_bytes, p, predict(g, p.schedule), b.resolve(base.step_peak_bytes),
                     base)
    else:
        chosen = fit(lambda a: plan_fn(budget=a, certify="off"), g, args["budget"],
                     strategy=args["strategy"])
        if certify != "off":
            chosen.plan = plan_fn(budget=chosen.activation_budget)
    p = chosen.plan
    step = {**chosen.step.report(), "activation_budget_bytes": int(p.budget_bytes),
            "step_baseline_peak_bytes": int(chosen.baseline.step_peak_bytes)}
    b = args["budget"]
    return dataclasses.replace(p, budget=getattr(b, "text", str(b)),
                               budget_bytes=int(chosen.budget_bytes), step=step,
                               seconds=time.perf_counter() - t0 + p.seconds)


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
