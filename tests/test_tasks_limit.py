"""``--tasks`` beyond what can be used is cut to it, in one line (issue 39, item 4).

Before, ``hgraph submit plan --tasks 100000 --runtime ray`` on a 33-op graph never finished
(killed at 400 s, a flood of Ray warnings): the engine cut the tasks to one per vertex, silently,
and started that many Ray actors — a process each — on a 2-CPU machine, for each of the plan's
engine runs. Now the engine cuts them to what the runtime can use too (one Ray actor per CPU of
the cluster, :func:`hgraph.runtime.task_limit`) and says so with a
:class:`~hgraph.common.errors.Notice`; the CLI prints each distinct one once. The results are
the same for any number of tasks, and are checked to be (more tasks than vertices, in the
engine: ``tests/test_graph_io.py``).
"""

from __future__ import annotations

import pytest

import hgraph
from hgraph.algorithms import SSSP
from hgraph.common.errors import Notice
from hgraph.generators import random_graph
from jobs.cli import main as hgraph_main
from tests.conftest import RAY_TIMEOUT, ROOT

TINY = ROOT / "examples" / "tiny.edges"


@pytest.mark.ray
def test_more_ray_actors_than_cpus_are_cut_with_a_notice(ray_session):
    """The session's Ray has 4 CPUs (conftest): 100,000 tasks on 150 vertices run 4 actors."""
    g = random_graph(150, 700, seed=11)
    with pytest.warns(Notice, match=r"running 4 tasks, not the 100,000 asked for: at most one "
                                    r"Ray actor per CPU of the cluster \(4 CPUs\)"):
        remote = hgraph.run(SSSP(3), g, hgraph.EngineOptions(tasks=100_000, runtime="ray",
                                                             timeout=RAY_TIMEOUT))
    assert remote.values.tobytes() == hgraph.run(SSSP(3), g, hgraph.EngineOptions(tasks=1)).values.tobytes()
    assert sum(row["bytes"] for row in remote.stats) > 0         # it did run on several workers


def _notice_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("hgraph: running ")]


@pytest.mark.ray
def test_cli_sssp_on_ray_with_100000_tasks(ray_session, tmp_path, capsys):
    ref, out = tmp_path / "ref.tsv", tmp_path / "out.tsv"
    common = ["submit", "sssp", "--graph", str(TINY), "--source", "0", "--progress", "off"]
    assert hgraph_main([*common, "--out", str(ref)]) == 0
    capsys.readouterr()
    assert hgraph_main([*common, "--tasks", "100000", "--runtime", "ray", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "hgraph: running 4 tasks, not the 100,000 asked for: at most one Ray actor per CPU of "
        "the cluster (4 CPUs); the results are the same for any number"], err
    assert out.read_bytes() == ref.read_bytes()


def test_cli_plan_with_100000_tasks_says_so_once(tmp_path, capsys):
    """A plan runs the engine several times (levels, lower sets, replays): one line for all."""
    graph, ref, out = tmp_path / "mlp.txt", tmp_path / "ref.txt", tmp_path / "out.txt"
    assert hgraph_main(["graph", "zoo", "mlp", "--out", str(graph)]) == 0
    common = ["submit", "plan", "--graph", str(graph), "--budget", "100%", "--progress", "off",
              "--certify", "off"]
    assert hgraph_main([*common, "--out", str(ref)]) == 0
    capsys.readouterr()
    assert hgraph_main([*common, "--tasks", "100000", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert _notice_lines(err) == [
        "hgraph: running 15 tasks, not the 100,000 asked for: at most one task per vertex (the "
        "graph has 15); the results are the same for any number"], err
    assert out.read_bytes() == ref.read_bytes()
