"""The reference's data, as the benches read them: from the repository, so a clone alone reruns
every bench.

The copies the tests use (``tests/conftest.py``): the reference's graphs in
``tests/data/graphs``, ResNet-50's in ``jobs/data`` (the package ships it), its results.csv in
``tests/data/reference``; ``docs/FORMAT.md`` says where they come from
(``tests/test_data_in_repo.py`` checks that every bench reads them here).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: results.csv of the reference: one row per graph, solver, strategy and budget label.
RESULTS = ROOT / "tests" / "data" / "reference" / "results.csv"
_GRAPH_DIRS = (ROOT / "tests" / "data" / "graphs", ROOT / "jobs" / "data")


def graph(name: str) -> Path:
    """The reference graph ``cg_NAME.txt`` (its path under tests/data/graphs if it is nowhere)."""
    for folder in _GRAPH_DIRS:
        path = folder / f"cg_{name}.txt"
        if path.exists():
            return path
    return _GRAPH_DIRS[0] / f"cg_{name}.txt"


def names() -> list[str]:
    """Every reference graph's name (``cg_NAME.txt``), sorted."""
    return sorted({p.stem[3:] for folder in _GRAPH_DIRS for p in folder.glob("cg_*.txt")})
