"""The Kusumoto DP (planner.dp) against the reference's results.csv and against a plain oracle.

Every row goes through the product's own path, :class:`planner.solver.Solver` (the one that
:func:`planner.plan` uses: units by :func:`planner.units.scale_units`, the activation graph of
:class:`planner.activation_graph.ActivationGraph`, families from the engine analyses).

* Conformance: every DP2fix / DPfix row of results.csv (reference units) gives the same
  model_recompute_cost, model_peak_bytes, ckpt_bytes, blocks and n_lower_sets, and IMPOSSIBLE
  where the row says so; the time-centric recompute is never above the published DP / DP2 rows.
  Densenet's full grid is marked ``slow``; ``bench/planner_bench.py`` checks the same numbers.
* GoogLeNet's exact DP (27,358 lower sets; the reference's DPfix times out) finishes at every
  budget of results.csv, both strategies, and is never worse than the published DP.cpp or the
  approximate DP2fix plan (each is a chain of the exact family); its schedules replay cleanly.
* The vectorized pull-form DP equals a line-by-line transcription of the reference loop
  (dict fronts, transitions sorted by peak, ``break``) on random DAGs, chain included.
* The exact family's bounded search (knapsack bound, lexicographic memory-centric pass) gives
  the plan of the unpruned DP, chain and tie-breaks included, on random DAGs.
* The objective bound used on big approximate families does not change the plan.
* Exact bytes: model peak within budget, emitted schedules replay without violations.
"""

from __future__ import annotations

import csv
import functools

import numpy as np
import pytest

from conftest import data_path
from hgraph.common.errors import HGraphError
from planner import cg
from planner.activation_graph import ActivationGraph
from planner.dp.loop import run_dp
from planner.dp.solve import solve_family
from planner.dp_families import DPGraph, approx_family, exact_family
from planner.options import SolverLimits
from planner.solver import make_solver
from planner.units import scale_units
from tests.family_oracle import random_single_sink_dag

SOLVER_FAMILY = {"DP2fix": "approx", "DPfix": "exact"}
PUBLISHED = {"approx": "DP2", "exact": "DP"}


@functools.lru_cache(maxsize=None)
def _rows():
    with open(data_path("reference", "results.csv")) as f:
        return list(csv.DictReader(f))


@functools.lru_cache(maxsize=None)
def _graph(name):
    return cg.read(data_path("graphs", f"cg_{name}.txt"))


@functools.lru_cache(maxsize=None)
def _solver(name, family):
    """The product's solver for a graph (families are kept per scaling ratio across rows)."""
    return make_solver(_graph(name), solver=family, units="reference")


def _solve_row(row):
    return _solver(row["graph"], SOLVER_FAMILY[row["solver"]]).dp(int(row["budget_bytes"]),
                                                                   strategy=row["strategy"])


def _check_row(row):
    r = _solve_row(row)
    where = f"{row['graph']} {row['solver']} {row['strategy']} {row['budget_label']}"
    if row["status"] == "IMPOSSIBLE":
        assert r.impossible, where
        return r
    if row["status"] != "OK":                      # TIMEOUT / SKIPPED: no numbers, must finish
        assert r.status in ("OK", "IMPOSSIBLE"), where
        return r
    got = (r.model_recompute_cost, r.model_peak_bytes, r.ckpt_bytes, r.blocks, r.n_lower_sets)
    want = tuple(int(row[k]) for k in ("model_recompute_cost", "model_peak_bytes", "ckpt_bytes",
                                       "blocks", "n_lower_sets"))
    assert got == want, where
    assert r.comp_ratio == int(row["comp_ratio"]), where
    return r


def _ids(rows):
    return [f"{r['graph']}-{r['solver']}-{r['strategy']}-{r['budget_label']}" for r in rows]


def _select(graphs=None, solvers=("DP2fix", "DPfix"), labels=None, slow=False):
    out = []
    for r in _rows():
        if r["solver"] not in solvers or (graphs and r["graph"] not in graphs):
            continue
        if labels and r["budget_label"] not in labels:
            continue
        if r["status"].startswith("SKIPPED") or r["status"].startswith("TIMEOUT"):
            continue
        out.append(r)
    return [pytest.param(r, id=i, marks=[pytest.mark.slow] if slow else []) for r, i in
            zip(out, _ids(out))]


def _fast_rows():
    return (_select(graphs=("vgg19", "unet", "resnet50")) + _select(graphs=("googlenet",),
            solvers=("DP2fix",)) + _select(graphs=("densenet",), labels=("min_DP", "20%act")))


def _slow_rows():
    return _select(graphs=("densenet",), labels=tuple(f"{p}%act" for p in range(30, 101, 10))
                   + ("unlimited",), slow=True)


@pytest.mark.parametrize("row", _fast_rows())
def test_results_csv_row(row):
    _check_row(row)


@pytest.mark.parametrize("row", _slow_rows())
def test_results_csv_row_slow(row):
    _check_row(row)


def test_never_worse_than_published_programs():
    """Time-centric recompute ≤ the published DP.cpp / DP2.cpp at every budget with numbers."""
    rows = _rows()
    published = {(r["graph"], r["solver"], r["strategy"], r["budget_label"]): r for r in rows}
    checked = 0
    for r in rows:
        if r["solver"] not in SOLVER_FAMILY or r["strategy"] != "time" or r["status"] != "OK":
            continue
        if r["graph"] == "densenet" and r["budget_label"] not in ("min_DP", "20%act"):
            continue
        pub = published.get((r["graph"], PUBLISHED[SOLVER_FAMILY[r["solver"]]], "time",
                             r["budget_label"]))
        if pub is None or pub["status"] != "OK":
            continue
        res = _solve_row(r)
        assert res.model_recompute_cost <= int(pub["model_recompute_cost"]), r["budget_label"]
        checked += 1
    assert checked >= 40


GOOGLENET_LABELS = ("min_DP", "40%act", "50%act", "60%act", "70%act", "80%act", "90%act",
                    "100%act", "unlimited")


def _row(graph, solver, strategy, label):
    return next(r for r in _rows() if (r["graph"], r["solver"], r["strategy"],
                                       r["budget_label"]) == (graph, solver, strategy, label))


@pytest.mark.parametrize("strategy", ["time", "memory"])
@pytest.mark.parametrize("label", GOOGLENET_LABELS)
def test_googlenet_exact_every_budget(label, strategy):
    """The exact DP finishes where the reference's DPfix timed out, and beats every known plan.

    DP.cpp's and DP2fix's chains are chains of the exact family under the same accounting, so
    the exact optimum recomputes no more (time-centric) and keeps no more checkpoint memory
    (memory-centric, whose objective is the ckpt, not the peak). The schedule must replay
    cleanly; a memory-centric one must also fit the budget in the simulator. (Time-centric
    plans at tight budgets replay above it, as the reference's own DP / DP2fix plans do: the
    model leaves parameter gradients out, FORMAT.md §4.2.)
    """
    from planner import emit, simulate

    row = _row("googlenet", "DPfix", strategy, label)
    assert row["status"] != "OK"                   # the reference has no numbers here
    r = _solve_row(row)
    budget = int(row["budget_bytes"])
    assert (r.status, r.family, r.n_lower_sets) == ("OK", "exact", 27358)
    assert r.model_peak_bytes <= budget
    objective = "model_recompute_cost" if strategy == "time" else "ckpt_bytes"
    ours = getattr(r, objective)
    for solver in ("DP2fix", "DP"):
        other = _row("googlenet", solver, strategy, label)
        if other["status"] == "OK":
            assert ours <= int(other[objective]), (solver, ours, other[objective])
    sim = simulate.replay(_graph("googlenet"), emit.emit(_graph("googlenet"), r.chain))
    assert not sim.violations
    assert sim.recompute_cost >= r.model_recompute_cost
    if strategy == "memory":
        assert sim.peak_bytes <= budget


def _dpgraph(name):
    ag = ActivationGraph.from_cg(_graph(name))
    return DPGraph(m=ag.bytes, t=ag.t, src=ag.src, dst=ag.dst)


def test_exact_family_limit_refuses_or_falls_back():
    g = _dpgraph("googlenet")
    with pytest.raises(HGraphError, match="more than 1,000 lower sets"):
        exact_family(g, max_lower_sets=1000)
    fam = exact_family(g, max_lower_sets=1000, fallback=True)
    assert fam.fell_back and fam.kind == "approx" and fam.num_sets == g.n + 1
    two_sinks = DPGraph(m=[1, 1, 1], t=[1, 1, 1], src=[0, 0], dst=[1, 2])
    with pytest.raises(HGraphError, match="single sink"):
        approx_family(two_sinks)
    with pytest.raises(HGraphError):
        make_solver(_graph("unet"), "exact", limits=SolverLimits(max_lower_sets=100)).dp(10**11)
    r = make_solver(_graph("unet"), "exact",
                    limits=SolverLimits(max_lower_sets=100, fallback=True)).dp(10**11)
    assert r.fell_back and r.n_lower_sets == 61 and r.status == "OK"


# ----------------------------------------------------------------------- the plain oracle
def _oracle(m, t, src, dst, budget, family, strategy):
    """The reference loop written out with Python sets and dicts (FORMAT.md §4.2-4.5)."""
    n = len(m)
    preds = [set() for _ in range(n)]
    succs = [set() for _ in range(n)]
    for a, b in zip(src, dst):
        preds[b].add(a)
        succs[a].add(b)
    if family == "approx":
        anc = []
        for v in range(n):
            seen, stack = {v}, [v]
            while stack:
                for p in preds[stack.pop()]:
                    if p not in seen:
                        seen.add(p)
                        stack.append(p)
            anc.append(frozenset(seen))
        fam = [frozenset()] + sorted(anc, key=lambda s: (sum(m[x] for x in s), len(s),
                                                           anc.index(s)))
    else:
        found, frontier = {frozenset()}, [frozenset()]
        while frontier:
            nxt = []
            for s in frontier:
                for v in range(n):
                    if v not in s and preds[v] <= s and (s | {v}) not in found:
                        found.add(s | {v})
                        nxt.append(s | {v})
            frontier = nxt
        fam = sorted(found, key=len)
    mm = lambda s: sum(m[x] for x in s)  # noqa: E731
    bnd = [frozenset(x for x in s if succs[x] - s) for s in fam]
    A = [frozenset(y for x in s for y in succs[x] if y not in s) for s in fam]
    B = [frozenset(p for y in a for p in preds[y] if p not in s) for s, a in zip(fam, A)]
    trans = []
    for i, li in enumerate(fam):
        out = []
        for j in range(i + 1, len(fam)):
            if li < fam[j]:
                w = bnd[j] - li
                peak = 2 * (mm(fam[j]) - mm(li)) + mm(A[j]) + mm(B[j])
                out.append((peak, j, sum(t[x] for x in w), mm(w)))
        out.sort(key=lambda x: x[0])                # stable: ties keep id order
        trans.append(out)
    dp = [dict() for _ in fam]
    pred = [dict() for _ in fam]
    dp[0][0] = 0
    for i in range(len(fam)):
        for s in sorted(dp[i]):
            c = dp[i][s]
            for peak, j, dt, dm in trans[i]:
                if c + peak > budget:
                    break
                ns, nc = s + dt, c + dm
                if any(k >= ns and v <= nc for k, v in dp[j].items()):
                    continue
                for k in [k for k, v in dp[j].items() if k <= ns and v >= nc]:
                    del dp[j][k]
                dp[j][ns] = nc
                pred[j][ns] = (i, s)
    end = len(fam) - 1
    if not dp[end]:
        return None
    s = max(dp[end]) if strategy == "time" else min(dp[end])
    c, chain, j = dp[end][s], [], end
    while True:
        chain.append(j)
        if j == 0:
            break
        j, s_prev = pred[j][s]
        s = s_prev
    sk = max(dp[end]) if strategy == "time" else min(dp[end])
    return sk, dp[end][sk], [sorted(fam[k]) for k in reversed(chain)]


def _random_dag(rng, n, p):
    src, dst, perm = random_single_sink_dag(rng, n, p)
    m = rng.integers(0, 6, n)
    t = rng.choice([1, 10], n)
    return m, t, src, dst, perm[n - 1]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("family", ["approx", "exact"])
def test_matches_plain_reference_loop(seed, family):
    rng = np.random.default_rng(seed)
    n = 9 if family == "exact" else 14
    m, t, src, dst, _sink = _random_dag(rng, n, 0.25 if seed % 2 else 0.5)
    g = DPGraph(m=m, t=t, src=src, dst=dst)
    fam = exact_family(g) if family == "exact" else approx_family(g)
    total = int(m.sum())
    for budget in (total // 2, total, 2 * total, 5 * total):
        for strategy in ("time", "memory"):
            want = _oracle(m, t, src, dst, budget, family, strategy)
            r = solve_family(fam, g, budget, strategy=strategy)
            if want is None:
                assert r.impossible
                continue
            s, c, chain = want
            assert (r.saved, r.ckpt_bytes) == (s, c), (budget, strategy)
            assert [list(x) for x in r.chain] == chain, (budget, strategy)


def test_objective_bounds_do_not_change_the_plan():
    rng = np.random.default_rng(7)
    m, t, src, dst, _ = _random_dag(rng, 11, 0.3)
    g = DPGraph(m=m, t=t, src=src, dst=dst)
    fam = exact_family(g)
    budget = 2 * int(m.sum())
    full = run_dp(fam, g.t, g.m, budget)
    end = fam.num_sets - 1
    lo, hi = full.ptr[end], full.ptr[end + 1]
    assert hi > lo
    best_s, best_c = int(full.s[hi - 1]), int(full.c[lo])
    for kw in (dict(max_recompute=int(t.sum()) - best_s), dict(max_ckpt=best_c)):
        pruned = run_dp(fam, g.t, g.m, budget, **kw)
        plo, phi = pruned.ptr[end], pruned.ptr[end + 1]
        k_full = hi - 1 if "max_recompute" in kw else lo
        k_pr = phi - 1 if "max_recompute" in kw else plo

        def chain(fr, k):
            out = []
            while k >= 0:
                out.append((int(fr.state[k]), int(fr.s[k]), int(fr.c[k])))
                k = int(fr.pred[k])
            return out
        assert chain(full, k_full) == chain(pruned, k_pr)
        assert pruned.size <= full.size


def _unpruned_plan(fam, g, budget, strategy):
    """(chain ids, saved, ckpt) of the plain pull DP (no bounds): the semantics to keep."""
    fr = run_dp(fam, g.t, g.m, budget)
    end = fam.num_sets - 1
    lo, hi = fr.ptr[end], fr.ptr[end + 1]
    if hi == lo:
        return None
    k = int(hi - 1) if strategy == "time" else int(lo)
    s, c, ids = int(fr.s[k]), int(fr.c[k]), []
    while k >= 0:
        ids.append(int(fr.state[k]))
        k = int(fr.pred[k])
    return ids[::-1], s, c


def _random_exact_case(seed, single_sink=True):
    rng = np.random.default_rng(100 + seed)
    n = 15 + seed % 4
    m, t, src, dst, _sink = _random_dag(rng, n, (0.15, 0.25, 0.4)[seed % 3])
    if not single_sink:                             # drop the edges into the sink: many sinks
        keep = dst != _sink
        keep[np.flatnonzero(dst == _sink)[0]] = True
        src, dst = src[keep], dst[keep]
    m = rng.integers(0, 40, n) * (rng.random(n) < 0.85)     # some nodes weigh nothing
    return DPGraph(m=m, t=t, src=src, dst=dst)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("single_sink,family", [(True, "exact"), (False, "exact"),
                                                (True, "approx")])
def test_bounded_exact_search_keeps_the_plan(seed, single_sink, family, monkeypatch):
    """Knapsack-bounded fronts and the lexmin memory pass = the unpruned DP, chain included
    (the exact family, and the dense approximate one, which from 512 sets runs the same search
    memory-centric and the deepened bounded loop time-centric: here at every size)."""
    from planner.dp import solve

    monkeypatch.setattr(solve, "APPROX_SEARCH_SETS", (0, 4096))
    g = _random_exact_case(seed, single_sink)
    fam = exact_family(g) if family == "exact" else approx_family(g)
    assert fam.num_sets > (30 if family == "exact" else 14)
    total = int(g.m.sum())
    checked = 0
    for frac in (0.4, 0.6, 0.8, 1.0, 1.3, 1.7, 2.2, 3.0, 5.0):
        budget = int(frac * total)
        for strategy in ("time", "memory"):
            want = _unpruned_plan(fam, g, budget, strategy)
            r = solve_family(fam, g, budget, strategy=strategy)
            if want is None:
                assert r.impossible, (frac, strategy)
                continue
            assert (r.chain_ids, r.saved, r.ckpt_bytes) == want, (frac, strategy)
            checked += 1
    assert checked >= 8


def test_bounded_exact_search_big_family_fallbacks(monkeypatch):
    """Past their size caps the search tests bitsets per pair (no inclusion matrix), builds the
    knapsack tables one state at a time and sums boundary slots one by one (no dt/dm tables):
    same plans."""
    from planner import dp_families
    from planner.dp import exact_search, knapsack

    g = _random_exact_case(4)
    monkeypatch.setattr(dp_families, "SUBSET_MATRIX_MAX_BYTES", 0)
    monkeypatch.setattr(knapsack, "KNAPSACK_BLOCK_CELLS", 0)
    monkeypatch.setattr(exact_search, "BOUNDARY_TABLE_MAX", 0)
    fam = exact_family(g)
    assert fam.subset_matrix() is None
    total = int(g.m.sum())
    checked = 0
    for frac in (1.0, 1.7, 3.0, 5.0):
        for strategy in ("time", "memory"):
            want = _unpruned_plan(fam, g, int(frac * total), strategy)
            r = solve_family(fam, g, int(frac * total), strategy=strategy)
            assert (None if r.impossible else (r.chain_ids, r.saved, r.ckpt_bytes)) == want
            checked += want is not None
    assert checked >= 4


def test_subset_matrix_is_inclusion():
    g = _random_exact_case(3)
    fam = exact_family(g)
    sub = fam.subset_matrix()
    bits = np.unpackbits(sub, axis=1, bitorder="little")[:, :fam.num_sets].astype(bool)
    sets = fam.sets
    want = np.all((sets[None, :, :] & ~sets[:, None, :]) == 0, axis=2)    # [j, i]: L_i ⊆ L_j
    assert np.array_equal(bits, want)
    low, _v, tgt = fam.covers                                  # one-node steps, each once
    assert len(set(zip(low.tolist(), tgt.tolist()))) == low.size
    assert np.array_equal(fam.size[tgt], fam.size[low] + 1)


# ----------------------------------------------------------------------- exact bytes
@pytest.mark.parametrize("name", ["vgg19", "resnet50"])
def test_bytes_units_plans_fit(name):
    from planner import emit, simulate

    g = _graph(name)
    solvers = {family: make_solver(g, family) for family in ("approx", "exact")}
    S = solvers["approx"].act_sum
    for frac in (0.4, 0.7, 1.0):
        for family, solver in solvers.items():
            r = solver.dp(int(frac * S))
            if r.impossible:
                continue
            assert r.comp_ratio == 1 and r.model_peak_bytes <= int(frac * S)
            sch = emit.emit(g, r.chain)
            sim = simulate.replay(g, sch, mode="exact")
            assert not sim.violations


# ----------------------------------------------------------------------- one unit path
def _reference_ratio(budget, act_sum):
    """DP.cpp's two start-up loops, transcribed (FORMAT.md §2.1): (comp_ratio, scaled budget)."""
    b, ratio = int(budget), 1
    while b > 1e8:
        b //= 10
        ratio *= 10
    mem = int(act_sum) // ratio
    while mem > 1e8:
        mem //= 10
        b //= 10
        ratio *= 10
    return ratio, b


def _reference_arrays(g):
    """(bytes, t, src, dst) read off the forward functions as the reference does: the k-th
    activation by variable id, cost 10 for Conv*, 1 otherwise."""
    forward = [f for f in g.functions if f.direction == "forward"]
    acts = np.sort(np.array([f.outputs[0] for f in forward], dtype=np.int64))
    node_of = np.full(len(g.var_bytes), -1, dtype=np.int64)
    node_of[acts] = np.arange(acts.size)
    t = np.ones(acts.size, dtype=np.int64)
    src, dst = [], []
    for f in forward:
        v = node_of[f.outputs[0]]
        t[v] = 10 if f.type.startswith("Conv") else 1
        ins = node_of[np.array([a for a, _tag in f.inputs], dtype=np.int64)]
        src += ins[ins >= 0].tolist()
        dst += [v] * int((ins >= 0).sum())
    return np.asarray(g.var_bytes, np.int64)[acts], t, src, dst


@pytest.mark.parametrize("name", ["vgg19", "resnet50", "googlenet", "unet", "densenet"])
def test_the_product_units_and_graph_are_the_references(name):
    """The one unit path (scale_units on ActivationGraph) equals the reference's own loops."""
    g = _graph(name)
    bytes_, t, src, dst = _reference_arrays(g)
    want = DPGraph(m=bytes_, t=t, src=src, dst=dst)
    got = _dpgraph(name)
    for field_ in ("m", "t", "src", "dst"):
        assert np.array_equal(getattr(got, field_), getattr(want, field_)), field_
    S = int(bytes_.sum())
    for budget in [int(r["budget_bytes"]) for r in _rows() if r["graph"] == name] + [1, S, 7 * S]:
        u = scale_units(budget, S, "reference")
        assert (u.ratio, u.budget) == _reference_ratio(budget, S), budget
