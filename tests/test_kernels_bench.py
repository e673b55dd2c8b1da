"""bench/kernels_bench.py's PyTorch translation computes the executor's function (issue 26).

Each zoo model at the zoo's small default sizes (ResNet-50 at 64x64, so that its last batch
norm normalises over more than two numbers) runs one plain step on the executor (NumPy) and one
through the bench's op-by-op torch translation with the same parameters: the losses and every
parameter gradient agree within float32 rounding, and in float64 within the float32 constants
the op table uses (GELU's, norms' eps, attention's scale). No timing is asserted.
"""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the torch extra is not installed")

from planner.execute import zoo  # noqa: E402
from planner.ops import OPS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"resnet50": {"image": 64}}
#: float32: relative to each gradient's largest entry; deep batch-normalised nets amplify
#: rounding (ResNet-50 here: ~3e-5). A wrong translation (exact instead of tanh GELU, another
#: pooling tie rule, a different eps) shows in float64, whose bound is far below those.
RTOL = {"float32": 1e-3, "float64": 1e-6}


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("kernels_bench", ROOT / "bench" / "kernels_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_op_has_a_translation(bench):
    assert set(bench.torch_ops()) == set(OPS)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_torch_step_matches_executor(bench, name, dtype):
    gaps = bench.compare(name, SIZES.get(name, {}), dtype=dtype)
    assert gaps["params"] > 0
    assert gaps["loss_rel_diff"] <= RTOL[dtype], gaps
    assert gaps["grad_rel_diff"] <= RTOL[dtype], gaps


def test_a_wrong_translation_is_caught(bench, monkeypatch):
    """The check has teeth: exact GELU in place of planner.ops' tanh form fails the float64 bound."""
    import torch.nn.functional as F

    table = bench.torch_ops()
    table["gelu"] = lambda xs, a: F.gelu(xs[0])
    monkeypatch.setattr(bench, "torch_ops", lambda: table)
    gaps = bench.compare("transformer", dtype="float64")
    assert gaps["grad_rel_diff"] > RTOL["float64"]


def test_worker_sides_agree_in_process(bench, tmp_path):
    """The timed workers (one per side) run and hand back comparable gradients."""
    import torch

    spec = {"model": "mlp", "sizes": {"depth": 2}, "device": "cpu", "dtype": "float32", "steps": 1,
            "seed": 0, "threads": 1, "dir": str(tmp_path)}
    ex = bench.worker_executor(spec)
    assert ex["peak_bytes"] > 0 and ex["peak_meter"] == "tracemalloc"
    threads = torch.get_num_threads()
    try:
        to = bench.worker_torch({**spec, "exec_loss": ex["loss"]})
    finally:
        torch.set_num_threads(threads)
    assert to["peak_bytes"] > 0
    assert to["grad_rel_diff"] <= RTOL["float32"] and to["loss_rel_diff"] <= RTOL["float32"]


def test_interleaved_worker_times_both_sides(bench, tmp_path):
    """``--interleave``: one process steps both sides in turn and compares their gradients."""
    import torch

    spec = {"model": "mlp", "sizes": {"depth": 2}, "device": "cpu", "dtype": "float32", "steps": 2,
            "seed": 0, "threads": 1, "dir": str(tmp_path)}
    threads = torch.get_num_threads()
    try:
        both = bench.worker_both(spec)
    finally:
        torch.set_num_threads(threads)
    assert len(both["executor"]["times"]) == len(both["torch"]["times"]) == 2
    assert both["executor"]["peak_bytes"] > 0 and both["torch"]["peak_bytes"] > 0
    assert both["torch"]["grad_rel_diff"] <= RTOL["float32"]


def test_cpu_clock_times_the_steps_work(bench, tmp_path):
    """``--clock cpu``: the process's CPU time; a side that sleeps in its step shows the sleep in
    wall time only."""
    import time

    slept = []

    def step():
        time.sleep(0.05)
        slept.append(1)

    wall, _ = bench._timed(step, 2, clock="wall")
    cpu, _ = bench._timed(step, 2, clock="cpu")
    assert len(slept) == 4
    assert min(wall) >= 0.05 and max(cpu) < 0.025


def test_cpu_clock_refuses_cuda_rows(bench, capsys):
    assert bench.main(["--clock", "cpu", "--device", "cuda", "--models", "mlp"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--clock cpu" in err[0]


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_plan_steps_time_each_plan_against_the_plain_step(bench, clock):
    rows = bench.plan_steps("resnet", {}, steps=1, clock=clock)
    assert [r["plan"] for r in rows] == ["plain", "recompute", "rows"]
    plain = rows[0]
    assert plain["flop_ratio"] == 1.0 and plain["time_ratio"] == 1.0
    for r in rows:
        assert r["flop_ratio"] >= 1.0 and min(r["times"]) > 0
        assert r["time_over_flops"] == pytest.approx(r["time_ratio"] / r["flop_ratio"])


def test_kernels_ab_loads_another_revisions_kernels(capfd):
    """bench/kernels_ab.py: the baseline's op table comes from git, as a module of its own."""
    spec = importlib.util.spec_from_file_location("kernels_ab", ROOT / "bench" / "kernels_ab.py")
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    old = ab.load_ops("HEAD")
    assert set(old.OPS) == set(OPS) and old.OPS["conv2d"] is not OPS["conv2d"]
    assert ab.main(["mlp", "--base", "no-such-revision", "--threads", str(_blas_threads())]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-revision" in err[0], err


def _blas_threads() -> str:
    import os

    return os.environ.get("OPENBLAS_NUM_THREADS", "1")
