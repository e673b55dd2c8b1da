"""Sharded sources (hgraph/shards.py): a graph the workers read a byte range each.

The slices the workers build from their shards must be the slices of the graph read whole
(same CSR, weights, in-degrees, columns, block-pair counts) for any shards and tasks, and a
run on them the run on the whole graph, after a lost worker too, in-process and on Ray.
"""

from __future__ import annotations

import numpy as np
import pytest

import hgraph
from hgraph import io, shards
from hgraph.algorithms import SSSP, MinLabel
from hgraph.common.errors import HGraphError, InputError
from hgraph.partition import Partition
from tests.conftest import RAY_TIMEOUT


def _edges(tmp_path, n=240, m=1500, seed=3, weighted=True):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    w = rng.integers(1, 9, m).astype(float)
    lines = ["# a comment line"]
    for i, (a, b, c) in enumerate(zip(src.tolist(), dst.tolist(), w.tolist())):
        lines.append(f"{a} {b} {c}" if weighted or i % 3 == 0 else f"{a}\t{b}")
        if i % 97 == 0:
            lines.append("")                          # blank lines are skipped
    path = tmp_path / "g.edges"
    path.write_text("\n".join(lines) + "\n")
    return path, io.load(path, n=n)


def _same_slices(sharded, whole, tasks, blocks):
    p = Partition(whole, tasks=tasks, blocks=blocks)
    assert (sharded.tasks, sharded.blocks) == (p.tasks, p.blocks)
    assert np.array_equal(sharded.pair_edges, p.pair_edges)
    assert sharded.num_edges == whole.num_edges
    for t in range(p.tasks):
        a, b = sharded.task_slice(t), p.task_slice(t)
        for key in ("block_bounds", "task_bounds", "all_block_bounds", "out_indptr",
                    "out_indices", "out_weights", "in_degree"):
            assert np.array_equal(getattr(a, key), getattr(b, key)), (t, key)


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("tasks,blocks", [(1, 1), (2, 3), (4, 2)])
def test_sharded_slices_are_the_whole_graphs(tmp_path, parts, tasks, blocks):
    path, whole = _edges(tmp_path, weighted=parts % 2 == 1)
    source = io.edgelist_source(path, whole.n, parts)
    assert 1 <= len(source.ranges) <= parts
    with hgraph.Session(hgraph.EngineOptions(tasks=tasks, blocks=blocks)) as s:
        _same_slices(s.load(source), whole, tasks, blocks)


def test_cuts_fall_on_line_starts_and_count_lines(tmp_path, monkeypatch):
    """Cuts are at line starts, their line numbers are the file's, and a chunk boundary in
    the middle of a line changes nothing (chunks of 7 bytes)."""
    text = b"head\n" + b"".join(b"F\n%d x\n" % i for i in range(40)) + b"B\nend\n"
    path = tmp_path / "m.txt"
    path.write_bytes(text)
    lines = text.split(b"\n")
    for chunk in (7, 1 << 22):
        monkeypatch.setattr(shards, "SCAN_CHUNK", chunk)
        start, line = shards.find_line(path, b"F")
        stop, stop_line = shards.find_line(path, b"B", start, line)
        assert (start, line, stop, stop_line) == (5, 2, text.index(b"B\n"), 82)
        for parts in (1, 3, 5, 80):
            cuts = shards.cut_lines(path, b"F", start, stop, parts, line)
            assert cuts[0] == (start, line) and cuts[-1] == (stop, stop_line)
            offsets = [c for c, _ in cuts]
            assert offsets == sorted(set(offsets)) and len(cuts) <= parts + 1
            for offset, ln in cuts[:-1]:
                assert text[offset:offset + 2] == b"F\n" and lines[ln - 1] == b"F"
        every = shards.cut_lines(path, None, 0, len(text), 4)
        assert all(o == 0 or text[o - 1:o] == b"\n" for o, _ in every)
        assert all(text[:o].count(b"\n") + 1 == ln for o, ln in every[:-1])
    assert shards.find_line(path, b"none") == (len(text), text.count(b"\n") + 1)
    tail = tmp_path / "tail.txt"                  # a last line without its newline
    tail.write_bytes(b"x\nF\nyy\nF")
    assert shards.find_line(tail, b"F", 2, 2) == (2, 2)
    assert shards.find_line(tail, b"F", 4, 3) == (7, 4)
    assert [c for c, _ in shards.cut_lines(tail, None, 0, 8, 4)] == [0, 4, 7, 8]


def test_a_bad_line_in_a_shard_names_the_files_line(tmp_path):
    path, whole = _edges(tmp_path)
    lines = path.read_text().split("\n")
    lines[1201] = "12 x"
    path.write_text("\n".join(lines))
    source = io.edgelist_source(path, whole.n, 4)
    with hgraph.Session(hgraph.EngineOptions(tasks=2)) as s:
        with pytest.raises(InputError, match=rf"g\.edges:1202: not a number: 'x'"):
            s.load(source)


def test_out_of_range_ids_are_one_line(tmp_path):
    path, whole = _edges(tmp_path)
    source = io.edgelist_source(path, whole.n - 5, 3)
    with pytest.raises(InputError, match=r"g\.edges:\d+: vertex id \d+ is out of range"):
        with hgraph.Session(hgraph.EngineOptions(tasks=2)) as s:
            s.load(source)


def test_sharded_piece_with_rows_fills_and_pads_columns():
    """Rows of a 2-D column narrower than the widest piece are padded with the column's
    fill; vertices no piece names take the fill."""
    meta = {"task": 0, "tasks": 1, "blocks": 1, "n": 5, "block_bounds": np.array([0, 5]),
            "columns": shards.merge_columns([
                {"columns": {"c": ((1,), "<i8")}}, {"columns": {"c": ((3,), "<i8")}}]),
            "fills": (("c", -1),)}
    a = shards.Piece(ids=np.array([4]), columns={"c": np.array([[7]])})
    b = shards.Piece(ids=np.array([0, 2]), columns={"c": np.array([[1, 2, 3], [4, 5, 6]])})
    part = shards.assemble_slice(meta, [a, b])
    assert part.columns["c"].tolist() == [[1, 2, 3], [-1, -1, -1], [4, 5, 6], [-1, -1, -1],
                                          [7, -1, -1]]


@pytest.mark.parametrize("mode", ["push", "pull", "hybrid"])
def test_runs_on_a_sharded_graph_are_the_whole_graphs(tmp_path, mode):
    path, whole = _edges(tmp_path)
    opts = hgraph.EngineOptions(tasks=3, blocks=2, mode=mode)
    want = [hgraph.run(SSSP(0), whole, opts), hgraph.run(MinLabel(), whole, opts)]
    with hgraph.Session(opts) as s:
        g = s.load(io.edgelist_source(path, whole.n, 4))
        got = [s.run(SSSP(0), g), s.run(MinLabel(), g)]
    for a, b in zip(got, want):
        assert np.array_equal(a.values, b.values)
        assert a.supersteps == b.supersteps and a.aggregates == b.aggregates


def test_a_lost_worker_on_a_sharded_graph_gives_the_same_result(tmp_path):
    path, whole = _edges(tmp_path)
    want = hgraph.run(SSSP(0), whole, hgraph.EngineOptions(tasks=3))
    for every in (None, 1):
        opts = hgraph.EngineOptions(tasks=3, inject_failure=2, checkpoint_every=every)
        with hgraph.Session(opts) as s:
            got = s.run(SSSP(0), io.edgelist_source(path, whole.n, 2))
        assert got.failures and np.array_equal(got.values, want.values)


def test_on_ray_sharded_reads_runs_and_recovery(ray_session, tmp_path):
    """On Ray: the actors read the shards (the same slices as the whole graph's), a run is
    the whole graph's, an actor killed between runs is replaced and rebuilds its slice from
    the pieces left in the store, and an injected failure gives the same values."""
    path, whole = _edges(tmp_path)
    local = hgraph.run(SSSP(0), whole, hgraph.EngineOptions(tasks=4, blocks=2))
    opts = hgraph.EngineOptions(tasks=4, blocks=2, runtime="ray", timeout=RAY_TIMEOUT)
    with hgraph.Session(opts) as s:
        g = s.load(io.edgelist_source(path, whole.n, 3))
        assert all(isinstance(h, ray_session.ObjectRef) for row in g.pieces for h in row)
        p = Partition(whole, tasks=4, blocks=2)
        assert np.array_equal(g.pair_edges, p.pair_edges)
        for t in range(4):
            a = shards.assemble_slice(g.meta(t), ray_session.get(g.pieces_for(t),
                                                                 timeout=RAY_TIMEOUT))
            b = p.task_slice(t)
            assert np.array_equal(a.out_indices, b.out_indices)
            assert np.array_equal(a.in_degree, b.in_degree)
        first = s.run(SSSP(0), g)
        s.runtime.kill(1)
        again = s.run(SSSP(0), g)
        assert np.array_equal(first.values, local.values)
        assert np.array_equal(again.values, local.values)
    failing = hgraph.EngineOptions(tasks=4, blocks=2, runtime="ray", timeout=RAY_TIMEOUT,
                                   inject_failure=1, checkpoint_every=1)
    with hgraph.Session(failing) as s:
        got = s.run(SSSP(0), io.edgelist_source(path, whole.n, 4))
    assert got.failures and np.array_equal(got.values, local.values)


def test_reversed_view_and_driver_columns(tmp_path):
    """``reverse=True`` cuts every edge by its other end too: the reversed view's slices are
    those of the reversed whole graph; a driver array put on the workers reads as a column."""
    path, whole = _edges(tmp_path)
    back = hgraph.Graph.from_edges(whole.dst, whole.src, weights=whole.weights, n=whole.n)
    with hgraph.Session(hgraph.EngineOptions(tasks=3, blocks=2)) as s:
        g = s.load(io.edgelist_source(path, whole.n, 4), reverse=True)
        _same_slices(g, whole, 3, 2)
        _same_slices(g.reversed(), back, 3, 2)
        start = np.arange(whole.n)[::-1].copy()
        s.put("start", start, g.task_bounds)
        assert np.array_equal(s.gather("start"), start)
        got = s.run(MinLabel(), g.reversed(), keep="label", inputs=("start",))
        assert np.array_equal(s.gather_rows("label", [0, 7, whole.n - 1]),
                              got.values[[0, 7, whole.n - 1]])
    with hgraph.Session(hgraph.EngineOptions(tasks=3, blocks=2)) as s:
        want = s.run(MinLabel(), back)
    assert np.array_equal(got.values, want.values)
    with hgraph.Session(hgraph.EngineOptions(tasks=2)) as s:
        with pytest.raises(HGraphError, match="without its reversed edges"):
            s.load(io.edgelist_source(path, whole.n, 2)).reversed()


def test_views_join_directions_and_weigh_edges_by_their_source(tmp_path):
    """A view of both directions, the reversed edges weighed by a column of their source
    (a driver column put on the workers) and the forward ones by a constant, is the whole
    graph built with those edges and weights, slice by slice."""
    path, whole = _edges(tmp_path)
    flag = (np.arange(whole.n) % 3 == 0)
    src = np.concatenate([whole.dst, whole.src])
    dst = np.concatenate([whole.src, whole.dst])
    w = np.concatenate([np.where(flag[whole.dst], 5.0, 1.0), np.full(whole.num_edges, 2.0)])
    want = hgraph.Graph.from_edges(src, dst, weights=w, n=whole.n)
    with hgraph.Session(hgraph.EngineOptions(tasks=3, blocks=2)) as s:
        g = s.load(io.edgelist_source(path, whole.n, 4), reverse=True)
        both = g.view([("reversed", ("flag", (1.0, 5.0))), ("forward", (None, 2.0))])
        p = Partition(want, tasks=3, blocks=2)
        assert np.array_equal(both.pair_edges, p.pair_edges)
        for t in range(3):
            lo, hi = int(p.task_bounds[t]), int(p.task_bounds[t + 1])
            part = both.task_slice(t)
            part.columns["flag"] = flag[lo:hi]
            a, b = shards.weigh(part), p.task_slice(t)
            for key in ("out_indptr", "out_indices", "out_weights", "in_degree"):
                assert np.array_equal(getattr(a, key), getattr(b, key)), (t, key)
        s.put("flag", flag, g.task_bounds)
        got = s.run(SSSP(0), both, inputs=("flag",))
    assert np.array_equal(got.values, hgraph.run(SSSP(0), want,
                                                 hgraph.EngineOptions(tasks=3)).values)


def _dies_once(path, start, stop, line, n, flag):
    """An edge-list loader whose first call (across processes: a flag file) kills its
    process, as a worker lost while reading its shard."""
    import os

    if not os.path.exists(flag):
        open(flag, "w").close()
        os._exit(1)
    return io.edgelist_piece(path, start, stop, line, n)


def test_on_ray_a_worker_lost_while_reading_is_replaced(ray_session, tmp_path):
    """A reader that dies mid-shard: its shards are read again on a replacement actor and
    the slices are the whole graph's (the loader pickled by value: the actors need not
    import the tests)."""
    import sys

    from ray import cloudpickle

    path, whole = _edges(tmp_path)
    base = io.edgelist_source(path, whole.n, 4)
    source = shards.ShardedSource(base.path, base.n, base.ranges, _dies_once,
                                  args=(("n", whole.n), ("flag", str(tmp_path / "died"))))
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        opts = hgraph.EngineOptions(tasks=2, blocks=2, runtime="ray", timeout=RAY_TIMEOUT)
        with hgraph.Session(opts) as s:
            g = s.load(source)
            got = s.run(SSSP(0), g)
            p = Partition(whole, tasks=2, blocks=2)
            for t in range(2):
                a = shards.assemble_slice(g.meta(t), ray_session.get(g.pieces_for(t),
                                                                     timeout=RAY_TIMEOUT))
                assert np.array_equal(a.out_indices, p.task_slice(t).out_indices)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert (tmp_path / "died").exists()                  # a reader did die
    assert np.array_equal(got.values, hgraph.run(SSSP(0), whole,
                                                 hgraph.EngineOptions(tasks=2)).values)
