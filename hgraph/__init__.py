"""hgraph: a Pregel-style graph engine with push, block-pull and hybrid messaging.

    import hgraph
    g = hgraph.Graph.from_edges(src, dst, weights)
    result = hgraph.run(program, g, hgraph.EngineOptions(tasks=4))   # see hgraph.api.run
    with hgraph.Session(hgraph.EngineOptions(tasks=4)) as s:         # workers across runs,
        s.run(program, g, keep="x", gather=False)                    # values left on them:
        s.run(other, g, inputs=("x",))                               # see hgraph.session

The names below are loaded on first use (a module ``__getattr__``), so ``import
hgraph.common.errors`` or ``hgraph.common.fileio`` (:mod:`hgraph.common`: what the engine, the
planner and the jobs share) does not start NumPy, the master loop, the wire format or the
checkpoint store: a command line that only builds its parser, or fails on a bad flag, stays
instant.
"""

import importlib

#: Public name -> the module that defines it (``io`` and ``shards``, graphs the workers read
#: a byte range each, are the submodules themselves).
_LAZY = {
    "ExactSum": "hgraph.exactsum",
    "exact_sum": "hgraph.exactsum",
    "EngineOptions": "hgraph.options",
    "Graph": "hgraph.graph",
    "Result": "hgraph.result",
    "Session": "hgraph.session",
    "run": "hgraph.api",
    "Update": "hgraph.program",
    "VertexProgram": "hgraph.program",
    "io": None,
    "shards": None,
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'hgraph' has no attribute {name!r}")
    module = _LAZY[name]
    if module is None:
        value = importlib.import_module(f"hgraph.{name}")
    else:
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
