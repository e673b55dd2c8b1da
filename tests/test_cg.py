"""planner.cg: the strict reader, the byte-exact writer, and the bad-input corpus."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import data_path
from hgraph.common.errors import InputError
from planner import cg

BAD = Path(__file__).parent / "badinput"
GRAPHS = ["vgg19", "unet", "resnet50", "googlenet", "densenet"]

# FORMAT.md §1.3: N, M, activations, act->act edges, S, T(V)
TABLE = {
    "vgg19": (86, 92, 46, 45, 4_004_508_676, 190),
    "unet": (108, 120, 60, 63, 11_781_604_356, 231),
    "resnet50": (340, 352, 176, 191, 4_605_604_868, 653),
    "googlenet": (266, 268, 134, 162, 1_273_252_884, 665),
    "densenet": (1054, 1136, 568, 645, 11_661_796_356, 2008),
}


@pytest.mark.parametrize("name", GRAPHS)
def test_reference_graphs_round_trip_and_match_the_table(name, tmp_path):
    path = data_path("graphs", f"cg_{name}.txt")
    g = cg.read(path)
    assert cg.dumps(g) == path.read_text()
    cg.write(g, tmp_path / "out.txt")
    assert (tmp_path / "out.txt").read_bytes() == path.read_bytes()

    from planner.activation_graph import ActivationGraph

    n, m, acts, edges, s, tv = TABLE[name]
    ag = ActivationGraph.from_cg(g)
    assert (g.num_vars, g.num_functions, int(g.is_activation.sum())) == (n, m, acts)
    assert (ag.n, ag.num_edges) == (acts, edges)
    assert int(g.var_bytes[g.is_activation].sum()) == s
    assert int(g.forward_costs.sum()) == tv
    assert g.var_bytes.dtype == np.int64
    assert all(bw.index == f.index + m // 2 for f, bw in zip(g.forward, g.backward))
    assert len(ag.sinks) == 1


def test_sizes_are_64_bit(tmp_path):
    text = (BAD / "tiny_valid.txt").read_text().replace("2 400 _", "2 5000000000000 _", 1)
    g = cg.loads(text)
    assert g.var_bytes[2] == 5_000_000_000_000
    assert int(g.var_bytes.sum()) == 5_000_000_000_000 + 540
    assert cg.dumps(g) == text


def test_tiny_graph_structure():
    g = cg.read(BAD / "tiny_valid.txt")
    assert g.producer.tolist() == [-1, -1, 0, 1]
    assert g.is_activation.tolist() == [False, False, True, True]
    assert g.backward[0].tagged("input") == [0, 1]
    assert g.backward[1].outputs == [2]
    assert g.forward[1].line == 13 and g.backward[0].line == 19


# file, line, words the message must contain
CORPUS = [
    ("empty.txt", 1, "empty file"),
    ("binary.bin", 1, "binary"),
    ("binary_utf8.bin", 2, "binary"),
    ("truncated.txt", 21, "unexpected end of file"),
    ("truncated_no_newline.txt", 33, "truncated"),
    ("wrong_var_count.txt", 6, "header says N=5"),
    ("wrong_function_count.txt", 19, "expected direction line 'forward'"),
    ("odd_function_count.txt", 1, "even function count"),
    ("wrong_block_counts.txt", 10, "3 inputs"),
    ("unknown_id.txt", 8, "unknown id 9"),
    ("cycle.txt", 6, "cycle"),
    ("negative_size.txt", 4, "non-negative integer"),
    ("nonnumeric_size.txt", 4, "expected an integer"),
    ("missing_direction.txt", 13, "expected direction line"),
    ("wrong_direction.txt", 6, "expected direction line 'forward'"),
    ("bad_tag.txt", 23, "input tag"),
    ("bad_json.txt", 12, "JSON"),
    ("ids_out_of_order.txt", 3, "expected variable id 1"),
]


@pytest.mark.parametrize("name,line,words", CORPUS, ids=[c[0] for c in CORPUS])
def test_bad_input_gives_one_line_error_with_file_and_line(name, line, words):
    path = BAD / name
    with pytest.raises(InputError) as info:
        cg.read(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}:{line}: "), msg
    assert words in msg
    assert "\n" not in msg
    assert info.value.exit_code == 2 and info.value.line == line


def test_corpus_is_complete():
    listed = {c[0] for c in CORPUS} | {"tiny_valid.txt"}
    assert {p.name for p in BAD.iterdir()} == listed


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        cg.read(tmp_path / "nope.txt")


def test_crlf_is_rejected():
    text = (BAD / "tiny_valid.txt").read_text().replace("\n", "\r\n")
    with pytest.raises(InputError, match="line endings"):
        cg.loads(text, "x.txt")


@pytest.mark.parametrize("name", ["vgg19", "googlenet"])
def test_fast_path_equals_line_by_line_parser(name, monkeypatch):
    path = data_path("graphs", f"cg_{name}.txt")
    text = path.read_text()
    head = text.index("\n")
    n, m = map(int, text[:head].split())
    assert cg._fast_parse(text, text.encode(), n, m, head + 1) is not None   # the common case
    fast = cg.read(path)
    monkeypatch.setattr(cg, "_fast_parse", lambda *args: None)
    slow = cg.read(path)
    assert fast.functions == slow.functions
    assert fast.var_names == slow.var_names
    assert np.array_equal(fast.var_bytes, slow.var_bytes)


def test_a_read_graph_plans_from_its_columns(tmp_path):
    """A graph read from a file holds its blocks as columns; the scale path (activation graph,
    emit, replay, lower bound, report) never builds the Function objects, which are built,
    equal to the written ones, only when asked."""
    from planner import emit, report, simulate, synth
    from planner.activation_graph import ActivationGraph
    from planner.api import lower_bound_bytes

    built = synth.build(layers=3, heads=2)
    cg.write(built, tmp_path / "cg_t.txt")
    g = cg.read(tmp_path / "cg_t.txt")
    ag = ActivationGraph.from_cg(g)
    groups = np.arange(ag.n) // 7
    sim = simulate.replay(g, emit.emit_groups(g, groups, ag))
    assert sim.ok and lower_bound_bytes(g) > 0 and len(report.decisions(g, ag, groups, sim))
    assert "_functions" not in g.__dict__
    key = (lambda fs: [(f.index, f.direction, f.inputs, f.outputs, f.type, f.details)
                       for f in fs])
    assert key(g.functions) == key(built.functions) and cg.dumps(g) == cg.dumps(built)
