"""Executor acceptance: bitwise gradients under recomputation, tracked and measured vs predicted peaks, replay."""

import json
import subprocess
import sys

import pytest

from conftest import data_path
from planner import cg, chen, emit, simulate
from planner.execute import backend, executor, export, plans, replay, zoo
from planner.schedule import Schedule

NP = backend.get("numpy")          # acceptance on NumPy here; tests/test_gpu.py repeats it on CuPy

REFERENCE_GRAPHS = ["vgg19", "unet", "resnet50", "googlenet", "densenet"]


@pytest.fixture(scope="module")
def zoo_graphs():
    return {name: export.to_cg(zoo.build(name)) for name in zoo.MODELS}


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_zoo_gradients_bitwise_under_dp_schedules(zoo_graphs, name):
    g = zoo_graphs[name]
    plain = executor.run(g, executor.plain_schedule(g), executor.RunOptions(recycle=False),
                         backend=NP)
    budgets = plans.feasible_budgets(g, count=3)
    assert len(budgets) == 3
    for fraction, s in budgets:
        sim = simulate.replay(g, s)
        assert sim.ok, sim.violations[:3]
        for allocator in ("naive", "pool", "static"):
            r = executor.run(g, s, executor.RunOptions(allocator=allocator), backend=NP)   # free after last use
            assert executor.gradients_equal(plain.param_grads, r.param_grads), (fraction, allocator)
            assert r.loss == plain.loss
            assert r.tracked_peak_bytes <= sim.peak_bytes
        exact = executor.run(g, s, executor.RunOptions(recycle=False), backend=NP)                  # free at the schedule's forgets
        assert exact.tracked_peak_bytes == sim.peak_bytes
        assert executor.gradients_equal(plain.param_grads, exact.param_grads)


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_zoo_memory_centric_schedules(zoo_graphs, name):
    g = zoo_graphs[name]
    plain = executor.run(g, executor.plain_schedule(g), backend=NP)
    for fraction, s in plans.feasible_budgets(g, count=2, strategy="memory"):
        sim = simulate.replay(g, s)
        r = executor.run(g, s, executor.RunOptions(allocator="static"), backend=NP)
        assert executor.gradients_equal(plain.param_grads, r.param_grads), fraction
        assert r.tracked_peak_bytes <= sim.peak_bytes


def test_gradients_survive_heavy_recomputation(zoo_graphs):
    g = zoo_graphs["resnet"]
    plain = executor.run(g, executor.plain_schedule(g), backend=NP)
    s = executor.checkpoint_schedule(g, keep=[])                   # recompute everything
    sim = simulate.replay(g, s)
    assert sim.ok and sim.recompute_cost >= 0.9 * sim.forward_cost
    r = executor.run(g, s, executor.RunOptions(allocator="static"), backend=NP)
    assert executor.gradients_equal(plain.param_grads, r.param_grads)


def test_gradients_equal_detects_a_flipped_bit(zoo_graphs):
    g = zoo_graphs["mlp"]
    a = executor.run(g, executor.plain_schedule(g), backend=NP).param_grads
    b = {k: v.copy() for k, v in a.items()}
    k = next(iter(b))
    b[k].view("uint32").flat[0] ^= 1
    assert executor.gradients_equal(a, a) and not executor.gradients_equal(a, b)


def test_invalid_schedule_is_refused(zoo_graphs):
    from hgraph.common.errors import HGraphError
    g = zoo_graphs["mlp"]
    with pytest.raises(HGraphError, match="not live"):
        executor.timeline(g, Schedule.loads("compute 1\n"))


def _reference_schedules(g, name):
    """Three schedules per reference graph: the DP at two budgets and Chen's sqrt(n)."""
    out = [("chen", emit.emit(g, chen.solve(g).chain))]
    for fraction, s in plans.feasible_budgets(g, count=2, ladder=(0.3, 0.5, 0.7, 1.0)):
        out.append((f"dp{fraction}", s))
    return out


@pytest.mark.parametrize("name", REFERENCE_GRAPHS)
def test_replay_measures_the_predicted_peak(name):
    g = cg.read(data_path("graphs", f"cg_{name}.txt"))
    schedules = _reference_schedules(g, name)
    assert len(schedules) == 3
    for label, s in schedules:
        sim = simulate.replay(g, s)
        assert sim.ok, sim.violations[:3]
        for allocator in ("pool", "static"):
            r = replay.replay(g, s, backend=NP, allocator=allocator)
            assert r.kernels == "stand-in"
            assert r.tracked_peak_bytes == sim.peak_bytes, (label, allocator)
            assert r.reserved_bytes >= r.tracked_peak_bytes


def test_replay_of_reference_emitted_schedule():
    g = cg.read(data_path("graphs", "cg_resnet50.txt"))
    s = Schedule.read(data_path("reference", "schedules", "resnet50_DP2_time_60pctact.txt"))
    assert replay.replay(g, s, backend=NP).tracked_peak_bytes == simulate.replay(g, s).peak_bytes


def test_execute_job_report(tmp_path):
    g = export.to_cg(zoo.build("transformer", depth=1))
    graph = tmp_path / "cg.txt"
    cg.write(g, graph)
    sched = tmp_path / "s.txt"
    plans.feasible_budgets(g, count=1)[0][1].write(sched)
    report = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "jobs.execute", "--graph", str(graph), "--schedule", str(sched),
                        "--allocator", "all", "--backend", "numpy", "--report", str(report)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rep = json.loads(report.read_text())
    for key in ("predicted_peak_bytes", "tracked_peak_bytes", "measured_peak_bytes", "meter", "allocator",
                "backend", "seconds", "gradients_match", "peak_within_prediction", "tracked_within_prediction",
                "measured_over_predicted"):
        assert key in rep
    assert rep["gradients_match"] is True and rep["backend"] == "numpy" and rep["meter"] == "tracemalloc"
    assert rep["tracked_peak_bytes"] <= rep["predicted_peak_bytes"] and rep["tracked_within_prediction"]
    assert rep["measured_peak_bytes"] > 0
    assert rep["peak_within_prediction"] == all(a["measured_peak_bytes"] <= rep["predicted_peak_bytes"]
                                                for a in rep["allocators"])
    assert "tracked (plan's count)" in r.stderr and "measured (tracemalloc)" in r.stderr
    assert [a["allocator"] for a in rep["allocators"]] == ["naive", "pool", "static"]
    bad = tmp_path / "bad.txt"
    bad.write_text("compute 0\nfrobnicate\n")
    r = subprocess.run([sys.executable, "-m", "jobs.execute", "--graph", str(graph), "--schedule", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "bad.txt:2" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.ray
def test_ray_worker_runs_the_executor_in_an_actor(ray_session):
    import os

    from jobs import gpu_actor
    g = export.to_cg(zoo.build("mlp", depth=1))
    s = plans.feasible_budgets(g, count=1)[0][1]
    rep = gpu_actor.evaluate_on_gpu(cg.dumps(g), s.dumps(), {"allocators": ("static",)}, timeout=120,
                                     num_gpus=0, backend="numpy")
    assert rep["worker_pid"] != os.getpid()
    assert rep["gradients_match"] is True and rep["allocator"] == "static"
    assert rep["tracked_peak_bytes"] <= rep["predicted_peak_bytes"] and rep["measured_peak_bytes"] > 0
    assert gpu_actor.cluster_gpus() == ray_session.cluster_resources().get("GPU", 0.0)


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_executor_gradient_is_the_loss_derivative(name):
    """Whole-graph wiring, in float64: <grad, d> matches a central difference of the loss along d."""
    import numpy as np
    g = export.to_cg(zoo.build(name, dtype="float64"))
    s = plans.feasible_budgets(g, count=1)[0][1]
    base = executor.leaves(g, np, seed=0)
    r = executor.run(g, s, backend=NP)
    rng = np.random.default_rng(3)
    d = {v: rng.standard_normal(r.param_grads[v].shape) for v in sorted(r.param_grads)}
    slope = sum(float((r.param_grads[v] * d[v]).sum()) for v in d)
    eps = 1e-7           # small: ReLU / max-pool kinks lie within 1e-6 along d on some models
    losses = [executor.run(g, executor.plain_schedule(g), backend=NP,
                           leaf_values={v: base[v] + sign * eps * d[v] for v in d}).loss for sign in (1, -1)]
    assert (losses[0] - losses[1]) / (2 * eps) == pytest.approx(slope, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("argv,message", [
    (["--model", "mlp", "--backend", "cupy"], None),
    (["--graph", "/nonexistent/cg.txt"], "cannot read"),
    ([], "needs --graph cg.txt or --model NAME"),
    (["--model", "resnet", "--seq", "4"], "use --image, not --seq"),
])
def test_execute_job_bad_input_is_one_line(capsys, argv, message):
    from jobs.cli import main
    if argv[-1:] == ["cupy"] and backend.gpu_available()[0]:
        pytest.skip("CuPy works here")
    assert main(["submit", "execute", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hgraph: error:")
    assert message is None or message in err[0]


def test_execute_job_with_model_and_report(tmp_path, capsys):
    from jobs.cli import main
    out = tmp_path / "r.json"
    assert main(["submit", "execute", "--model", "unet", "--depth", "1", "--image", "8", "--backend", "numpy",
                 "--allocator", "static", "--free", "schedule", "--report", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["graph"] == "zoo:unet" and rep["schedule"] == "plain" and rep["recycle"] is False
    assert rep["tracked_peak_bytes"] == rep["predicted_peak_bytes"] and rep["gradients_match"] is True
    assert rep["meter"] == "tracemalloc" and rep["measured_peak_bytes"] > 0
    assert rep["allocators"][0]["arena"]["gap_pct"] <= 5.0


@pytest.mark.parametrize("name", ["unet", "transformer"])
def test_timeline_matches_simulator_step_by_step(zoo_graphs, name):
    import numpy as np
    g = zoo_graphs[name]
    for _, s in plans.feasible_budgets(g, count=2):
        curve = executor.timeline(g, s, recycle=False).live_curve()
        sim = simulate.replay(g, s)
        computes = np.array([op.kind == "compute" for op in s.ops])
        assert np.array_equal(curve[computes], sim.timeline[computes])
        assert (executor.timeline(g, s, recycle=True).live_curve() <= curve).all()
