"""The certificate (issue 27) on the reference graphs: DP cost, MILP cost, bounds, gaps, times.

For each reference graph (``bench/refdata.py``: five of the reference's seven ship)
at 40 %, 60 % and 80 % of S, the sum of activation bytes (the reference's ``N%act``, in
practice its no-recomputation peak; FORMAT.md §1.3), in reference units:

* ``dp``: the exact DP (every lower set, size-ordered: DPfix) — its model recompute cost and
  time (``planner.solver.make_solver(..., "exact", units="reference").dp``);
* ``milp``: :func:`planner.milp.solve` (the unrestricted model) within ``--milp-limit``
  seconds, its stages fixed to the exact DP's chain (``--milp-mode dp``, what ``--solver milp``
  does; where the DP has no chain, free order) or in free order over ``--stages`` stages
  (``--milp-mode free``): the schedule's cost, whether HiGHS proved it optimal *for those
  stages*, HiGHS's dual bound of that restricted model (not a bound on the full one), the time; the schedule is emitted by
  :func:`planner.emit.emit_groups` and replayed by :func:`planner.simulate.replay` (its
  violations, simulated peak and recompute go in the JSON);
* ``lp``: the LP relaxation of the full model (one stage per activation), its bound rounded up
  and time, or TIMEOUT past ``--lp-limit``, or ``—`` above ``--lp-max-nodes`` activations;
* ``knapsack``: :func:`planner.certificate.knapsack_bound` and its time;
* ``bound`` = the largest valid bound; the gaps ``(cost − bound) / cost`` of the DP and the MILP.

``--timing`` instead measures what the default certificate costs a plan: ``planner.plan`` with
``certify="on"`` and ``"off"`` alternately in one process, ``--repeat`` times each, on every
reference graph (approximate DP, bytes units, 80 %) and three small ``synth`` graphs; it prints
the fastest of each (the machine is shared: the minimum is the
least disturbed), their ratio, and the certificate's own median time over the plan's.

    python3 bench/certificate_bench.py --out bench/certificate.json
    python3 bench/certificate_bench.py --milp-mode free --stages 16
    python3 bench/certificate_bench.py --timing --repeat 7
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import refdata  # noqa: E402  (bench/ is not a package)

import numpy as np  # noqa: E402

import planner  # noqa: E402
from planner import certificate, cg, milp, simulate, synth  # noqa: E402
from planner.activation_graph import ActivationGraph  # noqa: E402
from planner.emit import emit_groups  # noqa: E402
from planner.solver import make_solver  # noqa: E402
from planner.units import scale_units  # noqa: E402

GRAPHS = ("vgg19", "unet", "googlenet", "resnet50", "densenet")
FRACTIONS = (0.4, 0.6, 0.8)


def _graph_path(name: str) -> Path:
    return refdata.graph(name)


def row(name: str, frac: float, args) -> dict:
    g = cg.read(_graph_path(name))
    s = make_solver(g, "exact", units="reference")
    ag = s.ag
    S = s.act_sum
    budget = int(frac * S)
    u = scale_units(budget, S, "reference")
    out = {"graph": name, "nodes": ag.n, "budget_pct": round(100 * frac), "budget_bytes": budget,
           "comp_ratio": u.ratio, "budget_units": u.budget}
    s.family(u.ratio)                              # the family, outside the DP's time
    t0 = time.perf_counter()
    r = s.dp(budget)
    out["dp_s"] = time.perf_counter() - t0
    out["dp_status"] = r.status
    out["dp_cost"] = None if r.impossible else int(r.model_recompute_cost)
    out["dp_blocks"] = None if r.impossible else int(r.blocks)
    dg, _ = s.family(u.ratio)

    m = milp.solve(dg, u.budget, stages=args.stages, time_limit=args.milp_limit,
                   groups=None if args.milp_mode == "free" or r.impossible else r.groups)
    out.update(milp_status=m.status, milp_cost=m.cost, milp_optimal_for_stages=m.optimal,
               milp_stages=m.stages, milp_dual_bound=m.dual_bound, milp_s=m.seconds,
               milp_variables=m.variables)
    if m.status == "OK":
        sched = emit_groups(g, m.groups, ag, keep=m.keep, recompute=m.recompute, retain=m.retain)
        sim = simulate.replay(g, sched)
        out.update(milp_sim_violations=len(sim.violations), milp_sim_peak=sim.peak_bytes,
                   milp_sim_recompute=sim.recompute_cost, milp_model_peak_units=m.peak)
    if not r.impossible:
        sim = simulate.replay(g, emit_groups(g, r.groups, ag))
        out.update(dp_sim_peak=sim.peak_bytes, dp_sim_recompute=sim.recompute_cost)

    sinks = np.flatnonzero(np.bincount(ag.src, minlength=ag.n) == 0)
    t0 = time.perf_counter()
    kb = certificate.knapsack_bound(dg.m, dg.t, int(dg.m[sinks].min()), u.budget)
    out.update(knapsack=kb, knapsack_s=time.perf_counter() - t0)
    if ag.n <= args.lp_max_nodes:
        lp = milp.relaxation(dg, u.budget, time_limit=args.lp_limit)
        out.update(lp_status=lp.status, lp_s=lp.seconds,
                   lp=None if lp.status != "OK" else max(0, math.ceil(lp.bound - 1e-6)))
    else:
        out.update(lp_status="not run", lp=None, lp_s=None)
    bounds = [kb] + [out["lp"]] * (out["lp"] is not None)
    if m.optimal and m.stages == ag.n and m.dual_bound is not None:
        bounds.append(math.ceil(m.dual_bound - 1e-6))
    out["bound"] = max(bounds)
    for who in ("dp", "milp"):
        c = out[f"{who}_cost"]
        out[f"{who}_gap"] = None if c is None else (0.0 if c == 0 else (c - out["bound"]) / c)
    return out


def _fmt(x, nd=1):
    return "—" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def table(rows) -> str:
    head = ("| graph | budget | DP cost (s) | MILP cost, status (s) | MILP dual bound "
            "(its stages) | LP bound (s) | knapsack (s) | bound | DP gap | MILP gap |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        status = {"OK": "optimal" if r["milp_optimal_for_stages"] else "time limit"}.get(
            r["milp_status"], r["milp_status"])
        lp = (f"{r['lp']} ({r['lp_s']:.1f})" if r["lp"] is not None else
              (f"{r['lp_status']} ({r['lp_s']:.0f})" if r["lp_s"] is not None else "not run"))
        pct = lambda v: "—" if v is None else f"{100 * v:.0f}%"   # noqa: E731
        lines.append(
            f"| {r['graph']} | {r['budget_pct']}% | {_fmt(r['dp_cost'])} ({r['dp_s']:.2f}) | "
            f"{_fmt(r['milp_cost'])}, {status} ({r['milp_s']:.0f}) | "
            f"{_fmt(r['milp_dual_bound'])} ({r['milp_stages']}) | {lp} | "
            f"{r['knapsack']} ({1000 * r['knapsack_s']:.2f} ms) | {r['bound']} | "
            f"{pct(r['dp_gap'])} | {pct(r['milp_gap'])} |")
    return head + "\n".join(lines) + "\n"


def timing(args) -> None:
    cases = [(name, str(_graph_path(name))) for name in GRAPHS]
    for layers, heads in ((1, 1), (2, 2), (4, 4)):
        g = synth.build(layers=layers, heads=heads)
        cases.append((f"synth L{layers} H{heads}", g))
    print("| graph | activations | plan, certify off (s, min) | plan, certify on (s, min) | "
          "ratio | certificate (s, median) | certificate / plan off |\n"
          "|---|---|---|---|---|---|---|")
    for name, graph in cases:
        planner.plan(graph, budget="80%", certify="on")          # warm: imports, caches
        times = {"off": [], "on": []}
        cert_s = []
        for _ in range(args.repeat):
            for mode in ("off", "on"):
                t0 = time.perf_counter()
                p = planner.plan(graph, budget="80%", certify=mode)
                times[mode].append(time.perf_counter() - t0)
                if mode == "on":
                    cert_s.append(p.recompute_certificate.seconds)
        off, on = min(times["off"]), min(times["on"])
        cert = statistics.median(cert_s)
        print(f"| {name} | {p.nodes} | {off:.4f} | {on:.4f} | {on / off:.3f} | "
              f"{cert:.6f} | {100 * cert / off:.2f}% |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", default=",".join(GRAPHS))
    ap.add_argument("--milp-mode", choices=["dp", "free"], default="dp",
                    help="dp: the MILP's stages are the exact DP's chain (--solver milp's "
                         "default); free: free order over --stages stages")
    ap.add_argument("--stages", type=int, default=milp.DEFAULT_SOLVER_STAGES)
    ap.add_argument("--milp-limit", type=float, default=60.0)
    ap.add_argument("--lp-limit", type=float, default=30.0)
    ap.add_argument("--lp-max-nodes", type=int, default=200)
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--timing", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if args.timing:
        timing(args)
        return
    rows = []
    for name in args.graphs.split(","):
        for frac in FRACTIONS:
            rows.append(row(name, frac, args))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
