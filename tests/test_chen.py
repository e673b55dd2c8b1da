"""planner.chen: every Chen row of results.csv, model and schedule figures."""

from __future__ import annotations

import csv

from conftest import data_path
from planner import cg, chen, emit, simulate

COLUMNS = ["blocks", "model_recompute_cost", "model_peak_bytes", "ckpt_bytes", "n_lower_sets",
           "comp_ratio", "sched_recompute_cost", "sim_peak_bytes"]

# FORMAT.md §4.6: k / #selected sets incl. ∅ and V
K_SELECTED = {"vgg19": (6, 8), "unet": (3, 4), "resnet50": (6, 8), "googlenet": (4, 4),
              "densenet": (10, 12)}


def test_every_chen_row_matches():
    rows = [r for r in csv.DictReader(open(data_path("reference", "results.csv")))
            if r["solver"] == "Chen"]
    assert len(rows) == 47
    graphs = {}
    for row in rows:
        g = graphs.setdefault(row["graph"], cg.read(data_path("graphs", f"cg_{row['graph']}.txt")))
        plan = chen.solve(g, int(row["budget_bytes"]), units="reference")
        sim = simulate.replay(g, emit.emit(g, plan.chain))
        got = dict(blocks=plan.blocks, model_recompute_cost=plan.model_recompute_cost,
                   model_peak_bytes=plan.model_peak_bytes, ckpt_bytes=plan.ckpt_bytes,
                   n_lower_sets=plan.n_lower_sets, comp_ratio=plan.ratio,
                   sched_recompute_cost=sim.recompute_cost, sim_peak_bytes=sim.peak_bytes)
        want = {c: int(row[c]) for c in COLUMNS}
        assert got == want, (row["graph"], row["budget_label"])
        assert sim.violations == []
        assert (plan.k, plan.blocks + 1) == K_SELECTED[row["graph"]]


def test_selection_rule():
    # 9 sets: k = 3, step = 90 // 3 = 30; thresholds 30, 60, 90
    m = [0, 10, 31, 35, 50, 61, 70, 89, 90]
    assert chen.select(m) == [0, 2, 5, 8]
    assert chen.select([0, 5]) == [0, 1]
