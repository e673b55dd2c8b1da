"""Graph construction and the text loaders: CSR, columns, formats, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import hgraph
from hgraph.common.errors import HGraphError, InputError, Notice
from hgraph.partition import Partition

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples"


def test_from_edges_builds_both_csrs():
    g = hgraph.Graph.from_edges([2, 0, 0, 1], [0, 2, 1, 2], weights=[1.0, 2.0, 3.0, 4.0], n=4,
                                columns={"c": np.arange(4)})
    assert (g.n, g.num_edges) == (4, 4)
    assert g.out_indptr.tolist() == [0, 2, 3, 4, 4]
    assert g.out_indices.tolist() == [2, 1, 2, 0]          # stable: input order per source
    assert g.out_weights.tolist() == [2.0, 3.0, 4.0, 1.0]
    assert g.in_indptr.tolist() == [0, 1, 2, 4, 4]
    assert g.in_indices.tolist() == [2, 0, 0, 1]
    assert g.out_degree.tolist() == [2, 1, 1, 0] and g.in_degree.tolist() == [1, 1, 2, 0]
    assert g.weights.dtype == np.float64 and g.columns["c"].tolist() == [0, 1, 2, 3]
    assert hgraph.Graph.from_edges([0], [1]).weights.tolist() == [1.0]


def test_from_edges_rejects_bad_arrays():
    with pytest.raises(HGraphError):
        hgraph.Graph.from_edges([0, 1], [1])
    with pytest.raises(HGraphError):
        hgraph.Graph.from_edges([0, 5], [1, 2], n=3)
    with pytest.raises(HGraphError):
        hgraph.Graph.from_edges([0], [1], columns={"x": [1, 2, 3]})


def test_edgelist_and_adjacency_examples_agree():
    a = hgraph.io.load(EXAMPLES / "tiny.edges")
    b = hgraph.io.load(EXAMPLES / "tiny.adj")
    key = lambda g: sorted(zip(g.src.tolist(), g.dst.tolist(), g.weights.tolist()))  # noqa: E731
    assert a.n == b.n == 8 and key(a) == key(b)


def test_edgelist_comments_blank_lines_and_optional_weights(tmp_path):
    p = tmp_path / "g.edges"
    p.write_text("# header\n0 1 2.5\n\n1\t2   # trailing comment\n  2 0 1e-3\n")
    g = hgraph.io.load(p)
    assert g.src.tolist() == [0, 1, 2] and g.dst.tolist() == [1, 2, 0]
    assert g.weights.tolist() == [2.5, 1.0, 0.001]


def test_adjacency_unweighted_and_isolated(tmp_path):
    p = tmp_path / "g.adj"
    p.write_text("0\t1:2:3\n1\t\n2\t0\n5\t0\n")
    g = hgraph.io.load(p)
    assert g.n == 6 and g.src.tolist() == [0, 0, 0, 2, 5] and g.dst.tolist() == [1, 2, 3, 0, 0]
    assert g.weights.tolist() == [1.0] * 5
    q = tmp_path / "w.adj"
    q.write_text("0\t1:2:3:4\n")                      # integers only: explicit weighted form
    w = hgraph.io.load(q, fmt="adjacency-weighted")
    assert w.dst.tolist() == [1, 3] and w.weights.tolist() == [2.0, 4.0]


@pytest.mark.parametrize("text, fmt, line, words", [
    ("0 1\n1 2 3 4\n", "edgelist", 2, "fields"),
    ("0 1\n# ok\nx 2\n", "edgelist", 3, "not a number"),
    ("0 1\n-1 2\n", "edgelist", 2, "non-negative integer"),
    ("0 1.5\n", "edgelist", 1, "non-negative integer"),
    ("0\t1:2.0:3\n", "adjacency-weighted", 1, "pairs"),
    ("0\t1:2\n0\t2\n", "adjacency", 2, "twice"),
    ("0\t1:zz\n", "adjacency", 1, "not a number"),
])
def test_malformed_files_name_file_and_line(tmp_path, text, fmt, line, words):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(InputError) as info:
        hgraph.io.load(p, fmt=fmt)
    assert info.value.line == line and words in info.value.problem
    assert str(info.value).startswith(f"{p}:{line}: ")


def test_load_parses_many_edges_vectorized(tmp_path):
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 5000, 200_000), rng.integers(0, 5000, 200_000)
    w = rng.random(200_000)
    p = tmp_path / "big.edges"
    np.savetxt(p, np.column_stack([src, dst, w]), fmt="%d %d %.17g")
    g = hgraph.io.load(p)
    assert np.array_equal(g.src, src) and np.array_equal(g.dst, dst) and np.array_equal(g.weights, w)


def test_partition_blocks_and_dependency():
    g = hgraph.Graph.from_edges([0, 1, 5, 9], [9, 2, 6, 0], n=10)
    p = Partition(g, tasks=2, blocks=2)
    assert p.block_bounds.tolist() == [0, 2, 5, 7, 10]
    assert p.task_bounds.tolist() == [0, 5, 10]
    assert p.dependency[0, 3] and p.dependency[0, 1] and p.dependency[3, 0] and p.dependency[2, 2]
    assert p.pair_edges.sum() == 4
    s = p.task_slice(1)
    assert (s.start, s.stop) == (5, 10) and s.out_indices.tolist() == [6, 0]
    route = p.route_table(np.array([True, False, False, False]))
    assert route[:, 0].tolist() == [False, True, False, True] and not route[:, 1].any()


# --- issue 11 item 3: memory errors as tracebacks -------------------------------------------

ROOT = EXAMPLES.parent


def _job(*words, timeout=300):
    """A job as a user runs it (a subprocess, so a traceback or a MemoryError would show)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", *map(str, words)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env)


@pytest.mark.parametrize("text, fmt, line", [
    ("# ids are dense\n0 1\n1 99999999999\n", "edgelist", 3),
    ("0\t1:99999999999\n1\t0\n", "adjacency", 1),
    ("0\t1:2.0:5:1.0\n99999999999\t0:1.0\n", "adjacency", 2),
])
def test_a_huge_vertex_id_is_refused_naming_its_line(tmp_path, text, fmt, line):
    """A stray id of 99999999999 used to allocate 745 GiB (numpy _ArrayMemoryError)."""
    p = tmp_path / "huge.txt"
    p.write_text(text)
    with pytest.raises(InputError) as info:
        hgraph.io.load(p, fmt=fmt)
    assert info.value.line == line
    assert "vertex id 99999999999" in info.value.problem and "dense" in info.value.problem
    assert f"below {hgraph.io.MIN_ID_SPACE:,}" in info.value.problem


def test_the_id_space_bound_grows_with_the_file(tmp_path):
    """Ids may be sparse (16 per id named, at least 2^20): a 2^20-vertex file with few edges
    loads, as does a file whose ids are sparse but within 16 per id; one beyond is refused."""
    p = tmp_path / "sparse.edges"
    p.write_text(f"0 1\n1 {hgraph.io.MIN_ID_SPACE - 1}\n")
    assert hgraph.io.load(p).n == hgraph.io.MIN_ID_SPACE
    m = hgraph.io.MIN_ID_SPACE // 8                 # 2m ids named: bound 32m = 4 x MIN_ID_SPACE
    src = np.arange(m)
    q = tmp_path / "wide.edges"
    np.savetxt(q, np.column_stack([src, (src * 31) % (32 * m)]), fmt="%d")
    assert hgraph.io.load(q).n == int(((src * 31) % (32 * m)).max()) + 1
    with open(q, "a") as handle:
        handle.write(f"0 {32 * m + 2}\n")            # 2m + 2 ids: the bound is 32m + 32
    assert hgraph.io.load(q).n == 32 * m + 3
    with open(q, "a") as handle:
        handle.write(f"0 {40 * m}\n")
    with pytest.raises(InputError) as info:
        hgraph.io.load(q)
    assert info.value.line == m + 2
    assert hgraph.io.load(q, n=40 * m + 1).n == 40 * m + 1   # an explicit n is the caller's word


def test_cli_refuses_a_huge_vertex_id_in_one_line(tmp_path):
    p = tmp_path / "huge.edges"
    p.write_text("0 1\n1 99999999999\n")
    proc = _job("jobs.sssp", "--graph", p, "--progress", "off")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"hgraph: error: {p}:2: vertex id 99999999999")


def test_more_tasks_and_blocks_than_vertices_are_cut_to_the_vertices():
    """``--tasks 100000`` on a small graph used to allocate a 74.5 GiB block matrix. Tasks are
    cut to one per vertex, then blocks to fill the rest; the result is the same as for any tasks."""
    g = hgraph.io.load(EXAMPLES / "tiny.edges")                   # 8 vertices
    for (tasks, blocks), fitted in {(100_000, 1): (8, 1), (4, 4): (4, 2), (3, 5): (3, 2),
                                    (2, 2): (2, 2), (1, 10**9): (1, 8)}.items():
        p = Partition(g, tasks=tasks, blocks=blocks)
        assert (p.tasks, p.blocks) == fitted and p.requested == (tasks, blocks)
        assert p.num_blocks <= g.n and p.pair_edges.shape == (p.num_blocks, p.num_blocks)
    empty = Partition(hgraph.Graph.from_edges([], [], n=0), tasks=5, blocks=5)
    assert (empty.tasks, empty.blocks) == (1, 1)
    from hgraph.algorithms import SSSP

    one = hgraph.run(SSSP(0), g, hgraph.EngineOptions(tasks=1))
    with pytest.warns(Notice, match=r"running 8 tasks, not the 100,000 asked for: at most one "
                                    r"task per vertex \(the graph has 8\)"):   # said (issue 39)
        many = hgraph.run(SSSP(0), g, hgraph.EngineOptions(tasks=100_000, blocks=3))
    assert one.values.tobytes() == many.values.tobytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error", Notice)              # a request that fits: no notice
        hgraph.run(SSSP(0), g, hgraph.EngineOptions(tasks=8))


def test_too_many_vblocks_for_the_block_matrices_are_refused():
    g = hgraph.Graph.from_edges([0], [1], n=20_000)
    with pytest.raises(HGraphError, match=r"20,000 VBlocks.*at most 10,000"):
        Partition(g, tasks=20_000)
    assert Partition(g, tasks=100, blocks=100).num_blocks == 10_000


def test_cli_runs_tasks_beyond_the_vertex_count(tmp_path):
    out = tmp_path / "dist.tsv"
    proc = _job("jobs.sssp", "--graph", EXAMPLES / "tiny.edges", "--tasks", 100000,
                "--progress", "off", "--out", out)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert out.read_text().splitlines()[:3] == ["0\t0.0", "1\t3.0", "2\t1.0"]
