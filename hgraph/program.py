"""The vertex-program protocol: what a user implements to run on the engine.

A program is vectorized per VBlock: every method receives whole NumPy arrays for one block (or
for the edges of one (source block, destination block) group) and never sees a single vertex.
This mirrors GraphX's ``pregel(vprog, sendMsg, mergeMsg)`` and HybridGraph's decoupled
``update`` / ``getMessages``:

* :meth:`VertexProgram.init` — initial values and which vertices respond (send) in superstep 0;
* :meth:`VertexProgram.update` — new values from the combined inbox, plus who responds next and
  who votes to halt;
* :meth:`VertexProgram.message` — the message on each edge from its source value and weight;
* :attr:`VertexProgram.combiner` — a NumPy ufunc (``np.minimum``, ``np.maximum``, ``np.add``,
  ``np.logical_or``, ``np.bitwise_or``) merging messages to the same destination;
* :attr:`VertexProgram.aggregators` — global reductions, visible in the next superstep.

Values and messages may have a trailing shape (``value_shape``/``message_shape``), e.g. a bitset
of ``k`` uint64 words per vertex combined with ``np.bitwise_or``.

Example: :class:`hgraph.algorithms.SSSP` — single-source shortest paths, the engine's own
program (the ``sssp`` job, the tests and the benchmarks run it) — is the protocol's worked
example, every method in a few lines; :func:`hgraph.run` shows it run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np


@dataclass
class Update:
    """What :meth:`VertexProgram.update` returns for one block.

    ``respond``: bool mask of vertices that send messages along their out-edges next.
    ``halt``: bool mask of vertices that vote to halt (default: those not responding). A halted
    vertex is woken by an incoming message.
    ``aggregates``: partial values of the program's aggregators over this block.
    """

    values: np.ndarray
    respond: np.ndarray
    halt: np.ndarray | None = None
    aggregates: Mapping[str, Any] = field(default_factory=dict)


class VertexProgram:
    """Base class of vertex programs; see the module docstring for a complete example."""

    value_dtype: Any = np.float64
    value_shape: tuple[int, ...] = ()
    message_dtype: Any = np.float64
    message_shape: tuple[int, ...] = ()
    combiner: np.ufunc = np.minimum
    #: name -> "sum" | "min" | "max"; partials come from ``Update.aggregates``.
    aggregators: Mapping[str, str] = {}
    #: None: run until halting (no responding vertex and no message in flight).
    max_supersteps: int | None = None
    #: Whether ``update`` runs on every vertex each superstep (True) or is only called for
    #: blocks that have an active vertex (False, the default: an all-halted block with no inbox
    #: is skipped).
    always_update: bool = False

    def init(self, block) -> tuple[np.ndarray, np.ndarray]:
        """Initial (values, responding mask) for ``block``."""
        raise NotImplementedError

    def update(self, ctx, block, values, inbox, has_message) -> Update:
        """New values for ``block`` from its combined ``inbox`` (identity where ``~has_message``)."""
        raise NotImplementedError

    def message(self, src_values: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """Message value per edge, from the source value (rows gathered per edge) and weight."""
        raise NotImplementedError
