"""The approximate DP's passes on the small graphs: this tree's loop against another revision's.

For every shared graph under ``--max-nodes`` activations and every time-centric budget label
of results.csv (reference units, as ``hgraph submit plan --units reference`` runs them), one
solve (:func:`planner.dp.solve.solve_family`) records the passes it makes — the calls to
:func:`planner.dp.loop.run_dp` with their objective bounds (one under 512 sets, the deepening's
one to three from 512). Then those same calls run with this tree's ``run_dp`` and with the
``run_dp`` of ``planner/dp/loop.py`` at git revision ``--against`` (loaded beside this tree's,
on the same family), alternately, ``--repeat`` times each; a side whose ``run_dp`` takes
``resume`` gets the pass before it, as the solve passes it. Printed per row: the passes, the
best seconds of each side (in ``run_dp`` only) and their ratio, and whether every pass's
fronts are identical entry for entry (saved, ckpt, predecessor, state, pointers: a digest of
each taken right after the pass); the bench exits 1 if any differ.

The family is built once per graph and scaling ratio and kept, as one command builds it once
(the other revision's loop builds its own tables on the family's cache on its first pass;
those first, untimed runs are warm-ups).

    python3 bench/table_loop_bench.py                       # against cef322c (before the table loop)
    python3 bench/table_loop_bench.py --graphs densenet --against HEAD~3 --repeat 7
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.util
import inspect
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT))

from planner import cg                                     # noqa: E402
from planner.dp import loop, solve                        # noqa: E402
from planner.solver import make_solver                         # noqa: E402
from planner.units import scale_units                     # noqa: E402


def load_loop(rev: str):
    """``planner/dp/loop.py`` at ``rev``, as a module beside this tree's."""
    text = subprocess.run(["git", "show", f"{rev}:planner/dp/loop.py"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="hgraph-loop-")) / "loop_at_rev.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("loop_at_rev", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def recorded_passes(fam, dg, budget: int) -> list[dict]:
    """The options of every ``run_dp`` call one time-centric solve makes (``resume`` left
    out: :func:`passes` passes it on where a side takes it)."""
    calls, real = [], solve.run_dp

    def spy(*args, **kw):
        calls.append({k: v for k, v in kw.items() if k != "resume"})
        return real(*args, **kw)

    solve.run_dp = spy
    try:
        solve.solve_family(fam, dg, budget, strategy="time")
    finally:
        solve.run_dp = real
    return calls


def passes(fn, fam, dg, budget: int, calls: list[dict]):
    """(seconds in ``fn``, a digest of each pass's fronts taken right after it): the passes in
    order, each after the first resuming the one before where ``fn`` takes ``resume`` (as
    :func:`planner.dp.solve.objective_bounded` does; a resumed pass reuses its arrays)."""
    takes = "resume" in inspect.signature(fn).parameters
    seconds, digests, prev = 0.0, [], None
    for kw in calls:
        if takes and prev is not None:
            kw = dict(kw, resume=prev)
        t0 = time.perf_counter()
        fronts = fn(fam, dg.t, dg.m, budget, **kw)
        seconds += time.perf_counter() - t0
        digests.append(digest(fronts))
        prev = (fronts, kw.get("max_recompute"))
    return seconds, digests


def digest(f) -> str:
    h = hashlib.sha256(f.ptr.tobytes())
    for k in ("s", "c", "pred", "state"):
        h.update(getattr(f, k)[:f.size].tobytes())
    return h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", default="", help="comma list (default: all under --max-nodes)")
    ap.add_argument("--max-nodes", type=int, default=1000)
    ap.add_argument("--against", default="cef322c", help="git revision to compare with")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    other = load_loop(args.against)
    rows = [r for r in csv.DictReader(open(SHARED / "reference" / "results.csv"))
            if r["solver"] == "DP2fix" and r["strategy"] == "time"]
    names = args.graphs.split(",") if args.graphs else sorted(
        p.stem[3:] for p in (SHARED / "graphs").glob("cg_*.txt"))
    print(f"this tree's run_dp against {args.against}'s, best of {args.repeat}, alternating")
    print(f"{'graph':10} {'states':>6} {'budget':9} {'passes':>6} {'this_s':>8} "
          f"{'other_s':>8} {'other/this':>10}  fronts")
    bad = 0
    total = [0.0, 0.0]
    for name in names:
        path = SHARED / "graphs" / f"cg_{name}.txt"
        g = cg.read(path)
        s = make_solver(g, "approx", "time", "reference")
        if s.ag.n >= args.max_nodes:
            continue
        for r in rows:
            if r["graph"] != name:
                continue
            u = scale_units(int(r["budget_bytes"]), s.act_sum, "reference")
            dg, fam = s.family(u.ratio)
            calls = recorded_passes(fam, dg, u.budget)
            best = [float("inf"), float("inf")]
            same = True
            for rep in range(args.repeat + 1):      # the first round warms both up
                mine = None
                for side, fn in enumerate((loop.run_dp, other.run_dp)):
                    sec, dig = passes(fn, fam, dg, u.budget, calls)
                    if rep:
                        best[side] = min(best[side], sec)
                    same &= mine is None or dig == mine
                    mine = dig
            bad += not same
            total[0] += best[0]
            total[1] += best[1]
            print(f"{name:10} {fam.num_sets:6d} {r['budget_label']:9} {len(calls):6d} "
                  f"{best[0]:8.4f} {best[1]:8.4f} {best[1] / best[0]:10.2f}  "
                  f"{'identical' if same else 'DIFFERENT'}", flush=True)
    print(f"all rows: this {total[0]:.3f} s, {args.against} {total[1]:.3f} s, "
          f"ratio {total[1] / max(total[0], 1e-9):.2f}; rows with different fronts: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
