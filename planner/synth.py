"""Deep transformer-like and branchy CNN-like training graphs in the cg.txt format (``hgraph
graph synth`` writes them).

The reference graphs stop at ~1,000 variables; the planner is meant to scale far past that, so
this tool writes graphs of any depth with the structure that matters for planning.

:func:`build` (the transformer) has a residual
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

:func:`build_cnn` is branchy in the other way convolutional nets are: Inception modules (four
parallel branches of 1×1/3×3/5×5 convolutions and a pooling branch, joined by a Concat) and
DenseNet blocks (each layer's input is the Concat of the block input and *every* earlier layer's
new features, so fan-in grows to ``dense_layers + 1`` and many values stay live together), in
``stages`` stages that halve the spatial size and double the width, joined by DenseNet
transitions. Sizes are float32 ``batch × channels × height × width × 4``; backward blocks
follow dump.py's rules as Chainer records them (ReLU keeps only its output; pooling keeps
input and output). :func:`cnn_blocks_for_nodes` sizes it for a node count.

    >>> g = build_cnn(blocks=2, stages=2, dense_layers=2, image=32, batch=2)
    >>> len(g.forward) == cnn_nodes(blocks=2, stages=2, dense_layers=2)
    True
    >>> max(len(f.inputs) for f in g.forward if f.type == "Concat")   # fan-in of the last Concat
    4
"""

from __future__ import annotations

import json

from planner.cg import ComputationalGraph, Function

__all__ = ["build", "nodes_per_layer", "layers_for_nodes", "build_cnn", "cnn_nodes",
           "cnn_blocks_for_nodes"]

F32 = 4
#: Functions whose backward retains the forward output (Chainer's get_retained_outputs).
_RETAINS_OUTPUT = {"Softmax", "GELU", "MaxPooling2D", "AveragePooling2D"}
#: Functions whose backward reads only the output, none of the inputs (Chainer's ReLU).
_OUTPUT_ONLY = {"ReLU"}


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
            inputs = [(y, "gradient")]
            if ftype in _OUTPUT_ONLY:
                inputs.append((y, "output"))
            else:
                inputs += [(a, "input") for a in ins]
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


#: Nodes of one Inception module: 1×1 (3), 1×1→3×3 (6), 1×1→5×5 (6), pool→1×1 (4), Concat.
_INCEPTION_NODES = 20
#: Nodes of one DenseNet layer: BN, ReLU, 1×1 conv, BN, ReLU, 3×3 conv, Concat.
_DENSE_LAYER_NODES = 7
#: Stem (conv, BN, ReLU, max-pool), head (global average pool, Linear, loss), transition.
_STEM_NODES, _HEAD_NODES, _TRANSITION_NODES = 4, 3, 4


def cnn_nodes(blocks: int = 8, stages: int = 4, dense_layers: int = 4) -> int:
    """Activations of :func:`build_cnn` with these sizes (one block = Inception + dense block)."""
    stages = min(stages, blocks)
    return (_STEM_NODES + _HEAD_NODES + _TRANSITION_NODES * (stages - 1)
            + blocks * (_INCEPTION_NODES + _DENSE_LAYER_NODES * dense_layers))


def cnn_blocks_for_nodes(nodes: int, stages: int = 4, dense_layers: int = 4) -> int:
    """Blocks needed for at least ``nodes`` activations."""
    per = _INCEPTION_NODES + _DENSE_LAYER_NODES * dense_layers
    blocks = max(1, -(-(nodes - _STEM_NODES - _HEAD_NODES - _TRANSITION_NODES * (stages - 1))
                      // per))
    while cnn_nodes(blocks, stages, dense_layers) < nodes:     # fewer stages when blocks < stages
        blocks += 1
    return blocks


def build_cnn(blocks: int = 8, stages: int = 4, dense_layers: int = 4, width: int = 64,
              growth: int = 32, image: int = 224, batch: int = 8,
              classes: int = 1000) -> ComputationalGraph:
    """The training graph of an Inception/DenseNet-style CNN (see the module docstring).

    ``blocks`` (Inception module + dense block of ``dense_layers`` layers each) are spread evenly
    over ``min(stages, blocks)`` stages; stage ``s`` runs at ``image / 2**(s + 2)`` pixels a side
    (at least 1) with ``width · 2**s`` Inception channels; each dense layer adds ``growth``.
    """
    if min(blocks, stages, dense_layers, width, growth, image, batch, classes) < 1:
        raise ValueError("blocks, stages, dense_layers, width, growth, image, batch and classes "
                         "must be >= 1")
    stages = min(stages, blocks)
    b = _Builder()
    state = {"conv": 0, "bn": 0}

    def fmap(channels, side):
        return batch * channels * side * side * F32

    def conv(inp, cin, cout, k, side):
        state["conv"] += 1
        w = b.var(cout * cin * k * k * F32, f"/predictor/conv{state['conv']}/W")
        return b.fn("Convolution2DFunction", [inp, w], fmap(cout, side))

    def bn_relu(inp, channels, side):
        state["bn"] += 1
        p = f"/predictor/bn{state['bn']}"
        h = b.fn("BatchNormalization", [inp, b.var(channels * F32, f"{p}/gamma"),
                                        b.var(channels * F32, f"{p}/beta")], fmap(channels, side))
        return b.fn("ReLU", [h], fmap(channels, side))

    def conv_bn_relu(inp, cin, cout, k, side):
        return bn_relu(conv(inp, cin, cout, k, side), cout, side)

    def inception(x, cin, cout, side):
        q = max(1, cout // 4)
        b1 = conv_bn_relu(x, cin, q, 1, side)
        b3 = conv_bn_relu(conv_bn_relu(x, cin, q, 1, side), q, q, 3, side)
        b5 = conv_bn_relu(conv_bn_relu(x, cin, q, 1, side), q, q, 5, side)
        bp = conv_bn_relu(b.fn("MaxPooling2D", [x], fmap(cin, side)), cin, q, 1, side)
        return b.fn("Concat", [b1, b3, b5, bp], fmap(4 * q, side)), 4 * q

    def dense_block(x, cin, side):
        feats, channels = [x], cin
        for _ in range(dense_layers):
            h = conv(bn_relu(x, channels, side), channels, 4 * growth, 1, side)
            feats.append(conv(bn_relu(h, 4 * growth, side), 4 * growth, growth, 3, side))
            channels += growth
            x = b.fn("Concat", list(feats), fmap(channels, side))
        return x, channels

    side = max(1, image // 2)
    x = b.var(batch * 3 * image * image * F32, "0")                 # images (model input 0)
    labels = b.var(batch * F32, "1")
    x = conv_bn_relu(x, 3, width, 7, side)
    side = max(1, side // 2)
    x = b.fn("MaxPooling2D", [x], fmap(width, side))
    channels = width
    for s in range(stages):
        if s:
            x = conv(bn_relu(x, channels, side), channels, width << s, 1, side)
            side = max(1, side // 2)
            channels = width << s
            x = b.fn("AveragePooling2D", [x], fmap(channels, side))
        for _ in range(blocks // stages + (s < blocks % stages)):
            x, channels = inception(x, channels, width << s, side)
            x, channels = dense_block(x, channels, side)
    x = b.fn("AveragePooling2D", [x], batch * channels * F32)
    w = b.var(classes * channels * F32, "/predictor/fc/W")
    bias = b.var(classes * F32, "/predictor/fc/b")
    logits = b.fn("LinearFunction", [x, w, bias], batch * classes * F32)
    b.fn("SoftmaxCrossEntropy", [logits, labels], F32)
    return b.graph()

