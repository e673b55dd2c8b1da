"""Memory planning for computational graphs: liveness, arena plans and recomputation schedules.

The analyses that scale with the graph run as vertex programs on :mod:`hgraph`; the DP
recurrences run on the driver. The planner never imports Ray.
"""
