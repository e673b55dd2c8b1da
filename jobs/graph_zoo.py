"""``hgraph graph zoo NAME``: write a zoo model's training graph as cg.txt.

The command-line surface only: the models are :mod:`planner.execute.zoo`, the writer
:mod:`planner.execute.export`.

Example (``hgraph graph zoo transformer --depth 4 --seq 64 --out cg_transformer.txt``; the line
goes to stderr)::

    >>> import os, tempfile
    >>> from jobs.cli import main
    >>> d = tempfile.mkdtemp()
    >>> main(["graph", "zoo", "mlp", "--out", os.path.join(d, "mlp.txt")])
    0
    >>> from planner import cg
    >>> len(cg.read(os.path.join(d, "mlp.txt")).forward)
    15
"""

from __future__ import annotations

import sys

from jobs.flags import positive_int

NAME = "zoo"
HELP = "write a model-zoo training graph (mlp, resnet, unet, transformer, vgg16, resnet50) as cg.txt"


def add_size_arguments(parser) -> None:
    """The sizing flags shared with ``hgraph submit execute --model``."""
    parser.add_argument("--batch", type=positive_int, default=None, help="batch size")
    parser.add_argument("--width", type=positive_int, default=None, help="hidden units / channels / model width")
    parser.add_argument("--depth", type=positive_int, default=None, help="layers / blocks per stage / levels")
    parser.add_argument("--image", type=positive_int, default=None, help="image side (mlp and the CNNs)")
    parser.add_argument("--seq", type=positive_int, default=None, help="sequence length (transformer)")


def add_arguments(parser) -> None:
    from planner.execute.zoo import MODELS

    parser.add_argument("model", metavar="NAME", choices=sorted(MODELS), help=", ".join(MODELS))
    add_size_arguments(parser)
    parser.add_argument("--out", required=True, help="cg.txt to write")


def main(args) -> int:
    from planner.execute import export, zoo

    t = zoo.build(args.model, batch=args.batch, width=args.width, depth=args.depth,
                  image=args.image, seq=args.seq)
    export.write(t, args.out)
    print(f"{args.out}: {args.model}, {len(t.nodes)} ops, {len(t.vars)} vars, "
          f"{t.activation_bytes():,} activation bytes, {t.forward_flops:,} forward FLOPs", file=sys.stderr)
    return 0
