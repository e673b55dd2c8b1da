"""What every topic of the op table shares: the :class:`OpDef` record, the :class:`KernelCall`
its temporaries are priced on, and the byte arithmetic of NumPy's ufunc buffers.

Why a module of its own: each topic module (:mod:`planner.ops.elementwise`, ``conv``, ``pool``,
``norm``, ``loss``, ``shape``, ``attention``) declares its ops here-shaped, kernels and
temporaries side by side, and :mod:`planner.ops.table` gathers them; this is the one thing
they all import.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable


def _numel(shape) -> int:
    return int(math.prod(shape))


def _nb(shape, itemsize) -> int:
    return _numel(shape) * itemsize


#: NumPy's ufunc buffer, in elements (``np.getbufsize()``): a ufunc that broadcasts, casts or
#: walks strided operands copies them through buffers of at most this many elements each.
UFUNC_BUFSIZE = 8192


def _bufs(count, shape, itemsize) -> int:
    """``count`` ufunc buffers for operands of ``shape`` (smaller arrays get smaller buffers)."""
    return count * min(UFUNC_BUFSIZE, _numel(shape)) * itemsize


def _bias_shape(xshape, axis):
    shape = [1] * len(xshape)
    shape[axis] = xshape[axis]
    return tuple(shape)


@dataclasses.dataclass(frozen=True)
class KernelCall:
    """One kernel call as its temporaries depend on it: the input shapes ``ins``, the result's
    shape ``out``, the op's ``attrs``, the item size ``e``; ``want``: the gradient positions
    asked for (backward); ``into``: the buffers the caller hands the kernel (forward: ``-1``
    when it is given ``out=``; backward: the gradient positions given ``out={pos: ...}``)."""

    ins: tuple
    out: tuple
    attrs: dict
    e: int
    want: frozenset = frozenset()
    into: frozenset = frozenset()

    @property
    def xs(self) -> int:
        """Bytes of the first input."""
        return _nb(self.ins[0], self.e) if self.ins else 0

    @property
    def ys(self) -> int:
        """Bytes of the result (the forward's output, the backward's output gradient)."""
        return _nb(self.out, self.e)

    @property
    def res(self) -> int:
        """The forward's result where the kernel allocates it (not handed ``out=``), else 0."""
        return 0 if -1 in self.into else self.ys

    def held(self, pos: int, nbytes: int) -> int:
        """``nbytes`` where gradient ``pos`` is wanted and the kernel allocates it, else 0."""
        return 0 if pos in self.into or pos not in self.want else nbytes


def result_temp(c: KernelCall) -> int:
    """A forward kernel's temporaries when it holds nothing but its result (0 when handed
    ``out=``)."""
    return c.res


def no_temp(c: KernelCall) -> int:
    """A kernel that allocates nothing (views of its operands, a backward that returns the
    output gradient itself)."""
    return 0


@dataclasses.dataclass(frozen=True)
class OpDef:
    """One op of the table: its shape rule, FLOPs, kernels, what its backward saves, and what
    its kernels hold beyond their operands (``forward_temp`` / ``backward_temp``: a
    :class:`KernelCall` -> bytes, the most the kernel holds at once, its returned arrays
    included unless written into ``out``; declared beside the kernel in its topic module and
    read by the whole-step prediction, :func:`planner.ops.kernel_temp_bytes`)."""

    name: str                 # tracer / details name
    type: str                 # cg.txt FunctionType (Chainer's class names where they exist)
    infer: Callable           # (in_shapes, in_dtypes, attrs) -> (shape, dtype)
    flops: Callable           # (in_shapes, out_shape, attrs) -> forward FLOPs
    forward: Callable         # (xp, xs, attrs) -> y
    backward: Callable        # (xp, gy, saved, y, attrs, in_shapes, want) -> {pos: grad}; a grad
                              # may be a view of gy (callers copy or add it into their buffers)
    saves_inputs: tuple = ()  # input positions the backward reads
    saves_output: bool = False
    fills_out: bool = False   # forward takes ``out=`` (an array of the result's shape and dtype,
                              # not aliasing an input) and writes the result there
    fills_grads: bool = False  # backward takes ``out={pos: array}`` likewise for (some of) the
                              # gradients it returns (it returns those arrays)
    forward_temp: Callable = result_temp     # KernelCall -> bytes beyond operands and ``out=``
    backward_temp: Callable = no_temp        # KernelCall -> bytes beyond operands and ``out=``
