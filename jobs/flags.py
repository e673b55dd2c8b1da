"""Command-line flags shared by the jobs and tools: one leaf module, importing nothing of the app.

The engine flags' defaults are :class:`hgraph.EngineOptions`' own and ``--certify``'s
:class:`planner.options.CertifyOptions`' (read from them, not restated), so a flag left out and
the Python API's default are one value (tests/test_public_face.py).

``add_common_arguments`` gives every engine job the same engine flags (``--graph --tasks --blocks
--mode --runtime --address --max-supersteps --checkpoint-every --inject-failure --stats
--progress``); ``add_recovery_arguments`` the recovery limit of the jobs that run
:func:`hgraph.run` themselves; ``positive_int`` is the ``type=`` for every count.
"""

from __future__ import annotations

import argparse

from hgraph import EngineOptions

_ENGINE = EngineOptions()


def positive_float(text: str) -> float:
    """argparse ``type=`` for seconds: a positive number, or one line."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse ``type=`` for counts: a clear message instead of a traceback or a silent 0."""
    return _int_at_least(text, 1, "a positive integer")


def nonnegative_int(text: str) -> int:
    """argparse ``type=`` for limits that may be 0."""
    return _int_at_least(text, 0, "an integer >= 0")


def _int_at_least(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags every engine job takes (the job adds its own)."""
    parser.add_argument("--graph", required=True, help="input graph file")
    parser.add_argument("--tasks", type=positive_int, default=_ENGINE.tasks,
                        help=f"workers (default {_ENGINE.tasks})")
    parser.add_argument("--blocks", type=positive_int, default=_ENGINE.blocks,
                        help=f"VBlocks per worker (default {_ENGINE.blocks})")
    parser.add_argument("--mode", choices=["push", "pull", "hybrid"], default=_ENGINE.mode,
                        help=f"message mode (default {_ENGINE.mode})")
    parser.add_argument("--runtime", choices=["local", "ray"], default=None,
                        help="in-process or Ray actors (default: local, or ray when --address is given)")
    parser.add_argument("--address", default=None,
                        help="Ray cluster to use: HOST:PORT joins it, http://HOST:8265 submits a Ray Job "
                             "(default: RAY_ADDRESS, else an embedded local Ray when --runtime ray)")
    parser.add_argument("--max-supersteps", type=positive_int, default=None, metavar="N",
                        help="stop after N supersteps even if vertices are still active "
                             "(default: run until every vertex halts)")
    parser.add_argument("--checkpoint-every", type=positive_int, default=None, metavar="K",
                        help="checkpoint worker state every K supersteps")
    parser.add_argument("--inject-failure", type=positive_int, default=None, metavar="SUPERSTEP",
                        help="kill one worker at this superstep (testing fault recovery)")
    parser.add_argument("--stats", default=None, help="write per-superstep stats (JSON list) here")
    parser.add_argument("--progress", choices=["auto", "bar", "plain", "off"], default="auto",
                        help="progress on stderr: auto (default: live on a terminal, nothing in a "
                             "pipe or log), bar, plain (one line per superstep or stage) or off; "
                             "results are printed either way")


def add_recovery_arguments(parser: argparse.ArgumentParser) -> None:
    """``--max-recoveries N``: the engine's ``max_recoveries`` (a job that loses a worker more
    often fails with one line naming the worker and the superstep)."""
    parser.add_argument("--max-recoveries", type=nonnegative_int, default=_ENGINE.max_recoveries,
                        metavar="N", help=f"fail the job when a worker is lost after N recoveries "
                                          f"(default {_ENGINE.max_recoveries})")


def add_certificate_arguments(parser: argparse.ArgumentParser) -> None:
    """The plan job's certificate and MILP flags: ``--certify on|lp|off``,
    ``--certify-time-limit S``, ``--milp-time-limit S``, ``--milp-stages T``."""
    from planner.options import CERTIFY_MODES, CertifyOptions

    parser.add_argument("--certify", choices=list(CERTIFY_MODES), default=CertifyOptions().mode,
                        help="a lower bound on the plan's recomputation and the gap to it: on "
                             "(default: the knapsack bound, microseconds), lp (also the LP "
                             "relaxation, up to ~200 activations, within --certify-time-limit), off")
    parser.add_argument("--certify-time-limit", type=positive_float, default=None, metavar="S",
                        help="wall seconds the LP relaxation may take, building it included "
                             "(default 30)")
    parser.add_argument("--milp-time-limit", type=positive_float, default=None, metavar="S",
                        help="--solver milp: wall seconds for the plan's MILPs, building and "
                             "re-solves included (default 60)")
    parser.add_argument("--milp-stages", type=positive_int, default=None, metavar="T",
                        help="--solver milp: free order over T backward stages (default: the "
                             "stages of the exact DP's chain; one per activation covers every chain)")
