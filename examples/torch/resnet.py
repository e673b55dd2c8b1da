"""A ResNet-18/50-style CNN in plain torch.nn: conv stem, batch norm, residual basic blocks.

``model()`` returns ``(model, (images,), loss)``: a 2-stage network small enough to train a
step in well under a second on 2 CPU cores (float64, so gradients compare exactly).
``hgraph graph torch examples/torch/resnet.py:model --out g.txt``
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    """Two 3x3 conv-bn layers with an identity (or 1x1 conv-bn) shortcut, as in ResNet-18."""

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.short is None else self.short(x)))


class ResNet(nn.Module):
    def __init__(self, width=8, blocks=(2, 2), classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(), nn.MaxPool2d(2))
        layers, cin = [], width
        for i, n in enumerate(blocks):
            cout = width * 2 ** i
            for j in range(n):
                layers.append(BasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1))
                cin = cout
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        y = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


def model(batch=4, image=16, width=8):
    torch.manual_seed(0)
    net = ResNet(width=width).double()
    x = torch.randn(batch, 3, image, image, dtype=torch.float64)
    labels = torch.arange(batch) % 10
    return net, (x,), lambda out: F.cross_entropy(out, labels)


def blocks(net):
    """The repeated blocks (what "checkpoint every block" wraps in bench/torch_bench.py)."""
    return list(net.blocks)
