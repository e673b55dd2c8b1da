"""No function over 80 lines in the product's code (issue 38: a newcomer reads a function on
one screen; a longer one is several jobs, each of which deserves a name and a docstring).

The scan walks every function and method (nested ones too) of ``planner/``, ``hgraph/``,
``jobs/`` and ``cluster/`` with ``ast``; a function's length is its ``def`` line to its last
line, docstring included.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("planner", "hgraph", "jobs", "cluster")
MAX_LINES = 80

#: Functions allowed over the limit, ``path:function`` -> why (issue 38 emptied it: the step
#: walkers, the DP loops, the emitter, the MILP builder and the torch importer were split). An
#: entry is a debt with a reason, and leaves as soon as its function is split.
ALLOWED: dict = {}


def long_functions(root: Path = ROOT, packages=PACKAGES, limit: int = MAX_LINES) -> dict:
    """``{"path:function": lines}`` of every function over ``limit`` lines under ``packages``."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > limit:
                        out[f"{path.relative_to(root).as_posix()}:{node.name}"] = lines
    return out


def test_no_function_is_over_80_lines():
    over = {k: v for k, v in long_functions().items() if k not in ALLOWED}
    assert not over, "functions over %d lines (split them): %s" % (
        MAX_LINES, ", ".join(f"{k} ({v})" for k, v in sorted(over.items())))


def test_the_allow_list_holds_only_long_functions():
    """An entry whose function was split (or renamed) leaves the list."""
    long = long_functions()
    assert not [k for k in ALLOWED if k not in long], "split: remove from ALLOWED"


def test_the_scan_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(f"def short():\n    pass\n\n\nclass C:\n"
                                           f"    def wide(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n")
    assert long_functions(tmp_path, ("pkg",)) == {"pkg/m.py:wide": MAX_LINES + 1}
