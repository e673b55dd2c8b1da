"""Chains of lower sets for the schedule tests: a chain is the block of every activation."""

from __future__ import annotations

import numpy as np


def random_chain(g, ag, blocks: int, seed: int) -> np.ndarray:
    """A chain of ``blocks`` blocks: the reference's topological order cut at random places
    (a prefix of a topological order is a lower set)."""
    from planner.emit import topsor

    topo = ag.node_of_var[g.forward_output[topsor(g)]]
    cuts = np.sort(np.random.default_rng(seed).choice(np.arange(1, ag.n), blocks - 1,
                                                      replace=False))
    groups = np.empty(ag.n, np.int64)
    groups[topo] = np.searchsorted(cuts, np.arange(ag.n), side="right")
    return groups
