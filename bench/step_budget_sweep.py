"""Whole-step budgets on NumPy, metered by tracemalloc (issue 23's acceptance, as a table).

Every zoo model (at ``tests/test_step_memory.py``'s sizes) at three whole-step budgets -- the
smallest reachable one (what a budget of 1 byte is refused with), the middle and 100 % of the
no-recomputation step -- planned by ``planner.plan`` and run by the executor under the plan's
convolution workspace cap; then row plans (VGG-16, ResNet-50; R = 4 and 8; batch 1 and 8) by
``planner.rows.step.predict_rows``. Per row: the budget, the predicted whole step
(``step_peak_bytes``), tracemalloc's whole step (``measured_step_peak_bytes``: from before the
parameters and inputs are built), their ratio, whether it is at most the budget, the workspace
cap, and where the predicted peak sits.

    python3 bench/step_budget_sweep.py              # ~1 min on two loaded cores
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hgraph.common.errors import InfeasibleError  # noqa: E402
import planner  # noqa: E402
from planner.execute import executor, export, rows_exec, zoo  # noqa: E402
from planner.rows.step import predict_rows  # noqa: E402
from planner.rows import plan as rows_plan  # noqa: E402
from tests.test_step_memory import ROWS, SIZES  # noqa: E402


def _kib(workspace: int | None) -> str:
    """The convolution workspace in KiB, or "-" for a graph without a convolution (the report
    gives null there)."""
    return "-" if workspace is None else f"{workspace >> 10}Ki"


def main() -> int:
    t0 = time.perf_counter()
    ok = True
    print(f"{'model':12s} {'budget B':>11s} {'predicted B':>11s} {'measured B':>11s} {'m/p':>6s} "
          f"{'<= budget':>9s} {'workspace':>9s}  peak at")
    for name, kw in SIZES.items():
        g = export.to_cg(zoo.build(name, **kw))
        try:
            planner.plan(g, budget=1, certify="off")
        except InfeasibleError as err:
            lo = int(err.min_budget_bytes)
        full = planner.plan(g, budget="100%", certify="off").budget_bytes
        for b in (lo, (lo + full) // 2, full):
            p = planner.plan(g, budget=b, certify="off")
            rep = p.report
            r = executor.run(g, p.schedule, executor.RunOptions(workspace=rep["workspace_bytes"]))
            m, s = r.measured_step_peak_bytes, rep["step_peak_bytes"]
            good = 0.9 <= m / s <= 1.0 and m <= b
            ok &= good
            print(f"{name:12s} {b:>11,} {s:>11,} {m:>11,} {m / s:6.3f} {str(m <= b):>9s} "
                  f"{_kib(rep['workspace_bytes']):>9}  {rep['step_peak_breakdown']['op']}")
    print(f"\n{'row plan':28s} {'predicted B':>11s} {'measured B':>11s} {'m/p':>6s}  peak at")
    for name, kw in ROWS:
        for batch in (1, 8):
            g = export.to_cg(zoo.build(name, batch=batch, **kw))
            for bands in (4, 8):
                p = rows_plan.plan(g, bands, "overlap")
                pred = predict_rows(g, p)
                m = rows_exec.run(g, p).measured_step_peak_bytes
                ok &= 0.9 <= m / pred.step_peak_bytes <= 1.0
                print(f"{name} b{batch} R{bands} overlap{'':>10s} {pred.step_peak_bytes:>11,} {m:>11,} "
                      f"{m / pred.step_peak_bytes:6.3f}  {pred.breakdown['op']}")
    print(f"\n{'all within [0.9, 1.0] and the budget' if ok else 'SOME OUTSIDE'} "
          f"({time.perf_counter() - t0:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
