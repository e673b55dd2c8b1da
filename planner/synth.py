"""Deep transformer-like training graphs in the cg.txt format (``hgraph graph synth`` writes them).

The reference graphs stop at ~1,000 variables; the planner is meant to scale far past that, so
this tool writes graphs of any depth with the structure that matters for planning: a residual
stream, pre-LayerNorm attention with ``heads`` parallel branches (scores, softmax, context per
head — incomparable lower sets, as GoogLeNet's branches), an MLP, and a loss. Sizes are float32
``numel × 4`` at the given batch/sequence/hidden sizes; backward blocks follow dump.py's rules
(FORMAT.md §1.2: ``gradient`` of the output, every forward input as ``input``, retained outputs
of Softmax/GELU as ``output``; outputs are the forward inputs in order).

Per layer: 2 LayerNorms, 4 Linears (q, k, v, out), per head 3 nodes (MatMul, Softmax, MatMul),
a Concat, 2 Linears + GELU for the MLP and 2 Adds: ``12 + 3·heads`` activations.

Example::

    >>> g = build(layers=2, heads=2)
    >>> len(g.forward), g.num_vars > len(g.forward)
    (40, True)
"""

from __future__ import annotations

import json

from planner.cg import ComputationalGraph, Function

__all__ = ["build", "nodes_per_layer", "layers_for_nodes"]

F32 = 4
#: Functions whose backward retains the forward output (Chainer's get_retained_outputs).
_RETAINS_OUTPUT = {"Softmax", "GELU"}


def nodes_per_layer(heads: int) -> int:
    return 12 + 3 * heads


def layers_for_nodes(nodes: int, heads: int = 4) -> int:
    """Layers needed for at least ``nodes`` activations (the head adds 4 more)."""
    per = nodes_per_layer(heads)
    return max(1, -(-(nodes - 4) // per))


class _Builder:
    def __init__(self):
        self.var_bytes, self.var_names, self.fwd = [], [], []

    def var(self, nbytes: int, name: str = "_") -> int:
        self.var_bytes.append(int(nbytes))
        self.var_names.append(name)
        return len(self.var_bytes) - 1

    def fn(self, ftype: str, inputs, out_bytes: int) -> int:
        y = self.var(out_bytes)
        self.fwd.append((ftype, list(inputs), y))
        return y

    def graph(self) -> ComputationalGraph:
        nf = len(self.fwd)
        functions = []
        for i, (ftype, ins, y) in enumerate(self.fwd):
            details = json.dumps({"rank": i}, separators=(", ", ": "))
            functions.append(Function(i, "forward", [(a, "_") for a in ins], [y], ftype, details))
        for i, (ftype, ins, y) in enumerate(self.fwd):
            inputs = [(y, "gradient")] + [(a, "input") for a in ins]
            if ftype in _RETAINS_OUTPUT:
                inputs.append((y, "output"))
            details = json.dumps({"rank": i}, separators=(", ", ": "))
            functions.append(Function(nf + i, "backward", inputs, list(ins), ftype, details))
        return ComputationalGraph(self.var_bytes, self.var_names, functions)


def build(layers: int = 12, hidden: int = 256, seq: int = 128, batch: int = 8, heads: int = 4,
          vocab: int = 1000) -> ComputationalGraph:
    """The training graph of a ``layers``-deep pre-LN transformer (see the module docstring)."""
    if min(layers, hidden, seq, batch, heads, vocab) < 1:
        raise ValueError("layers, hidden, seq, batch, heads and vocab must be >= 1")
    b = _Builder()
    tok = batch * seq
    act = tok * hidden * F32
    head_dim = max(1, hidden // heads)
    x = b.var(tok * F32, "0")                                      # token ids (model input 0)
    labels = b.var(tok * F32, "1")
    emb = b.var(vocab * hidden * F32, "/predictor/embed/W")
    x = b.fn("EmbedIDFunction", [x, emb], act)

    def param(path, numel):
        return b.var(numel * F32, path)

    def linear(inp, path, fan_in, fan_out):
        w = param(f"{path}/W", fan_in * fan_out)
        bias = param(f"{path}/b", fan_out)
        return b.fn("LinearFunction", [inp, w, bias], tok * fan_out * F32)

    def layernorm(inp, path):
        return b.fn("LayerNormalization", [inp, param(f"{path}/gamma", hidden),
                                           param(f"{path}/beta", hidden)], act)

    for layer in range(layers):
        p = f"/predictor/l{layer}"
        h = layernorm(x, f"{p}/ln1")
        q = linear(h, f"{p}/q", hidden, hidden)
        k = linear(h, f"{p}/k", hidden, hidden)
        v = linear(h, f"{p}/v", hidden, hidden)
        ctxs = []
        for _ in range(heads):
            s = b.fn("MatMul", [q, k], batch * seq * seq * F32)
            pr = b.fn("Softmax", [s], batch * seq * seq * F32)
            ctxs.append(b.fn("MatMul", [pr, v], tok * head_dim * F32))
        c = b.fn("Concat", ctxs, act)
        o = linear(c, f"{p}/o", hidden, hidden)
        x = b.fn("Add", [x, o], act)
        h = layernorm(x, f"{p}/ln2")
        u = linear(h, f"{p}/fc1", hidden, 4 * hidden)
        u = b.fn("GELU", [u], tok * 4 * hidden * F32)
        d = linear(u, f"{p}/fc2", 4 * hidden, hidden)
        x = b.fn("Add", [x, d], act)
    x = layernorm(x, "/predictor/ln_f")
    logits = linear(x, "/predictor/head", hidden, vocab)
    b.fn("SoftmaxCrossEntropy", [logits, labels], F32)
    return b.graph()
