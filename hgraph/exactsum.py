"""Exact floating-point sums for aggregators: the same bits for any partitioning.

A float sum depends on the order of its terms, so a ``"sum"`` aggregator fed with per-block float
partials gives results that differ in the last bits between 1 and 4 tasks. ``exact_sum(values)``
instead returns an :class:`ExactSum`: the exact value of the sum as an integer multiple of
``2**-1074`` (every finite float64 is one). Partials add exactly in any order, and the engine
rounds the total to the nearest float64 once, when it hands the aggregate to the next superstep.

Vectorized: the floats are split into 53-bit integer mantissas and exponents with ``np.frexp``,
mantissas are summed exactly per distinct exponent in int64 halves, and only the (few) distinct
exponents are combined as Python integers.

Example (in a vertex program:
``Update(..., aggregates={"mass": hgraph.exact_sum(rank[dangling])})``)::

    >>> import numpy as np
    >>> from hgraph.exactsum import exact_sum
    >>> x = np.array([1e16, 1.0, -1e16])
    >>> float(exact_sum(x)), float(np.sum(x))
    (1.0, 0.0)
    >>> float(exact_sum(x[:2]) + exact_sum(x[2:]))     # 1.0 in any grouping
    1.0
"""

from __future__ import annotations

import numpy as np

_SHIFT = 1074 + 53      # scale: every float64 is an integer multiple of 2**-1074
_HALF = 26


class ExactSum:
    """An exact sum of float64 values (``int`` numerator over ``2**_SHIFT``); add with ``+``,
    round with ``float()``. Non-finite terms make it a plain float sum (inf/nan propagate)."""

    __slots__ = ("numerator", "special")

    def __init__(self, numerator: int = 0, special: float | None = None):
        self.numerator = int(numerator)
        self.special = special

    def __add__(self, other):
        if not isinstance(other, ExactSum):
            other = exact_sum(np.asarray(other, dtype=np.float64))
        special = None
        if self.special is not None or other.special is not None:
            special = (self.special or 0.0) + (other.special or 0.0)
        return ExactSum(self.numerator + other.numerator, special)

    __radd__ = __add__

    def __float__(self) -> float:
        if self.special is not None:
            return float(self.special)
        from fractions import Fraction      # here: an engine run that sums nothing never needs it

        return float(Fraction(self.numerator, 1 << _SHIFT))

    def __eq__(self, other) -> bool:
        return isinstance(other, ExactSum) and (self.numerator, self.special) == (
            other.numerator, other.special)

    def __reduce__(self):
        return (ExactSum, (self.numerator, self.special))

    def __repr__(self) -> str:
        return f"ExactSum({float(self)!r})"


def exact_sum(values) -> ExactSum:
    """The exact sum of ``values`` (any shape, converted to float64)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    finite = np.isfinite(x)
    if not finite.all():
        return ExactSum(0, float(np.sum(x[~finite])))
    x = x[x != 0]
    if x.size == 0:
        return ExactSum(0)
    mantissa, exponent = np.frexp(x)
    m = np.ldexp(mantissa, 53).astype(np.int64)              # exact: |m| < 2**53
    shift = exponent.astype(np.int64) - 53 + _SHIFT          # >= 0 for every float64
    exps, inverse = np.unique(shift, return_inverse=True)
    hi = np.zeros(len(exps), np.int64)
    lo = np.zeros(len(exps), np.int64)
    np.add.at(hi, inverse, m >> _HALF)                       # |m >> 26| < 2**27: no overflow
    np.add.at(lo, inverse, m & ((1 << _HALF) - 1))           # below 2**36 terms
    total = 0
    for e, h, l_ in zip(exps.tolist(), hi.tolist(), lo.tolist()):
        total += ((h << _HALF) + l_) << e
    return ExactSum(total)
