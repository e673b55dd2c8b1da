"""Small plans end to end: ``hgraph submit plan --runtime local`` wall time beside the reference's.

For every reference graph under ``--max-nodes`` activations (tests/data) and every budget label
asked for, this runs the real command in a child process —
``python3 -m jobs submit plan --graph G --runtime local --budget B --units reference
--solver approx --out S --progress off`` with B the row's ``budget_bytes`` — and prints its wall
seconds (best of ``--repeat``) and CPU seconds (user + sys of the child, from ``wait4``: what a
loaded machine does not inflate) beside the reference's ``wall_s`` for the same graph, solver
(approx ↔ DP2fix, exact ↔ DPfix), strategy and budget in results.csv. The floors are printed
first: a bare interpreter and ``import numpy``.

The ``schedule`` column is the start of the SHA-256 of the schedule the command wrote (``--out``):
run the bench on two trees (``--labels all``, each ``--strategy``) and compare the columns to
check that a change kept every plan.

``--units bytes`` runs the command as a user does by default instead: exact bytes, ``--budget``
the label's percentage of the simulated no-recomputation peak (``20%act`` → ``20%``; labels
without one are skipped), where a plan is fitted to the byte (two or three DP solves a little
below the budget; ``planner.api``).

``--imports`` then runs the first command once under ``python3 -X importtime`` and prints the
modules it imports by cumulative time, each with the chain of modules that imported it, and
which of the heavy optional packages (ray, matplotlib, rich, torch, scipy, cupy, ...) were
loaded at all: what to make lazy, and where.

``--ratio`` is the small-plan acceptance check (issue 39): the README's plan of googlenet,
``hgraph submit plan --graph cg_googlenet.txt --units reference --budget 60% --out S``, and
``python3 -c "import numpy"`` run alternately (``--ratio-rounds`` pairs, in one process, so
both see the same load), their best wall and CPU seconds and the ratio of the plan's to
numpy's, against :data:`RATIO_LIMIT`; exit status 1 above it. Wall is what a user waits for;
CPU (the children's user + sys) is what a loaded machine does not inflate: both are printed.

    python3 bench/small_plan_bench.py --ratio                # the acceptance check alone
    python3 bench/small_plan_bench.py                        # 50%act, every graph < 1,000 nodes
    python3 bench/small_plan_bench.py --labels 20%act,50%act,unlimited --repeat 3 --imports
    python3 bench/small_plan_bench.py --labels all --units bytes
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import refdata  # noqa: E402  (bench/ is not a package)
REF_SOLVER = {"approx": "DP2fix", "exact": "DPfix"}
HEAVY = ("ray", "matplotlib", "rich", "torch", "scipy", "cupy", "pandas", "grpc", "requests",
         "certifi", "urllib3", "yaml", "psutil", "numpy.ma", "numpy.linalg", "jsonschema")


#: Byte-code cache of the children (None: as the environment says). An installed package has
#: its .pyc files; a checkout run with PYTHONDONTWRITEBYTECODE=1 recompiles every module on
#: every start, which is not the product's cost.
PYC_PREFIX = None


def _env(blas=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_AUTH_MODE="disabled",
               RAY_USAGE_STATS_ENABLED="0")
    if blas is not None:
        env["OPENBLAS_NUM_THREADS"] = blas
    if PYC_PREFIX is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = PYC_PREFIX
    return env


def timed(cmd, blas=None) -> tuple[float, float, int, str]:
    """(wall s, child CPU s, exit code, stderr tail) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(blas),
                            cwd=str(ROOT))
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode, err.decode()[-300:]


def best(cmd, repeat: int, blas=None):
    runs = [timed(cmd, blas) for _ in range(repeat)]
    return min(r[0] for r in runs), min(r[1] for r in runs), runs[-1][2], runs[-1][3]


#: The small plan may take at most this many times ``python3 -c "import numpy"`` (issue 39).
RATIO_LIMIT = 2.5
#: The acceptance check's plan: the README's googlenet example in the reference's units.
RATIO_ARGS = ("--units", "reference", "--budget", "60%", "--progress", "off")


def ratio_check(py: str, graph: Path, out: Path, rounds: int) -> float:
    """Best wall and CPU seconds of the plan and of ``import numpy``, run alternately
    ``rounds`` times each; prints them and returns the plan's best wall over numpy's."""
    plan = [py, "-m", "jobs", "submit", "plan", "--graph", str(graph), *RATIO_ARGS,
            "--out", str(out)]
    numpy = [py, "-c", "import numpy"]
    got = {"plan": [], "numpy": []}
    for _ in range(rounds):
        for name, cmd in (("plan", plan), ("numpy", numpy)):
            wall, cpu, rc, err = timed(cmd)
            if rc != 0:
                raise SystemExit(f"{' '.join(cmd)}: exit {rc}: {err.strip()}")
            got[name].append((wall, cpu))
    wall = {k: min(w for w, _ in v) for k, v in got.items()}
    cpu = {k: min(c for _, c in v) for k, v in got.items()}
    ratio = wall["plan"] / wall["numpy"]
    print(f"ratio check ({rounds} interleaved rounds, best of each; load {_load()}):\n"
          f"  plan  {' '.join(plan[3:])}\n"
          f"        {wall['plan']:.3f} s wall, {cpu['plan']:.3f} s CPU\n"
          f"  numpy python3 -c 'import numpy'\n"
          f"        {wall['numpy']:.3f} s wall, {cpu['numpy']:.3f} s CPU\n"
          f"  plan / numpy: {ratio:.2f}x wall, {cpu['plan'] / cpu['numpy']:.2f}x CPU "
          f"(limit {RATIO_LIMIT}x wall: {'ok' if ratio <= RATIO_LIMIT else 'ABOVE'})")
    return ratio


def _load() -> str:
    """The 1-minute load average and the core count (what the figures were measured under)."""
    return f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"


def import_tree(text: str):
    """Parse ``-X importtime`` output: [(module, self us, cumulative us, parent chain)]."""
    rows = []
    for line in text.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3 or "self [us]" in line:
            continue
        name = parts[2].rstrip()
        level = (len(name) - len(name.lstrip(" ")) - 1) // 2
        rows.append([name.strip(), int(parts[0].split(":")[1]), int(parts[1]), level])
    # post-order: a module's parent is the next line one level up
    out = []
    for i, (name, self_us, cum_us, level) in enumerate(rows):
        chain, want = [], level - 1
        for other in rows[i + 1:]:
            if want < 0:
                break
            if other[3] == want:
                chain.append(other[0])
                want -= 1
        out.append((name, self_us, cum_us, chain))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", default="", help="comma list (default: all under --max-nodes)")
    ap.add_argument("--max-nodes", type=int, default=1000)
    ap.add_argument("--labels", default="50%act",
                    help="budget labels of results.csv, comma-separated ('all': every one)")
    ap.add_argument("--solver", choices=sorted(REF_SOLVER), default="approx")
    ap.add_argument("--strategy", choices=["time", "memory"], default="time")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row, best kept (default 3)")
    ap.add_argument("--units", choices=["reference", "bytes"], default="reference",
                    help="reference (default): the row's budget_bytes in the reference's units; "
                         "bytes: the command's default units, budget the label's percentage "
                         "(20%%act -> --budget 20%%; other labels skipped), the plan fitted to "
                         "the byte; ref_s is then the reference's time at that label")
    ap.add_argument("--progress", choices=["off", "auto"], default="off",
                    help="the command's --progress (auto: as a user runs it, summary table "
                         "included; default off)")
    ap.add_argument("--ratio", action="store_true",
                    help=f"only the acceptance check: googlenet {' '.join(RATIO_ARGS[:4])} "
                         f"against python3 -c 'import numpy', interleaved (exit 1 above "
                         f"{RATIO_LIMIT}x)")
    ap.add_argument("--ratio-rounds", type=int, default=7,
                    help="runs of each command in the ratio check (default 7)")
    ap.add_argument("--imports", action="store_true", help="also analyse -X importtime")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--no-pyc", action="store_true",
                    help="keep the environment's PYTHONDONTWRITEBYTECODE (default: cache .pyc "
                         "files under a temporary PYTHONPYCACHEPREFIX and warm it first)")
    args = ap.parse_args(argv)
    rows = list(csv.DictReader(open(refdata.RESULTS)))
    ref = {(r["graph"], r["solver"], r["strategy"], r["budget_label"]): r for r in rows}
    names = args.graphs.split(",") if args.graphs else refdata.names()
    py = sys.executable
    work = Path(tempfile.mkdtemp(prefix="hgraph-small-"))
    global PYC_PREFIX
    if not args.no_pyc:
        PYC_PREFIX = str(work / "pycache")
        timed([py, "-m", "jobs", "submit", "plan", "--help"])      # warm the .pyc cache
    print(f"byte-code cache: {PYC_PREFIX or 'as the environment says'} "
          f"(PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r})")
    if args.ratio:
        ratio = ratio_check(py, refdata.graph("googlenet"), work / "s.txt",
                            args.ratio_rounds)
        return 0 if ratio <= RATIO_LIMIT else 1
    w, c, _, _ = best([py, "-c", "pass"], args.repeat)
    print(f"floor: bare python3 {w:.3f} s wall, {c:.3f} s CPU")
    for blas in ("1", None):          # the command's default (jobs.cli), then NumPy's own
        w, c, _, _ = best([py, "-c", "import numpy"], args.repeat, blas=blas)
        print(f"floor: python3 -c 'import numpy' {w:.3f} s wall, {c:.3f} s CPU "
              f"(OPENBLAS_NUM_THREADS={blas or os.environ.get('OPENBLAS_NUM_THREADS', 'unset')})")
    print(f"{'graph':10} {'nodes':>5} {'budget':9} {'wall_s':>7} {'cpu_s':>7} {'ref_s':>7} "
          f"{'wall/ref':>8}  {'<= 0.5 s':8} {'schedule':12}")
    first_cmd = None
    worst = 0.0
    for name in names:
        path = refdata.graph(name)
        nodes = int(path.open().readline().split()[1]) // 2
        if nodes >= args.max_nodes:
            continue
        labels = args.labels.split(",") if args.labels != "all" else [
            r["budget_label"] for r in rows if r["graph"] == name
            and r["solver"] == REF_SOLVER[args.solver] and r["strategy"] == args.strategy]
        for label in labels:
            r = ref.get((name, REF_SOLVER[args.solver], args.strategy, label))
            if r is None:
                continue
            budget = r["budget_bytes"]
            if args.units == "bytes":            # the label's share of the simulated baseline
                if not label.endswith("%act"):
                    continue
                budget = label[:-3]
            cmd = [py, "-m", "jobs", "submit", "plan", "--graph", str(path), "--runtime",
                   "local", "--budget", budget, "--units", args.units, "--solver",
                   args.solver, "--strategy", args.strategy, "--out", str(work / "s.txt"),
                   "--progress", args.progress]
            first_cmd = first_cmd or cmd
            (work / "s.txt").unlink(missing_ok=True)
            wall, cpu, rc, err = best(cmd, args.repeat)
            sched = (hashlib.sha256((work / "s.txt").read_bytes()).hexdigest()[:12]
                     if (work / "s.txt").exists() else "-")
            ref_s = float(r["wall_s"]) if r["wall_s"] else float("nan")
            status = "yes" if wall <= 0.5 else "NO"
            if rc not in (0, 3):           # 3: infeasible, as the reference's IMPOSSIBLE rows
                status = f"rc={rc} {err.strip().splitlines()[-1] if err.strip() else ''}"
            worst = max(worst, wall)
            print(f"{name:10} {nodes:5d} {label:9} {wall:7.3f} {cpu:7.3f} {r['wall_s'] or '-':>7} "
                  f"{wall / ref_s if ref_s == ref_s and ref_s > 0 else float('nan'):8.1f}  "
                  f"{status:8} {sched}", flush=True)
    print(f"slowest: {worst:.3f} s wall (best of {args.repeat})")
    if args.imports and first_cmd:
        out = subprocess.run([py, "-X", "importtime", *first_cmd[1:]], capture_output=True,
                             text=True, env=_env(), cwd=str(ROOT))
        tree = import_tree(out.stderr)
        total = sum(s for _, s, _, _ in tree)
        print(f"\n-X importtime of {' '.join(first_cmd[3:6])} ...: {len(tree)} modules, "
              f"{total / 1e6:.3f} s of import (self times summed)")
        print("top modules by cumulative import time (chain: who imported it):")
        for name, _, cum, chain in sorted(tree, key=lambda x: -x[2])[:args.top]:
            print(f"  {cum / 1e6:7.3f} s  {name:40} <- {' <- '.join(chain) or '(top)'}")
        print("heavy optional packages:")
        for pkg in HEAVY:
            hit = [row for row in tree if row[0] == pkg]
            if hit:
                name, _, cum, chain = hit[0]
                print(f"  {pkg:14} imported, {cum / 1e6:.3f} s, via {' <- '.join(chain) or '(top)'}")
            else:
                print(f"  {pkg:14} not imported")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
