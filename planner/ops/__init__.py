"""The op table: each operator's shape rule, FLOPs, forward kernel, hand-written VJP and the
temporaries its kernels hold, one topic a module.

It sits below :mod:`planner.rows` (row geometry, FLOPs of a row plan) and
:mod:`planner.execute` (tracer, exporter, executors), which both read it and never each
other for it.

Modules, bottom up: :mod:`~planner.ops.base` (:class:`OpDef`, :class:`KernelCall`, ufunc
buffers), :mod:`~planner.ops.flops`, :mod:`~planner.ops.reductions` (sums as BLAS products),
:mod:`~planner.ops.elementwise` (matmul, add, bias, ReLU, GELU), :mod:`~planner.ops.conv_tiles`
(a convolution's tiles and column layouts), :mod:`~planner.ops.conv`, :mod:`~planner.ops.pool`
(max / average pooling, upsampling), :mod:`~planner.ops.norm` (batch / layer norm),
:mod:`~planner.ops.loss`, :mod:`~planner.ops.shape` (reshape, concat),
:mod:`~planner.ops.attention`; :mod:`~planner.ops.table` gathers their ops (:data:`OPS`). Each
topic module ends with its ops' :class:`OpDef` entries, whose ``forward_temp`` /
``backward_temp`` say what the kernels above them hold beyond their operands: one place per
kernel, read by the kernel's author and by the whole-step prediction
(:func:`kernel_temp_bytes`).

Every kernel is written against an array module ``xp`` (NumPy or CuPy), so the same code runs on
both. An op's backward reads only what its :class:`OpDef` says it saves (``saves_inputs``,
``saves_output``): the exported cg.txt tags exactly those as ``input`` / ``output``, so a planner
that keeps those values alive can always run the backward block.

All kernels are deterministic (fixed loop and reduction orders; tiles fixed by the shapes), which
is what makes gradients of a recomputation schedule bitwise identical to the plain run's.

Speed (issue 26; ``bench/kernels_bench.py`` against PyTorch eager): every product goes through
the backend's BLAS (``matmul`` on contiguous or singly transposed operands); convolution is
im2col + GEMM in tiles whose columns stay within :data:`CONV_WORKSPACE_BYTES` (pixel-major
columns on small maps), its stride-1 input gradient a transposed convolution; per-channel
statistics are matrix-vector products with ones; elementwise chains run in place in one
temporary; kernels with ``fills_out`` / ``fills_grads`` write into the caller's buffer. No
per-element Python anywhere.

The names below are re-exported so that ``from planner.ops import X`` reads them; a tuning
constant is read by its own module's kernels, so a test that changes one patches that module
(``monkeypatch.setattr(planner.ops.norm, "EXPAND_PIXELS", ...)``).

>>> import numpy as np
>>> x = np.array([[-1.0, 2.0]], dtype=np.float32)
>>> OPS["relu"].forward(np, [x], {})
array([[0., 2.]], dtype=float32)
"""

from planner.ops.attention import ATTENTION_BLOCK_BYTES, _head_blocks  # noqa: F401
from planner.ops.base import UFUNC_BUFSIZE, KernelCall, OpDef, _bufs  # noqa: F401
from planner.ops.conv import (AMORTISE_PIXELS, DX_AMORTISE_PIXELS, _conv_dw,  # noqa: F401
                              _conv_dx, _winograd)
from planner.ops.conv_tiles import (CONV_WORKSPACE_BYTES, MERGE_PIXELS,  # noqa: F401
                                    PIXEL_MAJOR_MAX_WIDTH, PIXEL_MAJOR_MIN_CHANNELS, TILE_PIXELS,
                                    _conv_tiles, _pm_tiles, _row_taps, col2im_add,
                                    conv_workspace_bytes, merged_columns, pad_map,
                                    pixel_major_slab, swap01)
from planner.ops.elementwise import (_GELU_A, _GELU_C, ELEMENTWISE_BLOCK_BYTES,  # noqa: F401
                                     _rows_times)
from planner.ops.flops import BACKWARD_FLOPS_FACTOR  # noqa: F401
from planner.ops.norm import EXPAND_PIXELS, norm_forward, norm_statistics  # noqa: F401
from planner.ops.reductions import dots, sums  # noqa: F401
from planner.ops.table import OPS, implements, kernel_temp_bytes, with_workspace  # noqa: F401

__all__ = ["OPS", "OpDef", "KernelCall", "kernel_temp_bytes", "implements", "with_workspace",
           "BACKWARD_FLOPS_FACTOR", "CONV_WORKSPACE_BYTES", "conv_workspace_bytes",
           "UFUNC_BUFSIZE", "col2im_add", "merged_columns", "pixel_major_slab", "swap01",
           "pad_map", "sums", "dots", "norm_forward", "norm_statistics"]
