"""``hgraph submit execute --torch FILE.py:FUNC --schedule s.txt --report r.json``.

Runs a PyTorch model's real training step under a plan and reports predicted against measured:
:func:`planner.torch.execute` does the work and says what each key means
(:class:`planner.torch.execution.TorchExecution`); this job checks the flags, calls it, writes
its report (JSON, ``--report`` or stdout) and a one-line summary on stderr: the budget
(``--budget``, read as ``hgraph submit plan`` read it), the predicted and the measured peak (the
allocator's events) and whether it holds. Exit status 0 when the gradients match, 1 otherwise;
a measured peak above the budget is reported (``within_budget: false``) and said in one more
line on stderr, exit status still 0, as ``submit plan`` reports a plan above its budget: the
step ran and its figures are the result. Bad input is one line naming the problem, exit 2.
"""

from __future__ import annotations

import json
import sys

from hgraph.common.errors import HGraphError
from hgraph.common.fileio import write_text
from hgraph.common.formatting import format_bytes

#: execute's flags (dest, flag) that the PyTorch step has no use for: the model, its sizes and
#: kernels are the model file's, and the step runs in this process. Refused, not dropped.
NOT_WITH_TORCH = (("model", "--model"), ("batch", "--batch"), ("width", "--width"),
                  ("depth", "--depth"), ("image", "--image"), ("seq", "--seq"),
                  ("dtype", "--dtype"),
                  ("backend", "--backend"), ("workspace", "--workspace"),
                  ("address", "--address"))


def check_flags(args) -> None:
    """One line for a flag given with ``--torch`` that the step would not use."""
    if getattr(args, "runtime", None) == "ray":
        raise HGraphError("--runtime ray does not apply with --torch (the PyTorch step runs in "
                          "this process)")
    for dest, flag in NOT_WITH_TORCH:
        if getattr(args, dest, None) is not None:
            raise HGraphError(f"{flag} does not apply with --torch (the model file builds the "
                              f"model, its inputs and sizes, and the step runs in this process)")


def main(args) -> int:
    import planner.torch as pt

    check_flags(args)
    r = pt.execute(args.torch, args.schedule, args.graph, eager=getattr(args, "eager", None),
                   budget=getattr(args, "budget", None))
    write_text(args.report or "-", json.dumps(r.report(), indent=2) + "\n")
    budget = ("no budget given" if r.budget_bytes is None else
              f"budget {r.budget} = {r.budget_bytes:,} B, within_budget={r.within_budget}")
    print(f"{args.torch}: {budget}; peak predicted {r.predicted_peak_bytes:,} B, measured "
          f"{r.measured_peak_bytes:,} B ({r.peak_measured_by}); recompute planned "
          f"{r.planned_recompute_flops:,} / run {r.recompute_flops:,} FLOPs; "
          f"gradients_match={r.gradients_match}", file=sys.stderr)
    if r.within_budget is False:
        print(f"hgraph: the measured step peak {format_bytes(r.measured_peak_bytes)} is above "
              f"the budget {r.budget} ({format_bytes(r.budget_bytes)}) by "
              f"{r.measured_peak_bytes - r.budget_bytes:,} B", file=sys.stderr)
    return 0 if r.gradients_match else 1
