"""A cg.txt read in shards by the engine's workers (planner/cg_shards.py).

The graph the driver assembles from the shards must be :func:`planner.cg.read`'s (every
column, the costs, lazily the names and details), the levels from the variable graph the
shards leave on the workers the activation graph's, and ``planner.plan`` on a path past
``SEGMENTED_LIMIT`` the plan of the graph read whole — for 1, 2 and 4 workers, in-process and
on Ray, with a worker lost — without the driver ever reading the file whole, its levels,
separators and lower-set statistics computed on the variable graph the shards left there.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import hgraph
import planner
from hgraph.common.errors import InputError
from planner import api, cg, cg_shards, report, synth
from planner.activation_graph import ActivationGraph
from planner.analyses import engine, segments
from planner.analyses import local_stats as local_stats_mod
from planner.analyses.levels import levels, var_levels
from planner.analyses.local_stats import local_stats
from planner.dp import scale
from tests.conftest import RAY_TIMEOUT, data_path

COLUMNS = ("k", "p", "in_var", "in_tag", "out_var", "line", "in_ptr", "out_ptr")


def _same_graph(got, want):
    for key in COLUMNS:
        assert np.array_equal(getattr(got.columns, key), getattr(want.columns, key)), key
    assert got.columns.types.tolist() == want.columns.types.tolist()
    assert np.array_equal(got.var_bytes, want.var_bytes)
    assert np.array_equal(got.producer, want.producer)
    assert np.array_equal(got.forward_costs, want.forward_costs)
    assert got.costs is None and want.costs is None and got.ops == want.ops


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cgs")
    out = {"googlenet": data_path("graphs", "cg_googlenet.txt")}
    for name, g in (("transformer", synth.build(layers=20, heads=2)),
                    ("cnn", synth.build_cnn(blocks=2))):
        out[name] = d / f"cg_{name}.txt"
        cg.write(g, out[name])
    return out


@pytest.mark.parametrize("name", ["googlenet", "transformer", "cnn"])
@pytest.mark.parametrize("tasks,shard_bytes", [(1, 1 << 24), (2, 5000), (4, 777)])
def test_sharded_read_is_the_whole_read(files, monkeypatch, name, tasks, shard_bytes):
    """Any shards (small ones cut at odd places) give the whole read's graph, and the
    levels, separators and lower-set statistics computed on the variable graph left on the
    workers are the activation graph's."""
    monkeypatch.setattr(cg_shards, "SHARD_BYTES", shard_bytes)
    path = files[name]
    want = cg.read(path)
    ir = ActivationGraph.from_cg(want)
    opts = hgraph.EngineOptions(tasks=tasks, blocks=2)
    whole = local_stats(ir, tasks=1)
    with engine.session(opts) as s:
        got, sharded = cg_shards.read(s, path)
        assert len(sharded.pieces) >= 3 * (1 if shard_bytes > 1 << 20 else tasks)
        _same_graph(got, want)
        level, _ = var_levels(sharded, ir.var, opts)
        engine.bind_var_graph(opts, sharded, ir.var)
        stats = local_stats(ir, opts=opts, level=level)    # separators and statistics there
        assert engine.var_graph(opts, ir) is None and s.kept == {}      # released, dropped
    assert np.array_equal(level, levels(ir, tasks=1))
    for key in ("lloc", "bndloc", "size", "mL", "tL", "t_bnd", "m_bnd", "mAB"):
        assert np.array_equal(getattr(stats, key), getattr(whole, key)), key
    for key in ("pos", "sep", "sstart", "loc"):
        assert np.array_equal(getattr(stats.seg, key), getattr(whole.seg, key)), key
    assert got.var_names == want.var_names                  # read from the file when asked
    assert list(got.columns.details) == list(want.columns.details)


def test_a_doubted_shard_falls_back_to_the_whole_reads_error(files, tmp_path, monkeypatch):
    """A bad block makes its shard doubt, the sharded read gives up (None) and the plan's
    error is the whole reader's one line (file, line, problem)."""
    monkeypatch.setattr(cg_shards, "SHARD_BYTES", 4000)
    text = files["transformer"].read_text().split("\n")
    at = text.index("backward") + 1
    text[at] = "2 x"
    bad = tmp_path / "cg_bad.txt"
    bad.write_text("\n".join(text))
    with engine.session(hgraph.EngineOptions(tasks=2)) as s:
        assert cg_shards.read(s, bad) is None
    # a worker that cannot open the file (a node without the driver's file system) doubts
    assert cg_shards.piece(str(tmp_path / "gone.txt"), 0, 10, 1, 5).extra["kind"] == "doubt"
    with pytest.raises(InputError) as whole:
        cg.read(bad)
    monkeypatch.setattr(scale, "SEGMENTED_LIMIT", 10)
    with pytest.raises(InputError) as planned:
        planner.plan(str(bad), budget="50%", certify="off")
    assert str(planned.value) == str(whole.value) and f"cg_bad.txt:{at + 1}:" in str(whole.value)


def _plan_hash(p):
    rep = {k: v for k, v in p.report.items() if k not in ("seconds", "engine")}
    return hashlib.sha256(p.schedule.dumps().encode() + report.dumps(rep).encode()).hexdigest()


def test_plan_from_shards_is_the_whole_reads_for_1_2_4_workers_local_and_ray(
        monkeypatch, tmp_path, ray_session):
    """``planner.plan`` on a path past ``SEGMENTED_LIMIT`` reads it in shards (the driver never
    calls ``cg.read``) and gives the plan of the graph read whole — schedule and report but
    timings and the engine line — for 1, 2, 4 tasks in-process, 4 Ray actors, and 2 Ray
    actors with one killed at superstep 1 of every engine run."""
    monkeypatch.setattr(scale, "SEGMENTED_LIMIT", 1000)
    monkeypatch.setattr(api, "BASELINE_SCHEDULE_LIMIT", 1000)   # as past 10^5: no baseline
    monkeypatch.setattr(cg_shards, "SHARD_BYTES", 50_000)        # replay (its Function objects)
    path = tmp_path / "cg_t.txt"
    cg.write(synth.build(layers=110, heads=4), path)             # ~2,600: the scale path
    want = _plan_hash(planner.plan(cg.read(path), budget="50%", certify="off",
                                   engine=planner.EngineOptions(tasks=2)))
    reads, sharded, separators, stats = [], [], [], []
    whole_read, sharded_read, max_succ = cg.read, cg_shards.read, segments._max_succ_vars
    on_vars = local_stats_mod._on_variables
    monkeypatch.setattr(local_stats_mod, "_on_variables",
                        lambda *a, **k: (stats.append(1), on_vars(*a, **k))[1])
    monkeypatch.setattr(cg, "read", lambda *a, **k: (reads.append(a), whole_read(*a, **k))[1])
    monkeypatch.setattr(cg_shards, "read",
                        lambda *a, **k: (sharded.append(1), sharded_read(*a, **k))[1])
    monkeypatch.setattr(segments, "_max_succ_vars",
                        lambda *a, **k: (separators.append(1), max_succ(*a, **k))[1])
    runs = [dict(tasks=1), dict(tasks=2), dict(tasks=4),
            dict(tasks=4, runtime="ray", timeout=RAY_TIMEOUT),
            dict(tasks=2, runtime="ray", timeout=RAY_TIMEOUT, checkpoint_every=1,
                 inject_failure=1)]
    for options in runs:
        p = planner.plan(str(path), budget="50%", certify="off",
                         engine=planner.EngineOptions(**options))
        assert p.report["dp_segmented"]["segments"] > 1
        assert _plan_hash(p) == want, options
    # read in shards; levels, separators, statistics on the workers' variable graph; no
    # whole read
    assert len(sharded) == len(separators) == len(stats) == len(runs) and reads == []
