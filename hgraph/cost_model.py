"""Hybrid mode: predict push's and block-pull's cost of the next superstep and switch with hysteresis.

After every superstep the workers report, for the messages they just produced, the bytes each
encoding would put across workers (whichever mode actually ran), split into a fixed part (block
headers, pull bitmaps: paid per (sender, destination block) pair that receives anything) and a
variable part (paid per combined message: id + value for push, value only for pull). They also
report the counters behind them: responding vertices, their out-edges, the out-edges that leave
the worker, and the messages after combining.

The next superstep's messages are predicted by the growth of the message count over the last
superstep (``g = messages_t / messages_{t-1}``, clipped), which is what the frontier of a traversal
does from one superstep to the next; the variable parts scale by ``g`` and the fixed part of pull
by ``min(g, 1)`` upwards-capped at the full bitmap. The master switches to the other mode only
when its predicted bytes are below ``(1 - margin)`` of the running mode's and the saving is at
least ``min_gain`` bytes — a dead band as in HybridGraph (``|Q| > 2``) so that the mode does not
flap on noise.

Example::

    from hgraph.cost_model import HybridSwitcher
    s = HybridSwitcher(start="pull")
    s.observe({"messages": 10, "push_fixed": 110, "push_var": 120, "pull_fixed": 4000,
               "pull_var": 80})
    s.mode            # 'push': ten messages are cheaper as (id, value) pairs than as bitmaps
"""

from __future__ import annotations

from typing import Mapping

MODES = ("push", "pull")


class HybridSwitcher:
    """Chooses push or pull for the next superstep from the last superstep's counters."""

    def __init__(self, start: str = "pull", margin: float = 0.1, min_gain: int = 1024,
                 max_growth: float = 8.0):
        if start not in MODES:
            raise ValueError(start)
        self.mode = start
        self.margin, self.min_gain, self.max_growth = margin, min_gain, max_growth
        self.previous_messages: int | None = None
        self.switches = 0
        self.last_prediction: dict[str, float] = {}

    def predict(self, counters: Mapping[str, float]) -> dict[str, float]:
        """Predicted cross-worker bytes of each mode for the next superstep."""
        messages = counters["messages"]
        if self.previous_messages:
            growth = messages / self.previous_messages
        else:
            growth = 1.0
        growth = min(max(growth, 1.0 / self.max_growth), self.max_growth)
        return {
            "push": counters["push_fixed"] * min(growth, 1.0) + counters["push_var"] * growth,
            "pull": counters["pull_fixed"] * min(growth, 1.0) + counters["pull_var"] * growth,
        }

    def observe(self, counters: Mapping[str, float]) -> str:
        """Take one superstep's summed counters; returns the mode for the next superstep."""
        prediction = self.predict(counters)
        self.last_prediction = prediction
        self.previous_messages = counters["messages"]
        other = "pull" if self.mode == "push" else "push"
        current, alternative = prediction[self.mode], prediction[other]
        if counters["messages"] and alternative < (1.0 - self.margin) * current \
                and current - alternative >= self.min_gain:
            self.mode = other
            self.switches += 1
        return self.mode

    def state(self) -> dict:
        return {"mode": self.mode, "previous_messages": self.previous_messages,
                "switches": self.switches}

    def restore(self, state: Mapping) -> None:
        self.mode = state["mode"]
        self.previous_messages = state["previous_messages"]
        self.switches = state["switches"]
