"""A PyTorch model's real training step under a schedule: :func:`execute` -> TorchExecution.

The PyTorch front's third call, beside :func:`planner.torch.graph` (import a step) and
:func:`planner.plan` (plan it): run the step a schedule says, for real, and report predicted
against measured. ``hgraph submit execute --torch FILE.py:FUNC`` only parses its flags, calls
this and prints :meth:`TorchExecution.report`.

One capture for every path: the step run is the graph ``hgraph graph torch FILE.py:FUNC``
writes with the same choice of capture — Inductor's decomposition by default, the aten graph
eager autograd runs with ``eager=True`` — so ``graph torch``, ``submit plan`` and ``execute
--torch`` round-trip (with ``eager`` None, a schedule that is not the default graph's but the
eager one's runs that capture; ``capture`` says which ran). With ``graph`` (a cg.txt) the
capture is the one that file was made with (its details' ``capture``) and the re-imported graph
must be the same one. Without ``schedule`` the step keeps everything (the no-recomputation
baseline, default capture unless ``eager``).

The step is :func:`planner.torch.partition.apply_keep` (the backward keeps exactly the
schedule's tensors; :func:`planner.torch.apply` for a plan), measured by
:func:`planner.torch.measure.measure_step`; every step (plain, planned, keep-all) starts from
the same random state. Errors raised in the model file are one line naming its file and line
(:func:`planner.torch.model_file.user_errors`); a schedule that fits neither capture, a graph
that is not the model's, an IMPOSSIBLE schedule are one line naming the file.

This module imports torch only inside :func:`execute`: :class:`TorchExecution` is readable
without it.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, fields

from hgraph.common.errors import HGraphError

__all__ = ["TorchExecution", "execute"]


@dataclass(frozen=True)
class TorchExecution:
    """What one planned training step did against what was predicted of it.

    The fields are the execute report's keys, in its order (:meth:`report`):

    * ``model``: the ``FILE.py:FUNC`` spec; ``schedule``: its path, or ``"keep-all"`` (none
      given); ``capture``: ``"inductor"`` or ``"eager"``, the capture that ran;
    * ``predicted_peak_bytes``: the partitioned step's liveness replayed from tensor shapes
      (:func:`planner.torch.measure.predict_step_peak`); ``measured_peak_bytes``: the allocator's
      level (meter: ``peak_measured_by``, MemTracker on CPU, ``cuda.max_memory_allocated``);
    * ``plan_model_peak_bytes``: the planner's own model of the schedule (it keeps every block
      boundary until the backward, where torch frees what no backward op reads);
    * ``predicted_saved_bytes`` / ``measured_saved_bytes``: what the forward hands the backward,
      from the schedule's keep set / counted by saved-tensor hooks;
    * ``predicted_recompute_flops``: the schedule's recomputation in the graph's costs;
      ``recompute_flops``: the FLOPs of the forward ops the partitioned backward runs again;
    * ``step_seconds``: the measured step's wall time;
    * ``gradients_match``: the planned step's gradients equal, bit for bit, those of the same
      capture keeping everything (recomputation changes nothing) — for the eager capture, those
      of the plain eager step when they are equal; ``gradients_reference`` (``"eager"`` /
      ``"keep-all"``) says which;
    * ``eager_gradients_max_rel_diff``: the largest difference from the plain eager step's
      gradients, relative to their largest entry (0.0: bitwise equal; an Inductor capture rounds
      differently, and draws other random numbers than eager where the model has dropout; None
      where they do not compare).
    """

    model: str
    schedule: str
    capture: str
    predicted_peak_bytes: int
    plan_model_peak_bytes: int
    measured_peak_bytes: int
    predicted_saved_bytes: int
    measured_saved_bytes: int
    predicted_recompute_flops: int
    recompute_flops: int
    step_seconds: float
    gradients_match: bool
    gradients_reference: str
    eager_gradients_max_rel_diff: float | None
    peak_measured_by: str

    def report(self) -> dict:
        """The JSON report: every field, by name, in the fields' order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def execute(spec: str, schedule: str | os.PathLike | None = None,
            graph: str | os.PathLike | None = None, *, eager: bool | None = None
            ) -> TorchExecution:
    """Run the training step of the model ``spec`` (``FILE.py:FUNC``: ``FUNC()`` returns
    ``(model, inputs[, loss_fn])``) under the schedule file ``schedule`` (None: keep everything)
    and measure it (see the module docstring). ``eager``: True runs the undecomposed capture
    (``graph torch --eager``), False Inductor's decomposition; None the default capture, or the
    eager one where the schedule is that graph's; with ``graph`` (the cg.txt planned on) the
    graph's own capture decides. Needs torch (:func:`planner.torch.execute` says how to install
    it where it is missing)."""
    from planner.torch.model_file import load, user_errors

    model_spec = load(spec)
    with user_errors(model_spec):
        return _execute(model_spec, str(spec), None if schedule is None else str(schedule),
                        None if graph is None else str(graph), eager)


def _structure(g) -> tuple:
    """What a schedule depends on: the blocks' reads and writes, the vars' sizes and names."""
    return ([(f.direction, list(f.inputs), list(f.outputs)) for f in g.functions],
            [int(b) for b in g.var_bytes], list(g.var_names))


def _import_flags(spec_text: str, decompose: bool) -> str:
    return f"'hgraph graph torch {spec_text}{'' if decompose else ' --eager'}'"


def _max_rel_diff(a: list, b: list) -> float | None:
    """Largest ``|x - y|`` over the gradients, relative to the largest entry of ``b``'s (a
    gradient that is zero up to rounding, like a conv bias before batch norm's, does not
    count as a difference of 100%); None where they do not compare (a gradient missing on one
    side, another shape)."""
    gap = scale = 0.0
    if len(a) != len(b):
        return None
    for x, y in zip(a, b):
        if x is None and y is None:
            continue
        if x is None or y is None or x.shape != y.shape:
            return None
        if y.numel():
            gap = max(gap, float((x - y).abs().max()))
            scale = max(scale, float(y.abs().max()))
    return gap / scale if scale else (0.0 if gap == 0 else None)


def _same_random(fn):
    """``fn`` run from the random state of now on every call: the plain step, the planned step
    (traced, then measured) and the keep-all step draw the same dropout masks."""
    import torch

    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None

    def call(*args):
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        return fn(*args)

    return call


def _tries(graph_path, eager) -> tuple:
    """(the graph file's graph or None, the captures to try: decompose flags in order): the
    graph file's own capture, the one ``eager`` names, or (neither said) the default one and
    else the eager one."""
    from planner import cg
    from planner.torch.partition import plan_capture

    if not graph_path:      # eager None: graph torch's default, else its --eager graph's
        return None, [True, False] if eager is None else [not eager]
    want = cg.read(graph_path)
    decompose = plan_capture(want) == "inductor"
    if eager and decompose:
        raise HGraphError(f"{graph_path}: captured for Inductor, not --eager (drop --eager: "
                          f"execute runs the capture the graph was made with)")
    return want, [decompose]


def _capture_for(spec, spec_text, want, tries, schedule, schedule_path, graph_path):
    """(capture name, decompose, TorchGraph, schedule, its replay) of the first of ``tries``
    the schedule (None: that capture's keep-all baseline) is valid for; one line naming the
    file where none is."""
    from planner import simulate
    from planner.fixed_schedules import baseline_schedule
    from planner.torch.model_graph import import_model

    first = None
    for decompose in tries:
        capture = "inductor" if decompose else "eager"
        tg = import_model(copy.deepcopy(spec.model), spec.inputs, loss=spec.loss,
                          decompose=decompose, source=spec.source)
        g = tg.cg
        if want is not None and _structure(want) != _structure(g):
            raise HGraphError(f"{graph_path}: not the {capture} graph of {spec_text} (re-import "
                              f"it with {_import_flags(spec_text, decompose)})")
        if schedule is None:
            schedule = baseline_schedule(g)
        sim = simulate.replay(g, schedule)
        if not sim.violations:
            return capture, decompose, tg, schedule, sim
        first = first or (capture, decompose, sim.violations[0])
    capture, decompose, violation = first
    hint = (f"; plan on {graph_path} itself" if want is not None else
            f"; plan on the graph {_import_flags(spec_text, decompose)} writes, or pass "
            f"the planned graph with --graph")
    raise HGraphError(f"{schedule_path}: not a valid schedule for the {capture} capture of "
                      f"{spec_text}" + (" (nor for the eager one)" if len(tries) > 1 else "")
                      + f": {violation}{hint}")


def _execute(spec, spec_text, schedule_path, graph_path, eager) -> TorchExecution:
    from types import SimpleNamespace

    from planner.schedule import Schedule
    from planner.torch import capture as cap
    from planner.torch import measure
    from planner.torch.model_graph import KEEP
    from planner.torch.partition import apply_keep, keep_names, saved_nodes

    want, tries = _tries(graph_path, eager)
    model0 = copy.deepcopy(spec.model)
    schedule = Schedule.read(schedule_path) if schedule_path else None
    if schedule is not None and schedule.impossible:
        raise HGraphError(f"{schedule_path}: the schedule is IMPOSSIBLE (no plan fits the budget)")
    capture, decompose, tg, schedule, sim = _capture_for(spec, spec_text, want, tries, schedule,
                                                         schedule_path, graph_path)
    g = tg.cg
    everything = {g.var_names[v] for v in g.activations} - {KEEP}
    keep = keep_names(g, schedule) if schedule_path else everything
    var_of_name = {name: v for v, name in enumerate(g.var_names)}
    saved = {n.name for n in saved_nodes(tg.joint, keep) if n.op != "placeholder"}
    predicted_saved = sum(int(g.var_bytes[var_of_name[n]]) for n in saved if n in var_of_name)

    plain = copy.deepcopy(model0)
    loss_fn = spec.loss or cap.default_loss
    same_random = _same_random(lambda f, *xs: f(*xs))
    same_random(lambda: loss_fn(plain(*spec.inputs)).backward())
    eager_grads = measure.grads_of(plain)
    planned = copy.deepcopy(model0)
    order = SimpleNamespace(graph=g, schedule=schedule) if schedule_path else None
    step = apply_keep(planned, keep, decompose, loss=spec.loss, plan=order)
    got = measure.measure_step(lambda *xs: same_random(step, *xs), planned, spec.inputs)
    grads = measure.grads_of(planned)
    recomputed = measure.recompute_flops(tg.joint, step.partition["backward"])
    if not decompose and measure.same_grads(grads, eager_grads):
        match, reference = True, "eager"
    elif not schedule_path:
        match, reference = True, "keep-all"     # the step run is the keep-all step
    else:                   # the same capture keeping everything: what the plan could change
        whole = copy.deepcopy(model0)
        same_random(apply_keep(whole, everything, decompose, loss=spec.loss), *spec.inputs)
        match, reference = measure.same_grads(grads, measure.grads_of(whole)), "keep-all"
    return TorchExecution(
        model=spec_text, schedule=schedule_path or "keep-all", capture=capture,
        predicted_peak_bytes=measure.predict_step_peak(step.partition["forward"],
                                                       step.partition["backward"]),
        plan_model_peak_bytes=int(sim.peak_bytes),
        measured_peak_bytes=got["measured_peak_bytes"],
        predicted_saved_bytes=int(predicted_saved),
        measured_saved_bytes=got["measured_saved_bytes"],
        predicted_recompute_flops=int(sim.recompute_cost),
        recompute_flops=int(recomputed), step_seconds=got["step_seconds"],
        gradients_match=bool(match), gradients_reference=reference,
        eager_gradients_max_rel_diff=_max_rel_diff(grads, eager_grads),
        peak_measured_by=got["peak_measured_by"])
