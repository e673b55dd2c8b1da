"""planner.plan is the real function, Plan and ModelStats are typed (issue 25).

``planner.plan`` is :func:`planner.api.plan` itself (no ``**kwargs`` wrapper hiding the
signature), reached lazily so that ``import planner`` stays light; the CLI's plan path reaches
the DP without a ``**kwargs`` hop; :class:`planner.api.Plan` holds the report's figures as
fields (the report dict is built from them), and the solver's model statistics are one
:class:`planner.solver.ModelStats`, made in one class; plan() is a pipeline (analyse, then
fit: solve, emit, verify) over solver classes behind one protocol.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import subprocess
import sys

import pytest

from hgraph.common.errors import HGraphError
from planner import report, synth
import planner
from tests.conftest import ROOT

SAMPLE = ROOT / "jobs" / "data" / "cg_resnet50.txt"

#: plan()'s face: the graph and budget, the solver and strategy, and four grouped records
#: (planner.options; was 22 flat keywords, issue 38).
PLAN_PARAMETERS = ["graph_or_path", "budget", "solver", "strategy", "engine", "limits",
                   "certify", "accounting"]


def test_planner_plan_is_the_api_function_with_its_signature():
    import planner.api

    assert planner.plan is planner.api.plan and planner.Plan is planner.api.Plan
    sig = inspect.signature(planner.plan)
    assert list(sig.parameters) == PLAN_PARAMETERS
    assert not [p for p in sig.parameters.values() if p.kind is p.VAR_KEYWORD]
    assert sig.parameters["solver"].default == "approx"
    assert inspect.getsourcefile(planner.plan).endswith("planner/api.py")
    from planner import plan

    assert plan is planner.api.plan
    assert {"plan", "Plan"} <= set(dir(planner))
    with pytest.raises(AttributeError):
        planner.no_such_name  # noqa: B018


def test_import_planner_stays_light():
    """The reason planner.plan is looked up lazily: importing the package (which every
    ``planner.*`` import does) loads neither planner.api nor NumPy."""
    probe = ("import json, sys, planner; "
             "print(json.dumps([m in sys.modules for m in ('planner.api', 'numpy')]))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=ROOT, timeout=60, check=True)
    assert json.loads(out.stdout) == [False, False]


def _functions(path):
    """name -> every function definition of that name in the file (methods of several
    classes share names: ``solve``, ``__init__``)."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.setdefault(node.name, []).append(node)
    return out


def test_the_cli_plan_path_has_no_kwargs_hop():
    """jobs/plan.py main -> planner.plan (= planner.api.plan) -> analyse, fit -> the solver's
    class (planner.solver: make_solver, __init__, solve, dp, family) -> solve_family: no function
    on the way takes ``**kwargs`` to pass it on."""
    path = {"jobs/plan.py": ["main"],
            "planner/__init__.py": list(_functions("planner/__init__.py")),
            "planner/api.py": ["plan", "analyse", "fit", "_fit", "_replay", "_keep_everything"],
            "planner/solver.py": ["make_solver", "__init__", "solve", "dp", "family", "_build_family",
                                  "min_budget", "feasible", "direct_min_budget"],
            "planner/dp/solve.py": ["solve_family", "bounded_fronts"]}
    for file, names in path.items():
        found = _functions(file)
        for name in names:
            assert name in found, (file, name)
            for node in found[name]:
                kwarg = node.args.kwarg
                assert kwarg is None, f"{file}: {name} takes **{kwarg.arg}"
    assert "def plan(" not in (ROOT / "planner" / "__init__.py").read_text()


def test_plan_reads_as_a_pipeline_and_solvers_are_strategies():
    """plan() calls analyse then fit (solve, emit, verify) and never branches on the solver's
    name after picking its class; every solver is a class behind one protocol."""
    import planner.api as api
    from planner import solver as solver_mod

    plan_src = inspect.getsource(api.plan)
    body = plan_src[plan_src.index('"""', plan_src.index('"""') + 3):]
    assert "Planning(" in body and ".at(budget)" in body      # one session, one budget
    session = inspect.getsource(api.Planning)
    assert session.index("analyse(") < session.index("fit(") < session.index("Plan.from_replay(")
    for name in ("fit", "_fit", "_replay"):
        src = inspect.getsource(getattr(api, name))
        for word in ('"chen"', '"milp"', '"approx"', '"exact"', "s.solver"):
            assert word not in src, (name, word)
    assert set(solver_mod.CLASSES) == set(api.SOLVERS)
    g = synth.build(layers=1, heads=2)
    for name, cls in solver_mod.CLASSES.items():
        s = solver_mod.make_solver(g, name)
        assert type(s) is cls and isinstance(s, solver_mod.Solver) and s.solver == name
        for method in ("solve", "feasible", "direct_min_budget", "options_text", "infeasible"):
            assert callable(getattr(s, method)), (name, method)
    with pytest.raises(HGraphError, match="unknown solver"):
        solver_mod.make_solver(g, "simplex")


def test_make_solver_spells_out_the_solvers_own_signature():
    """make_solver names Solver's parameters itself (no **kwargs hop for help() and IDEs):
    they must stay the same, defaults included."""
    from planner import solver as solver_mod

    made = inspect.signature(solver_mod.make_solver).parameters
    own = dict(inspect.signature(solver_mod.Solver.__init__).parameters)
    own.pop("self")
    assert [(p.name, p.default) for p in made.values() if p.name != "solver"] == \
        [(p.name, p.default) for p in own.values() if p.name != "solver"]


def test_plan_is_a_dataclass_and_its_report_is_built_from_its_fields():
    from planner.api import Plan
    from planner.solver import ModelStats

    assert dataclasses.is_dataclass(Plan) and "__getattr__" not in vars(Plan)
    fields = {f.name for f in dataclasses.fields(Plan)}
    assert {"schedule", "graph", "nodes", "variables", "depth", "solver", "strategy", "units",
            "budget", "budget_bytes", "peak_bytes", "baseline_peak_bytes", "baseline_kind",
            "lower_bound_bytes", "recompute_cost", "forward_cost", "recomputed", "ops",
            "seconds", "model", "engine", "decisions", "decision", "timeline",
            "baseline_timeline", "recompute_certificate", "step", "report"} == fields
    p = planner.plan(synth.build(layers=2, heads=2), budget="60%")
    assert isinstance(p.model, ModelStats)
    assert p.report == report.build(p)
    rep = p.report
    for name in fields & set(rep) - {"graph"}:
        assert getattr(p, name) == rep[name], name
    for name in ("within_budget", "overhead", "blocks", "model_recompute_cost",
                 "model_peak_bytes", "n_lower_sets", "comp_ratio", "family", "fell_back"):
        assert getattr(p, name) == rep[name], name
    assert rep["graph"] == p.graph.name
    with pytest.raises(AttributeError):      # no fallback to the report dict any more
        p.dp_exact  # noqa: B018


@pytest.mark.parametrize("solver,budget,family", [("approx", "60%", "approx"),
                                                   ("exact", "60%", "exact"),
                                                   ("chen", "60%", "chen"),
                                                   ("approx", "100%", "keep_everything")])
def test_every_solver_gives_model_stats(solver, budget, family):
    from planner.solver import ModelStats

    p = planner.plan(SAMPLE, budget=budget, solver=solver)
    m = p.model
    assert isinstance(m, ModelStats) and m.family == family and not m.on_scale_path
    assert all(type(getattr(m, k)) is int for k in ("blocks", "model_recompute_cost",
                                                    "model_peak_bytes", "n_lower_sets",
                                                    "comp_ratio"))
    assert "dp_exact" not in p.report


def test_model_stats_on_the_scale_path_are_in_the_report():
    p = planner.plan(synth.build(layers=6, heads=2), budget="50%",
                     limits=planner.SolverLimits(dp_window=6, dp_front_cap=0))
    assert p.model.on_scale_path
    rep = p.report
    assert (rep["dp_window"], rep["dp_front_cap"], rep["dp_exact"]) == (6, None, False)


def test_model_stats_are_made_in_one_class():
    """The model statistics used to be dicts built in three places (the DP's and Chen's in the
    solver, keeping everything in the API): now the ModelStats class alone constructs them, and
    nothing in the planner or the benches builds the old dict."""
    offenders = []
    for base in ("planner", "bench", "jobs"):
        for path in sorted((ROOT / base).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
                       and n.name == "ModelStats"]
            inside = {id(n) for c in classes for n in ast.walk(c)}
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                name = getattr(node.func, "id", getattr(node.func, "attr", None))
                keys = {k.arg for k in node.keywords}
                if name == "ModelStats" and id(node) not in inside:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} ModelStats(...)")
                if name == "dict" and {"model_peak_bytes", "n_lower_sets"} <= keys:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} dict(...)")
    assert offenders == []
