"""What a run returns: :class:`Result` (its own module so that :mod:`hgraph.api` and
:mod:`hgraph.session` both name it without importing each other)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Result"]


@dataclass
class Result:
    """What :func:`run` returns.

    ``values``: ndarray ``(n, *value_shape)`` in vertex-id order; ``stats``: one dict per
    superstep (``superstep``, ``mode``, ``active``, ``messages``, ``bytes`` across workers,
    ``seconds``, plus the counters the cost model uses); ``aggregates``: the aggregators' final
    values; ``supersteps``: how many ran; ``failures``: one dict per lost worker (``superstep``,
    ``worker``, ``recovery_seconds``); ``switches``: mode changes made by hybrid mode.
    """

    values: np.ndarray
    stats: list[dict]
    aggregates: dict[str, Any] = field(default_factory=dict)
    supersteps: int = 0
    failures: list[dict] = field(default_factory=list)
    switches: int = 0
    checkpoint_dir: str | None = None

    @property
    def total_bytes(self) -> int:
        """Bytes that crossed workers over the whole run."""
        return int(sum(row["bytes"] for row in self.stats))
