"""A recurrent sequence model in plain torch.nn: embeddings, a 2-layer LSTM, a linear head,
next-token cross entropy.

``model()`` returns ``(model, (tokens,), loss)``. hgraph traces the LSTM as its per-timestep
ops (oneDNN's fused RNN kernel is opaque to a plan). Plain ``torch.compile`` runs an LSTM
eagerly (outside every partition) unless ``torch._dynamo.config.allow_rnn`` is set;
``planner.torch.compile`` sets it, so the LSTM's activations are planned there as in
``graph torch`` / ``apply`` / ``execute --torch``.
``hgraph graph torch examples/torch/lstm.py:model --out g.txt``
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Recurrent(nn.Module):
    def __init__(self, vocab=32, d=16, hidden=32, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.rnn = nn.LSTM(d, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx):
        y, _ = self.rnn(self.tok(idx))
        return self.head(y)


def model(batch=4, seq=12):
    torch.manual_seed(0)
    net = Recurrent().double()
    idx = torch.randint(0, 32, (batch, seq))
    target = torch.roll(idx, -1, dims=1)
    return net, (idx,), lambda logits: F.cross_entropy(logits.reshape(-1, 32), target.reshape(-1))


def blocks(net):
    """What "checkpoint every block" wraps in bench/torch_bench.py: the LSTM as one block."""
    return [net.rnn]
