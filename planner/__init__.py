"""Memory planning for computational graphs: liveness, arena plans and recomputation schedules.

The analyses that scale with the graph run as vertex programs on :mod:`hgraph`; the DP
recurrences run on the driver. The planner never imports Ray.

    >>> import planner
    >>> from planner import synth
    >>> p = planner.plan(synth.build(layers=2, heads=2), budget="60%", tasks=4)  # or a cg.txt path
    >>> p.peak_bytes <= p.budget_bytes, p.recompute_cost, p.schedule.dumps()[:9]
    (True, 25, 'compute 0')
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:                       # for readers' tools; at run time, __getattr__ below
    from planner.api import Plan, plan

__all__ = ["plan", "Plan"]

#: Names of :mod:`planner.api` that ``planner`` hands out as they are.
_API = frozenset(__all__)


def __getattr__(name):
    """``planner.plan`` / ``planner.Plan`` are :func:`planner.api.plan` and
    :class:`planner.api.Plan` themselves (same objects, same signature), imported on first
    use: ``import planner`` (which every ``planner.*`` import runs) stays light, so a CLI
    command that never plans loads neither NumPy nor the solvers."""
    if name in _API:
        from planner import api

        value = globals()[name] = getattr(api, name)
        return value
    raise AttributeError(f"module 'planner' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_API})
