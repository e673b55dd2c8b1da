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
schedule's tensors and follows its recompute episodes, as the front priced it; so it runs the
recomputation ``plan`` reported), its peak measured by the allocator's events over one step
from no gradients (:func:`planner.torch.measure.allocator_peak`: the meter ``pt.compile``
judges its budget by; one meter for every path), and judged against ``budget`` read as
``hgraph submit plan`` reads it (:mod:`planner.step_front`); every step (plain, planned,
keep-all) starts from the same random state. Errors raised in the model file are one line naming its file and line
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
    """What one planned training step did against what was planned and predicted of it.

    The fields are the execute report's keys, in its order (:meth:`report`):

    * ``model``: the ``FILE.py:FUNC`` spec; ``schedule``: its path, or ``"keep-all"`` (none
      given); ``capture``: ``"inductor"`` or ``"eager"``, the capture that ran;
    * ``budget`` / ``budget_bytes``: the step budget asked for (``--budget``: bytes, a percent
      of the keep-everything step's replayed peak, or ``"min"``, as ``hgraph submit plan``
      reads it on the graph's step front), None where none was given;
    * ``predicted_peak_bytes``: the partitioned step's liveness replayed from tensor shapes
      (:func:`planner.torch.measure.predict_step_peak`: what ``plan`` picked by);
      ``measured_peak_bytes``: the allocator's peak over one step from no gradients, by its
      events (:func:`planner.torch.measure.allocator_peak`, the meter ``pt.compile`` judges
      by; ``peak_measured_by`` names it); ``within_budget``: measured at most ``budget_bytes``
      (None without a budget);
    * ``plan_model_peak_bytes``: the planner's own model of the schedule (it keeps every block
      boundary until the backward, where torch frees what no backward op reads);
    * ``predicted_saved_bytes`` / ``measured_saved_bytes``: what the forward hands the backward,
      from the schedule's keep set / counted by saved-tensor hooks;
    * ``planned_recompute_flops``: the recomputation ``plan`` reported for this schedule (its
      ``recompute_cost``, from the graph's step front; None where the schedule is not on a
      ``--graph`` given, or none was given); ``recompute_flops``: the FLOPs of the forward ops
      the backward module that ran runs again (counted on that module);
      ``model_recompute_cost``: the planner model's recomputation of the schedule;
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
    budget: str | None
    budget_bytes: int | None
    predicted_peak_bytes: int
    measured_peak_bytes: int
    within_budget: bool | None
    peak_measured_by: str
    plan_model_peak_bytes: int
    predicted_saved_bytes: int
    measured_saved_bytes: int
    planned_recompute_flops: int | None
    recompute_flops: int
    model_recompute_cost: int
    step_seconds: float
    gradients_match: bool
    gradients_reference: str
    eager_gradients_max_rel_diff: float | None

    def report(self) -> dict:
        """The JSON report: every field, by name, in the fields' order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def execute(spec: str, schedule: str | os.PathLike | None = None,
            graph: str | os.PathLike | None = None, *, eager: bool | None = None,
            budget=None) -> TorchExecution:
    """Run the training step of the model ``spec`` (``FILE.py:FUNC``: ``FUNC()`` returns
    ``(model, inputs[, loss_fn])``) under the schedule file ``schedule`` (None: keep everything)
    and measure it (see the module docstring). ``eager``: True runs the undecomposed capture
    (``graph torch --eager``), False Inductor's decomposition; None the default capture, or the
    eager one where the schedule is that graph's; with ``graph`` (the cg.txt planned on) the
    graph's own capture decides. ``budget``: the step budget to judge the measured peak by
    (bytes, text as ``--budget`` takes it, or ``"min"``, which needs ``graph``'s step front).
    Needs torch (:func:`planner.torch.execute` says how to install it where it is missing)."""
    from planner.torch.model_file import load, user_errors

    model_spec = load(spec)
    with user_errors(model_spec):
        return _execute(model_spec, str(spec), None if schedule is None else str(schedule),
                        None if graph is None else str(graph), eager, budget)


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


def _execute(spec, spec_text, schedule_path, graph_path, eager, budget) -> TorchExecution:
    from types import SimpleNamespace

    from planner.schedule import Schedule
    from planner.torch import measure
    from planner.torch.model_graph import KEEP
    from planner.torch.partition import keep_names, saved_nodes

    want, tries = _tries(graph_path, eager)
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
    order = SimpleNamespace(graph=g, schedule=schedule) if schedule_path else None
    planned_flops, budget_bytes = _planned(tg, want, schedule, budget)
    run = _run(spec, decompose, keep, everything, order, schedule_path)
    step = run["step"]
    return TorchExecution(
        model=spec_text, schedule=schedule_path or "keep-all", capture=capture,
        budget=None if budget is None else getattr(budget, "text", str(budget)),
        budget_bytes=budget_bytes,
        predicted_peak_bytes=measure.predict_step_peak(step.partition["forward"],
                                                       step.partition["backward"]),
        measured_peak_bytes=run["peak"],
        within_budget=None if budget_bytes is None else run["peak"] <= budget_bytes,
        peak_measured_by=run["how"], plan_model_peak_bytes=int(sim.peak_bytes),
        predicted_saved_bytes=int(predicted_saved), measured_saved_bytes=run["saved"],
        planned_recompute_flops=planned_flops,
        recompute_flops=int(measure.recompute_flops(tg.joint, step.partition["backward"])),
        model_recompute_cost=int(sim.recompute_cost), step_seconds=run["seconds"],
        gradients_match=run["match"], gradients_reference=run["reference"],
        eager_gradients_max_rel_diff=run["rel_diff"])


def _run(spec, decompose, keep, everything, order, schedule_path) -> dict:
    """The planned step run and measured (:func:`metered_step`'s keys), and its gradients
    against the reference (``match``, ``reference``, ``rel_diff``). Every step (plain,
    planned, keep-all) starts from the same random state."""
    from planner.torch import capture as cap
    from planner.torch import measure
    from planner.torch.partition import apply_keep

    model0 = copy.deepcopy(spec.model)
    plain = copy.deepcopy(model0)
    loss_fn = spec.loss or cap.default_loss
    same_random = _same_random(lambda f, *xs: f(*xs))
    same_random(lambda: loss_fn(plain(*spec.inputs)).backward())
    eager_grads = measure.grads_of(plain)
    planned = copy.deepcopy(model0)
    got = metered_step(planned, spec.inputs, spec.loss, keep, decompose, order, same_random)
    grads = measure.grads_of(planned)
    if not decompose and measure.same_grads(grads, eager_grads):
        match, reference = True, "eager"
    elif not schedule_path:
        match, reference = True, "keep-all"     # the step run is the keep-all step
    else:                   # the same capture keeping everything: what the plan could change
        whole = copy.deepcopy(model0)
        same_random(apply_keep(whole, everything, decompose, loss=spec.loss), *spec.inputs)
        match, reference = measure.same_grads(grads, measure.grads_of(whole)), "keep-all"
    return dict(got, match=bool(match), reference=reference,
                rel_diff=_max_rel_diff(grads, eager_grads))


def metered_step(model, inputs, loss, keep, decompose: bool, order=None,
                 same_random=None) -> dict:
    """The step of ``model`` that keeps ``keep`` (fx node names; ``order``: the plan whose
    recompute episodes its backward follows) run on ``inputs`` and measured: ``step`` (its
    partition on ``step.partition``), ``peak`` / ``how`` (the allocator's peak over one step
    from no gradients: :func:`planner.torch.measure.allocator_peak`, after a first run that
    traces it), ``saved`` (bytes the forward hands the backward, saved-tensor hooks) and
    ``seconds`` (the metered step's wall time). Afterwards ``model``'s gradients are those of
    one step. ``same_random``: calls every run from one random state (default: now's)."""
    import time

    from planner.torch import measure
    from planner.torch.partition import apply_keep

    same_random = same_random or _same_random(lambda f, *xs: f(*xs))
    step = apply_keep(model, keep, decompose, loss=loss, plan=order)

    def run(*xs):
        return same_random(step, *xs)

    run(*inputs)                            # traces and partitions, outside the meters
    _no_grads(model)
    saved = measure.saved_bytes(run, model, inputs)
    _no_grads(model)
    t0 = time.perf_counter()
    peak, how = measure.allocator_peak(run, inputs)
    return dict(step=step, peak=int(peak), how=how, saved=int(saved),
                seconds=time.perf_counter() - t0)


def _no_grads(model) -> None:
    for p in model.parameters():
        p.grad = None


def _planned(tg, want, schedule, budget) -> tuple:
    """(the recompute FLOPs ``plan`` reported for this schedule, the budget in bytes or None).

    Both from the step front of the graph file ``want`` where it carries one
    (:mod:`planner.step_front`: the candidate with this schedule's digest, and the budget
    resolved as ``plan`` resolved it); else the schedule's partition priced as the front
    prices it, and a budget in bytes only (a percent needs the front's 100%)."""
    from types import SimpleNamespace

    from planner import step_front
    from planner.budget import Budget
    from planner.torch import front

    table = step_front.table(want) if want is not None else None
    digest = step_front.schedule_hash(schedule)
    row = next((c for c in (table or {}).get("candidates", ())
                if c["schedule_sha1"] == digest), None)
    if row is not None:
        planned = int(row["recompute_flops"])
    else:
        planned = front.measured_candidate(tg, SimpleNamespace(graph=tg.cg, schedule=schedule)
                                           ).recompute_flops
    if budget is None:
        return planned, None
    if table is not None:
        return planned, int(step_front.resolve(table, budget))
    b = budget if isinstance(budget, (int, Budget)) else (
        None if str(budget).strip().lower() == step_front.LOWEST else Budget.parse(budget))
    if b is None or (not isinstance(b, int) and b.is_relative):
        raise HGraphError(f"budget {budget}: a percent or '{step_front.LOWEST}' is of the "
                          f"graph's step front (what 100% is, the lowest step): pass --graph, "
                          f"the file 'hgraph graph torch' wrote and 'submit plan' planned on")
    return planned, int(b if isinstance(b, int) else b.nbytes)
