"""``hgraph submit execute --torch FILE.py:FUNC --schedule s.txt --report r.json``.

Runs a PyTorch model's real training step under a plan and reports predicted against measured:
:func:`planner.torch.execute` does the work and says what each key means
(:class:`planner.torch.execution.TorchExecution`); this job checks the flags, calls it, writes
its report (JSON, ``--report`` or stdout) and a one-line summary on stderr. Exit status 0 when
the gradients match, 1 otherwise; bad input is one line naming the problem, exit 2.
"""

from __future__ import annotations

import json
import sys

from hgraph.common.errors import HGraphError
from hgraph.common.fileio import write_text

#: execute's flags (dest, flag) that the PyTorch step has no use for: the model, its sizes and
#: kernels are the model file's, and the step runs in this process. Refused, not dropped.
NOT_WITH_TORCH = (("model", "--model"), ("batch", "--batch"), ("width", "--width"),
                  ("depth", "--depth"), ("image", "--image"), ("seq", "--seq"),
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
    result = pt.execute(args.torch, args.schedule, args.graph, eager=getattr(args, "eager", None))
    write_text(args.report or "-", json.dumps(result.report(), indent=2) + "\n")
    print(f"{args.torch}: predicted peak {result.predicted_peak_bytes:,} B, measured "
          f"{result.measured_peak_bytes:,} B; saved {result.predicted_saved_bytes:,} / "
          f"{result.measured_saved_bytes:,} B; recompute {result.recompute_flops:,} FLOPs; "
          f"gradients_match={result.gradients_match}", file=sys.stderr)
    return 0 if result.gradients_match else 1
