"""``hgraph graph torch FILE.py:FUNC --out g.txt``: a PyTorch model's training step as a graph.

``FUNC()`` returns ``(model, inputs)`` or ``(model, inputs, loss_fn)``. The joint
forward+backward graph is captured through AOTAutograd, decomposed as Inductor sees it (or
``--eager``: the aten graph eager autograd runs, op for op), with FLOP costs
(``--cost measured``: timed on this machine), and its step front (:mod:`planner.torch.step_table`:
the plans priced as torch runs them, what ``submit plan`` picks from so that its budget is the
step's, as in ``planner.torch.plan_for_step``). Plan it with ``hgraph submit plan --graph g.txt``
and run the plan with ``hgraph submit execute --torch FILE.py:FUNC --schedule s.txt`` (the same
``--eager`` flag, or ``--graph g.txt``: execute runs the capture this command wrote). An error
raised in the model file is one line naming its file and line.

Commands (they need torch): ``hgraph graph torch examples/torch/gpt.py:model --out cg_gpt.txt``,
then ``hgraph submit plan --graph cg_gpt.txt --budget 80% --out s.txt`` and ``hgraph submit execute
--torch examples/torch/gpt.py:model --schedule s.txt``; docs/torch.md has them, and
``tests/test_torch_cli.py`` runs them.
"""

from __future__ import annotations

import sys

NAME = "torch"
HELP = "write a PyTorch model's training graph (FILE.py:FUNC) as cg.txt"


def add_arguments(parser) -> None:
    parser.add_argument("spec", metavar="FILE.py:FUNC",
                        help="FUNC() returns (model, inputs) or (model, inputs, loss_fn)")
    parser.add_argument("--out", required=True, help="cg.txt to write")
    parser.add_argument("--cost", choices=("flops", "measured"), default="flops",
                        help="per-op cost: FLOPs (default) or measured nanoseconds")
    parser.add_argument("--progress", choices=["auto", "bar", "plain", "off"], default="auto",
                        help="progress on stderr (the capture's stages): auto (default: live on "
                             "a terminal, nothing in a pipe or log), bar, plain or off")
    parser.add_argument("--eager", action="store_true",
                        help="capture the undecomposed aten graph eager autograd runs (then "
                             "execute --torch with --eager too)")


def main(args) -> int:
    from hgraph.common.progress import tracking
    from planner import cg
    from planner.torch import require_torch

    require_torch()
    import planner.torch as pt
    from planner.torch.model_file import load, user_errors

    from planner import step_front
    from planner.torch.step_table import table, with_table

    spec = load(args.spec)
    with user_errors(spec), tracking(args.progress or "auto") as stages:
        # the table measures the keep-all and lowest steps itself: pt.graph's own measure of
        # the keep-all step would run that step a second time for the same figure
        tg = pt.graph(spec.model, *spec.inputs, loss=spec.loss, decompose=not args.eager,
                      costs=args.cost, source=spec.source, measure_slack=False)
        with stages.stage("the step front (plans priced as torch runs them)"):
            front = table(tg, spec.model, spec.inputs, spec.loss)
    cg.write(with_table(tg.cg, front), args.out)
    top, low = step_front.keep_all_peak(front), step_front.resolve(front, step_front.LOWEST)
    print(f"{args.out}: {spec.source}, {tg.info['forward_ops']} forward ops, "
          f"{tg.info['activations']} activations, {tg.info['activation_bytes']:,} activation "
          f"bytes, {int(tg.cg.costs.sum()):,} forward {args.cost}; step front: "
          f"{len(front['candidates'])} plans, keep-all step {top:,} B, lowest {low:,} B "
          f"({100 * low / max(1, top):.1f}%), allocator slack {front['allocator_slack']:,} B",
          file=sys.stderr)
    return 0
