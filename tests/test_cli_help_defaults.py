"""Every CLI option whose help text states a default states the real one (issue 38).

``--dp-front-cap``'s help said 32 while the DP ran with 128. This test walks every sub-command
of ``hgraph`` (its lazily added flags filled in) and, for every option whose help mentions
"default", checks what the help states against what the code does:

* an option with a real default (``action.default`` not None): with choices, the last choice
  the help names before the word "default" (``time: ... (default)``, ``auto (default: ...)``)
  is the default, unless the value right after "default" is a choice (``(default hybrid)``);
  without, the value written right after "default" (``(default 3600)``,
  ``default 127.0.0.1``) equals it (numbers compared as numbers, ``200,000`` == 200000);
* an option whose default is decided later (``default=None``: the planner picks, as for
  ``--dp-window``): every number its help states after "default", and the choice it marks, must
  be the code's own, listed in :data:`DERIVED` with the constant they come from. An option of
  that kind missing from :data:`DERIVED` fails, so a new one cannot go unchecked.
"""

from __future__ import annotations

import argparse
import functools
import re

import pytest

from jobs import cli

_NUMBER = re.compile(r"(?<![\w$.-])\d[\d,]*(?:\.\d+)?\b")


@functools.cache
def _derived() -> dict[str, dict]:
    """Options with ``default=None`` whose help states what the code then uses: the numbers
    (in order) and the choice it marks, from the code's own constants or by asking the code."""
    import argparse as ap

    from jobs.common import runtime_of
    from planner import certificate, milp
    from planner.dp import scale

    return {
        "--dp-window": {"numbers": [scale.EXACT_LIMIT, scale.DEFAULT_WINDOW,
                                    scale.MEMORY_WINDOW, 0]},
        "--dp-front-cap": {"numbers": [scale.EXACT_LIMIT, scale.DEFAULT_FRONT_CAP,
                                       scale.MEMORY_FRONT_CAP, 0]},
        "--certify-time-limit": {"numbers": [certificate.DEFAULT_TIME_LIMIT]},
        "--milp-time-limit": {"numbers": [milp.DEFAULT_TIME_LIMIT]},
        "--row-policy": {"choice": _row_policy_unasked()},
        "--runtime": {"choice": runtime_of(ap.Namespace(runtime=None, address=None))},
        "--dtype": {"choice": _rows_dtype_unasked()},
    }


def _row_policy_unasked() -> str:
    """The band policy a row plan gets when none is named (a tiny VGG, planned)."""
    from planner.execute import export, zoo
    from planner.rows_api import plan_rows

    return plan_rows(export.to_cg(zoo.build("vgg16", width=4, depth=1, image=32)), rows=2).policy


def _rows_dtype_unasked() -> str:
    """The precision ``execute --model M --rows R`` builds M in when ``--dtype`` is not given."""
    import inspect as ins

    from jobs import rows_flags

    source = ins.getsource(rows_flags)
    m = re.search(r'load_graph\(args, args\.dtype or "(\w+)"\)', source)
    assert m, "rows_flags no longer builds the model with args.dtype or a literal: update this"
    return m.group(1)


#: Words a help text uses for a default value that is not written as the value itself.
PHRASES = {"the current one": "."}


def options():
    """(command path, action) of every option of every sub-command whose help says "default"."""
    found = []

    def walk(parser, path):
        fill, parser._fill = getattr(parser, "_fill", None), None
        if fill is not None:
            fill(parser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif action.help and "default" in action.help.lower() and action.option_strings:
                found.append((path, action))

    walk(cli.build_parser(), "hgraph")
    return found


def _help(action) -> str:
    return action.help.replace("%(default)s", str(action.default)).replace("%%", "%")


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _choice_before_default(action, text: str) -> str | None:
    """The last of ``action.choices`` the help names before the word "default"."""
    head = text[:text.lower().index("default")].lower()
    best, where = None, -1
    for choice in action.choices:
        for m in re.finditer(rf"\b{re.escape(str(choice).lower())}", head):
            if m.start() > where:
                best, where = choice, m.start()
    return best


def _stated_value(text: str) -> str | None:
    """The value written right after "default" (``default 3600``, ``default: the current one``)."""
    after = text[text.lower().index("default") + len("default"):]
    for phrase, value in PHRASES.items():
        if after.lstrip(": ").startswith(phrase):
            return value
    m = re.match(r":?\s+([\w.,$-]+)", after)
    return m.group(1).rstrip(".,") if m else None


def _marked_choice(action, text: str):
    """The choice the help marks as the default: the value right after "default" when it is
    one of the choices (``(default hybrid)``), else the last choice named before "default"
    (``time: least recomputation (default)``)."""
    stated = _stated_value(text)
    for choice in action.choices:
        if stated is not None and stated.lower() == str(choice).lower():
            return choice
    return _choice_before_default(action, text)


def test_the_walk_finds_the_options():
    names = {a.option_strings[0] for _, a in options()}
    assert {"--dp-front-cap", "--dp-window", "--max-lower-sets", "--tasks",
            "--solver", "--listen", "--batch"} <= names, names


@pytest.mark.parametrize("path,action", options(),
                         ids=lambda x: x if isinstance(x, str) else x.option_strings[0])
def test_help_states_the_real_default(path, action):
    text, flag = _help(action), action.option_strings[0]
    derived = _derived()
    if action.default is None or action.default is argparse.SUPPRESS:
        tail = text[text.lower().index("default"):]
        numbers = [_number(n) for n in _NUMBER.findall(tail)]
        choice = _marked_choice(action, text) if action.choices else None
        if not numbers and choice is None:
            return                        # states no value: "(default: RAY_ADDRESS, else ...)"
        assert flag in derived, (f"{path} {flag}: its help states a default ({text!r}) the "
                                 f"code decides later; add it to DERIVED with its source")
        want = derived[flag]
        assert numbers == [float(n) for n in want.get("numbers", [])], (path, flag, text)
        assert choice == want.get("choice"), (path, flag, text)
        return
    if isinstance(action.default, bool):
        return                            # a switch: "(default: removed)" describes the off state
    if action.choices:
        assert _marked_choice(action, text) == action.default, (path, flag, text)
        return
    stated = _stated_value(text)
    assert stated is not None, (path, flag, text)
    if isinstance(action.default, (int, float)):
        assert _number(stated) == float(action.default), (path, flag, text, action.default)
    else:
        assert stated == str(action.default), (path, flag, text, action.default)


def test_a_wrong_help_fails():
    """The check itself: a help stating 32 where the code says 128 is caught."""
    from planner.dp import scale

    assert scale.DEFAULT_FRONT_CAP != 32
    wrong = argparse.Action(["--dp-front-cap"], "dp_front_cap", default=None,
                            help="keep K (default: off up to 2,500 activations, above: 32, "
                                 "memory-centric 4; 0: off)")
    with pytest.raises(AssertionError):
        test_help_states_the_real_default("hgraph submit plan", wrong)
    wrong = argparse.Action(["--tasks"], "tasks", default=1, help="workers (default 2)")
    with pytest.raises(AssertionError):
        test_help_states_the_real_default("hgraph submit sssp", wrong)
