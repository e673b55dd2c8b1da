"""``hgraph graph synth``: write a deep transformer-like training graph (cg.txt) for planning at scale.

The command-line surface only; the graphs are built by :func:`planner.synth.build`.

Example::

    hgraph graph synth --layers 24 --hidden 1024 --seq 512 --batch 8 --heads 4 --out cg.txt
"""

from __future__ import annotations

import sys

from hgraph.errors import HGraphError
from jobs.flags import positive_int
from planner import cg, synth

NAME = "synth"
HELP = "write a deep transformer-like training graph (cg.txt format) for planning at scale"


def add_arguments(parser) -> None:
    parser.add_argument("--layers", type=positive_int, default=None,
                        help="transformer layers (or give --nodes)")
    parser.add_argument("--nodes", type=positive_int, default=None,
                        help="at least this many activations (sets --layers)")
    parser.add_argument("--hidden", type=positive_int, default=256)
    parser.add_argument("--seq", type=positive_int, default=128)
    parser.add_argument("--batch", type=positive_int, default=8)
    parser.add_argument("--heads", type=positive_int, default=4)
    parser.add_argument("--vocab", type=positive_int, default=1000)
    parser.add_argument("--out", required=True, help="cg.txt to write")


def main(args) -> int:
    if args.layers is None and args.nodes is None:
        raise HGraphError("give --layers L or --nodes N")
    layers = args.layers if args.layers is not None else synth.layers_for_nodes(args.nodes, args.heads)
    g = synth.build(layers=layers, hidden=args.hidden, seq=args.seq, batch=args.batch,
                    heads=args.heads, vocab=args.vocab)
    cg.write(g, args.out)
    print(f"{args.out}: {layers} layers, {len(g.forward):,} activations, {g.num_vars:,} variables, "
          f"{int(g.var_bytes[g.is_activation].sum()):,} activation bytes", file=sys.stderr)
    return 0
