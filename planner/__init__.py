"""Memory planning for computational graphs: liveness, arena plans and recomputation schedules.

The analyses that scale with the graph run as vertex programs on :mod:`hgraph`; the DP
recurrences run on the driver. The planner never imports Ray.

    >>> import planner
    >>> from planner import synth
    >>> engine = planner.EngineOptions(tasks=4)            # where the analyses run
    >>> p = planner.plan(synth.build(layers=2, heads=2), "60%", engine=engine)  # or a cg.txt path
    >>> p.peak_bytes <= p.budget_bytes, p.recompute_cost, p.schedule.dumps()[:9]
    (True, 25, 'compute 0')
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:                       # for readers' tools; at run time, __getattr__ below
    from hgraph import EngineOptions
    from planner.api import Plan, plan
    from planner.options import AccountingOptions, CertifyOptions, SolverLimits
    from planner.rows_api import RowsPlan, plan_rows

#: The public face, name -> the module that defines it: :func:`plan` and its grouped options
#: (:mod:`planner.options`; ``EngineOptions`` is the engine's own record), the
#: :class:`Plan` it returns, and row plans. Everything else is an internal module's, imported
#: by its module path (tests/test_public_face.py holds each name here documented and at most
#: 8 parameters wide).
_PUBLIC = {
    "plan": "planner.api",
    "Plan": "planner.api",
    "EngineOptions": "hgraph",
    "SolverLimits": "planner.options",
    "CertifyOptions": "planner.options",
    "AccountingOptions": "planner.options",
    "plan_rows": "planner.rows_api",
    "RowsPlan": "planner.rows_api",
}

__all__ = list(_PUBLIC)


def __getattr__(name):
    """The names of :data:`__all__` are their modules' objects themselves (same objects, same
    signatures), imported on first use: ``import planner`` (which every ``planner.*`` import
    runs) stays light, so a CLI command that never plans loads neither NumPy nor the solvers."""
    if name in _PUBLIC:
        import importlib

        value = globals()[name] = getattr(importlib.import_module(_PUBLIC[name]), name)
        return value
    raise AttributeError(f"module 'planner' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_PUBLIC})
