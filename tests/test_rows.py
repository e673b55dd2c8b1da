"""Row-centric (LR-CNN) plans: row analysis on the engine, band execution, the plan/execute flags."""

import json

import numpy as np
import pytest

from hgraph.common.errors import HGraphError
from planner.execute import executor, export, rows_exec, zoo
from planner.execute.trace import Tracer
from planner.analyses.engine import EngineOptions
from planner.rows import layers, plan as rows_plan

CNNS = ["vgg16", "resnet50", "resnet", "unet"]


@pytest.fixture(scope="module")
def graphs():
    return {name: export.to_cg(zoo.build(name, dtype="float64")) for name in CNNS}


@pytest.fixture(scope="module")
def plain(graphs):
    return {name: executor.run(g, executor.plain_schedule(g), executor.RunOptions(recycle=False)) for name, g in graphs.items()}


@pytest.mark.parametrize("name", CNNS)
@pytest.mark.parametrize("policy", ["overlap", "share"])
@pytest.mark.parametrize("bands", [2, 5])
def test_row_step_equals_plain_step(graphs, plain, name, policy, bands):
    g = graphs[name]
    p = rows_plan.plan(g, bands, policy, prune=False)       # keep the regions that save nothing too
    r = rows_exec.run(g, p)
    assert r.loss == plain[name].loss
    assert rows_exec.relative_error(r.param_grads, plain[name].param_grads) <= 1e-10
    assert r.param_grads.keys() == plain[name].param_grads.keys()
    assert r.tracked_peak_bytes <= p.predicted_peak_bytes


def test_a_wrong_gradient_is_detected(graphs, plain):
    g = graphs["vgg16"]
    r = rows_exec.run(g, rows_plan.plan(g, 2, "overlap"))
    k = next(iter(r.param_grads))
    r.param_grads[k] = r.param_grads[k] * (1 + 1e-8)
    assert rows_exec.relative_error(r.param_grads, plain["vgg16"].param_grads) > 1e-10


def _chain():
    """Two 3x3 convolutions (pad 1) on 8 rows, a stride-2 one, then global pooling and a head."""
    t = Tracer("chain", "float64")
    x = t.input((1, 1, 8, 8))
    y = t.input((1,), dtype="int32", classes=2)
    h = t.conv2d(x, t.param("c1/W", (2, 1, 3, 3)), pad=1)
    h = t.conv2d(t.relu(h), t.param("c2/W", (2, 2, 3, 3)), pad=1)
    h = t.conv2d(h, t.param("c3/W", (2, 2, 3, 3)), stride=2, pad=1)
    h = t.reshape(t.avg_pool(h, kernel=4), (1, 2))
    t.loss = t.softmax_cross_entropy(h @ t.param("fc/W", (2, 2)), y).id
    return export.to_cg(t)


def test_halo_grows_through_kernels_and_strides():
    g = _chain()
    p = rows_plan.plan(g, 2, "overlap", stages=False)
    # ops: conv c1, relu, conv c2, conv c3 (stride 2, 4 rows), avg_pool (global: barrier), ...
    assert p.region.tolist()[:4] == [0, 0, 0, 0] and p.region[4] == -1
    assert p.outputs.tolist()[:4] == [False, False, False, True]
    assert p.ranges[3].tolist() == [[0, 2], [2, 4]]             # c3 owns its rows
    assert p.ranges[2].tolist() == [[0, 4], [3, 8]]             # rows 2s-1 .. 2(hi-1)-1+3
    assert p.ranges[1].tolist() == [[0, 5], [2, 8]]             # +1 halo row each side
    assert p.ranges[0].tolist() == [[0, 5], [2, 8]]
    halo = {h["op"]: h["halo_overhead"] for h in p.halo()}
    assert halo[3] == 0 and halo[0] == pytest.approx(11 / 8 - 1)
    share = rows_plan.plan(g, 2, "share", stages=False)
    assert share.fresh[0].tolist() == [0, 5]                    # band 1 reuses rows 2..4
    assert share.flops()["extra_flops"] < p.flops()["extra_flops"]
    r = rows_exec.run(g, share)
    ref = executor.run(g, executor.plain_schedule(g), executor.RunOptions(recycle=False))
    assert rows_exec.relative_error(r.param_grads, ref.param_grads) <= 1e-12


def test_stages_end_regions_at_downsampling(graphs):
    p = rows_plan.plan(graphs["vgg16"], 2, "overlap")
    ly = p.layers
    pools = [i for i, op in enumerate(ly.ops) if op == "max_pool" and p.region[i] >= 0]
    assert pools and all(p.outputs[i] for i in pools)          # every stage's pool output is kept
    assert p.num_regions == 5                                    # one region per stage
    assert p.region[pools[-1] + 1:].max() == 4 and 4 not in p.region[pools]   # pool5: 1 row < 2 bands


def test_barriers():
    g = export.to_cg(zoo.build("resnet50"))
    ly = layers.read(g)
    kinds = dict(zip(ly.ops, ly.kind.tolist()))
    assert kinds["batch_norm"] == layers.SAME and kinds["reshape"] == layers.BARRIER
    assert kinds["matmul"] == layers.BARRIER and kinds["conv2d"] == layers.WINDOW
    gap = [i for i, op in enumerate(ly.ops) if op == "avg_pool"]
    assert gap and all(ly.kind[i] == layers.BARRIER for i in gap)   # global pooling
    bn = [i for i, op in enumerate(ly.ops) if op == "batch_norm"]
    assert ly.norm[bn].all() and ly.norm.sum() == len(bn)
    p = rows_plan.plan(g, 2, "overlap", prune=False)
    inside = [i for i in bn if p.region[i] >= 0]
    assert inside and p.whole_forward[p.region[inside]].all()     # batch norms run in regions
    adds = [i for i, op in enumerate(ly.ops) if op == "add"]
    assert all(p.outputs[i] for i in adds if p.region[i] >= 0)    # a residual add ends its region


def test_batch_norm_phases():
    """conv -> BN -> ReLU -> conv -> BN: the last BN (level 0) accumulates in phase 0 and seeds
    phase 1, which carries its input gradient down to the first BN; that one seeds phase 2."""
    t = Tracer("bnchain", "float64")
    x = t.input((2, 1, 8, 8))
    y = t.input((2,), dtype="int32", classes=2)
    h = x
    for k in range(2):
        h = t.conv2d(h, t.param(f"c{k}/W", (2, 1 if k == 0 else 2, 3, 3)), pad=1)
        h = t.batch_norm(h, t.param(f"b{k}/g", (2,)), t.param(f"b{k}/b", (2,), init="zeros"))
        h = t.relu(h)
    h = t.reshape(t.avg_pool(h, kernel=8), (2, 2))
    t.loss = t.softmax_cross_entropy(h, y).id
    g = export.to_cg(t)
    p = rows_plan.plan(g, 4, "overlap")
    assert p.phases == 3 and p.region[:6].tolist() == [0] * 6
    assert p.seeds[1].tolist()[:6] == [0, 0, 0, 0, 1, 0] and p.seeds[2].tolist()[:6] == [0, 1, 0, 0, 0, 0]
    assert p.carriers[0].tolist()[:6] == [0, 0, 0, 0, 1, 1]       # ReLU, then BN accumulates
    assert p.carriers[1].tolist()[:6] == [0, 1, 1, 1, 0, 0]       # conv, ReLU, then the first BN
    assert p.carriers[2].tolist()[:6] == [1, 0, 0, 0, 0, 0]
    assert p.phase_ranges[2, 1].tolist() == [[0, 2], [2, 4], [4, 6], [6, 8]]   # a seed owns rows
    ref = executor.run(g, executor.plain_schedule(g), executor.RunOptions(recycle=False))
    r = rows_exec.run(g, p)
    assert r.loss == ref.loss and r.tracked_peak_bytes <= p.predicted_peak_bytes
    assert rows_exec.relative_error(r.param_grads, ref.param_grads) <= 1e-12


def test_resnet50_rows_cut_the_activation_peak():
    g = export.to_cg(zoo.build("resnet50", width=8, depth=3, image=64, batch=1))
    p = rows_plan.plan(g, 4, "overlap")
    plain = executor.timeline(g, executor.plain_schedule(g), recycle=True).live_peak()
    assert p.predicted_peak_bytes - p.param_grad_bytes < 0.6 * (plain - p.param_grad_bytes)


def test_regions_that_save_nothing_run_whole(graphs):
    # ResNet-50 (small): a region holding only the stem's convolution would keep its input
    full, pruned = (rows_plan.plan(graphs["resnet50"], 2, prune=flag) for flag in (False, True))
    assert 0 < pruned.num_regions < full.num_regions
    assert pruned.predicted_peak_bytes <= full.predicted_peak_bytes
    assert pruned.flops()["extra_flops"] < full.flops()["extra_flops"]


def test_analysis_is_the_same_on_any_engine_layout(graphs):
    g = graphs["unet"]
    a = rows_plan.plan(g, 4, "share", prune=False)
    b = rows_plan.plan(g, 4, "share", EngineOptions(tasks=2, blocks=3, mode="push"), prune=False)
    assert np.array_equal(a.ranges, b.ranges) and np.array_equal(a.region, b.region)
    assert a.predicted_peak_bytes == b.predicted_peak_bytes


def test_rows_lower_the_activation_peak():
    g = export.to_cg(zoo.build("vgg16", width=8, depth=3, image=128, batch=1))
    p = rows_plan.plan(g, 8, "overlap")
    plain = executor.timeline(g, executor.plain_schedule(g), recycle=True).live_peak()
    act_rows = p.predicted_peak_bytes - p.param_grad_bytes
    assert act_rows < 0.4 * (plain - p.param_grad_bytes)


@pytest.mark.parametrize("bands,message", [(0, "must be >= 1"), (33, "larger than the image height")])
def test_bad_band_counts(graphs, bands, message):
    with pytest.raises(HGraphError, match=message):
        rows_plan.plan(graphs["vgg16"], bands)


def test_no_convolution_stack():
    with pytest.raises(HGraphError, match="no convolution stack"):
        rows_plan.plan(export.to_cg(zoo.build("mlp")), 2)


def test_auto_fits_the_budget(graphs):
    g = graphs["vgg16"]
    candidates = [rows_plan.plan(g, b, pol) for b in (2, 4, 8, 16) for pol in ("overlap", "share")]
    budget = sorted(c.predicted_peak_bytes for c in candidates)[3]
    p = rows_plan.choose(g, budget)
    assert p.predicted_peak_bytes <= budget
    with pytest.raises(HGraphError, match="no row plan fits"):
        rows_plan.choose(g, 1000)


def _cli(argv, capsys):
    from jobs.cli import main

    code = main(argv)
    return code, capsys.readouterr()


def _jobs(tmp_path, capsys, plan_flags, execute_flags, model="unet"):
    """(exit code, report) of the plan job on the ``model`` graph, then of the execute job."""
    cgpath = tmp_path / "cg.txt"
    export.write(zoo.build(model), cgpath)
    out = []
    for argv in (["plan", "--graph", str(cgpath), *plan_flags],
                 ["execute", *execute_flags, "--dtype", "float64"]):
        report = tmp_path / f"{argv[0]}.json"
        code, _ = _cli(["submit", *argv, "--report", str(report)], capsys)
        out.append((code, json.loads(report.read_text())))
    return out


def test_plan_and_execute_jobs(tmp_path, capsys):
    (code, rep), (code_e, rep_e) = _jobs(tmp_path, capsys, ["--rows", "4", "--row-policy", "share"],
                                         ["--model", "vgg16", "--rows", "4"])
    assert code == 0 and rep["rows"] == 4 and rep["row_policy"] == "share"
    assert {"predicted_peak_bytes", "extra_flops", "halo", "bands"} <= rep.keys()
    assert not rep["combined_with_dp"]
    code, rep = code_e, rep_e
    assert code == 0 and rep["gradients_match"] and rep["loss_identical"]
    assert rep["tracked_peak_bytes"] <= rep["predicted_peak_bytes"] and rep["tracked_within_prediction"]
    assert rep["meter"] == "tracemalloc" and rep["measured_peak_bytes"] >= rep["activation_peak_bytes"] > 0
    assert rep["peak_within_prediction"] == (rep["measured_peak_bytes"] <= rep["predicted_peak_bytes"])
    assert {"activation_peak_bytes", "extra_flops", "plain_measured_peak_bytes"} <= rep.keys()


@pytest.mark.parametrize("argv,message", [
    (["--model", "vgg16", "--rows", "0"], "--rows must be >= 1"),
    (["--model", "vgg16", "--rows", "40"], "larger than the image height"),
    (["--model", "transformer", "--rows", "2"], "no convolution stack"),
])
def test_bad_row_options_are_one_line(capsys, argv, message):
    code, out = _cli(["submit", "execute", *argv], capsys)
    lines = out.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0]


@pytest.mark.parametrize("name,bands,share", [("resnet50", 2, 0.95), ("resnet50", 4, 0.95)])
def test_rows_plus_dp_fits_below_rows_alone_and_stays_exact(graphs, plain, name, bands, share):
    from planner.rows import with_dp

    g = graphs[name]
    p = rows_plan.plan(g, bands, "overlap")
    q = with_dp.combine(p, int(share * p.predicted_peak_bytes))
    assert (q.recompute or q.resweep) and q.report()["combined_with_dp"]
    assert q.predicted_peak_bytes <= share * p.predicted_peak_bytes
    assert all(p.region[i] < 0 for i in q.recompute)
    assert q.flops()["extra_flops"] > p.flops()["extra_flops"]      # the DP's recompute is counted
    r = rows_exec.run(g, q)
    assert r.tracked_peak_bytes == q.predicted_peak_bytes
    assert r.loss == plain[name].loss
    if q.resweep:             # a region's outputs are dropped after the forward and swept again
        assert any(st.phase == "c" for st in q.walk.steps)
    assert rows_exec.relative_error(r.param_grads, plain[name].param_grads) <= 1e-10
    assert with_dp.combine(p, p.predicted_peak_bytes) is p          # rows alone fit: no DP
    with pytest.raises(HGraphError, match=r"\+ DP: no plan fits"):
        with_dp.combine(p, 1000)


def _between_rows_alone_and_dp(dtype) -> int:
    """A whole-step budget (bytes) below the 2-band ResNet-50 row step alone but above its
    lowest rows + DP step: where the budget needs the DP."""
    from hgraph.common.errors import InfeasibleError
    from planner.rows.step import predict_rows
    from planner.rows import with_dp

    g = export.to_cg(zoo.build("resnet50", dtype=dtype))
    p = rows_plan.plan(g, 2, "overlap")

    def peak(q):
        return predict_rows(g, q).step_peak_bytes

    with pytest.raises(InfeasibleError) as err:
        with_dp.combine(p, 1, peak=peak)
    assert err.value.min_budget_bytes < peak(p)
    return (err.value.min_budget_bytes + peak(p)) // 2


def test_jobs_combine_rows_with_the_dp(tmp_path, capsys):
    b32, b64 = _between_rows_alone_and_dp("float32"), _between_rows_alone_and_dp("float64")
    (code, rep), (code_e, rep_e) = _jobs(tmp_path, capsys, ["--rows", "2", "--budget", str(b32)],
                                         ["--model", "resnet50", "--rows", "2", "--budget", str(b64)],
                                         model="resnet50")
    assert code == 0 and rep["combined_with_dp"] and rep["dp_recomputed_ops"]
    assert rep["accounting"] == "whole-step" and rep["step_peak_bytes"] <= rep["budget_bytes"] == b32
    assert rep["within_budget"]
    assert code_e == 0 and rep_e["combined_with_dp"] and rep_e["gradients_match"]
    assert rep_e["loss_identical"] and rep_e["tracked_peak_bytes"] <= rep_e["predicted_peak_bytes"]


def test_open_stages_run_exact_and_the_walk_search_opens_one():
    from planner.rows import with_dp

    g = export.to_cg(zoo.build("vgg16", width=4, depth=3, image=64, batch=1, dtype="float64"))
    ly = layers.read(g)
    pools = [i for i, op in enumerate(ly.ops) if op == "max_pool"]
    ref = executor.run(g, executor.plain_schedule(g), executor.RunOptions(recycle=True))
    for policy in ("overlap", "share"):
        q = rows_plan.plan(g, 4, policy, open_stages=pools[:2])
        assert q.num_regions == rows_plan.plan(g, 4, policy).num_regions - 2
        assert not q.outputs[pools[:2]].any()                   # pool1, pool2 never whole
        r = rows_exec.run(g, q)
        assert r.loss == ref.loss and r.tracked_peak_bytes == q.predicted_peak_bytes
        assert rows_exec.relative_error(r.param_grads, ref.param_grads) <= 1e-10
    # at 224 rows the stage-2 backward holds pool1 whole (value and gradient): the search opens it
    big = export.to_cg(zoo.build("vgg16", width=16, depth=3, image=224, batch=1))
    p = rows_plan.plan(big, 8, "overlap")
    path = with_dp.walk_search(p)
    assert path and path[0].open_stages == (pools[0],)
    assert path[-1].predicted_peak_bytes < p.predicted_peak_bytes
    assert with_dp.choose(p, path, path[-1].predicted_peak_bytes) is not None


def test_compiled_steps_are_built_once_per_plan(graphs, monkeypatch):
    """rows_exec compiles a plan's steps at its first run (before the meters start) and reuses
    them: a second run takes the same program and gives the same bits; a replaced kernel (a
    metered op table) makes it compile again."""
    g = graphs["resnet50"]
    p = rows_plan.plan(g, 4, "share")
    assert p.walk.program is None
    a = rows_exec.run(g, p)
    prog = p.walk.program
    assert prog is not None and len(prog[2]) == len(p.walk.steps)
    b = rows_exec.run(g, p)
    assert p.walk.program is prog
    assert a.loss == b.loss and a.tracked_peak_bytes == b.tracked_peak_bytes
    assert all(np.array_equal(a.param_grads[k], b.param_grads[k]) for k in a.param_grads)
    import dataclasses

    calls = []
    relu = rows_exec.OPS["relu"]
    monkeypatch.setitem(rows_exec.OPS, "relu", dataclasses.replace(
        relu, forward=lambda xp, xs, a, out=None: calls.append(1) or relu.forward(xp, xs, a, out=out)))
    c = rows_exec.run(g, p)
    assert p.walk.program is not prog and calls and c.loss == a.loss


def test_rows_ab_compares_with_another_revision(capfd):
    """bench/rows_ab.py: the other side's rows_exec comes from git; HEAD's gives the same bits
    (exit 0); a revision git does not have is one line and exit 2."""
    import importlib.util
    import os
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "rows_ab.py"
    spec = importlib.util.spec_from_file_location("rows_ab", path)
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    assert ab.load_rows_exec("HEAD").run is not rows_exec.run
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "1")
    assert ab.main(["resnet", "--base", "no-such-revision", "--threads", threads]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-revision" in err[0], err
    assert ab.main(["resnet", "--base", "HEAD", "--quick", "--steps", "1", "--threads", threads]) == 0
    out = capfd.readouterr().out
    assert "losses equal: True; gradients bitwise equal between the two row executors: True" in out
    assert "time / FLOP ratio" in out


def test_rows_profile_splits_a_row_step(capfd):
    """bench/rows_profile.py: the step-kind table and the convolution table of both steps; a
    model without row plans is one line and exit 2."""
    import importlib.util
    import os
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "rows_profile.py"
    spec = importlib.util.spec_from_file_location("rows_profile", path)
    prof = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prof)
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "1")
    assert prof.main(["mlp", "--threads", threads]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mlp" in err[0], err
    assert prof.main(["resnet", "--quick", "--steps", "1", "--threads", threads]) == 0
    out = capfd.readouterr().out
    assert "| bandbwd: conv2d |" in out and "| rows | fwd 3x3 s1" in out and "| plain | bwd" in out
    assert "rows: convolutions" in out and "rows: convolutions 0.0 ms" not in out


def test_allocator_take_is_alloc_typed():
    """TrackedAllocator.take (the row executor's request): the pool's blocks and counts as
    alloc + view; an unmetered run hands out the same typed view of a block again; a buffer
    taken twice is an error."""
    from planner.execute.allocator import TrackedAllocator
    from planner.execute.backend import get

    be = get("numpy")
    a, b = TrackedAllocator(be, "pool", alignment=64), TrackedAllocator(be, "pool", alignment=64)
    reqs = [(0, (2, 3)), (1, (4, 4)), (2, (2, 3)), (3, (1, 5))]
    with b.tracking(False):
        for buf, shape in reqs:
            nb = int(np.prod(shape)) * 4
            x = a.alloc(buf, nb).view(np.float32).reshape(shape)
            y = b.take(buf, nb, np.dtype(np.float32), shape)
            assert y.shape == x.shape and y.dtype == x.dtype
            if buf == 1:
                a.free(0), b.free(0)
        assert (a.peak_bytes, a.reserved_bytes, a.allocations) == \
            (b.peak_bytes, b.reserved_bytes, b.allocations)
        b.free(2)
        again = b.take(9, 24, np.dtype(np.float32), (2, 3))      # buffer 2's block, its view
        b.free(9)
        assert b.take(10, 24, np.dtype(np.float32), (2, 3)) is again
        with pytest.raises(HGraphError, match="allocated twice"):
            b.take(10, 24, np.dtype(np.float32), (2, 3))
    b.release()


def test_replayed_pool_blocks_are_the_pools(graphs):
    """rows_exec compiles each request's pool block (allocator.pool_blocks) and the run takes it
    by number (take_block): the same blocks as the pool's own free list, request by request, so
    the same reserved bytes, peak and allocation count."""
    from planner.execute.allocator import TrackedAllocator, pool_blocks
    from planner.execute.backend import get

    g = graphs["resnet50"]
    p = rows_plan.plan(g, 4, "share")
    prog = rows_exec._program(g, p, 64)
    be = get("numpy")
    a, b = TrackedAllocator(be, "pool", alignment=64), TrackedAllocator(be, "pool", alignment=64)
    for c in prog:
        for key, buf, nbytes, dtype, shape, zero, block in c.allocs:
            x = a.take(buf, nbytes, dtype, shape)
            y = b.take_block(buf, nbytes, dtype, shape, block)
            got = [next(n for n, blk in enumerate(al._blocks) if blk is al._live[buf][0])
                   for al in (a, b)]
            assert got == [block, block]
            assert x.shape == y.shape and x.dtype == y.dtype
        for key, buf in c.frees_after:
            a.free(buf)
            b.free_block(buf)
    assert (a.peak_bytes, a.reserved_bytes, a.allocations, a.live_bytes) == \
        (b.peak_bytes, b.reserved_bytes, b.allocations, b.live_bytes)
    assert pool_blocks([(0, 100), (1, 100), (0, None), (2, 64), (1, None), (3, 128)], 64) == [0, 1, 0, 1]
    assert rows_exec._program(g, p, 256) is not prog                # another alignment: recompiled
