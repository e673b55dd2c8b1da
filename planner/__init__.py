"""Memory planning for computational graphs: liveness, arena plans and recomputation schedules.

The analyses that scale with the graph run as vertex programs on :mod:`hgraph`; the DP
recurrences run on the driver. The planner never imports Ray.

    >>> import planner
    >>> from planner import synth
    >>> p = planner.plan(synth.build(layers=2, heads=2), budget="60%", tasks=4)  # or a cg.txt path
    >>> p.peak_bytes <= p.budget_bytes, p.recompute_cost, p.schedule.dumps()[:9]
    (True, 25, 'compute 0')
"""


def plan(graph_or_path, budget="100%", **kwargs):
    """Plan a recomputation schedule; see :func:`planner.api.plan` (imported lazily)."""
    from planner.api import plan as _plan

    return _plan(graph_or_path, budget=budget, **kwargs)


def __getattr__(name):
    if name == "Plan":
        from planner.api import Plan

        return Plan
    raise AttributeError(f"module 'planner' has no attribute {name!r}")
