"""One walker (issue 38): every walk over a step list goes through :mod:`planner.walk`.

The simulator, the timeline, the whole-step predictors and the three executors are visitors of
:class:`planner.walk.Walker` (the schedule's walkers of its :class:`ScheduleWalker`, the
predictors of its :class:`PoolWalker`); these tests hold that (1) each public entry point really
walks through the walker's loop, with its own visitor (the walker's ``walk`` is instrumented,
so a module that went back to a loop of its own fails here), and (2) no module of the planner
but ``planner/walk.py`` loops over a step's frees itself: the order of a step's events is
written once.
"""

from __future__ import annotations

import ast

import pytest

from planner import walk
from tests.conftest import ROOT


@pytest.fixture
def walked(monkeypatch):
    """The visitor classes whose walk ran (the walker's two loops, instrumented)."""
    seen = []
    for cls in (walk.Walker, walk.ScheduleWalker):
        original = cls.walk

        def counted(self, steps, _original=original):
            seen.append(type(self).__name__)
            return _original(self, steps)

        monkeypatch.setattr(cls, "walk", counted)
    return seen


def test_every_walker_is_a_visitor_of_the_one_walk(walked):
    from planner import simulate, timeline, whole_step
    from planner.execute import executor, export, rows_exec, zoo
    from planner.execute.run_options import RunOptions
    from planner.rows import plan as rows_plan
    from planner.rows.step import predict_rows

    g = export.to_cg(zoo.build("mlp"))
    s = executor.plain_schedule(g)
    calls = {
        "simulate": lambda: simulate.replay(g, s),
        "timeline": lambda: timeline.timeline(g, s),
        "predict": lambda: whole_step.predict(g, s),
        "executor": lambda: executor.run(g, s, RunOptions(meter=False)),
        "stand-in": lambda: executor.run(g, s, RunOptions(kernels="stand-in", meter=False)),
    }
    cnn = export.to_cg(zoo.build("vgg16", width=4, depth=1, image=32))
    p = rows_plan.plan(cnn, 4, "share")
    calls["rows predict"] = lambda: predict_rows(cnn, p)
    calls["rows executor"] = lambda: rows_exec.run(cnn, p, meter=False)
    expected = {"simulate": ["_Replay"], "timeline": ["_Builder"],
                "predict": ["_Builder", "_Held"], "executor": ["_Builder", "_Real"],
                "stand-in": ["_Builder", "_StandIn"], "rows predict": ["_RowsHeld"],
                "rows executor": ["_Run"]}
    for name, call in calls.items():
        walked.clear()
        call()
        assert walked == expected[name], name
    visitors = {simulate._Replay: walk.ScheduleWalker, timeline._Builder: walk.ScheduleWalker,
                whole_step._Held: walk.PoolWalker, rows_exec._Run: walk.Walker,
                executor._Real: walk.Walker}
    for cls, base in visitors.items():
        assert issubclass(cls, base) and "walk" not in vars(cls), cls


def test_only_the_walker_loops_over_a_steps_events():
    """A ``for`` over a step's ``frees_before`` / ``frees_after`` is a walk of its own."""
    found = []
    for path in sorted((ROOT / "planner").rglob("*.py")):
        if path == ROOT / "planner" / "walk.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.For) and isinstance(node.iter, ast.Attribute) and \
                    node.iter.attr in ("frees_before", "frees_after"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
    walker = ast.parse((ROOT / "planner" / "walk.py").read_text())
    loops = [n.iter.attr for n in ast.walk(walker)
             if isinstance(n, ast.For) and isinstance(n.iter, ast.Attribute)]
    assert {"frees_before", "allocs", "frees_after"} <= set(loops)    # the check sees loops


def test_the_torch_keep_set_is_read_by_the_walk(walked):
    """:func:`planner.torch.partition.kept_vars` (the partitioner's keep set, read off a
    schedule) is the walk's visitor too."""
    pytest.importorskip("torch")
    from planner.execute import executor, export, zoo
    from planner.torch import partition

    g = export.to_cg(zoo.build("mlp"))
    kept = partition.kept_vars(g, executor.plain_schedule(g))
    assert walked == ["_Kept"] and kept and issubclass(partition._Kept, walk.ScheduleWalker)
