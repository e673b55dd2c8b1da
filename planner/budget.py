"""Parse a memory budget: plain bytes, a size with a unit, or a percentage of the baseline peak.

Accepted forms (case-insensitive units, optional space before the unit):

* ``4000000000``, ``1e9``, ``2.5e9`` — bytes (rounded down to a whole byte);
* ``1.5GB``, ``800MB``, ``64kB`` — decimal units (k/K = 1e3, M = 1e6, G = 1e9, T = 1e12, P = 1e15);
* ``800MiB``, ``2GiB``, ``512KiB`` — binary units (powers of 1024); ``B`` alone is bytes;
* ``60%`` — a percentage of ``baseline`` (the peak without recomputation), which the caller
  supplies once the graph is known.

Anything else is one clear :class:`~hgraph.common.errors.HGraphError` naming the value. Two slips get
their own line: a bare number below 1 (``0.5`` — bytes, so almost surely a fraction meant as
``50%``) and a negative budget (``-5GB``).

Example::

    >>> parse_budget("1.5GB"), parse_budget("800MiB"), parse_budget("1e9")
    (1500000000, 838860800, 1000000000)
    >>> parse_budget("60%", baseline=1000)
    600
    >>> Budget.parse("60%").is_relative
    True
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from hgraph.common.errors import HGraphError

__all__ = ["Budget", "parse_budget"]

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
    "t": 10**12, "tb": 10**12, "p": 10**15, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*|%)\s*$")
_NEGATIVE = re.compile(r"^\s*-\s*\.?[0-9]")
_HELP = "expected bytes (4000000000, 1e9), a size (1.5GB, 800MiB) or a percentage (60%)"
#: Budgets are 64-bit signed byte counts.
_MAX = 2**63 - 1


@dataclass(frozen=True)
class Budget:
    """A parsed ``--budget``: absolute bytes, or a fraction of the baseline peak."""

    text: str
    nbytes: int | None = None         # absolute budgets
    percent: float | None = None      # relative budgets

    @property
    def is_relative(self) -> bool:
        return self.percent is not None

    @classmethod
    def parse(cls, text) -> "Budget":
        if isinstance(text, bool):
            raise HGraphError(f"bad --budget {text!r}: {_HELP}")
        if isinstance(text, (int,)):
            if text < 0:
                raise HGraphError(f"bad --budget {text!r}: a budget cannot be negative")
            return cls(str(text), nbytes=int(text))
        if isinstance(text, float):
            text = repr(text)
        raw = str(text)
        if _NEGATIVE.match(raw):
            raise HGraphError(f"bad --budget {raw!r}: a budget cannot be negative")
        match = _PATTERN.match(raw)
        if not match:
            raise HGraphError(f"bad --budget {raw!r}: {_HELP}")
        number, unit = float(match.group(1)), match.group(2)
        if not math.isfinite(number):
            raise HGraphError(f"bad --budget {raw!r}: not a finite number")
        if unit == "%":
            if number <= 0:
                raise HGraphError(f"bad --budget {raw!r}: the percentage must be positive")
            return cls(raw, percent=number)
        scale = _UNITS.get(unit.lower())
        if scale is None:
            raise HGraphError(f"bad --budget {raw!r}: unknown unit {unit!r} "
                              f"(use B, kB, MB, GB, TB, KiB, MiB, GiB, TiB or %)")
        if not unit and number < 1:
            raise HGraphError(f"bad --budget {raw!r}: a bare number is bytes; {_fraction_hint(number)}")
        value = _exact_product(match.group(1), scale)
        if value > _MAX:
            raise HGraphError(f"bad --budget {raw!r}: larger than 2^63 bytes")
        return cls(raw, nbytes=value)

    def resolve(self, baseline: int | None = None) -> int:
        """Bytes: the absolute value, or ``percent`` of ``baseline`` (rounded down)."""
        if self.nbytes is not None:
            return self.nbytes
        if baseline is None:
            raise HGraphError(f"--budget {self.text}: a percentage needs the baseline peak")
        return _fraction_of(int(baseline), self.percent) if baseline else 0


def _fraction_hint(number: float) -> str:
    """What a bare number below 1 most likely meant: a fraction of the baseline."""
    if number == 0:
        return "a budget of 0 bytes fits nothing (did you mean a percentage such as 60%?)"
    return f"did you mean {number * 100:g}%?"


def _ratio(number_text: str) -> tuple[int, int]:
    """(numerator, denominator) of a non-negative decimal ``[digits][.digits][e[+-]digits]``
    (what ``--budget`` takes; a float's ``repr``), exactly as :class:`fractions.Fraction` reads
    it, without importing :mod:`fractions` (and :mod:`decimal`: ~5 ms of every plan)."""
    mantissa, _, exponent = number_text.lower().partition("e")
    whole, _, frac = mantissa.partition(".")
    num, den, exp = int(whole + frac), 10 ** len(frac), int(exponent or 0)
    return (num * 10 ** exp, den) if exp >= 0 else (num, den * 10 ** -exp)


def _fraction_of(value: int, percent: float) -> int:
    """floor(value × percent / 100), exact (no float rounding of the percentage)."""
    num, den = _ratio(repr(percent))
    return value * num // (100 * den)


def _exact_product(number_text: str, scale: int) -> int:
    """floor(number × scale) computed exactly (no float rounding of e.g. 1.1GB)."""
    num, den = _ratio(number_text)
    return num * scale // den


def parse_budget(text, baseline: int | None = None) -> int:
    """Bytes for a ``--budget`` value; percentages need ``baseline`` (the no-recompute peak)."""
    return Budget.parse(text).resolve(baseline)
