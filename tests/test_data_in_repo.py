"""A clone alone runs every test: the oracle data are in the repository, not in ../shared.

``tests/data`` holds the reference's graphs (ResNet-50's is the one ``jobs/data`` ships), its
results.csv and the schedules it emitted; ``docs/FORMAT.md`` specifies their formats. No test
reads outside the repository, and no test skips for missing data.
"""

from __future__ import annotations

import csv
import re

from tests.conftest import DATA, ROOT, data_path


def test_every_graph_and_schedule_of_results_csv_is_here():
    rows = list(csv.DictReader(open(data_path("reference", "results.csv"))))
    graphs = {r["graph"] for r in rows}
    assert graphs == {"densenet", "googlenet", "resnet50", "unet", "vgg19"}
    for name in graphs:
        assert data_path("graphs", f"cg_{name}.txt").stat().st_size > 0
    schedules = sorted((DATA / "reference" / "schedules").glob("*.txt"))
    assert len(schedules) == 47
    assert {p.name.split("_")[0] for p in schedules} == graphs


def test_the_shipped_graph_is_not_copied():
    assert not (DATA / "graphs" / "cg_resnet50.txt").exists()
    assert data_path("graphs", "cg_resnet50.txt") == ROOT / "jobs" / "data" / "cg_resnet50.txt"


def test_no_test_reads_outside_the_repository():
    pattern = re.compile(r"ROOT\.parent|\.\./shared|parents\[2\]")
    offenders = [p.name for p in sorted((ROOT / "tests").glob("*.py"))
                 if p.name != "test_data_in_repo.py" and pattern.search(p.read_text())]
    assert not offenders


def test_the_format_spec_is_in_docs():
    text = (ROOT / "docs" / "FORMAT.md").read_text()
    assert "## 1. Graph file format" in text
    assert "docs/FORMAT.md" in (ROOT / "README.md").read_text()


def test_the_benches_read_the_reference_data_from_the_repository():
    """The README's figures are rerun by benches: a clone alone must run them too (issue 38).
    bench/refdata.py finds the same files the tests read; no bench reads ``../shared``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("refdata", ROOT / "bench" / "refdata.py")
    refdata = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refdata)
    rows = list(csv.DictReader(open(refdata.RESULTS)))
    assert refdata.names() == sorted({r["graph"] for r in rows})
    for name in refdata.names():
        assert refdata.graph(name) == data_path("graphs", f"cg_{name}.txt")
    pattern = re.compile(r"ROOT\.parent|\.\./shared|parents\[2\]")
    offenders = [p.name for p in sorted((ROOT / "bench").glob("*.py")) if pattern.search(p.read_text())]
    assert not offenders


def test_no_page_or_module_cites_a_document_outside_the_repository():
    """A reader of a clone can open what the code and the pages cite (issue 38: ARCHITECTURE.md
    and planner/api.py cited a DESIGN.md outside it). docs/FORMAT.md names its source as a
    provenance note; bench/NOTES_*.md are history."""
    pattern = re.compile(r"\.\./shared|DESIGN\.md")
    pages = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "bench" / "README.md",
             *[p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "FORMAT.md"]]
    modules = [p for pkg in ("hgraph", "planner", "jobs", "cluster", "bench")
               for p in sorted((ROOT / pkg).rglob("*.py"))]
    offenders = [str(p.relative_to(ROOT)) for p in pages + modules if pattern.search(p.read_text())]
    assert not offenders
