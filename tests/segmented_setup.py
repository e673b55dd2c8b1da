"""The segmented DP's test graphs and the hash its stitched fronts are compared by (the tests
of the workers' stashes: test_dp_segmented_reuse, test_dp_segmented_tables)."""

from __future__ import annotations

import hashlib

from planner import synth
from planner.activation_graph import ActivationGraph
from planner.dp import segmented as S

_G = {}


def setup(kind: str):
    """``(graph, family, cuts)`` of a 24-layer transformer (``"tf"``) or a 12-block CNN
    (``"cnn"``) in 6 segments, made once per test session."""
    if kind not in _G:
        cg = synth.build(layers=24, heads=4) if kind == "tf" else synth.build_cnn(blocks=12)
        g = ActivationGraph.from_cg(cg)
        fam = S.scale_family(g)
        _G[kind] = (g, fam, S.choose_cuts(fam, 6))
    return _G[kind]


def front_hash(stitched) -> str:
    """A digest of the composed front's states and their sums: equal digests, equal plans."""
    f = stitched.fronts
    return hashlib.sha256(f.state.tobytes() + f.s.tobytes() + f.c.tobytes()).hexdigest()
