"""Every ``Example::`` block in the packages is a doctest (issue 38).

``--doctest-modules`` (pyproject.toml) runs every ``>>>`` line of hgraph/, planner/, jobs/ and
cluster/; a block headed ``Example::`` without one is a literal block that never runs and can rot
(20 modules carried one). This test finds such blocks.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hgraph", "planner", "jobs", "cluster")
_HEAD = re.compile(r"\bExamples?\b[^\n]*::\s*$")


def dead_examples(text: str) -> list[int]:
    """Line numbers (1-based) of ``Example...::`` blocks whose body has no ``>>>`` line."""
    lines, dead = text.splitlines(), []
    for i, line in enumerate(lines):
        if not _HEAD.search(line):
            continue
        indent = len(line) - len(line.lstrip())
        body, j = [], i + 1
        while j < len(lines) and (not lines[j].strip()
                                  or len(lines[j]) - len(lines[j].lstrip()) > indent):
            body.append(lines[j])
            j += 1
        if not any(b.lstrip().startswith(">>>") for b in body):
            dead.append(i + 1)
    return dead


def test_the_finder_finds_a_dead_block():
    assert dead_examples('"""Doc.\n\nExample::\n\n    hgraph jobs\n"""\n') == [3]
    assert dead_examples('"""Doc.\n\nExample::\n\n    >>> 1 + 1\n    2\n"""\n') == []


def test_every_example_block_is_a_doctest():
    dead = [f"{path.relative_to(ROOT)}:{n}" for pkg in PACKAGES
            for path in sorted((ROOT / pkg).rglob("*.py"))
            for n in dead_examples(path.read_text(encoding="utf-8"))]
    assert not dead, f"Example:: blocks with no >>> line (make them doctests or prose): {dead}"
