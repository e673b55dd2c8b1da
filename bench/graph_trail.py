"""Follow ``planner.plan``'s graph argument through the code and count the corridors it walks.

Runs ``planner.plan`` on a graph under :func:`sys.setprofile` and records every call, into a
file of the project, that is handed the graph: one of whose arguments (``*args``/``**kwargs``
unpacked one level; not ``self`` of a method of the graph's own class: that is the graph
being read, a property or a helper of its type, not handed on) is **graph-like**: an instance of a class defined under ``planner/``
whose instances carry ``functions`` and ``var_bytes`` (the cg graph) or ``n``, ``src`` and
``dst`` (a DAG over the activations: the activation graph, the DP's graph, a units view of
them). That is the graph argument itself and every object the planner derives from it to
stand for the same DAG; arrays read off them (``ag.bytes``) and the engine's own
``hgraph.Graph`` (the analyses' vertex programs run on it) are not followed.

The **trail** is the sequence of files the graph is handed between: for each recorded call,
in order, the file of the project frame that made it, then the callee's file; consecutive
repeats collapse. From it:

* ``files``: the distinct files on the trail;
* ``up``: steps of the trail from a file to one above it in the layering, where module ``B``
  is above module ``A`` when ``B`` imports ``A``, directly or not (the import graph
  tests/test_layering.py keeps acyclic, read here with ``ast`` the same way; ARCHITECTURE.md's
  bottom-up module list is its order). Coming back to a caller that imports the callee counts:
  the reader climbs back up to where the graph goes next. Steps between files neither of
  which imports the other count in neither direction;
* ``returns``: steps into a file the trail had already visited and left;
* ``up-calls``: recorded calls whose callee's module is above its caller's (a lower module
  calling into a higher one, through a callback or a method of a higher object): the imports
  point down only (tests/test_layering.py), so this is the strict reading of "back up the
  layering"; ``up`` above is the reader's: the trail climbing back to a higher file to go on.

Usage::

    python3 bench/graph_trail.py                               # jobs/data ResNet-50, 60 %
    python3 bench/graph_trail.py --graph tests/data/graphs/cg_vgg19.txt --solver exact -v
    python3 bench/graph_trail.py --root /tmp/trail_before      # another checkout of the repo
    python3 bench/graph_trail.py --all                         # the four solvers (ARCHITECTURE.md)

``-v`` prints the trail itself. Figures and the command that made them: ARCHITECTURE.md.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGES = ("hgraph", "planner", "jobs", "cluster")


def module_of(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the project modules it imports (module level and inside functions)."""
    paths = {module_of(root, p): p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))}

    def resolve(name):
        parts = name.split(".")
        while parts and ".".join(parts) not in paths:
            parts.pop()
        return ".".join(parts) or None

    graph = {}
    for mod, path in paths.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        out = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                prefix = node.module or ""
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                names = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
            for name in names:
                target = resolve(name)
                if target and target != mod:
                    out.add(target)
        graph[mod] = out
    return graph


def below(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """module -> every module it imports, directly or not."""
    memo: dict[str, set[str]] = {}

    def reach(m, seen=()):
        if m not in memo:
            acc = set()
            for d in graph.get(m, ()):
                if d not in seen:
                    acc |= {d} | reach(d, seen + (m,))
            memo[m] = acc
        return memo[m]

    for m in graph:
        reach(m)
    return memo


def graph_like(x) -> bool:
    cls = type(x)
    mod = getattr(cls, "__module__", "") or ""
    if not mod.startswith("planner"):
        return False
    return ((hasattr(x, "functions") and hasattr(x, "var_bytes"))
            or (hasattr(x, "n") and hasattr(x, "src") and hasattr(x, "dst")))


def record(root: Path, run):
    """The recorded calls of ``run()``: (caller file, callee file, function name) in order."""
    roots = tuple(str(root / pkg) + "/" for pkg in PACKAGES)
    calls = []

    def project_file(frame):
        while frame is not None:
            f = frame.f_code.co_filename
            if f.startswith(roots):
                return f
            frame = frame.f_back
        return None

    def args_of(frame):
        code = frame.f_code
        n = code.co_argcount + code.co_kwonlyargcount
        n += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
        loc = frame.f_locals
        names = code.co_varnames[:n]
        if names[:1] in (("self",), ("cls",)):
            names = names[1:]
        for name in names:
            v = loc.get(name)
            if isinstance(v, tuple):
                yield from v
            elif isinstance(v, dict) and code.co_flags & 0x08:
                yield from v.values()
            else:
                yield v

    def prof(frame, event, arg):
        if event != "call":
            return
        callee = frame.f_code.co_filename
        if not callee.startswith(roots):
            return
        if any(graph_like(v) for v in args_of(frame)):
            caller = project_file(frame.f_back)
            calls.append((caller, callee, frame.f_code.co_qualname
                          if hasattr(frame.f_code, "co_qualname") else frame.f_code.co_name))

    sys.setprofile(prof)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def trail_of(root: Path, calls) -> list[str]:
    trail = []
    for caller, callee, _ in calls:
        for f in (caller, callee):
            if f is None:
                continue
            mod = module_of(root, Path(f))
            if not trail or trail[-1] != mod:
                trail.append(mod)
    return trail


def up_calls(root: Path, calls, deps: dict[str, set[str]]) -> int:
    n = 0
    for caller, callee, _ in calls:
        if caller is not None:
            a, b = module_of(root, Path(caller)), module_of(root, Path(callee))
            n += a != b and a in deps.get(b, ())
    return n


def measure(trail: list[str], deps: dict[str, set[str]]) -> dict:
    up = returns = 0
    seen = set()
    for i, mod in enumerate(trail):
        if i and trail[i - 1] in deps.get(mod, ()):
            up += 1
        if mod in seen:
            returns += 1
        seen.add(mod)
    return dict(files=len(set(trail)), up=up, returns=returns, steps=max(0, len(trail) - 1))


#: --all: (graph, budget, solver) of each run; the MILP on VGG-19 at 80 %, where HiGHS proves
#: its optimum in seconds.
ALL = (("jobs/data/cg_resnet50.txt", "60%", "approx"), ("jobs/data/cg_resnet50.txt", "60%", "exact"),
       ("jobs/data/cg_resnet50.txt", "60%", "chen"),
       ("tests/data/graphs/cg_vgg19.txt", "80%", "milp"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[1]),
                    help="the repository to measure (default: this one)")
    ap.add_argument("--graph", default="jobs/data/cg_resnet50.txt",
                    help="a cg.txt (relative to --root), or synth for planner.synth.build()")
    ap.add_argument("--budget", default="60%")
    ap.add_argument("--solver", default="approx")
    ap.add_argument("--strategy", default="time")
    ap.add_argument("--all", action="store_true", help="the runs of ALL, one line each")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the trail")
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    sys.path.insert(0, str(root))
    import planner                                      # from --root
    from planner import cg, synth

    assert Path(planner.__file__).resolve().is_relative_to(root), planner.__file__
    deps = below(import_graph(root))
    runs = ALL if args.all else ((args.graph, args.budget, args.solver),)
    for graph, budget, solver in runs:
        g = synth.build() if graph == "synth" else cg.read(root / graph)
        calls = record(root, lambda: planner.plan(g, budget=budget, solver=solver,
                                                  strategy=args.strategy))
        trail = trail_of(root, calls)
        m = measure(trail, deps)
        if args.verbose:
            for i, mod in enumerate(trail):
                mark = (" ^" if i and trail[i - 1] in deps.get(mod, ()) else "  ")
                print(f"{i:4d}{mark} {mod}")
            print("files:", " ".join(sorted(set(trail))))
        print(f"{graph} {solver}/{args.strategy} {budget}: {m['files']} files, "
              f"{m['up']} steps up the layering, {m['returns']} returns to a file left, "
              f"{up_calls(root, calls, deps)} up-calls, {m['steps']} steps "
              f"({len(calls)} calls with the graph)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
