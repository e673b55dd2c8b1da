"""A GPT-style decoder in plain torch.nn: embeddings, pre-norm blocks with causal attention.

``model()`` returns ``(model, (tokens,), loss)``: next-token cross entropy. Attention goes
through ``F.scaled_dot_product_attention`` (on CPU: the flash-attention-for-CPU kernel, whose
FLOPs hgraph counts itself). ``hgraph graph torch examples/torch/gpt.py:model --out g.txt``
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=64, d=32, heads=4, layers=2, seq=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        return self.head(self.ln(self.blocks(x)))


def model(batch=4, seq=16, d=32, layers=2):
    torch.manual_seed(0)
    net = GPT(d=d, seq=seq, layers=layers).double()
    idx = torch.randint(0, 64, (batch, seq))
    target = torch.roll(idx, -1, dims=1)
    return net, (idx,), lambda logits: F.cross_entropy(logits.reshape(-1, 64), target.reshape(-1))


def blocks(net):
    """The repeated blocks (what "checkpoint every block" wraps in bench/torch_bench.py)."""
    return list(net.blocks)
