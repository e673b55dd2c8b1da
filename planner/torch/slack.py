"""The allocator's slack over a step's replay: what the fx replay that prices a front's
candidates misses, measured once by running the step.

Its own module: it runs the step through :mod:`planner.torch.execution`, which imports
:mod:`planner.torch.front` to price a schedule as the front prices it; inside ``front`` it
would make the two import each other (tests/test_layering.py).
"""

from __future__ import annotations

__all__ = ["measured_slack"]


def measured_slack(tg, c, model, inputs, loss=None) -> int:
    """Bytes the allocator measures over candidate ``c``'s replayed peak (0 if none): its step
    run on a copy of ``model`` (:func:`planner.torch.execution.metered_step`, the meter
    ``execute --torch`` and the apply sweep report). The replay prices the tensors ops return;
    this is what it misses: memory a kernel allocates inside (float64 convolution's im2col
    columns in ``aten::_slow_conv2d_backward``) and scalars no fx node holds (8 B on
    examples/torch/gpt.py). ``c.step_peak`` may already hold ``tg.step_slack``; it is taken off."""
    import copy

    from planner.torch.execution import metered_step

    replayed = c.step_peak - getattr(tg, "step_slack", 0)
    mine = tuple(copy.deepcopy(x) for x in inputs)      # a step may write its inputs
    peak = metered_step(copy.deepcopy(model), mine, loss, set(c.keep), tg.decompose,
                        c.plan)["peak"]
    return max(0, int(peak) - int(replayed))
