"""Memory units and the cost model: the reference's accounting (FORMAT.md §2.1, §4.1) or exact bytes.

The reference programs do all DP memory arithmetic in 32-bit ``int``. To fit, they divide the
budget and every activation size by a power of ten, ``comp_ratio``, with per-node truncation, and
this truncation decides feasibility at the boundary and tie-breaking. ``--units reference`` copies
it (to reproduce results.csv number for number); ``--units bytes`` (the default) works in exact
int64 bytes with ratio 1, so a plan that fits the model fits the budget.

The cost model is the reference's in both modes: a forward function costs 10 if its type starts
with ``"Conv"`` (so Deconvolution2DFunction costs 1), otherwise 1.

Example::

    >>> comp_ratio(int(0.6 * 4004508676), 4004508676)     # vgg19 at 60 % of S
    100
    >>> function_cost("Convolution2DFunction"), function_cost("Deconvolution2DFunction")
    (10, 1)
    >>> [w for w, _ in zip(ratio_windows(4004508676, "reference"), range(2))]
    [(0, 10000000099, 100), (10000000100, 100000000999, 1000)]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["LIMIT", "UNLIMITED_BUDGET", "function_cost", "comp_ratio", "Units",
           "scale_units", "ratio_windows"]

#: The reference's bound on scaled sizes (1e8, so sums fit a 32-bit int).
LIMIT = 100_000_000
#: The budget results.csv calls "unlimited".
UNLIMITED_BUDGET = 100_000_000_000


def function_cost(ftype: str) -> int:
    """The reference's cost of one forward function: 10 for Conv*, else 1."""
    return 10 if ftype.startswith("Conv") else 1


def comp_ratio(budget: int, act_sum: int) -> int:
    """The reference's scaling divisor for a budget and the activation byte sum S.

    The two start-up loops of DP.cpp, literally: divide B by 10 while B > 1e8, then divide S/ratio
    (and B) by 10 while it is > 1e8. Equivalently the smallest power of ten with
    ``floor(B/ratio) <= 1e8`` and ``floor(S/ratio) <= 1e8``.
    """
    b, ratio = int(budget), 1
    while b > LIMIT:
        b //= 10
        ratio *= 10
    naive = int(act_sum) // ratio
    while naive > LIMIT:
        naive //= 10
        ratio *= 10
    return ratio


@dataclass(frozen=True)
class Units:
    """Memory units of one planning run.

    ``mode`` is ``"reference"`` or ``"bytes"``; ``ratio`` the divisor (1 in bytes mode);
    ``budget`` the budget in these units (``floor(bytes / ratio)``). Model quantities are converted
    back to bytes with :meth:`to_bytes` (scaled value x ratio, as results.csv reports them).
    """

    mode: str
    ratio: int
    budget: int
    budget_bytes: int

    def scale(self, nbytes) -> np.ndarray:
        """Per-node sizes in these units: floor division by ``ratio`` (int64)."""
        return np.asarray(nbytes, dtype=np.int64) // self.ratio

    def to_bytes(self, value) -> int:
        return int(value) * self.ratio


def scale_units(budget_bytes: int, act_sum: int, mode: str = "bytes") -> Units:
    """The :class:`Units` for a budget (bytes) on a graph whose activations sum to ``act_sum``."""
    if mode == "reference":
        ratio = comp_ratio(budget_bytes, act_sum)
    elif mode == "bytes":
        ratio = 1
    else:
        raise ValueError(f"units must be 'bytes' or 'reference', got {mode!r}")
    return Units(mode, ratio, int(budget_bytes) // ratio, int(budget_bytes))


def ratio_windows(act_sum: int, mode: str = "bytes"):
    """The budgets (bytes) that share a scaling ratio, ascending: ``(first, last, ratio)`` for
    every budget ``first ≤ B ≤ last`` (``last`` None: no end), as :func:`scale_units` scales.

    In bytes units one window, ratio 1. In reference units the ratio is the larger of the one
    ``act_sum`` needs (``comp_ratio(0, act_sum)``) and the least power of ten with
    ``B // ratio ≤ LIMIT``, so it steps ×10 at ``B = (LIMIT + 1)·ratio``: a search over
    budgets (:meth:`planner.solver.Solver.min_budget`) solves each ratio's DP once.
    """
    if mode == "bytes":
        yield 0, None, 1
        return
    if mode != "reference":
        raise ValueError(f"units must be 'bytes' or 'reference', got {mode!r}")
    first, ratio = 0, comp_ratio(0, act_sum)
    while True:
        last = (LIMIT + 1) * ratio - 1
        yield first, last, ratio
        first, ratio = last + 1, ratio * 10
