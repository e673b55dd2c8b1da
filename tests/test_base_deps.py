"""A plain ``pip install .`` brings everything the package imports when it loads.

The README's commands run after ``pip install -e .`` alone, without the test extra. A static scan
(ast) of every module of the package (hgraph/, planner/, jobs/, cluster/) holds the rule that keeps
them working:

* an import that runs when a module loads (module level, outside ``if TYPE_CHECKING:`` and
  outside a ``try`` that catches ImportError) is of the standard library, of the project, or of a
  base dependency of pyproject.toml;
* an optional extra's package (``torch``: torch, ``gpu``: CuPy) is imported at module level only
  by the modules that serve that extra (:data:`EXTRA_MODULES`), and those are loaded lazily:
  no other module reaches them through module-level imports;
* no import anywhere, in a function or not, needs a package that only the test extra installs
  (pytest, networkx, ...): nothing installs it for a user.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from collections import deque
from pathlib import Path

from tests.conftest import ROOT

try:
    import tomllib
except ImportError:                                  # Python 3.10
    from pip._vendor import tomli as tomllib

#: The project's own top-level packages (pyproject's [tool.setuptools.packages.find]).
PACKAGES = ("hgraph", "planner", "jobs", "cluster")

#: Modules that serve an optional extra and may import its packages at module level: the
#: extra's name -> module-name prefixes. ``planner.torch`` itself (its __init__) stays torch-free.
EXTRA_MODULES = {"torch": ("planner.torch.",)}

#: Import names of distributions that need not be installed here (the rest is read from the
#: installed distributions' metadata).
KNOWN_IMPORTS = {"cupy": "cupy-cuda12x", "cupyx": "cupy-cuda12x", "functorch": "torch",
                 "torchgen": "torch"}

#: Extras that are not for running the package.
NOT_RUNTIME = ("test",)


def _norm(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def _dist_name(requirement: str) -> str:
    return _norm(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1))


def read_dependencies(text: str) -> tuple[set[str], dict[str, set[str]]]:
    """(base distributions, extra -> distributions) of a pyproject.toml, self-references
    (``hgraph[torch]``) expanded."""
    project = tomllib.loads(text)["project"]
    me = _norm(project["name"])
    base = {_dist_name(r) for r in project.get("dependencies", [])}
    raw = project.get("optional-dependencies", {})

    def expand(extra, seen=()):
        out = set()
        for r in raw[extra]:
            name = _dist_name(r)
            if name == me:
                for sub in re.search(r"\[([^\]]*)\]", r).group(1).split(","):
                    if sub.strip() not in seen:
                        out |= expand(sub.strip(), seen + (extra,))
            else:
                out.add(name)
        return out

    return base, {extra: expand(extra) for extra in raw}


def _installed() -> dict[str, str]:
    found = {name: _norm(dists[0])
             for name, dists in importlib.metadata.packages_distributions().items() if dists}
    return {**found, **{k: _norm(v) for k, v in KNOWN_IMPORTS.items()}}


class _Module:
    def __init__(self, name: str, path: Path):
        self.name, self.path = name, path
        self.is_package = path.name == "__init__.py"
        self.eager: list[tuple[str, int]] = []      # absolute names imported when it loads
        self.lazy: list[tuple[str, int]] = []       # inside functions or guarded


def _modules() -> dict[str, _Module]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = _Module(".".join(parts), path)
    return out


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        names = ([handler.type] if not isinstance(handler.type, ast.Tuple) else handler.type.elts)
        if handler.type is None or any(isinstance(n, ast.Name) and n.id in (
                "ImportError", "ModuleNotFoundError", "Exception", "BaseException") for n in names):
            return True
    return False


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _scan(module: _Module, modules: dict[str, _Module]) -> None:
    """Fill ``module.eager`` / ``module.lazy`` with the absolute names it imports."""
    package = module.name if module.is_package else module.name.rpartition(".")[0]

    def names(node) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        if node.level:
            base = package.split(".")
            base = base[:len(base) - node.level + 1]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module
        # ``from pkg import sub``: sub may be a module of the project
        return [stem] + [f"{stem}.{a.name}" for a in node.names if f"{stem}.{a.name}" in modules]

    def visit(node, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                (module.lazy if lazy else module.eager).extend(
                    (n, child.lineno) for n in names(child))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, True)
            elif isinstance(child, ast.If) and _is_type_checking(child):
                visit(child, True)
            elif isinstance(child, ast.Try) and _catches_import_error(child):
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), True)
                for part in (child.handlers, child.orelse, child.finalbody):
                    for stmt in part:
                        visit(ast.Module(body=[stmt], type_ignores=[]), lazy)
            else:
                visit(child, lazy)

    visit(ast.parse(module.path.read_text(), str(module.path)), False)


def _own_targets(name: str, modules: dict[str, _Module]) -> list[str]:
    """The project's modules that importing ``name`` loads: it and its packages."""
    parts = name.split(".")
    return [m for m in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if m in modules]


def violations(pyproject_text: str) -> list[str]:
    """Every breach of the module docstring's rules, one line each."""
    base, extras = read_dependencies(pyproject_text)
    runtime_extras = {e: d for e, d in extras.items() if e not in NOT_RUNTIME}
    optional = set().union(*runtime_extras.values()) - base if runtime_extras else set()
    dist_of = _installed()
    modules = _modules()
    for m in modules.values():
        _scan(m, modules)

    def where(m: _Module, line: int) -> str:
        return f"{m.path.relative_to(ROOT)}:{line}"

    def third_party(name: str) -> str | None:
        top = name.split(".")[0]
        if top in PACKAGES or top in sys.stdlib_module_names:
            return None
        return top

    problems = []
    shortest: dict[str, tuple[int, str]] = {}     # an extra's import site -> its shortest chain
    # imports anywhere: every third-party package comes from base or a runtime extra
    for m in modules.values():
        for name, line in m.eager + m.lazy:
            top = third_party(name)
            if top is None:
                continue
            dist = dist_of.get(top)
            if dist is None:
                problems.append(f"{where(m, line)} imports {top}, which no known distribution "
                                f"provides (add it to KNOWN_IMPORTS and to pyproject.toml)")
            elif dist not in base and dist not in optional:
                extra = [e for e, d in extras.items() if dist in d]
                named = top if _norm(top) == dist else f"{top} ({dist})"
                problems.append(f"{where(m, line)} imports {named}, which "
                                + (f"only the {'/'.join(extra)} extra installs" if extra
                                   else "pyproject.toml does not name")
                                + ": add it to the base dependencies")

    # module-level imports: a module's load needs base dependencies only, plus the extra it serves
    def serves(name: str) -> set[str]:
        return {e for e, prefixes in EXTRA_MODULES.items() if name.startswith(prefixes)}

    for start in modules:
        allowed = base | set().union(*(runtime_extras.get(e, set()) for e in serves(start)))
        came_from = {start: None}
        queue = deque([start])
        while queue:
            current = queue.popleft()
            m = modules[current]
            for name, line in m.eager:
                top = third_party(name)
                if top is None:
                    for target in _own_targets(name, modules):
                        if target not in came_from:
                            came_from[target] = current
                            queue.append(target)
                    continue
                dist = dist_of.get(top)
                if dist in optional and dist not in allowed:
                    chain, node = [], current
                    while node is not None:
                        chain.append(node)
                        node = came_from[node]
                    extra = [e for e, d in runtime_extras.items() if dist in d]
                    message = (f"importing {start} loads {top} (the {'/'.join(extra)} extra) at "
                               f"module level: {' -> '.join(reversed(chain))} ({where(m, line)}); "
                               f"import it inside the function that needs it")
                    site = where(m, line)
                    if site not in shortest or len(chain) < shortest[site][0]:
                        shortest[site] = (len(chain), message)
    return sorted(set(problems) | {message for _, message in shortest.values()})


def test_package_needs_only_base_dependencies():
    problems = violations((ROOT / "pyproject.toml").read_text())
    assert not problems, "\n".join(problems)


def test_scan_sees_imports():
    """The scan is not vacuous: without numpy in the base dependencies it complains, and it
    finds the torch front's module-level torch imports."""
    text = (ROOT / "pyproject.toml").read_text()
    without_numpy = re.sub(r'^\s*"numpy[^"]*",\n', "", text, flags=re.M)
    assert without_numpy != text
    assert any("imports numpy" in p for p in violations(without_numpy))
    modules = _modules()
    capture = modules["planner.torch.capture"]
    _scan(capture, modules)
    assert "torch" in {n.split(".")[0] for n, _ in capture.eager}


def test_extras_expand():
    base, extras = read_dependencies((ROOT / "pyproject.toml").read_text())
    assert "numpy" in base
    assert extras["torch"] <= extras["test"]         # test = hgraph[torch] + its own
