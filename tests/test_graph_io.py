"""Graph construction and the text loaders: CSR, columns, formats, one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

import hgraph
from hgraph.errors import HGraphError, InputError
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
