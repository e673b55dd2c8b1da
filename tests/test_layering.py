"""The house's import rules, checked on the source with ``ast`` (no module is imported).

Every module under ``hgraph/``, ``planner/``, ``jobs/`` and ``cluster/`` is parsed; every import
statement counts, at module level or inside a function (relative imports resolved against the
module's package). The rules (ARCHITECTURE.md, "Layout"):

* the engine (``hgraph``) imports nothing of ``planner``, ``jobs`` or ``cluster``, and names
  none of their modules in a string either (no ``importlib`` back door);
* the planner imports neither ``ray`` nor ``jobs`` nor ``cluster``;
* ``cluster`` imports nothing of ``jobs`` (the application sits on top of it);
* no import cycle between modules: the module graph's strongly connected components are single
  modules.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("hgraph", "planner", "jobs", "cluster")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an imported name refers to (the longest known prefix), else None."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def imports_of(module: str) -> list[tuple[str, int]]:
    """(absolute imported name, line) for every import in ``module``, functions included."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # ``from pkg import mod`` depends on the module pkg.mod; ``from mod import name`` on mod
            submodules = [f"{prefix}.{alias.name}" for alias in node.names
                          if f"{prefix}.{alias.name}" in MODULES]
            if len(submodules) < len(node.names):
                names.append((prefix, node.lineno))
            names += [(name, node.lineno) for name in submodules]
    return names


def module_graph() -> dict[str, set[str]]:
    graph = {m: set() for m in MODULES}
    for module in MODULES:
        for name, _ in imports_of(module):
            target = _resolve(name)
            if target is not None and target != module:
                graph[module].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def violations(module: str, forbidden: tuple[str, ...]) -> list[str]:
    return [f"{MODULES[module].relative_to(ROOT)}:{line} imports {name}"
            for name, line in imports_of(module)
            if name.split(".")[0] in forbidden]


def test_every_package_is_seen():
    for package in PACKAGES:
        assert package in MODULES, package
    assert len(MODULES) > 60


def test_engine_imports_nothing_above_it():
    bad = [v for m in MODULES if m.split(".")[0] == "hgraph"
           for v in violations(m, ("planner", "jobs", "cluster"))]
    assert bad == []


#: A dotted module name of a package above the engine, inside any string literal.
_NAMED = re.compile(r"\b(planner|jobs|cluster)\.[a-z_]")


def test_engine_names_no_module_above_it_even_in_a_string():
    bad = []
    for module, path in MODULES.items():
        if module.split(".")[0] != "hgraph":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _NAMED.search(node.value):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {_NAMED.search(node.value).group(0)}")
    assert bad == []


def test_planner_imports_no_ray_jobs_or_cluster():
    bad = [v for m in MODULES if m.split(".")[0] == "planner"
           for v in violations(m, ("ray", "jobs", "cluster"))]
    assert bad == []


def test_cluster_imports_no_jobs():
    bad = [v for m in MODULES if m.split(".")[0] == "cluster" for v in violations(m, ("jobs",))]
    assert bad == []


def test_no_import_cycles():
    assert strongly_connected(module_graph()) == []


@pytest.mark.parametrize("graph, cycles", [
    ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_the_cycle_finder_finds_cycles(graph, cycles):
    assert strongly_connected(graph) == cycles


def test_imports_inside_functions_and_relative_imports_count(tmp_path, monkeypatch):
    pkg = tmp_path / "hgraph"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from . import b\n    import planner.x\n")
    (pkg / "b.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    fake = {"hgraph": pkg / "__init__.py", "hgraph.a": pkg / "a.py", "hgraph.b": pkg / "b.py"}
    monkeypatch.setattr(sys.modules[__name__], "MODULES", fake)
    assert ("hgraph.b", 2) in imports_of("hgraph.a")
    assert violations("hgraph.a", ("planner",)) == [f"{Path('hgraph/a.py')}:3 imports planner.x"]
