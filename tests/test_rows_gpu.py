"""Row-centric steps on a CUDA device through CuPy (skipped with the reason where CuPy finds none)."""

import pytest

from planner.execute import backend, executor, export, rows_exec, zoo
from planner.rows import plan as rows_plan

OK, REASON = backend.gpu_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not OK, reason=f"no CUDA device for CuPy: {REASON}")]


@pytest.mark.parametrize("policy", ["overlap", "share"])
def test_gpu_row_step_matches_plain_and_prediction(policy):
    gpu = backend.get("cupy")
    g = export.to_cg(zoo.build("vgg16", dtype="float64"))
    p = rows_plan.plan(g, 4, policy)
    r = rows_exec.run(g, p, backend=gpu)
    plain = executor.run(g, executor.plain_schedule(g), executor.RunOptions(recycle=False),
                         backend=gpu)
    assert r.backend == "cupy" and r.device_peak_bytes > 0 and r.measured_peak_bytes == r.device_peak_bytes
    assert r.tracked_peak_bytes <= r.predicted_peak_bytes
    assert r.device_peak_bytes >= r.tracked_peak_bytes
    assert rows_exec.relative_error(r.param_grads, plain.param_grads) <= 1e-10
