"""The model zoo: small traced training graphs sized by arguments.

``mlp``, ``resnet``, ``unet``, ``transformer``, ``vgg16`` and ``resnet50``, each a function of
(batch, width, depth, image or seq) returning a :class:`~planner.execute.trace.Tracer` whose single
sink is the loss. Defaults give small graphs (15-80 activations, tiny widths) that every solver
plans in well under a second; ``vgg16 --width 64 --image 224`` and ``resnet50 --width 64 --depth 6
--image 224`` are the real networks (the widths are a multiplier: 64 is the papers' first stage);
``dtype="float64"`` builds the same model in double precision (gradient checks).

Every activation has at most two consumers (residual and skip connections fan out to exactly two),
so gradient accumulation is a single commutative add and a schedule's backward order cannot change
a gradient bit.

>>> g = build("mlp", depth=2)
>>> len(g.nodes), g.vars[g.nodes[-1].output].shape
(9, ())
"""

from __future__ import annotations

from hgraph.common.errors import HGraphError
from planner.execute.trace import Tracer

CLASSES = 10


def _linear(t, x, name, n_in, n_out):
    return t.bias(x @ t.param(f"{name}/W", (n_in, n_out)), t.param(f"{name}/b", (n_out,), init="zeros"))


def _bn(t, x, name, c):
    return t.batch_norm(x, t.param(f"{name}/gamma", (c,), init="ones"),
                        t.param(f"{name}/beta", (c,), init="zeros"))


def _ln(t, x, name, d):
    return t.layer_norm(x, t.param(f"{name}/gamma", (d,), init="ones"),
                        t.param(f"{name}/beta", (d,), init="zeros"))


def _conv_bn(t, x, name, c_in, c_out, k=3, stride=1, relu=True):
    y = t.conv2d(x, t.param(f"{name}/W", (c_out, c_in, k, k)), stride=stride, pad=k // 2)
    y = _bn(t, y, f"{name}/bn", c_out)
    return t.relu(y) if relu else y


def _head(t, x, c, labels):
    """Global average pool, linear classifier, softmax cross-entropy."""
    n, _, h, w = t.vars[x.id].shape
    pooled = t.reshape(t.avg_pool(x, kernel=h), (n, c)) if h == w else t.reshape(x, (n, c * h * w))
    n_in = c if h == w else c * h * w
    return t.softmax_cross_entropy(_linear(t, pooled, "fc", n_in, CLASSES), labels)


def mlp(batch: int = 32, width: int = 128, depth: int = 4, image: int = 8, dtype: str = "float32") -> Tracer:
    """``depth`` hidden layers of ``width`` units on flattened ``image`` x ``image`` inputs."""
    t = Tracer("mlp", dtype)
    x = t.input((batch, image * image))
    labels = t.input((batch,), dtype="int32", classes=CLASSES)
    h, n_in = x, image * image
    for i in range(depth):
        h = t.relu(_linear(t, h, f"fc{i}", n_in, width))
        n_in = width
    return _finish(t, t.softmax_cross_entropy(_linear(t, h, "out", n_in, CLASSES), labels))


def resnet(batch: int = 8, width: int = 8, depth: int = 1, image: int = 16, dtype: str = "float32") -> Tracer:
    """Stem (conv, BN, ReLU, max pool), three stages of ``depth`` basic blocks, pooled classifier."""
    t = Tracer("resnet", dtype)
    x = t.input((batch, 3, image, image))
    labels = t.input((batch,), dtype="int32", classes=CLASSES)
    h = _conv_bn(t, x, "stem", 3, width)
    h = t.max_pool(h, kernel=2)
    c_in = width
    for stage, c in enumerate([width, 2 * width, 4 * width]):
        for block in range(depth):
            stride = 2 if stage > 0 and block == 0 else 1
            name = f"res{stage + 2}/{block}"
            y = _conv_bn(t, h, f"{name}/a", c_in, c, stride=stride)
            y = _conv_bn(t, y, f"{name}/b", c, c, relu=False)
            short = h if (stride == 1 and c_in == c) else _conv_bn(t, h, f"{name}/proj", c_in, c, k=1,
                                                                    stride=stride, relu=False)
            h = t.relu(y + short)
            c_in = c
    return _finish(t, _head(t, h, c_in, labels))


def unet(batch: int = 4, width: int = 8, depth: int = 2, image: int = 16, dtype: str = "float32") -> Tracer:
    """Encoder of ``depth`` levels (two convs, max pool), bottleneck, decoder with skip concats."""
    if image % (2 ** depth):
        raise HGraphError(f"unet: image {image} must be divisible by 2**depth = {2 ** depth}")
    t = Tracer("unet", dtype)
    x = t.input((batch, 3, image, image))
    labels = t.input((batch,), dtype="int32", classes=CLASSES)
    h, c_in, skips = x, 3, []
    for level in range(depth):
        c = width * 2 ** level
        h = _conv_bn(t, h, f"enc{level}/a", c_in, c)
        h = _conv_bn(t, h, f"enc{level}/b", c, c)
        skips.append((h, c))
        h, c_in = t.max_pool(h, kernel=2), c
    c = width * 2 ** depth
    h = _conv_bn(t, h, "mid/a", c_in, c)
    h = _conv_bn(t, h, "mid/b", c, c)
    for level in reversed(range(depth)):
        skip, c_skip = skips[level]
        u = _conv_bn(t, t.upsample(h), f"dec{level}/up", c, c_skip, k=1)
        h = t.concat([skip, u], axis=1)
        h = _conv_bn(t, h, f"dec{level}/a", 2 * c_skip, c_skip)
        c = c_skip
    return _finish(t, _head(t, h, c, labels))


def transformer(batch: int = 4, width: int = 32, depth: int = 2, seq: int = 16, heads: int = 4,
                dtype: str = "float32") -> Tracer:
    """Pre-LN encoder: ``depth`` blocks of attention and a GELU MLP with residuals, linear head."""
    if width % heads:
        raise HGraphError(f"transformer: width {width} must be divisible by heads {heads}")
    t = Tracer("transformer", dtype)
    x = t.input((batch, seq, width))
    labels = t.input((batch,), dtype="int32", classes=CLASSES)
    for i in range(depth):
        name = f"layer{i}"
        qkv = _linear(t, _ln(t, x, f"{name}/ln1", width), f"{name}/qkv", width, 3 * width)
        a = _linear(t, t.attention(qkv, heads=heads), f"{name}/proj", width, width)
        x = x + a
        h = t.gelu(_linear(t, _ln(t, x, f"{name}/ln2", width), f"{name}/fc1", width, 4 * width))
        x = x + _linear(t, h, f"{name}/fc2", 4 * width, width)
    x = _ln(t, x, "ln_f", width)
    logits = _linear(t, t.reshape(x, (batch, seq * width)), "head", seq * width, CLASSES)
    return _finish(t, t.softmax_cross_entropy(logits, labels))


#: VGG-16's convolution stages: (convolutions, channels as a multiple of ``width``).
VGG16_STAGES = ((2, 1), (2, 2), (3, 4), (3, 8), (3, 8))
#: ResNet-50's bottleneck stages: (blocks, inner channels as a multiple of ``width``).
RESNET50_STAGES = ((3, 1), (4, 2), (6, 4), (3, 8))


def vgg16(batch: int = 2, width: int = 4, depth: int = 2, image: int = 32, dtype: str = "float32") -> Tracer:
    """VGG-16 (configuration D): 13 3x3 convolutions with ReLU in five stages, each closed by a
    2x2 max pool, then three fully connected layers (``64 * width`` hidden units; 4096 at
    ``width=64``). ``depth`` caps the convolutions per stage (``depth=3``: the real 13)."""
    if image % 32:
        raise HGraphError(f"vgg16: image {image} must be divisible by 32 (five 2x2 pools)")
    t = Tracer("vgg16", dtype)
    x = t.input((batch, 3, image, image))
    labels = t.input((batch,), dtype="int32", classes=CLASSES)
    h, c_in = x, 3
    for stage, (convs, mult) in enumerate(VGG16_STAGES):
        c = width * mult
        for i in range(min(convs, depth)):
            h = t.relu(t.bias(t.conv2d(h, t.param(f"conv{stage + 1}_{i + 1}/W", (c, c_in, 3, 3)), pad=1),
                              t.param(f"conv{stage + 1}_{i + 1}/b", (c,), init="zeros"), axis=1))
            c_in = c
        h = t.max_pool(h, kernel=2)
    side = image // 32
    n_in, hidden = c_in * side * side, 64 * width
    h = t.reshape(h, (batch, n_in))
    h = t.relu(_linear(t, h, "fc6", n_in, hidden))
    h = t.relu(_linear(t, h, "fc7", hidden, hidden))
    return _finish(t, t.softmax_cross_entropy(_linear(t, h, "fc8", hidden, CLASSES), labels))


def resnet50(batch: int = 2, width: int = 2, depth: int = 1, image: int = 32, dtype: str = "float32") -> Tracer:
    """ResNet-50's structure: 7x7/2 stem with BN, 3x3/2 max pool, four stages of bottleneck blocks
    (1x1 reduce, 3x3, 1x1 expand to 4x, BN after each, projection shortcut on each stage's first
    block, stride 2 from stage 3 on), global average pool and a linear classifier. Blocks per
    stage are ``min(depth, (3, 4, 6, 3))``: ``depth=6`` is ResNet-50, ``width=64`` its widths."""
    if image % 32:
        raise HGraphError(f"resnet50: image {image} must be divisible by 32 (total stride)")
    t = Tracer("resnet50", dtype)
    x = t.input((batch, 3, image, image))
    labels = t.input((batch,), dtype="int32", classes=CLASSES)
    h = _conv_bn(t, x, "conv1", 3, width, k=7, stride=2)
    h = t.max_pool(h, kernel=3, stride=2, pad=1)
    c_in = width
    for stage, (blocks, mult) in enumerate(RESNET50_STAGES):
        mid = width * mult
        out = 4 * mid
        for block in range(min(blocks, depth)):
            stride = 2 if stage > 0 and block == 0 else 1
            name = f"res{stage + 2}/{block}"
            y = _conv_bn(t, h, f"{name}/a", c_in, mid, k=1)
            y = _conv_bn(t, y, f"{name}/b", mid, mid, stride=stride)
            y = _conv_bn(t, y, f"{name}/c", mid, out, k=1, relu=False)
            short = h if block > 0 else _conv_bn(t, h, f"{name}/proj", c_in, out, k=1, stride=stride,
                                                   relu=False)
            h = t.relu(y + short)
            c_in = out
    return _finish(t, _head(t, h, c_in, labels))


def _finish(t: Tracer, loss) -> Tracer:
    t.loss = loss.id
    return t


MODELS = {"mlp": mlp, "resnet": resnet, "unet": unet, "transformer": transformer, "vgg16": vgg16,
          "resnet50": resnet50}
#: ``depth`` at which a zoo model is the real network (VGG-16's 13 convolutions, ResNet-50's
#: 3/4/6/3 bottlenecks); the defaults are smaller so tests stay fast.
REAL_DEPTH = {"vgg16": 3, "resnet50": 6}


def build(name: str, batch: int | None = None, width: int | None = None, depth: int | None = None,
          image: int | None = None, seq: int | None = None, **extra) -> Tracer:
    """A zoo model by name; arguments left ``None`` take the model's default."""
    if name not in MODELS:
        raise HGraphError(f"unknown zoo model {name!r}; choose from {', '.join(MODELS)}")
    kwargs = {k: v for k, v in dict(batch=batch, width=width, depth=depth, **extra).items() if v is not None}
    if name == "transformer":
        if image is not None:
            raise HGraphError("transformer: use --seq, not --image")
        if seq is not None:
            kwargs["seq"] = seq
    else:
        if seq is not None:
            raise HGraphError(f"{name}: use --image, not --seq")
        if image is not None:
            kwargs["image"] = image
    for key, value in kwargs.items():
        if isinstance(value, int) and value < 1:
            raise HGraphError(f"{name}: --{key} must be positive, got {value}")
    try:
        return MODELS[name](**kwargs)
    except ValueError as err:       # a shape rule refused the sizes
        raise HGraphError(f"{name}: {err}") from None
