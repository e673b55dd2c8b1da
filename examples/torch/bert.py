"""A BERT-style encoder in plain torch.nn, trained with dropout on: token + position embeddings,
post-norm blocks (bidirectional attention, GELU MLP), masked-token cross entropy.

``model()`` returns ``(model, (tokens,), loss)``; the model is in training mode, so every
dropout draws a mask each step (hgraph replays a recomputed one with the forward's random
state). ``hgraph graph torch examples/torch/bert.py:model --out g.txt``
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, p):
        super().__init__()
        self.heads, self.p = heads, p
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.ln2 = nn.LayerNorm(d)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v)
        x = self.ln1(x + self.drop(self.proj(y.transpose(1, 2).reshape(b, t, d))))
        return self.ln2(x + self.drop(self.fc2(self.drop(F.gelu(self.fc1(x))))))


class Encoder(nn.Module):
    def __init__(self, vocab=64, d=32, heads=4, layers=2, seq=16, p=0.1):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        self.drop = nn.Dropout(p)
        self.blocks = nn.Sequential(*[Block(d, heads, p) for _ in range(layers)])
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.drop(self.tok(idx) + self.pos[: idx.shape[1]])
        return self.head(self.blocks(x))


def model(batch=4, seq=16, d=32, layers=2):
    torch.manual_seed(0)
    net = Encoder(d=d, seq=seq, layers=layers).double().train()
    idx = torch.randint(0, 64, (batch, seq))
    target = torch.randint(0, 64, (batch, seq))
    return net, (idx,), lambda logits: F.cross_entropy(logits.reshape(-1, 64), target.reshape(-1))


def blocks(net):
    """The repeated blocks (what "checkpoint every block" wraps in bench/torch_bench.py)."""
    return list(net.blocks)
