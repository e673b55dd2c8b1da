"""Define-by-run tracing: record a model's forward as a graph instead of running it.

Like SINGA's graph mode (operation buffering), calling an op on a :class:`Tensor` only appends a
:class:`Node` to the :class:`Tracer`: shapes and dtypes are inferred, byte sizes and FLOP costs
attached. The recorded forward plus the VJPs of :mod:`planner.ops` is the whole training
step; :mod:`planner.execute.export` writes it as cg.txt.

>>> t = Tracer()
>>> x = t.input((4, 8)); y = t.input((4,), dtype="int32")
>>> W = t.param("fc/W", (8, 3))
>>> loss = t.softmax_cross_entropy(t.relu(x @ W), y)
>>> [n.op for n in t.nodes], t.vars[loss.id].shape
(['matmul', 'relu', 'softmax_cross_entropy'], ())
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from planner.ops import OPS


@dataclasses.dataclass
class Var:
    id: int
    shape: tuple
    dtype: str
    kind: str                 # "param" | "input" | "activation"
    name: str                 # cg.txt name: "/path/W" for params, "k" for the k-th input, "_" else
    init: dict | None = None  # params and inputs: how the executor fills them

    @property
    def nbytes(self) -> int:
        return int(math.prod(self.shape)) * np.dtype(self.dtype).itemsize


@dataclasses.dataclass
class Node:
    index: int
    op: str
    inputs: list[int]
    output: int
    attrs: dict
    flops: int


class Tensor:
    """A handle on a traced variable; arithmetic operators record ops."""

    __slots__ = ("tracer", "id")

    def __init__(self, tracer: "Tracer", vid: int):
        self.tracer, self.id = tracer, vid

    @property
    def shape(self) -> tuple:
        return self.tracer.vars[self.id].shape

    def __matmul__(self, other):
        return self.tracer.matmul(self, other)

    def __add__(self, other):
        return self.tracer.add(self, other)

    def reshape(self, *shape):
        return self.tracer.reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape)

    def __repr__(self):
        v = self.tracer.vars[self.id]
        return f"Tensor(id={v.id}, shape={v.shape}, {v.kind})"


class Tracer:
    """Records ops; ``vars`` and ``nodes`` are the forward graph (creation order is topological)."""

    def __init__(self, name: str = "model", dtype: str = "float32"):
        self.name = name
        self.dtype = str(np.dtype(dtype))     # of parameters and float inputs
        self.vars: list[Var] = []
        self.nodes: list[Node] = []
        self._inputs = 0

    # ---------------------------------------------------------------- leaves
    def input(self, shape, dtype: str | None = None, classes: int | None = None) -> Tensor:
        """The next model input (named 0, 1, ... as in cg.txt); ``classes`` makes integer labels."""
        init = {"kind": "labels", "classes": int(classes)} if classes else {"kind": "normal", "scale": 1.0}
        v = self._var(shape, dtype or self.dtype, "input", str(self._inputs), init)
        self._inputs += 1
        return v

    def param(self, name: str, shape, init: str = "normal", scale: float | None = None) -> Tensor:
        shape = tuple(int(s) for s in shape)
        if scale is None and init == "normal":
            fan_in = int(math.prod(shape[1:])) if len(shape) == 4 else shape[0]
            scale = 1.0 / math.sqrt(max(fan_in, 1))
        return self._var(shape, self.dtype, "param", "/" + name.strip("/"),
                         {"kind": init, "scale": scale})

    def _var(self, shape, dtype, kind, name, init=None) -> Tensor:
        v = Var(len(self.vars), tuple(int(s) for s in shape), str(np.dtype(dtype)), kind, name, init)
        self.vars.append(v)
        return Tensor(self, v.id)

    # ---------------------------------------------------------------- recording
    def record(self, op: str, inputs, **attrs) -> Tensor:
        opdef = OPS[op]
        ids = [t.id for t in inputs]
        shapes = [self.vars[i].shape for i in ids]
        dtypes = [self.vars[i].dtype for i in ids]
        shape, dtype = opdef.infer(shapes, dtypes, attrs)
        out = self._var(shape, dtype, "activation", "_")
        self.nodes.append(Node(len(self.nodes), op, ids, out.id, dict(attrs),
                               int(opdef.flops(shapes, shape, attrs))))
        return out

    def matmul(self, x, w):
        return self.record("matmul", [x, w])

    def add(self, a, b):
        return self.record("add", [a, b])

    def bias(self, x, b, axis: int = -1):
        return self.record("bias", [x, b], axis=axis)

    def relu(self, x):
        return self.record("relu", [x])

    def gelu(self, x):
        return self.record("gelu", [x])

    def conv2d(self, x, w, stride: int = 1, pad: int = 0):
        return self.record("conv2d", [x, w], stride=stride, pad=pad)

    def max_pool(self, x, kernel: int, stride: int | None = None, pad: int = 0):
        return self.record("max_pool", [x], kernel=kernel, stride=stride or kernel, pad=pad)

    def avg_pool(self, x, kernel: int, stride: int | None = None):
        return self.record("avg_pool", [x], kernel=kernel, stride=stride or kernel)

    def upsample(self, x, factor: int = 2):
        """Nearest-neighbour upsampling (U-Net decoders)."""
        return self.record("upsample", [x], factor=factor)

    def batch_norm(self, x, gamma, beta, eps: float = 1e-5):
        return self.record("batch_norm", [x, gamma, beta], kind="batch", axis=1, eps=eps)

    def layer_norm(self, x, gamma, beta, eps: float = 1e-5):
        return self.record("layer_norm", [x, gamma, beta], kind="layer", axis=-1, eps=eps)

    def softmax_cross_entropy(self, logits, labels):
        return self.record("softmax_cross_entropy", [logits, labels])

    def reshape(self, x, shape):
        return self.record("reshape", [x], shape=[int(s) for s in shape])

    def concat(self, xs, axis: int = 1):
        return self.record("concat", list(xs), axis=axis)

    def attention(self, qkv, heads: int, causal: bool = False):
        return self.record("attention", [qkv], heads=heads, causal=causal)

    # ---------------------------------------------------------------- queries
    @property
    def params(self) -> list[Var]:
        return [v for v in self.vars if v.kind == "param"]

    @property
    def forward_flops(self) -> int:
        return sum(n.flops for n in self.nodes)

    def activation_bytes(self) -> int:
        return sum(v.nbytes for v in self.vars if v.kind == "activation")
