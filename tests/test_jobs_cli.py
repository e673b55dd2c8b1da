"""The named engine jobs through the CLI, end to end: results, output files, errors, progress.

Most runs call :func:`jobs.cli.main` in-process (fast); the checks about what a user sees —
one line, an exit code, no traceback, ``python -m jobs.NAME`` — run real subprocesses.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jobs.cli import main
from jobs.common import read_values

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
STATS_KEYS = {"superstep", "mode", "active", "messages", "bytes", "seconds"}


def random_graph(n=60, m=240, seed=7):
    """Distinct random weighted edges, no self-loops: a dense part on the first 2/3 of the
    vertices and a sparse one on the rest, so there are several components, unreachable,
    isolated and dangling vertices. Vertex n-1 gets its one edge in :func:`write_edgelist`."""
    rng = np.random.default_rng(seed)
    k = 2 * n // 3
    src = np.concatenate([rng.integers(0, k, size=2 * m), rng.integers(k, n - 1, size=n // 4)])
    dst = np.concatenate([rng.integers(0, k, size=2 * m), rng.integers(k, n - 1, size=n // 4)])
    keep = src != dst
    key = np.unique(src[keep] * n + dst[keep])
    key = rng.permutation(key)[:m]
    src, dst = key // n, key % n
    weights = np.round(rng.uniform(0.5, 3.0, size=len(src)), 3)
    return n, src, dst, weights


def write_edgelist(path, n, src, dst, weights):
    lines = ["# random test graph"]
    lines += [f"{s} {d} {w!r}" for s, d, w in zip(src.tolist(), dst.tolist(), weights.tolist())]
    # Make sure vertex n-1 exists even if it has no edge (ids are 0..max id).
    lines.append(f"{n - 1} {n - 2} 1.0")
    path.write_text("\n".join(lines) + "\n")
    src = np.append(src, n - 1)
    dst = np.append(dst, n - 2)
    weights = np.append(weights, 1.0)
    return src, dst, weights


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("graphs") / "random.edges"
    n, src, dst, weights = random_graph()
    src, dst, weights = write_edgelist(path, n, src, dst, weights)
    return path, n, src, dst, weights


def submit(*argv) -> int:
    return main(["submit", *map(str, argv), "--progress", "off"])


def run_cli(*argv, check=False):
    """``python -m ARGV`` in a subprocess (``jobs`` is the ``hgraph`` command); returns the CompletedProcess."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", *map(str, argv)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(proc.stderr)
    return proc


def values_array(path, n, dtype=float):
    values = read_values(path)
    assert list(values) == list(range(n)), "--out must have every vid once, sorted"
    return np.array([dtype(values[i]) for i in range(n)])


# --------------------------------------------------------------------------------------------
# listing


def test_jobs_lists_each_engine_job_on_one_line(capsys):
    assert main(["jobs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = {line.split()[0] for line in lines}
    assert {"sssp", "pagerank", "cc"} <= names
    for line in lines:
        name, _, help_text = line.partition(" ")
        assert help_text.strip(), f"job {name} has no help line"


# --------------------------------------------------------------------------------------------
# correctness against SciPy / networkx


def test_sssp_out_and_stats(graph_file, tmp_path):
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    path, n, src, dst, weights = graph_file
    out, stats = tmp_path / "dist.tsv", tmp_path / "stats.json"
    assert submit("sssp", "--graph", path, "--source", 3, "--tasks", 2, "--blocks", 2,
                  "--out", out, "--stats", stats) == 0
    expected = dijkstra(csr_matrix((weights, (src, dst)), shape=(n, n)), indices=3)
    got = values_array(out, n)
    assert np.array_equal(got, expected)
    assert np.isinf(got).any(), "the test graph should have unreachable vertices"
    text = out.read_text()
    assert "\tinf\n" in text
    # floats as shortest round-trip repr: reading back gives the exact float64
    for line in text.splitlines():
        vid, value = line.split("\t")
        assert value == repr(float(value))

    rows = json.loads(stats.read_text())
    assert isinstance(rows, list) and rows
    for i, row in enumerate(rows):
        assert STATS_KEYS <= set(row), row
        assert row["superstep"] == i
        assert row["mode"] in ("push", "pull")
        assert row["active"] >= 0 and row["messages"] >= 0 and row["bytes"] >= 0
        assert row["seconds"] >= 0


def test_cc_matches_scipy_weak_components(graph_file, tmp_path):
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    path, n, src, dst, weights = graph_file
    out = tmp_path / "cc.tsv"
    assert submit("cc", "--graph", path, "--tasks", 3, "--out", out) == 0
    count, labels = connected_components(csr_matrix((weights, (src, dst)), shape=(n, n)),
                                         directed=True, connection="weak")
    assert count > 1, "the test graph should have several components"
    # our label: the smallest vertex id of the component
    smallest = np.full(count, n)
    np.minimum.at(smallest, labels, np.arange(n))
    text_values = read_values(out)
    assert all(v.lstrip("-").isdigit() for v in text_values.values()), "cc labels are integers"
    assert np.array_equal(values_array(out, n, int), smallest[labels])


def test_pagerank_matches_networkx(graph_file, tmp_path):
    import networkx as nx

    path, n, src, dst, weights = graph_file
    out = tmp_path / "pr.tsv"
    assert submit("pagerank", "--graph", path, "--tasks", 2, "--iterations", 200,
                  "--damping", 0.85, "--out", out) == 0
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_weighted_edges_from(zip(src.tolist(), dst.tolist(), weights.tolist()))
    assert any(g.out_degree(v) == 0 for v in g), "the test graph should have dangling vertices"
    expected = nx.pagerank(g, alpha=0.85, tol=1e-14, max_iter=1000)
    got = values_array(out, n)
    assert np.max(np.abs(got - np.array([expected[v] for v in range(n)]))) < 1e-9
    assert abs(got.sum() - 1.0) < 1e-9


def test_pagerank_iterations_are_exact_power_iterations(tmp_path):
    """--iterations k runs exactly k steps: compare with k dense power-iteration steps."""
    out = tmp_path / "pr.tsv"
    assert submit("pagerank", "--graph", EXAMPLES / "tiny.edges", "--iterations", 3,
                  "--damping", 0.5, "--out", out) == 0
    n, d = 8, 0.5
    edges = [(0, 1, 4.0), (0, 2, 1.0), (2, 1, 2.0), (1, 3, 1.0), (2, 3, 5.0), (3, 4, 3.0),
             (4, 0, 1.5), (5, 6, 1.0), (6, 7, 0.5), (7, 5, 2.0)]
    w = np.zeros((n, n))
    for s, t, x in edges:
        w[s, t] = x
    p = w / w.sum(axis=1, keepdims=True)
    x = np.full(n, 1 / n)
    for _ in range(3):
        x = (1 - d) / n + d * (x @ p)
    assert np.allclose(values_array(out, n), x, rtol=0, atol=1e-14)


# --------------------------------------------------------------------------------------------
# determinism across partitionings and message modes


@pytest.mark.parametrize("job,extra", [("sssp", ["--source", "0"]), ("cc", []),
                                       ("pagerank", ["--iterations", "25"])])
def test_outputs_identical_across_tasks_blocks_modes(graph_file, tmp_path, job, extra):
    path = graph_file[0]
    outputs = set()
    for tasks, blocks, mode in [(1, 1, "push"), (2, 3, "pull"), (3, 1, "hybrid"), (4, 3, "push")]:
        out = tmp_path / f"{job}-{tasks}-{blocks}-{mode}.tsv"
        assert submit(job, "--graph", path, "--tasks", tasks, "--blocks", blocks,
                      "--mode", mode, "--out", out, *extra) == 0
        outputs.add(out.read_bytes())
    assert len(outputs) == 1


def test_adjacency_and_edgelist_give_the_same_result(tmp_path):
    a, b = tmp_path / "a.tsv", tmp_path / "b.tsv"
    assert submit("sssp", "--graph", EXAMPLES / "tiny.edges", "--out", a) == 0
    assert submit("sssp", "--graph", EXAMPLES / "tiny.adj", "--out", b) == 0
    assert a.read_text() == b.read_text() == (
        "0\t0.0\n1\t3.0\n2\t1.0\n3\t4.0\n4\t7.0\n5\tinf\n6\tinf\n7\tinf\n")
    labels = tmp_path / "cc.tsv"
    assert submit("cc", "--graph", EXAMPLES / "tiny.adj", "--tasks", 2, "--out", labels) == 0
    assert labels.read_text() == "0\t0\n1\t0\n2\t0\n3\t0\n4\t0\n5\t5\n6\t5\n7\t5\n"


# --------------------------------------------------------------------------------------------
# errors: one line, exit code, no traceback, no half-written output


def _one_line_error(proc, code=2):
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_malformed_graph_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.edges"
    bad.write_text("# ok\n0 1\n1 two\n")
    out = tmp_path / "out.tsv"
    out.write_text("earlier good result\n")
    proc = run_cli("jobs", "submit", "sssp", "--graph", bad, "--out", out)
    line = _one_line_error(proc, 2)
    assert f"{bad}:3" in line
    assert out.read_text() == "earlier good result\n", "--out must be untouched on failure"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.edges", "out.tsv"], "temp left"


def test_missing_file_and_absurd_arguments_are_one_line(tmp_path):
    missing = tmp_path / "nope.edges"
    line = _one_line_error(run_cli("jobs", "submit", "cc", "--graph", missing), 2)
    assert str(missing) in line
    line = _one_line_error(run_cli("jobs", "submit", "sssp", "--graph",
                                   EXAMPLES / "tiny.edges", "--tasks", "0"), 2)
    assert "--tasks" in line
    line = _one_line_error(run_cli("jobs", "submit", "sssp", "--graph",
                                   EXAMPLES / "tiny.edges", "--mode", "sideways"), 2)
    assert "--mode" in line


def test_bad_job_arguments_raise_one_line_errors(tmp_path, capsys):
    out = tmp_path / "out.tsv"
    assert submit("sssp", "--graph", EXAMPLES / "tiny.edges", "--source", 8, "--out", out) == 2
    assert "--source 8" in capsys.readouterr().err
    assert not out.exists()
    assert submit("pagerank", "--graph", EXAMPLES / "tiny.edges", "--damping", 1.5) == 2
    assert "--damping" in capsys.readouterr().err
    assert submit("sssp", "--graph", EXAMPLES, "--out", out) == 2
    assert "directory" in capsys.readouterr().err
    assert not out.exists()


def test_output_paths_checked_before_the_run_and_dash_is_stdout(tmp_path, capsys):
    graph = EXAMPLES / "tiny.edges"
    assert submit("cc", "--graph", graph, "--out", tmp_path) == 2
    assert "is a directory" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert submit("cc", "--graph", graph, "--stats", blocker / "sub" / "s.json") == 2
    assert "--stats" in capsys.readouterr().err
    assert submit("cc", "--graph", graph, "--out", "-") == 0
    assert capsys.readouterr().out == "0\t0\n1\t0\n2\t0\n3\t0\n4\t0\n5\t5\n6\t5\n7\t5\n"
    nested = tmp_path / "new" / "dir" / "cc.tsv"
    assert submit("cc", "--graph", graph, "--out", nested) == 0 and nested.exists()


# --------------------------------------------------------------------------------------------
# entry points and progress


def test_python_m_jobs_module_equals_hgraph_submit(tmp_path):
    a, b, stats = tmp_path / "a.tsv", tmp_path / "b.tsv", tmp_path / "s.json"
    run_cli("jobs.sssp", "--graph", EXAMPLES / "tiny.adj", "--source", 5, "--tasks", 2,
            "--out", a, "--stats", stats, "--progress", "plain", check=True)
    assert submit("sssp", "--graph", EXAMPLES / "tiny.adj", "--source", 5, "--tasks", 2,
                  "--out", b) == 0
    assert a.read_text() == b.read_text()
    assert read_values(a)[7] == "1.5"
    # the module entry point reports errors like the CLI does
    _one_line_error(run_cli("jobs.cc", "--graph", tmp_path / "missing.edges"), 2)


def test_auto_progress_is_quiet_on_a_pipe_and_plain_gives_lines(tmp_path):
    """Issue 11 item 5: --progress auto shows progress on a terminal only; in a pipe or a log
    there is no line per superstep unless --progress plain asks for them."""
    stats = tmp_path / "s.json"
    quiet = run_cli("jobs", "submit", "sssp", "--graph", EXAMPLES / "tiny.edges",
                    "--stats", stats, check=True)  # --progress auto, stderr is a pipe
    assert not [line for line in quiet.stderr.splitlines() if line.startswith("superstep ")]
    proc = run_cli("jobs", "submit", "sssp", "--graph", EXAMPLES / "tiny.edges",
                   "--stats", stats, "--progress", "plain", check=True)
    rows = json.loads(stats.read_text())
    lines = [line for line in proc.stderr.splitlines() if line.startswith("superstep ")]
    assert len(lines) == len(rows)
    for line, row in zip(lines, rows):
        assert line.startswith(f"superstep {row['superstep']}  {row['mode']}  active {row['active']}")
        assert "bytes" in line
    assert proc.stdout == ""


def test_injected_failure_recovers_to_the_same_output_and_is_shown(graph_file, tmp_path, capsys):
    path = graph_file[0]
    clean, failed, stats = tmp_path / "clean.tsv", tmp_path / "failed.tsv", tmp_path / "s.json"
    assert submit("sssp", "--graph", path, "--tasks", 3, "--out", clean) == 0
    assert main(["submit", "sssp", "--graph", str(path), "--tasks", "3", "--checkpoint-every", "2",
                 "--inject-failure", "3", "--out", str(failed), "--stats", str(stats),
                 "--progress", "plain"]) == 0
    assert failed.read_bytes() == clean.read_bytes()
    rows = json.loads(stats.read_text())
    failures = [row for row in rows if row.get("failure")]
    assert len(failures) == 1 and failures[0]["failure"]["superstep"] == 3
    assert [row["superstep"] for row in rows] == list(range(len(rows)))
    assert "lost at superstep 3" in capsys.readouterr().err


def test_a_worker_that_dies_every_time_fails_in_one_line(graph_file, tmp_path, monkeypatch, capsys):
    """--max-recoveries N: past N recoveries the job fails with one line naming the worker and the
    superstep, a non-zero exit and no output file (here worker 1 dies at superstep 2 every time)."""
    import hgraph.runtime
    from hgraph.runtime import WorkerLost
    from hgraph.runtime.local import LocalRuntime

    class AlwaysLosesWorker1(LocalRuntime):
        def step(self, superstep, mode, aggregates, final, inbound):
            if superstep == 2:
                raise WorkerLost([1], "out of memory")
            return super().step(superstep, mode, aggregates, final, inbound)

    monkeypatch.setitem(hgraph.runtime.RUNTIMES, "local", AlwaysLosesWorker1)
    out = tmp_path / "d.tsv"
    capsys.readouterr()
    code = main(["submit", "sssp", "--graph", str(graph_file[0]), "--tasks", "2", "--progress", "off",
                 "--checkpoint-every", "1", "--max-recoveries", "2", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and not out.exists()
    assert len(err) == 1 and err[0].startswith("hgraph: error: worker 1 lost at superstep 2 after "
                                               "2 recoveries"), err
    with pytest.raises(SystemExit) as bad:
        main(["submit", "sssp", "--graph", str(graph_file[0]), "--max-recoveries", "-1"])
    assert bad.value.code == 2


def test_make_reporter_kinds():
    from hgraph.common.progress import make_reporter

    row = {"superstep": 4, "mode": "push", "active": 12345, "messages": 7, "bytes": 3 * 2**20,
           "seconds": 0.25}
    buf = io.StringIO()
    report = make_reporter("plain", stream=buf)
    report(row)
    report.close()
    assert buf.getvalue() == ("superstep 4  push  active 12,345  messages 7  bytes 3.00 MiB  "
                              "0.250 s\n")

    buf = io.StringIO()
    report = make_reporter("bar", stream=buf, total=10)
    report(row)
    report.close()
    text = buf.getvalue()
    assert "push" in text and "12,345" in text and "3.00 MiB" in text

    failed = dict(row, failure={"superstep": 4, "worker": 1, "resumed_at": 2},
                  recovery_seconds=0.5)
    buf = io.StringIO()
    make_reporter("plain", stream=buf)(failed)
    assert buf.getvalue().endswith("worker 1 lost at superstep 4, resumed at 2 after 0.50 s\n")
    buf = io.StringIO()
    report = make_reporter("bar", stream=buf)
    report(failed)
    report.close()
    assert "worker 1 lost at superstep 4" in buf.getvalue()

    buf = io.StringIO()  # auto on a non-terminal: quiet, but a lost worker is still said
    report = make_reporter("auto", stream=buf)
    report(row)
    assert buf.getvalue() == ""
    report(failed)
    assert buf.getvalue().endswith("worker 1 lost at superstep 4, resumed at 2 after 0.50 s\n")

    buf = io.StringIO()
    report = make_reporter("off", stream=buf)
    report(row)
    report.close()
    assert buf.getvalue() == ""
    with pytest.raises(ValueError):
        make_reporter("loud")


def test_stage_tracking_kinds():
    """Stage progress (issue 11 item 5): nothing in a pipe under auto, one line per top-level
    stage with ``plain``, a live line with the stage, position and ETA on a terminal; outside
    a tracked job every report is a no-op."""
    from hgraph.common.progress import current, tracking

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    def job():
        stages = current()
        with stages.stage("outer"):
            with stages.stage("inner"):
                stages.superstep({"superstep": 2, "mode": "pull", "active": 5})
                stages.position(3, 10)

    job()                                            # no tracker: silent, no error
    for kind, stream, expect in (("auto", io.StringIO(), None), ("off", Terminal(), None),
                                 ("plain", io.StringIO(), "outer"), ("auto", Terminal(), "ETA")):
        with tracking(kind, stream=stream):
            job()
        text = stream.getvalue()
        if expect is None:
            assert text == "", kind
        elif kind == "plain":
            assert text.startswith("outer: ") and text.endswith(" s\n") and "inner" not in text
        else:
            assert "outer" in text and "inner" in text and "ETA" in text
    assert current().kind == "off"
    with pytest.raises(ValueError):
        with tracking("loud"):
            pass


# --------------------------------------------------------------------------------------------
# Ray runtime through the CLI


@pytest.mark.ray
def test_jobs_on_ray_equal_in_process(ray_session, graph_file, tmp_path):
    path = graph_file[0]
    for job, extra in [("sssp", ["--source", "1"]), ("pagerank", ["--iterations", "10"])]:
        local, remote = tmp_path / f"{job}-local.tsv", tmp_path / f"{job}-ray.tsv"
        assert submit(job, "--graph", path, "--tasks", 2, "--out", local, *extra) == 0
        assert submit(job, "--graph", path, "--tasks", 2, "--runtime", "ray", "--out", remote,
                      *extra) == 0
        assert local.read_bytes() == remote.read_bytes()


# --------------------------------------------------------------------------------------------
# the engine benchmark script (its acceptance size is run by hand; here a small one)


@pytest.mark.ray
def test_engine_bench_small_run(ray_session, tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("engine_bench", ROOT / "bench" / "engine_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    src, dst, weights = bench.make_graph(500, 4000, seed=3)
    assert len(set(zip(src.tolist(), dst.tolist()))) == 4000 and not np.any(src == dst)
    again = bench.make_graph(500, 4000, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip((src, dst, weights), again))

    # --save-graph's edge list reproduces the bench's distances through the CLI
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    saved, dist = tmp_path / "bench.edges", tmp_path / "dist.tsv"
    bench.save_edgelist(saved, src, dst, weights, header="test")
    assert submit("sssp", "--graph", saved, "--source", 7, "--tasks", 3, "--out", dist) == 0
    expected = dijkstra(csr_matrix((weights, (src, dst)), shape=(500, 500)), indices=7)
    assert np.array_equal(values_array(dist, 500), expected)

    out = tmp_path / "bench.json"
    assert bench.main(["--vertices", "3000", "--edges", "30000", "--tasks", "2",
                       "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "RATIO in-process / scipy dijkstra" in text and "RATIO ray / in-process" in text
    record = json.loads(out.read_text())
    assert record["graph"]["edges"] == 30000 and record["graph"]["reachable"] > 1000
    for key in ("ratio_inprocess_over_scipy", "ratio_ray_over_inprocess"):
        assert record[key] > 0


@pytest.mark.parametrize("argv, one_thread", [
    (["submit", "plan", "--graph", "no_such_graph.txt"], True),
    (["submit", "plan", "--graph", "no_such_graph.txt", "--execute"], False),
    (["submit", "execute", "--graph", "no_such_graph.txt"], False),
])
def test_only_planning_commands_pin_blas_to_one_thread(argv, one_thread, monkeypatch):
    """An execute runs real matrix products and convolutions: it keeps BLAS's every core."""
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    assert main(argv) == 2                                      # the missing graph: one line
    assert (os.environ.get("OPENBLAS_NUM_THREADS") == "1") is one_thread
