"""The whole step beside an execution: :func:`evaluate` adds the predicted step to what a run
measured, :func:`metered_ops` meters every kernel to check the temporaries' model.

The prediction itself is the planner's, which never imports the executor: a schedule's step,
the choice of a plan whose step fits a budget and :func:`planner.plan`'s whole-step hook are
:mod:`planner.whole_step`; a row plan's step is :mod:`planner.rows.step`. Import them from
there: this module holds only what needs the executor.

>>> from planner.execute import export, zoo, executor
>>> g = export.to_cg(zoo.build("mlp"))
>>> r = evaluate(g, executor.plain_schedule(g))
>>> r["accounting"], r["step_within_prediction"]
('whole-step', True)
"""

from __future__ import annotations

import dataclasses

from planner.execute import executor
from planner.ops import OPS
from planner.whole_step import ACTIVATIONS, applies, predict


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
