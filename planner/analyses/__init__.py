"""The planner's graph analyses, as vertex programs on :mod:`hgraph` (distributed over ``tasks``).

They are what scales with the graph; the DP then runs on the driver over what they computed:

* :mod:`planner.analyses.engine` — how they run (:class:`EngineOptions`);
* :mod:`planner.analyses.levels` — longest-path topological levels;
* :mod:`planner.analyses.segments` — topological positions and strict separators;
* :mod:`planner.analyses.local_stats` — the approximate DP's per-set statistics, segment-local.

Past the scale threshold a plan's cg.txt is read by the workers themselves
(:mod:`planner.cg_shards`) and all three run on the variable graph its shards left there
(:func:`planner.analyses.engine.var_graph`): the driver builds no engine graph for them.
"""
