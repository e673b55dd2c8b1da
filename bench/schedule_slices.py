"""The schedule stage whole and in slices, side by side in one process: memory and CPU seconds.

Why: `bench/stage_memory.py` gives the driver's resident memory per stage of a real plan job;
this isolates the schedule stage (emit, hoist, replay) of one plan's chain and runs both ways
of making it in the same process on the same chain — the whole emission
(``planner.emit.emit_groups`` + ``planner.simulate.replay``, what ``plan()`` runs below
``SEGMENTED_LIMIT``) and the sliced one (``planner.sliced.emit_and_replay``) — so the ratio is
free of the machine's load and of Ray. It checks that both schedules hash the same and that
the replays' figures are equal.

Meters: ``--meter tracemalloc`` (each way's traced peak above what was allocated before it:
Python's own allocations, numpy's included), ``--meter cpu`` (each way's CPU seconds,
``time.process_time``, no tracing; ``--repeat`` runs, alternating).

``--against DIR``: instead, the sliced stage of this tree against the sliced stage of the
tree at ``DIR`` (an older checkout, e.g. ``git worktree add /tmp/old HEAD~5``), both in this
process, alternating: ``DIR``'s ``planner`` is loaded as ``planner_old`` (its own imports of
``planner`` read as ``planner_old``), so the ratio is free of the machine's load between runs
as the whole/sliced one is. The schedules must hash the same and the replays agree.

Run (the chain from a plan's report, ``decisions[i].block`` is activation i's block + 1)::

    python3 bench/schedule_slices.py --graph W/cg_transformer_100000.txt \\
        --report W/r.json --meter tracemalloc
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def chain_of_report(path) -> np.ndarray:
    """The block of every activation (0-based) from a plan's JSON report."""
    with open(path) as fh:
        rows = json.load(fh)["decisions"]
    return np.fromiter((r["block"] for r in rows), np.int64, len(rows)) - 1


def whole(g, groups, ag):
    """The whole emission and its replay, as ``plan()`` makes them below the limit."""
    from planner import simulate
    from planner.emit import emit_groups

    s = emit_groups(g, groups, ag)
    return s, simulate.replay(g, s)


def sliced(g, groups, ag):
    from planner import sliced as sl

    return sl.emit_and_replay(g, groups, ag)


def older(root):
    """The sliced stage of the tree at ``root``: its ``planner`` imported as ``planner_old``
    (see the module docstring)."""
    import importlib.abc
    import importlib.util
    import re

    base = Path(root).resolve() / "planner"

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.SourceLoader):
        def find_spec(self, name, path=None, target=None):
            if name != "planner_old" and not name.startswith("planner_old."):
                return None
            rel = Path(*name.split(".")[1:])
            pkg = (base / rel / "__init__.py").is_file()
            file = base / rel / "__init__.py" if pkg else (base / rel).with_suffix(".py")
            if not file.is_file():
                return None
            return importlib.util.spec_from_file_location(
                name, file, loader=self, submodule_search_locations=[str(file.parent)] if pkg
                else None)

        def get_filename(self, fullname):
            rel = Path(*fullname.split(".")[1:])
            pkg = base / rel / "__init__.py"
            return str(pkg if pkg.is_file() else (base / rel).with_suffix(".py"))

        def get_data(self, path):
            src = Path(path).read_text(encoding="utf-8")
            return re.sub(r"\b(from|import) planner\b", r"\1 planner_old", src).encode()

    sys.meta_path.insert(0, Finder())
    import importlib

    old = importlib.import_module("planner_old.sliced")
    print(f"old: {old.__file__}")
    return lambda g, groups, ag: old.emit_and_replay(g, groups, ag)


def digest(schedule) -> str:
    h = hashlib.sha256()
    for chunk in schedule.chunks():
        h.update(chunk.encode())
    return h.hexdigest()[:16]


def run(way, g, groups, ag, meter: str) -> dict:
    """One way's figures: its meter's reading, the schedule's hash and the replay's."""
    gc.collect()
    if meter == "tracemalloc":
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
    t = time.process_time()
    s, sim = way(g, groups, ag)
    out = {"cpu_s": time.process_time() - t}
    if meter == "tracemalloc":
        out["peak_mib"] = (tracemalloc.get_traced_memory()[1] - base) / 2**20
        out["kept_mib"] = (tracemalloc.get_traced_memory()[0] - base) / 2**20
        tracemalloc.stop()
    out.update(hash=digest(s), ops=len(s), peak_bytes=sim.peak_bytes,
               recompute_cost=sim.recompute_cost, violations=len(sim.violations))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--report", required=True, help="a plan's JSON report (its chain)")
    ap.add_argument("--meter", choices=["tracemalloc", "cpu"], default="tracemalloc")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--against", metavar="DIR",
                    help="the sliced stage against that of an older tree (see above)")
    args = ap.parse_args(argv)
    from planner import cg
    from planner.activation_graph import ActivationGraph

    g = cg.read(args.graph)
    ag = ActivationGraph.from_cg(g)
    groups = chain_of_report(args.report)
    print(f"{args.graph}: {ag.n:,} activations, {int(groups.max()) + 1:,} blocks")
    ways = (("whole", whole), ("sliced", sliced)) if args.against is None else \
        (("old", older(args.against)), ("sliced", sliced))
    (a, _), (b, _) = ways
    rows = {name: [] for name, _ in ways}
    for _ in range(args.repeat):
        for name, way in ways:
            rows[name].append(run(way, g, groups, ag, args.meter))
            print(name, rows[name][-1], flush=True)
    same = {k: rows[a][0][k] == rows[b][0][k]
            for k in ("hash", "ops", "peak_bytes", "recompute_cost", "violations")}
    print("same:", same)
    key = "peak_mib" if args.meter == "tracemalloc" else "cpu_s"
    w = np.median([r[key] for r in rows[a]])
    s = np.median([r[key] for r in rows[b]])
    print(f"{key}: {a} {w:.2f}, sliced {s:.2f}, sliced/{a} {s / w:.3f}; "
          f"per activation {2**20 * w / ag.n if key == 'peak_mib' else 1e6 * w / ag.n:.0f} -> "
          f"{2**20 * s / ag.n if key == 'peak_mib' else 1e6 * s / ag.n:.0f} "
          f"{'bytes' if key == 'peak_mib' else 'µs'}")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
