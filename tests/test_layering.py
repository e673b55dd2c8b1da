"""The house's import rules, checked on the source with ``ast`` (no module is imported).

Every module under ``hgraph/``, ``planner/``, ``jobs/`` and ``cluster/`` is parsed; every import
statement counts, at module level or inside a function (relative imports resolved against the
module's package). The rules (ARCHITECTURE.md, "Layout"):

* the engine (``hgraph``) imports nothing of ``planner``, ``jobs`` or ``cluster``, and names
  none of their modules in a string either (no ``importlib`` back door);
* the planner imports neither ``ray`` nor ``jobs`` nor ``cluster``;
* ``cluster`` imports nothing of ``jobs`` (the application sits on top of it);
* no import cycle between modules: the module graph's strongly connected components are single
  modules;
* no import cycle between packages either: inside every package, its direct children (modules
  and subpackages, a subpackage standing for every module below it) and its own ``__init__``
  import each other without a cycle — ``planner.rows`` and ``planner.execute`` may not lean on
  each other even through different modules. The package graph is read off the same imports
  (module level and inside functions: a lazy import is still a dependency, and the usual way a
  cycle hides);
* the op table (``planner.ops``) sits below ``planner.rows`` and ``planner.execute``: it imports
  neither, and the rows import nothing of ``planner.execute``;
* nothing of the planner outside ``planner.execute`` imports it (the executor sits above the
  planner: planning prices kernels through the op table).
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


def package_edge(importer: str, imported: str) -> tuple[str, str]:
    """The edge an import ``importer -> imported`` makes between siblings of one package.

    Below the two modules' deepest common package each is represented by the child of that
    package it lies in (``planner.rows.plan -> planner.execute.ops`` is ``planner.rows ->
    planner.execute``); a module that is itself that package (its ``__init__``) is the node
    ``PACKAGE.__init__`` (``planner.rows.with_dp -> planner`` is ``planner.rows ->
    planner.__init__``). Top-level packages are the children of the root.
    """
    a, b = importer.split("."), imported.split(".")
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1

    def node(parts: list[str], name: str) -> str:
        return f"{name}.__init__" if common == len(parts) else ".".join(parts[:common + 1])

    return node(a, importer), node(b, imported)


def package_graph(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    """The sibling graph of every package, all levels in one graph (node names do not collide
    across levels), from a module graph."""
    graph: dict[str, set[str]] = {}
    for importer, targets in modules.items():
        for imported in targets:
            a, b = package_edge(importer, imported)
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set())
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


def _cycle_imports(component: list[str]) -> list[str]:
    """The module imports that make the package edges of one component (the message's detail)."""
    members = set(component)
    return [f"{importer} -> {imported}" for importer, targets in sorted(module_graph().items())
            for imported in sorted(targets) if set(package_edge(importer, imported)) <= members]


def test_no_package_cycles():
    cycles = strongly_connected(package_graph(module_graph()))
    assert cycles == [], [(c, _cycle_imports(c)) for c in cycles]


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def imports_from(package: str, targets: tuple[str, ...]) -> list[str]:
    """Imports, in any module of ``package``, of anything under one of ``targets``."""
    return [f"{MODULES[m].relative_to(ROOT)}:{line} imports {name}"
            for m in MODULES if _within(m, package)
            for name, line in imports_of(m) if any(_within(name, t) for t in targets)]


def test_op_table_sits_below_rows_and_execute():
    assert "planner.ops" in MODULES
    assert imports_from("planner.ops", ("planner.rows", "planner.execute")) == []
    assert imports_from("planner.rows", ("planner.execute",)) == []


def test_the_planner_never_imports_the_executor():
    """Planning prices kernels through the op table (``planner.ops``, ``planner.band_kernels``),
    the buffer timeline and the pool's free list (``planner.whole_step``, ``planner.rows.step``);
    running a plan is the executor's, above it (issue 38): nothing under ``planner/`` outside
    ``planner/execute/`` imports ``planner.execute``, at module level or inside a function."""
    bad = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {name}"
           for m in MODULES if _within(m, "planner") and not _within(m, "planner.execute")
           for name, line in imports_of(m) if _within(name, "planner.execute")]
    assert bad == []


#: What the planner takes from the engine: its public API (``import hgraph``: ``hgraph.Graph``,
#: ``hgraph.run`` and the vertex-program types its analyses run on), nothing of its modules.
ENGINE_API_USED_BY_PLANNER = {"hgraph"}


def test_the_common_package_sits_below_the_engine_and_the_planner():
    """hgraph.common (errors, progress, output files, byte formatting) imports nothing of the
    project outside itself; the planner takes those from it, not from the engine's modules."""
    assert {"hgraph.common.errors", "hgraph.common.progress", "hgraph.common.fileio",
            "hgraph.common.formatting"} <= set(MODULES)
    outside = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {name}"
               for m in MODULES if _within(m, "hgraph.common")
               for name, line in imports_of(m)
               if _resolve(name) is not None and not _within(_resolve(name), "hgraph.common")]
    assert outside == []
    engine = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {name}"
              for m in MODULES if m.split(".")[0] == "planner"
              for name, line in imports_of(m)
              if _resolve(name) is not None and _within(_resolve(name), "hgraph")
              and not _within(_resolve(name), "hgraph.common")
              and _resolve(name) not in ENGINE_API_USED_BY_PLANNER]
    assert engine == []
    defs = [path for path in MODULES.values()
            if "def format_bytes(" in path.read_text(encoding="utf-8")]
    assert [p.relative_to(ROOT).as_posix() for p in defs] == ["hgraph/common/formatting.py"]


@pytest.mark.parametrize("importer, imported, edge", [
    ("planner.rows.plan", "planner.execute.ops", ("planner.rows", "planner.execute")),
    ("planner.rows.plan", "planner.ops", ("planner.rows", "planner.ops")),
    ("planner.rows.plan", "planner.rows.walk", ("planner.rows.plan", "planner.rows.walk")),
    ("planner.rows.with_dp", "planner", ("planner.rows", "planner.__init__")),
    ("planner", "planner.rows.plan", ("planner.__init__", "planner.rows")),
    ("planner.rows", "planner.rows.plan", ("planner.rows.__init__", "planner.rows.plan")),
    ("jobs.plan", "planner.api", ("jobs", "planner")),
])
def test_package_edges(importer, imported, edge):
    assert package_edge(importer, imported) == edge


def test_the_package_graph_finds_a_cycle_through_different_modules():
    modules = {"p.rows.layers": {"p.execute.ops"}, "p.execute.rows_exec": {"p.rows.walk"},
               "p.execute.ops": set(), "p.rows.walk": set()}
    assert strongly_connected(package_graph(modules)) == [["p.execute", "p.rows"]]
    modules["p.rows.layers"] = {"p.ops"}
    assert strongly_connected(package_graph(modules)) == []


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
