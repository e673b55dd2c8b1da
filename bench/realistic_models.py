"""The realistic bench's three models (issue 35), float32, at two scales, where activations
dominate the training step's memory (bench/realistic_bench.py measures how much).

* ``gpt``: examples/torch/gpt.py's GPT (pre-norm blocks, causal scaled-dot-product attention;
  the same class, loaded from the example, not a copy) at a real width and length;
* ``resnet50``: ResNet-50 (bottleneck blocks 3-4-6-3, widths 64-2048, batch norm), written
  here because torchvision does not import beside the CPU torch on this machine;
* ``vit``: a ViT-B/16-shaped model (16x16 patches, d=768, 12 heads, MLP 3072) built by
  transformers from a ``ViTConfig`` (no download), fewer layers at ``small``.

``full``: the issue's sizes (GPT d=512, 8 layers, seq 512, batch 8; ResNet-50 224 px batch 16;
ViT-B/16 12 layers 224 px batch 8). ``small``: what a 2-core machine shared with other jobs
runs in a few seconds a step, activations still the bulk of the step (the share is printed).
"""

from __future__ import annotations

import importlib.util
import os
import sys

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "torch")

#: Per scale and model, the size knobs (see each ``*_spec``).
SCALES = {
    "small": dict(gpt=dict(d=256, layers=4, seq=256, batch=4, heads=4, vocab=512),
                  resnet50=dict(image=160, batch=8),
                  vit=dict(layers=4, image=224, batch=8)),
    "full": dict(gpt=dict(d=512, layers=8, seq=512, batch=8, heads=8, vocab=512),
                 resnet50=dict(image=224, batch=16),
                 vit=dict(layers=12, image=224, batch=8)),
}
MODELS = ("gpt", "resnet50", "vit")


def gpt_spec(d, layers, seq, batch, heads, vocab):
    """examples/torch/gpt.py's GPT in float32, next-token cross entropy."""
    import torch
    import torch.nn.functional as F

    s = importlib.util.spec_from_file_location("ex_gpt", os.path.join(EXAMPLES, "gpt.py"))
    ex = importlib.util.module_from_spec(s)
    sys.modules[s.name] = ex            # Dynamo imports the module of the code it traces
    s.loader.exec_module(ex)
    torch.manual_seed(0)
    net = ex.GPT(vocab=vocab, d=d, heads=heads, layers=layers, seq=seq)
    idx = torch.randint(0, vocab, (batch, seq))
    target = torch.roll(idx, -1, dims=1)
    return net, (idx,), lambda logits: F.cross_entropy(logits.reshape(-1, vocab),
                                                      target.reshape(-1))


def _resnet50():
    """ResNet-50 (He et al. 2016, v1.5: stride on the 3x3 conv), 1000 classes."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def conv_bn(cin, cout, k, stride=1):
        return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False),
                             nn.BatchNorm2d(cout))

    class Bottleneck(nn.Module):
        def __init__(self, cin, mid, stride):
            super().__init__()
            self.a, self.b = conv_bn(cin, mid, 1), conv_bn(mid, mid, 3, stride)
            self.c = conv_bn(mid, 4 * mid, 1)
            self.short = (conv_bn(cin, 4 * mid, 1, stride)
                          if stride != 1 or cin != 4 * mid else None)

        def forward(self, x):
            y = self.c(F.relu(self.b(F.relu(self.a(x)))))
            return F.relu(y + (x if self.short is None else self.short(x)))

    class ResNet50(nn.Module):
        def __init__(self, classes=1000):
            super().__init__()
            self.stem = nn.Sequential(conv_bn(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            layers, cin = [], 64
            for i, n in enumerate((3, 4, 6, 3)):
                for j in range(n):
                    layers.append(Bottleneck(cin, 64 * 2 ** i, 2 if (j == 0 and i > 0) else 1))
                    cin = 4 * 64 * 2 ** i
            self.blocks = nn.Sequential(*layers)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))

    return ResNet50()


def resnet50_spec(image, batch):
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    net = _resnet50()
    x = torch.randn(batch, 3, image, image)
    labels = torch.arange(batch) % 1000
    return net, (x,), lambda out: F.cross_entropy(out, labels)


def vit_spec(layers, image, batch):
    """transformers' ViTForImageClassification, ViT-B/16's widths, ``layers`` layers, eager
    attention off (scaled-dot-product attention, as the GPT), dropout 0 (the config's)."""
    import torch
    import torch.nn.functional as F
    import transformers as tr

    torch.manual_seed(0)
    cfg = tr.ViTConfig(image_size=image, patch_size=16, hidden_size=768, num_hidden_layers=layers,
                       num_attention_heads=12, intermediate_size=3072, num_labels=1000,
                       attn_implementation="sdpa")
    net = tr.ViTForImageClassification(cfg).train()
    x = torch.randn(batch, 3, image, image)
    labels = torch.arange(batch) % 1000
    return net, (x,), lambda out: F.cross_entropy(out.logits, labels)


def spec(name, scale):
    """(model, inputs, loss) of bench model ``name`` at ``scale``."""
    make = {"gpt": gpt_spec, "resnet50": resnet50_spec, "vit": vit_spec}[name]
    return make(**SCALES[scale][name])
