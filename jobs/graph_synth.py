"""``hgraph graph synth``: write deep synthetic training graphs (cg.txt) for planning at scale.

The command-line surface only; the graphs are built by :func:`planner.synth.build` (``--kind
transformer``: a residual stream with parallel attention heads) and
:func:`planner.synth.build_cnn` (``--kind cnn``: Inception modules and DenseNet blocks, so the
lower sets branch and fan in the way convolutional nets do).

Example (at scale: ``hgraph graph synth --layers 24 --hidden 1024 --seq 512 --batch 8 --heads 4
--out cg.txt``, or ``hgraph graph synth --kind cnn --nodes 300000 --out cnn.txt``)::

    >>> import os, tempfile
    >>> from jobs.cli import main
    >>> d = tempfile.mkdtemp()
    >>> main(["graph", "synth", "--layers", "2", "--hidden", "64", "--seq", "16",
    ...       "--out", os.path.join(d, "cg.txt")])
    0
    >>> from planner import cg
    >>> int(cg.read(os.path.join(d, "cg.txt")).is_activation.sum())
    52
"""

from __future__ import annotations

import sys

from hgraph.common.errors import HGraphError
from jobs.flags import positive_int

NAME = "synth"
HELP = "write a deep transformer-like or branchy CNN-like training graph (cg.txt) for planning at scale"


def add_arguments(parser) -> None:
    parser.add_argument("--kind", choices=["transformer", "cnn"], default="transformer",
                        help="transformer (default) or cnn (Inception/DenseNet-style branches)")
    parser.add_argument("--nodes", type=positive_int, default=None,
                        help="at least this many activations (sets --layers / --blocks)")
    parser.add_argument("--batch", type=positive_int, default=8,
                        help="batch size: scales every activation (default %(default)s)")
    parser.add_argument("--out", required=True, help="cg.txt to write")
    tf = parser.add_argument_group("--kind transformer")
    tf.add_argument("--layers", type=positive_int, default=None,
                    help="transformer layers (or give --nodes)")
    tf.add_argument("--hidden", type=positive_int, default=256,
                    help="transformer hidden width (default %(default)s)")
    tf.add_argument("--seq", type=positive_int, default=128,
                    help="sequence length (default %(default)s)")
    tf.add_argument("--heads", type=positive_int, default=4,
                    help="attention heads (default %(default)s)")
    tf.add_argument("--vocab", type=positive_int, default=1000,
                    help="vocabulary size (default %(default)s)")
    cnn = parser.add_argument_group("--kind cnn")
    cnn.add_argument("--blocks", type=positive_int, default=None,
                     help="Inception module + dense block pairs (or give --nodes)")
    cnn.add_argument("--stages", type=positive_int, default=4,
                     help="resolutions (each halves the side, doubles the width)")
    cnn.add_argument("--dense-layers", type=positive_int, default=4, help="layers per dense block")
    cnn.add_argument("--width", type=positive_int, default=64, help="Inception channels, stage 0")
    cnn.add_argument("--growth", type=positive_int, default=32, help="channels each dense layer adds")
    cnn.add_argument("--image", type=positive_int, default=224, help="input side in pixels")


def main(args) -> int:
    from planner import cg, synth

    if args.kind == "cnn":
        if args.blocks is None and args.nodes is None:
            raise HGraphError("give --blocks B or --nodes N")
        blocks = (args.blocks if args.blocks is not None else
                  synth.cnn_blocks_for_nodes(args.nodes, args.stages, args.dense_layers))
        g = synth.build_cnn(blocks=blocks, stages=args.stages, dense_layers=args.dense_layers,
                            width=args.width, growth=args.growth, image=args.image,
                            batch=args.batch)
        size = f"{blocks} blocks"
    else:
        if args.layers is None and args.nodes is None:
            raise HGraphError("give --layers L or --nodes N")
        layers = (args.layers if args.layers is not None else
                  synth.layers_for_nodes(args.nodes, args.heads))
        g = synth.build(layers=layers, hidden=args.hidden, seq=args.seq, batch=args.batch,
                        heads=args.heads, vocab=args.vocab)
        size = f"{layers} layers"
    cg.write(g, args.out)
    print(f"{args.out}: {size}, {len(g.forward):,} activations, {g.num_vars:,} variables, "
          f"{int(g.var_bytes[g.is_activation].sum()):,} activation bytes", file=sys.stderr)
    return 0
