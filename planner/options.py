"""The grouped options of :func:`planner.plan`: one frozen record per topic, defaults stated once.

Why: ``plan()`` took 22 keywords and every front (the PyTorch bridge, row plans, the command
line) copied the list; a new option meant editing each copy, and the CLI's help drifted from the
code's defaults (``--dp-front-cap``). The face is now ``plan(graph, budget, *, solver, strategy,
engine, limits, certify, accounting)``, as Ray's libraries take ``ScalingConfig``/``RunConfig``:

* where the engine analyses run — :class:`hgraph.EngineOptions` (``planner.EngineOptions``);
* how far a solver may go — :class:`SolverLimits` (the exact DP's lower sets, the approximate
  DP's window and front cap, the MILP's time and stages);
* the lower bound on recomputation — :class:`CertifyOptions` (or its mode alone, ``"off"``);
* what the budget counts and in which units — :class:`AccountingOptions` (or its kind alone).

The command line's flags take their defaults from these classes (tests/test_public_face.py
holds them equal), and the values never change the plan's meaning, only where and how far.
This module imports nothing heavy (no NumPy): ``planner.torch.plan`` and the command line's
parser read it without loading the planner.

    >>> SolverLimits().max_lower_sets, CertifyOptions.of("off"), AccountingOptions.of(None).units
    (200000, CertifyOptions(mode='off', time_limit=None), 'bytes')
"""

from __future__ import annotations

from dataclasses import dataclass

from hgraph.common.errors import HGraphError

__all__ = ["SolverLimits", "CertifyOptions", "AccountingOptions", "CERTIFY_MODES",
           "ACCOUNTINGS", "UNITS", "DEFAULT_MAX_LOWER_SETS"]

#: Default cap on the exact family's size, for every enumeration (``--max-lower-sets``).
DEFAULT_MAX_LOWER_SETS = 200_000

#: ``certify`` modes: the knapsack bound, also the LP relaxation, none.
CERTIFY_MODES = ("on", "lp", "off")
#: What a budget holds: the whole step where the graph has op arguments, else the activations.
ACCOUNTINGS = ("auto", "activations")
#: Memory units: exact bytes, or the reference's scaled ints (number-for-number comparison).
UNITS = ("bytes", "reference")


def _choice(name: str, value, choices) -> None:
    if value not in choices:
        raise HGraphError(f"unknown {name} {value!r}; expected one of {', '.join(choices)}")


@dataclass(frozen=True)
class SolverLimits:
    """How far a solver may go; no limit changes a plan that fits inside it.

    ``max_lower_sets`` (200,000): the exact DP refuses a graph with more lower sets, or with
    ``fallback`` (False) uses the approximate family instead. ``dp_window`` / ``dp_front_cap``
    (None: off up to ``planner.dp.scale.EXACT_LIMIT`` activations, the scale path's defaults
    above; 0: off): the approximate DP reaches a state only from the W states before it / keeps
    at most K entries per Pareto front (:mod:`planner.dp.scale`; the report says what was used).
    ``milp_time_limit`` (None: ``planner.milp.DEFAULT_TIME_LIMIT``, 60 s) wall seconds for
    ``solver="milp"``'s MILPs; ``milp_stages`` (None: the stages of the exact DP's chain) its
    backward stages.
    """

    max_lower_sets: int = DEFAULT_MAX_LOWER_SETS
    fallback: bool = False
    dp_window: int | None = None
    dp_front_cap: int | None = None
    milp_time_limit: float | None = None
    milp_stages: int | None = None

    def __post_init__(self):
        if self.milp_time_limit is not None and not self.milp_time_limit > 0:
            raise HGraphError(f"milp_time_limit must be > 0 seconds, got {self.milp_time_limit}")
        if self.milp_stages is not None and self.milp_stages < 1:
            raise HGraphError(f"milp_stages must be >= 1, got {self.milp_stages}")


@dataclass(frozen=True)
class CertifyOptions:
    """The plan's lower bound on recomputation and its gap (:mod:`planner.certificate`).

    ``mode`` ("on"): the knapsack bound (microseconds), ``"lp"`` (also the LP relaxation, up to
    ~200 activations) or ``"off"``; ``time_limit`` (None: ``planner.certificate.
    DEFAULT_TIME_LIMIT``, 30 s): wall seconds the LP may take. ``plan(certify="off")`` is
    ``CertifyOptions("off")`` (:meth:`of`).
    """

    mode: str = "on"
    time_limit: float | None = None

    def __post_init__(self):
        _choice("certify mode", self.mode, CERTIFY_MODES)
        if self.time_limit is not None and not self.time_limit > 0:
            raise HGraphError(f"certify_time_limit must be > 0 seconds, got {self.time_limit}")

    @classmethod
    def of(cls, value: CertifyOptions | str | None) -> CertifyOptions:
        """``value`` as options: itself, a mode alone (``"off"``), or None for the defaults."""
        return value if isinstance(value, cls) else cls() if value is None else cls(mode=value)


@dataclass(frozen=True)
class AccountingOptions:
    """What a budget counts, in which units, and whether the replay checks the schedule.

    ``kind`` ("auto"): a graph with op arguments is budgeted by its whole training step
    (:mod:`planner.whole_step`), any other by its activations; ``"activations"``: the
    activations always. ``units`` ("bytes"): exact bytes, or ``"reference"``: the reference's
    scaled ints (activations only). ``check`` (True): the replay verifies the schedule's
    validity (:func:`planner.simulate.replay`). ``plan(accounting="activations")`` is
    ``AccountingOptions("activations")`` (:meth:`of`).
    """

    kind: str = "auto"
    units: str = "bytes"
    check: bool = True

    def __post_init__(self):
        _choice("units", self.units, UNITS)
        _choice("accounting", self.kind, ACCOUNTINGS)

    @classmethod
    def of(cls, value: AccountingOptions | str | None) -> AccountingOptions:
        """``value`` as options: itself, a kind alone (``"activations"``), or None."""
        return value if isinstance(value, cls) else cls() if value is None else cls(kind=value)
