"""The allocator's slack over a step's replay: what the fx replay that prices a front's
candidates misses, measured once by running the step.

Its own module: it runs the step through :mod:`planner.torch.execution`, which imports
:mod:`planner.torch.front` to price a schedule as the front prices it; inside ``front`` it
would make the two import each other (tests/test_layering.py).
"""

from __future__ import annotations

__all__ = ["measured_slack", "measured_peak", "checked_pick", "candidate_meter"]


def measured_slack(tg, c, model, inputs, loss=None) -> int:
    """Bytes the allocator measures over candidate ``c``'s replayed peak (0 if none): its step
    run on a copy of ``model`` (:func:`planner.torch.execution.metered_step`, the meter
    ``execute --torch`` and the apply sweep report). The replay prices the tensors ops return;
    this is what it misses: memory a kernel allocates inside (float64 convolution's im2col
    columns in ``aten::_slow_conv2d_backward``) and scalars no fx node holds (8 B on
    examples/torch/gpt.py). ``c.step_peak`` may already hold ``tg.step_slack``; it is taken off."""
    replayed = c.step_peak - getattr(tg, "step_slack", 0)
    return max(0, measured_peak(tg, c, model, inputs, loss) - int(replayed))


def measured_peak(tg, c, model, inputs, loss=None) -> int:
    """The allocator's peak of candidate ``c``'s step, run on copies of ``model`` and
    ``inputs`` (a step may write its inputs)."""
    import copy

    from planner.torch.execution import metered_step

    mine = tuple(copy.deepcopy(x) for x in inputs)
    return int(metered_step(copy.deepcopy(model), mine, loss, set(c.keep), tg.decompose,
                            c.plan)["peak"])


def checked_pick(tg, fr: list, budget, pick):
    """``pick(fr, budget)`` (:func:`planner.torch.front.pick`) whose choice the allocator has
    measured within its price: the pick's own step is run once (``tg.step_meter``, set by
    :func:`planner.torch.graph`) and, where it measures over the price (replay + the
    keep-everything step's slack), its price is raised to what was measured and the budget
    is searched again; each candidate is measured at most once (``tg.measured_peaks``).

    Why: the slack is the keep-everything step's, and a plan whose recomputation moves the
    peak into a kernel with more scratch measures over it (examples/torch/unet.py at ``min``:
    32 B over by the allocator). Prices only rise, and only on a miss, so a pick that
    measures within is the pick of before, and the search ends: every round measures a
    candidate not measured before. Plans that keep everything are not run: their price is
    the step the slack was measured on."""
    from dataclasses import replace

    from planner.torch.front import keeps_everything

    meter, seen = getattr(tg, "step_meter", None), tg.measured_peaks
    if meter is None:
        return pick(fr, budget)
    while True:
        fr = [replace(c, step_peak=max(c.step_peak, seen[c.keep])) if c.keep in seen else c
              for c in fr]
        c = pick(fr, budget)
        if keeps_everything(c) or c.keep in seen:
            return c
        seen[c.keep] = int(meter(tg, c))
        if seen[c.keep] <= c.step_peak:
            return c


def candidate_meter(model, inputs, loss):
    """``tg.step_meter`` for :func:`planner.torch.graph`: :func:`measured_peak` of candidate
    ``c``'s step."""
    def meter(tg, c) -> int:
        from hgraph.common.progress import current

        with current().stage("the allocator's peak of the picked step"):
            return measured_peak(tg, c, model, inputs, loss)
    return meter
