"""Schedule hashes of the planner's plans: the check that a refactor leaves every plan as it was.

For each case, ``planner.plan`` runs on the product path and the case's hash is the sha256 of
the schedule text (reference format) and of the JSON report with every ``seconds`` key taken
out (the only field that changes from run to run); an infeasible budget hashes the error's
one line and its ``min_budget_bytes``. The cases:

* ``ref``: every reference conformance row tests/test_dp_conformance.py checks (results.csv's
  DP2fix / DPfix rows that have numbers or say IMPOSSIBLE, densenet's slow grid included) and
  the Chen rows, in the reference's units at the row's budget;
* ``bench``: the shipped graphs (jobs/data ResNet-50, tests/data VGG-19, U-Net, GoogLeNet,
  DenseNet) and two synth graphs (a transformer and a branchy CNN, :mod:`planner.synth`) at
  40/60/80 % of the no-recomputation peak, solvers approx / exact / chen, strategies
  time / memory, in bytes; the MILP (time only) at :data:`MILP_CASES`: where HiGHS proves its
  optimum in seconds. Elsewhere its answer is the incumbent at the time limit (or none), which
  depends on the machine's load, so its hash would too.

Usage::

    python3 bench/plan_hashes.py --write bench/plan_hashes.json      # record
    python3 bench/plan_hashes.py --check bench/plan_hashes.json      # exit 1 on any change
    python3 bench/plan_hashes.py --check FILE --only bench --match resnet50

Progress (one line per case, with its seconds) goes to stderr.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.options import AccountingOptions  # noqa: E402  (after the path)

BUDGETS = ("40%", "60%", "80%")
BENCH_GRAPHS = ("resnet50", "vgg19", "unet", "googlenet", "densenet", "synth_transformer",
                "synth_cnn", "synth_small")
#: The (graph, budget) pairs the MILP runs at: the exact DP has a chain there and HiGHS proves
#: its optimum in a second or two (module docstring).
MILP_CASES = {("synth_small", "60%"), ("synth_small", "80%"), ("vgg19", "80%")}


def _graph(name):
    from planner import cg, synth

    if name == "synth_transformer":
        return synth.build(layers=4, heads=4)
    if name == "synth_small":
        return synth.build(layers=2, heads=2)
    if name == "synth_cnn":
        return synth.build_cnn(blocks=2, stages=2, dense_layers=3, image=32, batch=2)
    if name == "resnet50":
        return cg.read(ROOT / "jobs" / "data" / "cg_resnet50.txt")
    return cg.read(ROOT / "tests" / "data" / "graphs" / f"cg_{name}.txt")


def _strip(x):
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k != "seconds"}
    if isinstance(x, Sequence) and not isinstance(x, (str, bytes)):   # report.Decisions too
        return [_strip(v) for v in x]
    return x


def plan_hash(g, **options) -> str:
    """sha256 of the plan's schedule and report (no ``seconds``), or of its one-line error."""
    from hgraph.common.errors import HGraphError
    import planner

    h = hashlib.sha256()
    try:
        p = planner.plan(g, **options)
    except HGraphError as err:
        h.update(f"error: {err} min={getattr(err, 'min_budget_bytes', None)}".encode())
        return h.hexdigest()
    h.update(p.schedule.dumps().encode())
    h.update(json.dumps(_strip(p.report), sort_keys=True).encode())
    return h.hexdigest()


#: The reference's own accounting (its scaled units), as planner.plan takes it.
REFERENCE_UNITS = AccountingOptions(units="reference")


def ref_cases():
    """(key, graph name, plan options) of every reference conformance row."""
    solver_of = {"DP2fix": "approx", "DPfix": "exact", "Chen": "chen"}
    with open(ROOT / "tests" / "data" / "reference" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        if r["solver"] not in solver_of or r["status"].startswith(("SKIPPED", "TIMEOUT")):
            continue
        key = f"ref/{r['graph']}/{r['solver']}/{r['strategy']}/{r['budget_label']}"
        yield key, r["graph"], dict(budget=int(r["budget_bytes"]), solver=solver_of[r["solver"]],
                                    strategy=r["strategy"], accounting=REFERENCE_UNITS)


def bench_cases():
    for name in BENCH_GRAPHS:
        for solver in ("approx", "exact", "chen", "milp"):
            for strategy in (("time",) if solver == "milp" else ("time", "memory")):
                for budget in BUDGETS:
                    if solver == "milp" and (name, budget) not in MILP_CASES:
                        continue
                    yield (f"bench/{name}/{solver}/{strategy}/{budget}", name,
                           dict(budget=budget, solver=solver, strategy=strategy))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="FILE", help="record the hashes in FILE (JSON)")
    mode.add_argument("--check", metavar="FILE", help="compare with FILE; exit 1 on a change")
    ap.add_argument("--only", choices=("ref", "bench"), help="one group of cases")
    ap.add_argument("--match", default="", help="only cases whose key contains this text")
    args = ap.parse_args(argv)
    cases = []
    if args.only in (None, "ref"):
        cases += list(ref_cases())
    if args.only in (None, "bench"):
        cases += list(bench_cases())
    cases = [c for c in cases if args.match in c[0]]
    graphs = {}
    got = {}
    for key, name, options in cases:
        if name not in graphs:
            graphs[name] = _graph(name)
        t0 = time.perf_counter()
        got[key] = plan_hash(graphs[name], **options)
        print(f"{key}: {got[key][:12]} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    if args.write:
        old = json.loads(Path(args.write).read_text()) if Path(args.write).exists() else {}
        old.update(got)
        Path(args.write).write_text(json.dumps(dict(sorted(old.items())), indent=1) + "\n")
        print(f"{len(got)} hashes written to {args.write}")
        return 0
    want = json.loads(Path(args.check).read_text())
    missing = [k for k in got if k not in want]
    changed = [k for k in got if k in want and want[k] != got[k]]
    for k in changed:
        print(f"CHANGED {k}")
    for k in missing:
        print(f"NOT RECORDED {k}")
    print(f"{len(got)} cases: {len(got) - len(changed) - len(missing)} same, {len(changed)} "
          f"changed, {len(missing)} not recorded")
    return 1 if changed or missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
