"""A MobileNet-style CNN in plain torch.nn: inverted residual blocks of a 1x1 expansion, a 3x3
depthwise convolution (``groups`` = channels) and a 1x1 projection, batch norm and ReLU6.

``model()`` returns ``(model, (images,), loss)``. ``hgraph graph torch
examples/torch/mobilenet.py:model --out g.txt``
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand=4):
        super().__init__()
        mid = cin * expand
        self.body = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(),
            nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid),
            nn.ReLU6(),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


class MobileNet(nn.Module):
    def __init__(self, width=8, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU6())
        self.blocks = nn.Sequential(InvertedResidual(width, width, 1),
                                    InvertedResidual(width, 2 * width, 2),
                                    InvertedResidual(2 * width, 2 * width, 1))
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x):
        y = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


def model(batch=4, image=16, width=8):
    torch.manual_seed(0)
    net = MobileNet(width=width).double()
    x = torch.randn(batch, 3, image, image, dtype=torch.float64)
    labels = torch.arange(batch) % 10
    return net, (x,), lambda out: F.cross_entropy(out, labels)


def blocks(net):
    """The repeated blocks (what "checkpoint every block" wraps in bench/torch_bench.py)."""
    return list(net.blocks)
