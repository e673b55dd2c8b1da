"""Scale benchmark: plan synthetic transformer (or CNN) graphs with the approximate DP on Ray tasks.

Writes a ``hgraph graph synth --kind KIND`` graph of ``--nodes`` activations (default 100,000;
kept and reused under ``--workdir``) and runs the real product path on it — ``hgraph submit
plan --solver approx --tasks 4 --runtime ray --progress plain`` — in a child process, so that its
wall time, its stages' seconds (the plain progress lines) and peak memory are the planner's
own. ``--ladder`` plans smaller graphs first, which shows how each size grows. Every child runs
under ``--limit`` seconds; one that does not finish is reported as such, with what it reached.
``--stages`` additionally times the pieces in-process at each size (CPU seconds and resident
MiB after each: read, activation graph, engine analyses, DP, emit, replay, report, writing),
which says *where* the time and memory go.

Run::

    python3 bench/scale_bench.py                                  # 100k nodes, 4 Ray tasks
    python3 bench/scale_bench.py --nodes 100000 --ladder 1000,2000,4000 --stages --limit 900
    python3 bench/scale_bench.py --kind cnn --nodes 300000 --ladder '' --workdir /tmp/w

Graphs above ``planner.dp.scale.EXACT_LIMIT`` activations are planned on the scale path
(segment-local sets, a few engine supersteps, the approximate DP with the reported
``dp_window``/``dp_front_cap`` options); smaller ones by the exact approximate DP.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from proctree import TreeSampler  # noqa: E402  (bench/ is not a package)


#: What a Ray engine worker's command line holds (:mod:`hgraph.runtime.ray_actors`' actor).
WORKER_MARK = "WorkerActor"


#: ``python -c`` program: the plan job with the segmented DP off (its limit above any graph),
#: the single-process walk ``--compare`` measures against in the same run.
UNSEGMENTED = ("import sys; import planner.dp.scale as scale; "
               "scale.SEGMENTED_LIMIT = 1 << 62; from jobs.cli import main; "
               "sys.exit(main(sys.argv[1:]))")


def run_child(argv, limit: float) -> dict:
    """Run ``python -m ARGV`` (``python -c ...`` when ARGV starts with ``-c``) with a
    wall-clock limit: wall seconds, exit code, and the peak memory of the child's whole
    process tree (driver + Ray's processes and workers, summed, from :mod:`proctree`:
    ``tree_pss_mib`` what the tree costs, ``tree_rss_mib`` an upper bound), of the driver
    alone (``driver_*_mib``: the plan job's process) and of the largest engine worker
    (``worker_*_mib``: a Ray actor process; 0 on the local runtime)."""
    env = dict(os.environ, RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"),
               RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(ROOT))
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    cmd = [sys.executable, *argv] if argv[0] == "-c" else [sys.executable, "-m", *argv]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    sampler = TreeSampler(proc.pid).start()
    timed_out = False
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)         # the child's own session: it and its Ray
        out, err = proc.communicate()
    wall = time.perf_counter() - t0
    sampler.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    drv_rss, drv_pss = sampler.peaks(pid=proc.pid)
    wrk_rss, wrk_pss = sampler.peaks(contains=WORKER_MARK)
    return {"rc": proc.returncode, "timed_out": timed_out, "seconds": wall,
            "driver_rss_mib": drv_rss / 2**20, "driver_pss_mib": drv_pss / 2**20,
            "worker_rss_mib": wrk_rss / 2**20, "worker_pss_mib": wrk_pss / 2**20,
            "stage_seconds": stage_seconds(err or ""), "cpu_seconds": cpu,
            "tree_pss_mib": sampler.peak_pss_bytes / 2**20,
            "tree_rss_mib": sampler.peak_rss_bytes / 2**20,
            "processes": sampler.peak_processes, "pss_reads": sampler.pss_reads,
            "top_pss": [(round(b / 2**20), name) for b, name in sampler.peak_breakdown[:6]],
            "stderr_tail": err.strip().splitlines()[-1:] if err else []}


def _dp_seconds(res: dict) -> float:
    """Seconds of the plan's DP stages (``DP (...)`` lines of ``--progress plain``)."""
    return sum(v for k, v in res["stage_seconds"].items() if k.startswith("DP"))


def stage_seconds(stderr: str) -> dict:
    """``{stage: seconds}`` from the plan job's ``--progress plain`` lines (``name: 1.23 s``);
    a stage run more than once (the DP in a budget search) adds up."""
    out = {}
    for line in stderr.splitlines():
        name, sep, rest = line.rpartition(": ")
        if sep and rest.endswith(" s") and name and not name.startswith(" "):
            try:
                out[name] = out.get(name, 0.0) + float(rest[:-2])
            except ValueError:
                continue
    return out


def stages(path: str, tasks: int, runtime: str, budget: str) -> dict:
    """Time the pieces of one plan in-process, as :func:`planner.plan` runs them on a graph of
    this size: ``{piece}_cpu`` (CPU seconds of this process: on a shared machine they say more
    than wall seconds; engine workers on Ray are not in them) and ``{piece}_mib`` (resident
    MiB after it), for reading, the activation graph, levels, lower-set statistics, the DP,
    emit, replay, lower bound, report and writing the report and the schedule."""
    import gc
    import resource

    from planner import cg, emit, report, simulate
    from planner.activation_graph import ActivationGraph
    from planner.analyses.engine import EngineOptions
    from planner.analyses.levels import levels
    from planner.analyses.local_stats import local_stats
    from planner.api import Analysis, Asked, Plan, lower_bound_bytes
    from planner.budget import parse_budget
    from planner.dp import scale
    from planner.dp.solve import solve_family
    from planner.dp_families import DPGraph, approx_family
    from planner.solver import ModelStats

    out = {}
    page = os.sysconf("SC_PAGE_SIZE")

    class piece:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            self.t = time.process_time()

        def __exit__(self, *exc):
            out[f"{self.name}_cpu"] = time.process_time() - self.t
            with open("/proc/self/statm") as fh:
                out[f"{self.name}_mib"] = int(fh.read().split()[1]) * page / 2**20

    with piece("read"):
        g = cg.read(path)
    with piece("activation_graph"):
        ag = ActivationGraph.from_cg(g)
        dg = DPGraph(m=ag.bytes, t=ag.t, src=ag.src, dst=ag.dst)
    opts = EngineOptions(tasks=tasks, runtime=runtime)
    with piece("levels"):
        lv, steps = levels(dg, opts=opts, with_supersteps=True)
    b = parse_budget(budget, baseline=int(ag.bytes.sum()))
    big = ag.n > scale.EXACT_LIMIT
    window, cap = scale.plan_options(ag.n)
    with piece("lower_set_stats"):
        st = local_stats(dg, opts=opts, level=lv)
        fam = approx_family(dg, stats=st, dense=not big)
    with piece("dp"):
        r = solve_family(fam, dg, b, window=window, front_cap=cap)
    out["dp_status"], out["supersteps"] = r.status, steps + st.supersteps
    del fam, st
    gc.collect()
    if r.status == "OK":
        with piece("emit"):
            s = emit.emit_groups(g, r.groups, ag)
        with piece("replay"):
            sim = simulate.replay(g, s)
        with piece("lower_bound"):
            lb = lower_bound_bytes(g)
        with piece("report"):
            a = Analysis(g, ag, lv, int(lv.max()) + 1, 0, int(ag.bytes.sum()),
                         "activation_sum", None, None)
            rep = Plan.from_replay(a, (r.groups, ModelStats.of_dp(r), s, sim),
                                   Asked("approx", "time", "bytes", budget, b),
                                   engine={}, seconds=0.0).report
        with tempfile.TemporaryDirectory() as tmp, piece("write"):
            report.write_json(rep, os.path.join(tmp, "report.json"))
            s.write(os.path.join(tmp, "schedule.txt"))
        out["recompute"], out["peak"] = sim.recompute_cost, sim.peak_bytes
    out["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--kind", choices=["transformer", "cnn"], default="transformer",
                    help="hgraph graph synth --kind (default transformer)")
    ap.add_argument("--ladder", default="1000,2000", help="smaller sizes planned first ('' none)")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--runtime", choices=["local", "ray"], default="ray")
    ap.add_argument("--budget", default="50%")
    ap.add_argument("--limit", type=float, default=600.0, help="seconds per plan (default 600)")
    ap.add_argument("--stages", action="store_true", help="also time the pieces in-process (CPU s, MiB) at every size")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--compare", action="store_true",
                    help="also plan each graph with the segmented DP off (the single-process "
                         "walk) and print the recompute gap, wall and memory of both")
    args = ap.parse_args(argv)
    from planner import synth

    work = Path(args.workdir or tempfile.mkdtemp(prefix="hgraph-scale-"))
    sizes = [int(x) for x in args.ladder.split(",") if x.strip()] + [args.nodes]
    print(f"{'nodes':>8} {'layers' if args.kind == 'transformer' else 'blocks':>6} {'status':>10} {'seconds':>9} {'tree PSS MiB':>12} "
          f"{'tree RSS MiB':>12}  detail")
    rows = []
    for n in sizes:
        layers = (synth.layers_for_nodes(n) if args.kind == "transformer" else
                  synth.cnn_blocks_for_nodes(n))
        path = work / f"cg_{args.kind}_{n}.txt"
        t = time.perf_counter()
        if not path.exists():          # a --workdir kept from an earlier run is reused
            subprocess.run([sys.executable, "-m", "jobs", "graph", "synth", "--kind", args.kind,
                            "--nodes", str(n), "--out", str(path)], check=True,
                           capture_output=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        synth_s = time.perf_counter() - t
        rep = work / f"report_{n}.json"
        plan_args = ["submit", "plan", "--graph", str(path), "--solver", "approx",
                     "--tasks", str(args.tasks), "--runtime", args.runtime, "--budget",
                     args.budget, "--progress", "plain"]
        res = run_child(["jobs", *plan_args, "--report", str(rep)], args.limit)
        if res["timed_out"]:
            status, detail = "TIMEOUT", f"killed after {args.limit:.0f} s"
        elif res["rc"] == 0:
            r = json.loads(rep.read_text())
            status = "OK"
            dp_opts = ("exact DP" if r.get("dp_exact", True) else
                       f"dp_window {r['dp_window']}, dp_front_cap {r['dp_front_cap']}")
            if r.get("dp_segmented"):
                sg = r["dp_segmented"]
                dp_opts += (f", segmented: {sg['segments']} segments ({sg['mode']}, "
                            f"{sg['handed_over']} walked seeded)")
            detail = (f"{r['nodes']:,} activations, depth {r['depth']:,}, "
                      f"{r['engine']['supersteps']} supersteps, budget {r['budget_bytes']:,} B, "
                      f"peak {r['peak_bytes']:,} B = {r['peak_bytes'] / r['budget_bytes']:.4f} of "
                      f"budget ({'fits' if r['within_budget'] else 'OVER'}), recompute "
                      f"{r['recompute_cost']:,} = {100 * r['overhead']:.1f}% of a forward pass "
                      f"(model {r['model_recompute_cost']:,}), {r['blocks']:,} blocks, {dp_opts}")
        else:
            status, detail = f"rc={res['rc']}", " ".join(res["stderr_tail"])
        detail += (f"; CPU {res['cpu_seconds']:.1f} s (the child and the descendants it reaped)"
                   f"; synth {synth_s:.1f} s")
        if res["stage_seconds"]:
            detail += "; stages: " + ", ".join(f"{k} {v:.1f} s"
                                               for k, v in res["stage_seconds"].items())
        row = {"nodes": n, "layers": layers, "status": status, **res}
        if args.stages:
            row["stages"] = stages(str(path), args.tasks, args.runtime, args.budget)
            detail += "  " + " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                                      for k, v in row["stages"].items())
        rows.append(row)
        detail += (f"; driver peak {res['driver_rss_mib']:.0f} MiB RSS / "
                   f"{res['driver_pss_mib']:.0f} PSS, largest worker {res['worker_rss_mib']:.0f}"
                   f" RSS / {res['worker_pss_mib']:.0f} PSS")
        print(f"{n:>8,} {layers:>6} {status:>10} {res['seconds']:>9.1f} {res['tree_pss_mib']:>12.0f} "
              f"{res['tree_rss_mib']:>12.0f}  {detail}", flush=True)
        if args.compare and status == "OK":
            one_rep = work / f"report_{n}_single.json"
            one = run_child(["-c", UNSEGMENTED, *plan_args, "--report", str(one_rep)],
                            args.limit)
            row["single"] = one
            if one["rc"] == 0:
                q = json.loads(one_rep.read_text())
                gap = 100 * (r["recompute_cost"] - q["recompute_cost"]) / max(1, q["recompute_cost"])
                print(f"          vs the single-process walk: recompute {r['recompute_cost']:,} vs "
                      f"{q['recompute_cost']:,} ({gap:+.2f} %), wall {res['seconds']:.1f} vs "
                      f"{one['seconds']:.1f} s, DP {_dp_seconds(res):.1f} vs "
                      f"{_dp_seconds(one):.1f} s, driver peak {res['driver_rss_mib']:.0f} vs "
                      f"{one['driver_rss_mib']:.0f} MiB RSS, largest worker "
                      f"{res['worker_rss_mib']:.0f} vs {one['worker_rss_mib']:.0f} MiB RSS, tree "
                      f"PSS {res['tree_pss_mib']:.0f} vs {one['tree_pss_mib']:.0f} MiB"
                      f" (segmented: {'yes' if r.get('dp_segmented') else 'no'} vs "
                      f"{'yes' if q.get('dp_segmented') else 'no'})", flush=True)
            else:
                print(f"          single-process walk: rc={one['rc']} "
                      f"{' '.join(one['stderr_tail'])}", flush=True)
        print(f"          largest at the peak (PSS MiB, process; {res['pss_reads']} PSS readings): "
              + "; ".join(f"{mib} {name}" for mib, name in res["top_pss"]), flush=True)
    print("(tree PSS / RSS: peak of the summed memory of the planning process and every process it "
          "started, Ray's included, from /proc: RSS every 0.25 s, PSS each time the summed RSS "
          "grew by 1/32 — reading PSS stalls the sampled process: bench/proctree.py)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
