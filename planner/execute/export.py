"""Export a traced model's training step as cg.txt (the reference format of ``planner.cg``).

Forward block ``i`` is the i-th traced op (one output each); backward block ``i + M/2`` is its VJP:
``gradient`` of the output, ``input`` for each forward input the VJP reads, ``output`` when it
reads the forward output, and as outputs all forward inputs in order (FORMAT.md §1.2). The
details JSON carries what the executor needs to rebuild the real ops from the file alone: op name,
attributes, input/output shapes and dtypes, parameter and input initialisers, and FLOPs.

>>> from planner.execute import zoo
>>> g = to_cg(zoo.build("mlp", depth=1))
>>> len(g.forward), g.backward[0].type
(6, 'MatMul')
"""

from __future__ import annotations

import json

from planner import cg
from planner.execute.trace import Tracer
from planner.ops import BACKWARD_FLOPS_FACTOR, OPS


def details(t: Tracer, node) -> dict:
    """The JSON details of a traced node's forward block."""
    ins = [t.vars[i] for i in node.inputs]
    out = t.vars[node.output]
    init = {str(pos): v.init for pos, v in enumerate(ins) if v.kind != "activation"}
    return {"op": node.op, "attrs": node.attrs,
            "in_shapes": [list(v.shape) for v in ins], "in_dtypes": [v.dtype for v in ins],
            "out_shape": list(out.shape), "out_dtype": out.dtype, "init": init,
            "flops": node.flops, "backward_flops": BACKWARD_FLOPS_FACTOR * node.flops}


def to_cg(t: Tracer) -> cg.ComputationalGraph:
    """The forward + backward graph of ``t`` as a :class:`planner.cg.ComputationalGraph`."""
    m = len(t.nodes)
    forward, backward = [], []
    for node in t.nodes:
        opdef = OPS[node.op]
        text = json.dumps(details(t, node), separators=(",", ":"), sort_keys=True)
        forward.append(cg.Function(node.index, "forward", [(v, "_") for v in node.inputs],
                                   [node.output], opdef.type, text))
        inputs = [(node.output, "gradient")]
        inputs += [(node.inputs[p], "input") for p in opdef.saves_inputs]
        if opdef.saves_output:
            inputs.append((node.output, "output"))
        backward.append(cg.Function(m + node.index, "backward", inputs, list(node.inputs),
                                    opdef.type, json.dumps({"op": node.op, "vjp": True})))
    g = cg.ComputationalGraph([v.nbytes for v in t.vars], [v.name for v in t.vars],
                              forward + backward, path=f"cg_{t.name}.txt")
    return g


def dumps(t: Tracer) -> str:
    return cg.dumps(to_cg(t))


def write(t: Tracer, path) -> None:
    """Write ``t`` as cg.txt (atomically, through :func:`planner.cg.write`)."""
    cg.write(to_cg(t), path)


def flop_costs(g):
    """Forward FLOPs per forward function from the details of a zoo export, else None.

    A FLOP-based cost model for the planner (the reference counts Conv = 10, else 1).
    """
    import numpy as np

    out = []
    for f in g.forward:
        try:
            out.append(int(json.loads(f.details)["flops"]))
        except (ValueError, KeyError, TypeError):
            return None
    return np.asarray(out, dtype=np.int64)
