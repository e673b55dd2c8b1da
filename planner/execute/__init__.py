"""Execute memory plans for real: CuPy on a GPU, NumPy elsewhere, the same code path.

* :mod:`~planner.execute.backend`   -- choose CuPy or NumPy (``HGRAPH_BACKEND`` forces one)
* :mod:`~planner.execute.trace`     -- define-by-run tracer (records ops, shapes, bytes, FLOPs)
* :mod:`~planner.execute.zoo`       -- mlp, resnet, unet, transformer; ``hgraph graph zoo``
* :mod:`~planner.execute.export`    -- traced model -> cg.txt (forward + backward blocks)
* :mod:`~planner.execute.allocator` -- one tracked allocator: naive, pool, static arena
* :mod:`~planner.execute.executor`  -- run a schedule (lazy allocation, recycling, recomputation)
* :mod:`~planner.execute.replay`    -- any cg.txt with stand-in kernels (the reference graphs)
* :mod:`~planner.execute.plans`     -- DP schedules at feasible budgets (checks and benches)

The kernels (forward and hand-written VJPs, written against ``xp``) are the op table's,
:mod:`planner.ops`, which :mod:`planner.rows` reads too.

The Ray actor that runs the executor on a cluster GPU belongs to the application on top, not
here: the planner never imports Ray.

Example::

    >>> from planner.execute import zoo, export, executor, plans
    >>> g = export.to_cg(zoo.build("mlp"))
    >>> s = plans.feasible_budgets(g, count=1)[0][1]
    >>> executor.evaluate(g, s, allocators=("static",))["gradients_match"]
    True
"""
