"""The executor on a CUDA device through CuPy (skipped with the reason where CuPy finds none)."""

import numpy as np
import pytest

from planner import simulate
from planner.execute import backend, executor, export, plans, replay, zoo

OK, REASON = backend.gpu_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not OK, reason=f"no CUDA device for CuPy: {REASON}")]


@pytest.fixture(scope="module")
def gpu():
    return backend.get("cupy")


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_gpu_gradients_bitwise_and_peak(gpu, name):
    g = export.to_cg(zoo.build(name))
    plain = executor.run(g, executor.plain_schedule(g), executor.RunOptions(recycle=False),
                         backend=gpu)
    host = executor.run(g, executor.plain_schedule(g), backend="numpy")
    assert plain.backend == "cupy" and plain.device_peak_bytes > 0
    for k, ref in host.param_grads.items():                       # same maths as NumPy (float32)
        diff = np.linalg.norm(plain.param_grads[k].astype(np.float64) - ref)
        assert diff <= 1e-3 * np.linalg.norm(ref) + 1e-6, (name, k)
    for fraction, s in plans.feasible_budgets(g, count=3):
        sim = simulate.replay(g, s)
        for allocator in ("naive", "pool", "static"):
            r = executor.run(g, s, executor.RunOptions(allocator=allocator), backend=gpu)
            assert executor.gradients_equal(plain.param_grads, r.param_grads), (name, fraction, allocator)
            assert r.tracked_peak_bytes <= sim.peak_bytes
            assert r.meter == "cupy pool used bytes" and r.measured_peak_bytes == r.device_peak_bytes
            assert r.device_peak_bytes >= r.tracked_peak_bytes           # the hook saw every byte


def test_gpu_replay_of_a_zoo_graph_matches_prediction(gpu):
    g = export.to_cg(zoo.build("resnet", batch=16))
    for _, s in plans.feasible_budgets(g, count=3):
        r = replay.replay(g, s, backend=gpu, allocator="static", touch="full")
        assert r.tracked_peak_bytes == simulate.replay(g, s).peak_bytes
        assert r.device_peak_bytes >= r.arena["arena_bytes"]


@pytest.mark.ray
def test_gpu_actor(request):
    pytest.importorskip("ray", reason="ray is not installed here")
    request.getfixturevalue("ray_session")
    from planner import cg
    from jobs import gpu_actor
    if gpu_actor.cluster_gpus() < 1:
        pytest.skip("the Ray session has no GPU resource")
    g = export.to_cg(zoo.build("transformer"))
    s = plans.feasible_budgets(g, count=1)[0][1]
    rep = gpu_actor.evaluate_on_gpu(cg.dumps(g), s.dumps(), {"allocators": ("pool",)}, timeout=300)
    assert rep["backend"] == "cupy" and rep["gradients_match"] is True


def test_gpu_winograd_backward_matches_numpy(gpu):
    """The Winograd backward (planner/winograd.py) on CuPy: the conv2d VJP of a layer that takes
    it, against the same VJP on NumPy in float64 (same maths, both through the transforms)."""
    from planner import ops, winograd

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 64, 10, 9)), rng.standard_normal((64, 64, 3, 3))
    gy = rng.standard_normal((2, 64, 10, 9))
    attrs = {"stride": 1, "pad": 1}
    assert ops._winograd(2, 64, 64, 3, 1, 1, 10, 9, 8, ops.CONV_WORKSPACE_BYTES)
    xp = gpu.xp
    bwd = ops.OPS["conv2d"].backward
    host = bwd(np, gy, {0: x, 1: w}, None, attrs, [x.shape, w.shape], [0, 1])
    dev = bwd(xp, xp.asarray(gy), {0: xp.asarray(x), 1: xp.asarray(w)}, None, attrs,
              [x.shape, w.shape], [0, 1])
    for k in (0, 1):
        np.testing.assert_allclose(xp.asnumpy(dev[k]), host[k], rtol=1e-10, atol=1e-10)
    y = winograd.forward(xp, xp.asarray(x), xp.asarray(w), 1, ops.CONV_WORKSPACE_BYTES)
    np.testing.assert_allclose(xp.asnumpy(y), ops.OPS["conv2d"].forward(np, [x, w], attrs),
                               rtol=1e-10, atol=1e-10)
