"""A U-Net in plain torch.nn: conv-bn-relu stages, max-pool down, upsample + concatenate up.

``model()`` returns ``(model, (images,))``; the default loss (the output's mean) applies.
``hgraph graph torch examples/torch/unet.py:model --out g.txt``
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def stage(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU())


class UNet(nn.Module):
    def __init__(self, width=4, levels=2):
        super().__init__()
        chans = [width * 2 ** i for i in range(levels + 1)]
        self.down = nn.ModuleList([stage(3 if i == 0 else chans[i - 1], chans[i])
                                   for i in range(levels)])
        self.mid = stage(chans[levels - 1], chans[levels])
        self.up = nn.ModuleList([stage(chans[i + 1] + chans[i], chans[i])
                                 for i in reversed(range(levels))])
        self.out = nn.Conv2d(chans[0], 2, 1)

    def forward(self, x):
        skips = []
        for d in self.down:
            x = d(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.mid(x)
        for u in self.up:
            x = F.interpolate(x, scale_factor=2, mode="nearest")
            x = u(torch.cat([x, skips.pop()], dim=1))
        return self.out(x)


def model(batch=2, image=16, width=4):
    torch.manual_seed(0)
    net = UNet(width=width).double()
    return net, (torch.randn(batch, 3, image, image, dtype=torch.float64),)


def blocks(net):
    """The conv stages (what "checkpoint every block" wraps in bench/torch_bench.py)."""
    return [*net.down, net.mid, *net.up]
