"""planner.activation_graph and planner.lower_sets on the reference graphs and a toy DAG."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import data_path
from planner import cg
from planner.activation_graph import ActivationGraph
from planner.dp_families import DPGraph, approx_family
from planner.lower_sets import all_lower_sets, articulation_sets

# FORMAT.md §4.4: #L, DFS id of V; §4.6: #articulation sets -> k = floor(sqrt)
REFERENCE = {"vgg19": (47, 46), "unet": (331, 69), "resnet50": (241, 200),
             "googlenet": (27358, 384), "densenet": (569, 568)}


def _diamond():
    # 0 -> 1 -> 3, 0 -> 2 -> 3, 3 -> 4
    return ActivationGraph([0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [10, 20, 30, 40, 1],
                           [10, 1, 1, 10, 1], np.array([0, 0, 1, 2, 3]),
                           np.array([1, 2, 3, 3, 4]))


def test_set_helpers_on_a_diamond():
    ag = _diamond()
    L = [0, 1]
    assert ag.is_lower_set(L) and not ag.is_lower_set([1])
    assert np.flatnonzero(ag.boundary(L)).tolist() == [0, 1]
    assert np.flatnonzero(ag.above(L)).tolist() == [2, 3]
    assert np.flatnonzero(ag.below(L)).tolist() == [2]        # pred of A outside L
    assert ag.mem(L) == 30 and ag.cost(L) == 11
    bits = ag.to_bits(L)
    assert bits == 0b11 and ag.boundary(bits) == 0b11 and ag.above(bits) == 0b1100
    assert ag.to_mask(bits).tolist() == ag.to_mask(L).tolist()
    fam = all_lower_sets(ag)
    assert [sorted(np.flatnonzero(r).tolist()) for r in fam.masks] == [
        [], [0], [0, 1], [0, 2], [0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3, 4]]
    bm = ag.boundary_matrix(fam.masks)
    assert all(np.array_equal(bm[i], ag.boundary(fam.masks[i])) for i in range(len(fam)))
    assert fam.words().shape == (7, 1) and int(fam.words()[2, 0]) == 0b11
    anc = approx_family(DPGraph(m=ag.bytes, t=ag.t, src=ag.src, dst=ag.dst))
    assert anc.node.tolist() == [-1, 0, 1, 2, 3, 4]
    assert anc.mL.tolist() == [0, 10, 30, 40, 100, 101]
    model = ag.chain_model([[], [0], [0, 1, 2, 3], [0, 1, 2, 3, 4]])
    # blocks {0}: 0 + 2*10 + m(A={1,2}) = 70; {1,2,3}: 10 + 2*90 + m({4}) = 191; {4}: 50 + 2
    assert (model["blocks"], model["recompute_cost"], model["peak"], model["ckpt"]) == (3, 3, 191, 50)
    assert np.flatnonzero(model["checkpoints"]).tolist() == [0, 3]


@pytest.mark.parametrize("name", list(REFERENCE))
def test_lower_set_counts_and_dfs_ids(name):
    ag = ActivationGraph.from_cg(cg.read(data_path("graphs", f"cg_{name}.txt")))
    count, id_v = REFERENCE[name]
    dfs = all_lower_sets(ag, order="dfs")
    assert len(dfs) == count
    assert dfs.bits.index(ag.all_bits) == id_v
    fam = all_lower_sets(ag)
    assert np.all(np.diff(fam.size) >= 0) and fam.size[0] == 0 and fam.size[-1] == ag.n
    assert fam.m.tolist() == [ag.mem(b) for b in fam.bits][: len(fam)]
    assert all(ag.is_lower_set(m) for m in fam.masks[:: max(1, len(fam) // 50)])
    order = ag.topological_order()
    pos = np.empty(ag.n, dtype=np.int64)
    pos[order] = np.arange(ag.n)
    assert sorted(order.tolist()) == list(range(ag.n)) and np.all(pos[ag.src] < pos[ag.dst])
    art = articulation_sets(ag, dfs)
    assert np.all(ag.boundary_matrix(art.masks).sum(axis=1)[1:-1] == 1)


def test_limit_is_enforced():
    from hgraph.common.errors import HGraphError
    ag = ActivationGraph.from_cg(cg.read(data_path("graphs", "cg_googlenet.txt")))
    with pytest.raises(HGraphError, match="lower sets"):
        all_lower_sets(ag, limit=1000)
