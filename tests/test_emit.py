"""planner.emit: the emitted schedules equal the reference's, line for line."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from conftest import shared_path
from planner import cg, chen, emit, simulate
from planner.activation_graph import ActivationGraph
from planner.schedule import Schedule
from planner.units import scale_units


def _runs():
    rows = list(csv.DictReader(open(shared_path("reference", "results.csv"))))
    index = {(r["graph"], r["solver"], r["strategy"], r["budget_label"]): r for r in rows}
    for path in sorted(shared_path("reference", "schedules").glob("*.txt")):
        graph, solver, strategy, label = path.stem.split("_", 3)
        yield path, index[(graph, solver, strategy, label.replace("pct", "%"))]


_GRAPHS = {}


def _graph(name):
    if name not in _GRAPHS:
        g = cg.read(shared_path("graphs", f"cg_{name}.txt"))
        _GRAPHS[name] = (g, ActivationGraph.from_cg(g))
    return _GRAPHS[name]


def test_chen_schedules_equal_the_reference_files():
    runs = [(p, r) for p, r in _runs() if r["solver"] == "Chen"]
    assert len(runs) == 7
    for path, row in runs:
        g, ag = _graph(row["graph"])
        plan = chen.solve(g, int(row["budget_bytes"]), units="reference", ag=ag)
        assert emit.emit(g, plan.chain, ag).dumps() == path.read_text(), path.name


def test_every_reference_schedule_is_reemitted_from_its_recovered_chain():
    """DP, DP2, DP2fix (time and memory) and Chen: 47 schedules, all reproduced exactly."""
    runs = list(_runs())
    assert len(runs) == 47
    for path, row in runs:
        g, ag = _graph(row["graph"])
        ref = Schedule.read(path)
        chain = emit.recover_chain(g, ref, ag)
        assert emit.emit(g, chain, ag).dumps() == path.read_text(), path.name


def test_recovered_chains_have_the_rows_model_quantities():
    """The chain read back from a schedule has the DP's model cost, peak and checkpoint bytes.

    (Blocks made only of checkpoints leave no trace in a schedule, so ``blocks`` can differ.)
    """
    same_blocks = 0
    for path, row in _runs():
        g, ag = _graph(row["graph"])
        chain = emit.recover_chain(g, Schedule.read(path), ag, search=False)
        u = scale_units(int(row["budget_bytes"]), int(ag.bytes.sum()), "reference")
        model = ag.with_ratio(u.ratio).chain_model(chain)
        assert model["recompute_cost"] == int(row["model_recompute_cost"]), path.name
        assert u.to_bytes(model["peak"]) == int(row["model_peak_bytes"]), path.name
        assert u.to_bytes(model["ckpt"]) == int(row["ckpt_bytes"]), path.name
        same_blocks += model["blocks"] == int(row["blocks"])
    assert same_blocks >= 41


def _naive_hoist(g, ops):
    """The reference's optimizer literally: bubble each forget up, front to back."""
    nf = len(g.forward)

    def touches(c, f):
        key = (f.index, f.which)
        if c.index < nf:
            fn = g.forward[c.index]
            return key[1] == "forward" and (key[0] in [a for a, _ in fn.inputs]
                                            or key[0] == fn.outputs[0])
        bw = g.functions[c.index]
        if key[1] == "forward":
            return any(a == key[0] and t in ("input", "output") for a, t in bw.inputs)
        return (any(a == key[0] and t == "gradient" for a, t in bw.inputs)
                or any(bw.outputs[j] == key[0] for j in c.grads))

    ops = list(ops)
    for i in range(len(ops)):
        if ops[i].kind != "forget":
            continue
        j = i
        while j > 0 and not (ops[j - 1].kind == "compute" and touches(ops[j - 1], ops[j])):
            ops[j - 1], ops[j] = ops[j], ops[j - 1]
            j -= 1
    return ops


@pytest.mark.parametrize("name", ["vgg19", "unet", "resnet50"])
def test_linear_hoisting_equals_bubbling_and_plain_schedules_are_valid(name):
    g, ag = _graph(name)
    for budget in (int(0.6 * ag.bytes.sum()), 10**11):
        plan = chen.solve(g, budget, ag=ag)
        plain = emit.emit(g, plan.chain, ag, optimize=False)
        assert emit.hoist_forgets(g, plain.ops) == _naive_hoist(g, plain.ops)
        opt = emit.emit(g, plan.chain, ag)
        r_plain, r_opt = simulate.replay(g, plain), simulate.replay(g, opt)
        assert r_plain.violations == [] and r_opt.violations == []
        assert r_opt.peak_bytes <= r_plain.peak_bytes
        assert r_opt.recompute_cost == r_plain.recompute_cost


def test_trivial_chains():
    g, ag = _graph("vgg19")
    everything = emit.emit(g, [np.ones(ag.n, dtype=bool)], ag)     # one block: all recomputed
    r = simulate.replay(g, everything)
    assert r.violations == [] and r.recompute_cost >= r.forward_cost
    assert emit.emit(g, [0, ag.all_bits], ag).dumps() == everything.dumps()   # ∅ is optional
    with pytest.raises(ValueError, match="end with V"):
        emit.emit(g, [[0]], ag)
    with pytest.raises(ValueError, match="lower set"):
        emit.emit(g, [[ag.n - 1], ag.all_bits], ag)
