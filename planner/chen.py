"""Chen et al.'s √n checkpointing, as the reference's ``Chen.cpp`` does it (FORMAT.md §4.6).

Chen.cpp enumerates all lower sets (like DP.cpp) and keeps the "articulation" sets: ∅, V and every
L with a single boundary node (|∂L| = 1). Sorted by m(L), it takes the first and the last, and in
between every set whose m exceeds a threshold that starts at ``step = m(V) // k``
(``k = max(1, floor(sqrt(#articulation sets)))``) and is raised by ``step`` until it reaches that
set's m. The budget is ignored except through the units' comp_ratio scaling, which changes m.

Example::

    >>> from planner import synth
    >>> plan = solve(synth.build(layers=2, heads=2))
    >>> plan.blocks, plan.model_recompute_cost
    (3, 38)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.activation_graph import ActivationGraph
from planner.lower_sets import all_lower_sets, articulation_sets
from planner.units import scale_units

__all__ = ["ChenPlan", "select", "solve"]


@dataclass
class ChenPlan:
    """The chosen chain (bool masks, ∅ excluded, ending with V) and its model quantities.

    Byte figures are in bytes (scaled value x ratio under reference units, as results.csv).
    """

    chain: list
    blocks: int
    model_recompute_cost: int
    model_peak_bytes: int
    ckpt_bytes: int
    n_lower_sets: int
    n_articulation: int
    k: int
    ratio: int


def select(m_sorted: np.ndarray) -> list:
    """Chen.cpp's selection over articulation sets sorted by m: positions of the chosen sets."""
    count = len(m_sorted)
    k = max(1, math.isqrt(count))
    step = int(m_sorted[-1]) // k
    threshold = step
    chosen = [0]
    for i in range(1, count - 1):
        mi = int(m_sorted[i])
        if mi > threshold:
            chosen.append(i)
            while threshold < mi:
                threshold += step
                if step <= 0:
                    break
    if count > 1:
        chosen.append(count - 1)
    return chosen


def solve(g, budget: int = 10**11, units: str = "bytes", ag: ActivationGraph | None = None,
          lower_set_limit=None) -> ChenPlan:
    """Chen's chain for graph ``g``; ``budget`` only sets the comp_ratio under ``units="reference"``."""
    if ag is None:
        ag = ActivationGraph.from_cg(g)
    u = scale_units(budget, int(ag.bytes.sum()), units)
    ag = ag.with_ratio(u.ratio)
    fam = all_lower_sets(ag, limit=lower_set_limit, order="dfs")
    art = articulation_sets(ag, fam)
    perm = np.argsort(art.m, kind="stable")
    chosen = select(art.m[perm])
    chain = [art.masks[perm[i]] for i in chosen]
    chain = [c for c in chain if c.any()]
    model = ag.chain_model(chain)
    return ChenPlan(chain, model["blocks"], model["recompute_cost"], u.to_bytes(model["peak"]),
                    u.to_bytes(model["ckpt"]), len(fam), len(art), max(1, math.isqrt(len(art))),
                    u.ratio)
