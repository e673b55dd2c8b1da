"""Run a training step under a recomputation schedule and measure its real peak.

The schedule (``planner.schedule.Schedule``, reference format) is first turned into a buffer
timeline (:func:`planner.timeline.timeline`, in the planner: the whole-step prediction reads it
too): every value or gradient instance the run creates becomes a buffer with a size and a
half-open lifetime ``[start, end)`` in schedule steps.

* **lazy allocation** -- a buffer is allocated at the step that first writes it;
* **the schedule's recomputations** -- a forward compute of an already computed function creates a
  new instance of its output;
* **automatic recycling** (``recycle=True``) -- a buffer is freed right after its last read, even
  when the schedule forgets it later; parameter and input gradients (the step's results) are kept.
  With ``recycle=False`` memory is freed exactly at the schedule's ``forget`` lines, which
  reproduces the planner's accounting (``planner.simulate``, reference mode) byte for byte.

:func:`run` then executes the timeline through one :class:`TrackedAllocator` (naive, pool or
static: the static arena is planned from this same timeline), with the real kernels of
:mod:`planner.ops` when the graph's details carry op arguments (graphs exported by the
zoo) or with stand-in kernels otherwise (:mod:`planner.execute.replay`).

Two peaks, by two meters. ``tracked_peak_bytes`` is the plan's own count: the exact peak of bytes
held by the buffers the schedule governs (forward values and gradients; parameters, inputs and the
loss's ``ones`` are free, as in the reference's ``eval()``), with the byte counts the prediction
uses -- an accounting cross-check, equal to the prediction by construction when memory is freed at
the schedule's forgets. ``measured_peak_bytes`` is what a meter outside the plan saw over the step
(``meter``; :meth:`planner.execute.allocator.TrackedAllocator.tracking`): on NumPy the
``tracemalloc`` peak of the step, on CuPy the used-bytes peak of the memory pool every device
allocation of the step goes through (``device_peak_bytes``, the same figure). Both start after
parameters and inputs are built, so neither counts them; the measured peak also counts what the
plan does not: a kernel's own temporaries (im2col columns, the result before it is copied into
its buffer), the allocator's rounding and the blocks a pool keeps for reuse.
``measured_step_peak_bytes`` is the same meter counted from before the parameters and inputs are
built: the whole step, which :mod:`planner.whole_step` predicts (``step_peak_bytes``)
and a whole-step budget holds.

Example::

    >>> from planner.execute import zoo, export
    >>> g = export.to_cg(zoo.build("mlp"))
    >>> r = run(g, plain_schedule(g))
    >>> r.tracked_peak_bytes, r.kernels, r.meter
    (261288, 'real', 'tracemalloc')
    >>> r.measured_peak_bytes >= r.tracked_peak_bytes
    True
"""

from __future__ import annotations

import dataclasses
import functools
import time

import numpy as np

from hgraph.common.errors import HGraphError
from planner.cg import details_of as _details
from planner.execute import backend as backend_mod
from planner.execute.allocator import TrackedAllocator
from planner.execute.run_options import RunOptions  # noqa: F401  (run's options)
from planner.execute.standin import run_standin
from planner.fixed_schedules import (checkpoint_schedule, forward_order, loss_outputs,  # noqa: F401
                                     plain_schedule)
from planner.ops import OPS, implements, with_workspace  # noqa: F401  (the executor's API)
from planner.timeline import Step, Timeline, timeline  # noqa: F401  (the executor's input)
from planner.walk import Walker


# ---------------------------------------------------------------- running it
@dataclasses.dataclass
class RunResult:
    tracked_peak_bytes: int            # the plan's count: peak of the plan's live buffers
    measured_peak_bytes: int | None    # the independent meter's step peak (``meter``); None: run(meter=False)
    meter: str                         # "tracemalloc" (NumPy) | "cupy pool used bytes" (CuPy)
    reserved_bytes: int
    device_peak_bytes: int | None
    allocator: str
    backend: str
    seconds: float
    recycle: bool
    kernels: str                       # "real" | "stand-in"
    buffers: int
    loss: float | None = None
    param_grads: dict | None = None    # var id -> host NumPy array (real kernels)
    arena: dict | None = None
    #: the meter's peak counted from before the parameters and inputs were built: the whole
    #: step, as :func:`planner.whole_step.predict` predicts it (``step_peak_bytes``)
    measured_step_peak_bytes: int | None = None
    #: the process's CPU time over the same span as ``seconds`` (bench/kernels_bench.py --clock cpu)
    cpu_seconds: float | None = None

    def report(self) -> dict:
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "param_grads"}
        return out


def has_real_ops(g) -> bool:
    """Whether every forward block's details name an op this executor implements, with its
    argument shapes (:attr:`planner.cg.ComputationalGraph.ops`)."""
    return implements(g.ops)


def _init_array(xp, spec, shape, dtype, seed, vid):
    rng = np.random.default_rng([seed, vid])
    kind = (spec or {}).get("kind", "normal")
    if kind == "labels":
        a = rng.integers(0, spec["classes"], size=shape).astype(dtype)
    elif kind == "zeros":
        a = np.zeros(shape, dtype)
    elif kind == "ones":
        a = np.ones(shape, dtype)
    else:
        a = (rng.standard_normal(shape) * ((spec or {}).get("scale") or 1.0)).astype(dtype)
    return xp.asarray(a)


@functools.lru_cache(maxsize=None)
def _warm(xp) -> None:
    """Build one tiny array of each initialiser once per process before any meter starts: the
    first call imports and caches NumPy's random machinery (~0.7 MB of Python objects that a
    step's meter would otherwise count)."""
    for spec in ({"kind": "labels", "classes": 2}, {"kind": "zeros"}, {"kind": "ones"}, None):
        _init_array(xp, spec, (1,), "float32", 0, 0)


def leaves(g, xp, seed: int = 0) -> dict:
    """Parameters and inputs (var id -> array), built from the details' shapes and initialisers."""
    return _leaves(g, xp, seed, {})


def _leaves(g, xp, seed: int, given: dict) -> dict:
    """:func:`leaves`, those in ``given`` (var id -> array) taken from it instead (converted,
    not initialised)."""
    out = {}
    for f in g.forward:
        d = _details(f)
        for pos, (a, _) in enumerate(f.inputs):
            if not g.is_activation[a] and a not in out:
                shape, dtype = tuple(d["in_shapes"][pos]), d["in_dtypes"][pos]
                if a in given:
                    if tuple(given[a].shape) != shape:
                        raise HGraphError(f"leaf_values: var {a} is not a parameter/input of shape "
                                          f"{tuple(given[a].shape)} (its shape: {shape})")
                    out[a] = xp.asarray(given[a], dtype=dtype)
                else:
                    out[a] = _init_array(xp, d.get("init", {}).get(str(pos)), shape, dtype, seed, a)
    for a in given:
        if a not in out:
            raise HGraphError(f"leaf_values: var {a} is not a parameter/input")
    return out


def run(g, schedule, options: RunOptions = RunOptions(), *, backend=None,
        leaf_values: dict | None = None) -> RunResult:
    """Execute ``schedule`` on ``g``; real kernels when the graph carries op arguments.

    ``options`` (:class:`planner.execute.run_options.RunOptions`, defaults stated there): the
    allocator, recycling, kernels, seed, stand-in touching, alignment, meter and workspace cap;
    ``backend``: where (a :class:`planner.execute.backend.Backend` or its name; None: CuPy
    when it works, else NumPy).

    ``leaf_values`` (var id -> array) replaces initialised parameters or inputs (e.g. to check
    gradients against finite differences). Parameters and inputs are built before the step is
    measured (``measured_peak_bytes``; ``measured_step_peak_bytes`` counts them) and timed
    (``seconds``). ``workspace``: the convolution workspace cap (a plan's ``workspace_bytes``).
    ``meter=False`` runs the step
    without the independent meter (``measured_peak_bytes`` None): tracemalloc slows Python-level
    work (about 2x on a small zoo model's step), so timings are taken without it.
    """
    o = options
    allocator, recycle, kernels, seed = o.allocator, o.recycle, o.kernels, o.seed
    touch, alignment, meter, workspace = o.touch, o.alignment, o.meter, o.workspace
    be = backend if isinstance(backend, backend_mod.Backend) else backend_mod.get(backend)
    if kernels == "auto":
        kernels = "real" if has_real_ops(g) else "stand-in"
    if kernels == "real" and not has_real_ops(g):
        raise HGraphError("this graph carries no operator arguments; use replay (stand-in kernels)")
    tl = timeline(g, schedule, recycle=recycle)
    align = alignment or be.costs.alignment          # the backend's pool rounding
    plan = tl.arena(align) if allocator == "static" else None
    alloc = TrackedAllocator(be, allocator, arena=plan, alignment=align)
    leaf = None
    _warm(be.xp)
    with alloc.tracking(meter):
        if kernels == "real":    # through the module's ``leaves`` (bench/kernels_bench.py swaps it)
            leaf = _leaves(g, be.xp, seed, leaf_values) if leaf_values else leaves(g, be.xp, seed)
        alloc.leaves_built()
        t0, c0 = time.perf_counter(), time.process_time()
        if kernels == "real":
            loss, grads = _run_real(g, tl, alloc, be, leaf, workspace)
        else:
            loss, grads = None, None
            run_standin(g, tl, alloc, be, touch or ("full" if be.is_gpu else "page"))
        be.synchronize()
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    if grads is not None:        # copied out after the step: the copies are not the step's memory
        grads = {v: be.to_numpy(arr).copy() for v, arr in grads.items()}
    alloc.release()
    return RunResult(int(alloc.peak_bytes), alloc.measured_peak_bytes, alloc.meter, int(alloc.reserved_bytes),
                     alloc.device_peak_bytes, allocator, be.name, seconds, recycle,
                     kernels, tl.num_buffers, loss, grads, plan.summary() if plan else None,
                     alloc.measured_step_peak_bytes, cpu_seconds)


def _run_real(g, tl: Timeline, alloc: TrackedAllocator, be, leaf: dict, workspace=None):
    """(loss, parameter gradients) of a run of ``tl`` with the real kernels (:class:`_Real`)."""
    return _Real(g, tl, alloc, be, leaf, workspace).walk(tl.steps)


class _Real(Walker):
    """The executor's visitor of a timeline's walk (:mod:`planner.walk`): each compute runs
    its kernel from :data:`OPS` on arrays the allocator hands out (allocated as the kernel
    writes them: their shape is the op's), each free returns a buffer."""

    def __init__(self, g, tl: Timeline, allocator: TrackedAllocator, be, leaf: dict, workspace):
        self.g, self.tl, self.allocator, self.be, self.xp = g, tl, allocator, be, be.xp
        self.leaf, self.nf = leaf, len(g.forward)
        fwd = [_details(f) for f in g.forward]
        if workspace is not None:
            fwd = [{**d, "attrs": with_workspace(d["attrs"], d["op"], workspace)} for d in fwd]
        self.fwd, self.opdefs = fwd, [OPS[d["op"]] for d in fwd]
        self.sinks = loss_outputs(g)
        self.arrays = {}                             # buffer id -> typed array view
        self.values = {}                             # var id -> buffer id of its live value
        self.loss = None

    def typed(self, b, shape, dtype):
        raw = self.allocator.alloc(b, int(self.tl.nbytes[b]))
        arr = self.arrays[b] = raw.view(dtype).reshape(shape)
        return arr

    def value(self, a):
        return self.leaf[a] if a in self.leaf else self.arrays[self.values[a]]

    def free(self, b) -> None:
        """A var's live value is whichever buffer of it is still allocated."""
        self.allocator.free(b)
        del self.arrays[b]
        v = int(self.tl.var[b])
        if self.values.get(v) == b:
            del self.values[v]

    def visit(self, s: int, step) -> None:
        if step.op.kind == "compute":
            (self.forward if step.op.index < self.nf else self.backward)(step)

    def forward(self, step) -> None:
        f = step.op.index
        d, fn, opdef = self.fwd[f], self.g.forward[f], self.opdefs[f]
        xs = [self.value(a) for a, _ in fn.inputs]
        _, b, _ = step.writes[0]
        out = self.typed(b, tuple(d["out_shape"]), d["out_dtype"])
        if opdef.fills_out:                          # the kernel writes into the plan's buffer
            opdef.forward(self.xp, xs, d["attrs"], out=out)
        else:
            out[...] = opdef.forward(self.xp, xs, d["attrs"])
        self.values[fn.outputs[0]] = b
        if fn.outputs[0] in self.sinks:
            self.loss = float(self.be.to_numpy(out))

    def backward(self, step) -> None:
        """The VJP of a forward op; its results and inputs go when it returns, not when the
        next step rebinds them (they would sit beside its temporaries: memory no plan counts)."""
        i = step.op.index - self.nf
        d, fn, opdef, xp = self.fwd[i], self.g.forward[i], self.opdefs[i], self.xp
        gy = self.arrays[step.grad_in] if step.grad_in is not None else \
            xp.ones(tuple(d["out_shape"]), dtype=d["out_dtype"])
        saved = {p: self.value(fn.inputs[p][0]) for p in opdef.saves_inputs}
        y = self.value(fn.outputs[0]) if opdef.saves_output else None
        want = [j for j, _, _ in step.writes]
        fresh = {j: self.typed(b, tuple(d["in_shapes"][j]), d["in_dtypes"][j])
                 for j, b, accumulate in step.writes if not accumulate}
        shapes = [tuple(sh) for sh in d["in_shapes"]]
        if opdef.fills_grads:                        # the VJP writes into the plan's new buffers
            grads = opdef.backward(xp, gy, saved, y, d["attrs"], shapes, want, out=fresh)
        else:
            grads = opdef.backward(xp, gy, saved, y, d["attrs"], shapes, want)
        for j, b, accumulate in step.writes:
            if accumulate:
                self.arrays[b] += grads[j]
            elif grads[j] is not fresh[j]:
                fresh[j][...] = grads[j]

    def finish(self, n: int):
        """(loss, parameter gradients: the buffers themselves, :func:`run` copies them out
        after the step)."""
        grads = {}
        for b, arr in self.arrays.items():
            v = int(self.tl.var[b])
            if self.tl.grad[b] and self.g.var_names[v].startswith("/"):    # parameters: by path
                grads[v] = arr
        return self.loss, grads


def gradients_equal(a: dict, b: dict) -> bool:
    """Bitwise equality of two parameter-gradient maps."""
    if a.keys() != b.keys():
        return False
    return all(a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
               and a[k].tobytes() == b[k].tobytes() for k in a)


# ---------------------------------------------------------------- one call for jobs
def evaluate(g, schedule, *, allocators=("pool",), backend=None, recycle=None, seed: int = 0,
             touch: str | None = None, workspace: int | None = None) -> dict:
    """Run ``schedule`` on ``g`` with each allocator and compare with the planner's prediction.

    The report holds ``predicted_peak_bytes`` (``planner.simulate``, reference accounting);
    ``tracked_peak_bytes`` (the plan's own count of its buffers), ``measured_peak_bytes`` (the
    independent meter named by ``meter``: tracemalloc on NumPy, the CuPy pool's used bytes on
    CuPy), ``measured_over_predicted``, ``allocator``, ``backend``, ``seconds`` of the first
    allocator; one row per allocator under ``allocators``; ``peak_within_prediction`` (every
    allocator's *measured* peak at most the prediction: false whenever kernel temporaries,
    rounding or a pool's kept blocks take the step above what the plan counts) and
    ``tracked_within_prediction`` (every allocator's tracked peak at most the prediction: the
    plan's accounting held); ``measured_step_peak_bytes`` (the meter from before the parameters
    and inputs are built: the whole step, :mod:`planner.whole_step`); and -- for graphs with real ops -- ``gradients_match``: parameter
    gradients bitwise equal to those of a plain run (no recomputation, nothing freed), whose two
    peaks are ``plain_tracked_peak_bytes`` / ``plain_measured_peak_bytes``. ``recycle=None``
    frees after last use for real kernels and at the schedule's forgets for stand-ins (so the
    tracked peak of a replay reproduces the prediction exactly).
    """
    from planner import simulate

    sim = simulate.replay(g, schedule)
    if sim.impossible:
        raise HGraphError("the schedule is IMPOSSIBLE: nothing to execute")
    if sim.violations:
        raise HGraphError(f"invalid schedule: {sim.violations[0]}")
    be = backend if isinstance(backend, backend_mod.Backend) else backend_mod.get(backend)
    real = has_real_ops(g)
    free_early = real if recycle is None else bool(recycle)
    rows = []
    results = []
    for name in allocators:
        r = run(g, schedule, RunOptions(allocator=name, recycle=free_early, seed=seed, touch=touch,
                                        workspace=workspace), backend=be)
        results.append(r)
        rows.append(r.report())
    first = results[0]
    predicted = int(sim.peak_bytes)
    report = {"predicted_peak_bytes": predicted, "tracked_peak_bytes": first.tracked_peak_bytes,
              "measured_peak_bytes": first.measured_peak_bytes, "meter": first.meter,
              "measured_step_peak_bytes": first.measured_step_peak_bytes,
              "measured_over_predicted": round(first.measured_peak_bytes / max(predicted, 1), 4),
              "allocator": first.allocator, "backend": be.name, "device": be.device,
              "seconds": round(first.seconds, 6), "kernels": first.kernels, "recycle": free_early,
              "reserved_bytes": first.reserved_bytes, "device_peak_bytes": first.device_peak_bytes,
              "peak_within_prediction": all(r.measured_peak_bytes <= predicted for r in results),
              "tracked_within_prediction": all(r.tracked_peak_bytes <= predicted for r in results),
              "recompute_cost": int(sim.recompute_cost), "forward_cost": int(sim.forward_cost),
              "buffers": first.buffers, "allocators": rows}
    if real:
        # the same workspace cap: a convolution's tiles, hence its sums' order, follow the cap
        plain = run(g, plain_schedule(g), RunOptions(recycle=False, seed=seed, workspace=workspace),
                    backend=be)
        report["loss"] = first.loss
        report["gradients_match"] = all(gradients_equal(plain.param_grads, r.param_grads) for r in results)
        report["plain_tracked_peak_bytes"] = plain.tracked_peak_bytes
        report["plain_measured_peak_bytes"] = plain.measured_peak_bytes
    return report
