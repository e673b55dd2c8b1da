"""The public face stays thin (issue 38): what a user calls takes at most 8 parameters, every
public name says what it is, and the command line's defaults are the options records' own.

``planner.plan`` took 22 parameters and ``planner.torch.plan`` copied them; ``hgraph.run`` took
14. The face now groups them in frozen records (:mod:`planner.options`,
:class:`hgraph.EngineOptions`). This test walks every name of ``planner.__all__``,
``planner.torch.__all__`` and ``hgraph.__all__`` (a module among them: its own ``__all__``) with
:func:`inspect.signature` and fails on a function, method or class constructor over
:data:`LIMIT` parameters. A record (a dataclass) is built with the fields one changes, each a
keyword with its default, or made by the planner (``Plan``), so its generated constructor is not
counted; its methods are.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import types

import pytest

import hgraph
import planner
import planner.torch

LIMIT = 8

FACES = {"planner": planner, "planner.torch": planner.torch, "hgraph": hgraph}


def _public(module) -> list[tuple[str, object]]:
    """(qualified name, object) of every name in ``module.__all__``; a module listed there
    (``hgraph.io``) brings its own public names (its ``__all__``, else what it defines)."""
    out = []
    for name in module.__all__:
        obj = getattr(module, name)
        qual = f"{module.__name__}.{name}"
        if isinstance(obj, types.ModuleType):
            names = getattr(obj, "__all__", None) or [
                n for n, o in vars(obj).items()
                if not n.startswith("_") and getattr(o, "__module__", None) == obj.__name__]
            out += [(f"{qual}.{n}", getattr(obj, n)) for n in names]
        else:
            out.append((qual, obj))
    return out


def _callables(qual: str, obj) -> list[tuple[str, object]]:
    """The callables a user calls under ``qual``: a function itself; a class's constructor
    (unless it is a record) and its public methods, properties aside."""
    if not isinstance(obj, type):
        return [(qual, obj)] if callable(obj) else []
    out = [] if dataclasses.is_dataclass(obj) else [(qual, obj)]
    for name, member in vars(obj).items():
        if name.startswith("_") or isinstance(member, property):
            continue
        fn = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
        if inspect.isfunction(fn):
            out.append((f"{qual}.{name}", getattr(obj, name)))
    return out


def _width(fn) -> int:
    params = inspect.signature(fn).parameters.values()
    return sum(1 for p in params if p.name not in ("self", "cls"))


def _all_public():
    return [item for face in FACES.values() for item in _public(face)]


@pytest.mark.parametrize("face", sorted(FACES))
def test_every_face_has_one_all_and_every_name_resolves(face):
    module = FACES[face]
    names = module.__all__
    assert len(names) == len(set(names)), f"{face}.__all__ lists a name twice"
    for name in names:
        assert getattr(module, name) is not None, f"{face}.{name}"


def test_no_public_callable_takes_more_than_eight_parameters():
    wide = [f"{qual}: {_width(fn)}" for qual, obj in _all_public()
            for qual, fn in _callables(qual, obj) if _width(fn) > LIMIT]
    assert not wide, f"over {LIMIT} parameters in the public face: {wide}"


def test_the_walk_sees_wide_callables():
    """The check above would see a wide function, a wide method and a wide constructor."""
    def wide(a, b, c, d, e, f, g, h, i):
        """Nine."""

    class Wide:
        """A class."""

        def __init__(self, a, b, c, d, e, f, g, h, i):
            pass

        def call(self, a, b, c, d, e, f, g, h, i):
            """Nine."""

    found = [q for q, fn in _callables("wide", wide) + _callables("Wide", Wide)
             if _width(fn) > LIMIT]
    assert found == ["wide", "Wide", "Wide.call"]


def test_every_name_in_planner_all_says_what_it_is():
    """A docstring of its own (a dataclass without one gets its generated signature)."""
    bare = []
    for qual, obj in _public(planner) + _public(planner.torch):
        doc = inspect.getdoc(obj) if not isinstance(obj, str) else "a constant"
        name = qual.rsplit(".", 1)[-1]
        if not doc or doc.startswith(f"{name}("):
            bare.append(qual)
    assert not bare, f"public names without a docstring: {bare}"


def test_planner_all_is_the_face_and_loads_lazily():
    assert set(planner.__all__) >= {"plan", "Plan", "EngineOptions", "SolverLimits",
                                    "CertifyOptions", "AccountingOptions"}
    assert planner.EngineOptions is hgraph.EngineOptions
    namespace = {}
    exec("from planner import *", namespace)            # noqa: S102 - the star import works
    assert set(planner.__all__) <= set(namespace)


def _plan_args(*argv) -> argparse.Namespace:
    from jobs import plan as plan_job

    parser = argparse.ArgumentParser()
    plan_job.add_arguments(parser)
    return parser.parse_args(["--graph", "g.txt", *argv])


def test_the_plan_jobs_defaults_are_the_records_defaults():
    """Defaults in one place: the flags left out build records equal to the defaults."""
    from jobs import common, plan as plan_job

    args = _plan_args("--budget", "60%")
    assert common.engine_options(args) == hgraph.EngineOptions()
    assert plan_job.limits(args) == planner.SolverLimits()
    assert planner.CertifyOptions(args.certify, args.certify_time_limit) == \
        planner.CertifyOptions()
    assert planner.AccountingOptions(units=args.units) == planner.AccountingOptions()
    given = _plan_args("--budget", "60%", "--tasks", "3", "--dp-window", "4",
                       "--max-lower-sets", "9", "--units", "reference", "--certify", "off")
    assert common.engine_options(given).tasks == 3
    assert plan_job.limits(given) == planner.SolverLimits(max_lower_sets=9, dp_window=4)


def test_records_refuse_bad_values_in_one_line():
    from hgraph.common.errors import HGraphError

    for make in (lambda: planner.CertifyOptions("maybe"),
                 lambda: planner.CertifyOptions(time_limit=0),
                 lambda: planner.AccountingOptions(units="bits"),
                 lambda: planner.AccountingOptions("everything"),
                 lambda: planner.SolverLimits(milp_time_limit=-1),
                 lambda: planner.SolverLimits(milp_stages=0)):
        with pytest.raises(HGraphError) as err:
            make()
        assert "\n" not in str(err.value)
    with pytest.raises(dataclasses.FrozenInstanceError):
        planner.SolverLimits().fallback = True                         # type: ignore[misc]
    assert planner.CertifyOptions.of("lp") == planner.CertifyOptions(mode="lp")
    assert planner.AccountingOptions.of("activations").kind == "activations"
