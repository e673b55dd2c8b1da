"""Hybrid mode: predict push's and block-pull's cost of the next superstep and run the cheaper one.

After every superstep the workers report, for the messages they just produced, the bytes each
encoding would put across workers (whichever mode actually ran), split into a fixed part (block
headers, pull bitmaps: paid per (sender, destination block) pair that receives anything) and a
variable part (paid per combined message: id + value for push, value only for pull). They also
report the counters behind them: responding vertices, their out-edges, the out-edges that leave
the worker, and the messages after combining.

The next superstep's messages are predicted by the growth of the message count over the last
superstep (``g = messages_t / messages_{t-1}``, clipped), which is what the frontier of a traversal
does from one superstep to the next; the variable parts scale by ``g`` and the fixed parts by
``min(g, 1)``. Predictions are whole bytes.

The rule: the next superstep runs in the mode predicted cheaper; on a tie (as when no message was
sent: both predictions are 0) the running mode stays. There is deliberately no dead
band. HybridGraph has one (it switches only when ``|Q| > 2`` seconds, to push only when
``Q <= -10``, and waits two supersteps after a switch) because a switch costs it a superstep: going
from pull to push re-reads the updated vertices from disk after an extra barrier. Here a switch is
free — both encodings are built from the same in-memory arrays at the end of the superstep — so a
dead band could only make hybrid run the mode its own prediction says is dearer (on a small graph
every saving is below any absolute threshold). The master records, in each superstep's stats row,
the prediction that chose that superstep's mode (``predicted``), so the rule can be read off the
``--stats`` file.

Example (ten messages are cheaper as (id, value) pairs than as bitmaps)::

    >>> from hgraph.cost_model import HybridSwitcher
    >>> s = HybridSwitcher(start="pull")
    >>> _ = s.observe({"messages": 10, "push_fixed": 110, "push_var": 120, "pull_fixed": 4000,
    ...                "pull_var": 80})
    >>> s.mode, s.prediction           # the bytes that chose it
    ('push', {'push': 230, 'pull': 4080})
"""

from __future__ import annotations

from typing import Mapping

MODES = ("push", "pull")


def choose(mode: str, prediction: Mapping[str, int]) -> str:
    """The mode for the next superstep: the predicted-cheaper one; ``mode`` (the running one) on a
    tie. The whole switching rule, also used by tests to check recorded runs."""
    other = "pull" if mode == "push" else "push"
    return other if prediction[other] < prediction[mode] else mode


class HybridSwitcher:
    """Chooses push or pull for the next superstep from the last superstep's counters."""

    def __init__(self, start: str = "pull", max_growth: float = 8.0):
        if start not in MODES:
            raise ValueError(start)
        self.mode = start
        self.max_growth = max_growth
        self.previous_messages: int | None = None
        self.switches = 0
        #: The prediction that chose :attr:`mode` (empty before the first superstep).
        self.prediction: dict[str, int] = {}

    def predict(self, counters: Mapping[str, float]) -> dict[str, int]:
        """Predicted cross-worker bytes of each mode for the next superstep."""
        messages = counters["messages"]
        if self.previous_messages:
            growth = messages / self.previous_messages
        else:
            growth = 1.0
        growth = min(max(growth, 1.0 / self.max_growth), self.max_growth)
        shrink = min(growth, 1.0)
        return {mode: int(round(counters[f"{mode}_fixed"] * shrink + counters[f"{mode}_var"] * growth))
                for mode in MODES}

    def observe(self, counters: Mapping[str, float]) -> str:
        """Take one superstep's summed counters; returns the mode for the next superstep."""
        self.prediction = self.predict(counters)
        self.previous_messages = counters["messages"]
        mode = choose(self.mode, self.prediction)     # no message: both 0, a tie, so it stays
        if mode != self.mode:
            self.mode = mode
            self.switches += 1
        return self.mode

    def state(self) -> dict:
        return {"mode": self.mode, "previous_messages": self.previous_messages,
                "switches": self.switches, "prediction": dict(self.prediction)}

    def restore(self, state: Mapping) -> None:
        self.mode = state["mode"]
        self.previous_messages = state["previous_messages"]
        self.switches = state["switches"]
        self.prediction = dict(state["prediction"])
