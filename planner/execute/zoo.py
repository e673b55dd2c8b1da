"""The model zoo: small traced training graphs sized by arguments.

``mlp``, ``resnet``, ``unet`` and ``transformer``, each a function of (batch, width, depth,
image or seq) returning a :class:`~planner.execute.trace.Tracer` whose single sink is the loss.
Defaults give graphs of 15-45 activations that every solver plans in well under a second;
``dtype="float64"`` builds the same model in double precision (gradient checks).

Every activation has at most two consumers (residual and skip connections fan out to exactly two),
so gradient accumulation is a single commutative add and a schedule's backward order cannot change
a gradient bit.

>>> g = build("mlp", depth=2)
>>> len(g.nodes), g.vars[g.nodes[-1].output].shape
(9, ())
"""

from __future__ import annotations

from hgraph.errors import HGraphError
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


def _finish(t: Tracer, loss) -> Tracer:
    t.loss = loss.id
    return t


MODELS = {"mlp": mlp, "resnet": resnet, "unet": unet, "transformer": transformer}


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
