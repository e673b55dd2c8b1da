"""A test run leaves nothing in the machine's temp folder (issue 39, item 10).

Docstring examples that write files (``d = tempfile.mkdtemp()`` and a graph, a plan, a
checkpoint in it) left one folder each in ``tempfile.gettempdir()`` per run, and one wrote
``/tmp/hgraph-doc.txt``. The root ``conftest.py`` now points an example's ``tempfile`` at its
pytest ``tmp_path``. Checked by running every such example in a pytest of its own whose temp
folder (``TMPDIR``) is a fresh one: afterwards it holds pytest's own folder only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import ROOT

PACKAGES = ("hgraph", "planner", "jobs", "cluster")


def _example_lines():
    """(path, line) of every docstring example line (``>>>``/``...``) of the packages."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for line in path.read_text(encoding="utf-8").splitlines():
                if re.match(r"\s*(>>>|\.\.\.) ", line):
                    yield path, line


def test_no_example_names_a_fixed_temp_path():
    fixed = [f"{path.relative_to(ROOT)}: {line.strip()}" for path, line in _example_lines()
             if re.search(r"""["']/tmp/""", line)]
    assert fixed == [], "examples must write under tempfile's folder, not a fixed /tmp path"


def test_examples_that_make_temp_files_leave_none(tmp_path):
    modules = sorted({str(path.relative_to(ROOT)) for path, line in _example_lines()
                      if "tempfile." in line})
    assert len(modules) >= 5, modules                  # the examples this guards are found
    temp = tmp_path / "t"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *modules], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    left = sorted(name for name in os.listdir(temp) if not name.startswith("pytest-of-"))
    assert left == [], f"the examples of {modules} left {left} in the temp folder"
