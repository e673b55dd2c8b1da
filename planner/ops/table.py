"""The op table: every op of the topic modules by name (:data:`OPS`), and what the planner asks
of it -- whether a graph's ops are all here (:func:`implements`), a convolution's workspace cap
(:func:`with_workspace`) and a kernel call's temporaries (:func:`kernel_temp_bytes`, read off
the op's own declaration beside its kernel).

>>> kernel_temp_bytes("relu", "backward", [(8, 16)], (8, 16), {}, want=(0,), into=(0,))
128
"""

from __future__ import annotations

from planner.ops import attention, conv, elementwise, loss, norm, pool, shape
from planner.ops.base import KernelCall, OpDef

OPS: dict[str, OpDef] = {op.name: op for module in (elementwise, conv, pool, norm, loss, shape,
                                                      attention) for op in module.DEFS}


def implements(ops) -> bool:
    """Whether ``ops`` (op names, or None: a graph without op arguments) are all in the op
    table: what a graph needs to run on real kernels and to have its whole step budgeted."""
    return ops is not None and all(op in OPS for op in set(ops))


def with_workspace(attrs: dict, op: str, workspace: int | None) -> dict:
    """``attrs`` with the convolution workspace cap ``workspace`` (None: the kernels' own,
    :data:`~planner.ops.conv_tiles.CONV_WORKSPACE_BYTES`): the cap a whole-step plan chose."""
    if workspace is None or op != "conv2d":
        return attrs
    return {**attrs, "workspace": int(workspace)}


def kernel_temp_bytes(name, phase, in_shapes, out_shape, attrs, itemsize=4, want=(),
                      into=()) -> int:
    """The most bytes kernel ``name`` (``phase`` ``"forward"`` or ``"backward"``) holds at once
    beyond its inputs and the buffers it is handed: ``into`` names those (forward: ``-1`` when
    it is given ``out=``; backward: the gradient positions given ``out={pos: ...}``); ``want``:
    the gradient positions asked for. Results the kernel returns in arrays of its own count
    (the caller copies them into its buffers); Python objects and NumPy's ufunc buffers do not.

    Each op declares its own (:attr:`OpDef.forward_temp`, :attr:`OpDef.backward_temp`, beside
    its kernel in its topic module: change a kernel's temporaries, change the function next to
    it; tests/test_step_memory.py compares both under tracemalloc)."""
    call = KernelCall(tuple(tuple(s) for s in in_shapes), tuple(out_shape), attrs,
                      int(itemsize), frozenset(want), frozenset(into))
    opdef = OPS[name]
    return int((opdef.forward_temp if phase == "forward" else opdef.backward_temp)(call))
