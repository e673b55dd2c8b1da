"""Where the planning process's memory goes: its resident memory at every stage of a plan job.

Why: `bench/scale_bench.py` meters the whole process tree and its peaks (driver, largest
worker); it cannot say *which stage* of the driver holds the memory. This runs the real plan
job (`hgraph submit plan ...`, the same arguments) in this process with every stage of
:class:`hgraph.common.progress.StageProgress` wrapped: at each stage's start and end it prints
the driver's resident MiB (/proc/self/statm) and the stage's peak (sampled every 50 ms by a
thread), so the figures are the process's own, by the kernel, not by the planner's counting.
Use `--progress plain` so the stages are opened; Ray's workers are other processes and not in
these figures (scale_bench.py meters them).

Run::

    python3 bench/stage_memory.py submit plan --graph W/cg_transformer_300000.txt \\
        --solver approx --tasks 4 --runtime ray --budget 50% --progress plain \\
        --report W/r.json --out W/s.txt 2>&1 | grep MEM

``--whole-schedule`` (this script's own flag, taken out of the job's arguments) makes the
schedule stage whole at every size, as before :mod:`planner.sliced`: the baseline for the
sliced stage in the same tree. ``--whole-read`` (likewise) reads the graph whole on the
driver at every size, as before :mod:`planner.cg_shards`, and the engine analyses then run
on graphs the driver builds: the baseline for the sharded read in the same tree.

Each line: ``MEM <stage> start <MiB>`` / ``MEM <stage> end <MiB> peak <MiB> private <MiB>``
(nested stages, such as starting Ray inside the first engine stage, print their own pair;
``private``: resident less shared pages at the stage's end, see :func:`private_mib`). ``--traced`` (this
script's own) also prints ``TRACED <stage> end <MiB> peak <MiB>`` at each stage's end: what
Python has allocated and alive then, and tracemalloc's peak during the stage. ``--top N``
(this script's own; implies ``--traced``) also prints, at each stage's end, the N source lines
whose allocations are alive then, largest first (``TOP <stage> <MiB> <count> <file>:<line>``):
which of the driver's objects are the n-length ones, named by the line that made them.
``--calls mod:name,...`` (this script's own; ``mod:Class.method`` for a class's) meters each
named function as a stage of its own (patched where its callers look it up), to split a
stage's peak by the calls inside it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hgraph.common import progress  # noqa: E402

_PAGE = 4096
_peak = [0.0]


def rss_mib() -> float:
    """This process's resident MiB now."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * _PAGE / 2**20


def private_mib() -> float:
    """This process's resident MiB less its shared pages (the kernel's count of resident
    file-backed and shared pages: the libraries, and Ray's object store where the driver
    wrote or read an object)."""
    with open("/proc/self/statm") as fh:
        fields = fh.read().split()
    return (int(fields[1]) - int(fields[2])) * _PAGE / 2**20


def _sample(period: float = 0.05) -> None:
    while True:
        _peak[0] = max(_peak[0], rss_mib())
        time.sleep(period)


@contextlib.contextmanager
def _metering(name):
    """One stage's MEM (and TRACED, TOP) lines around the ``with`` body."""
    outer = _peak[0]
    _peak[0] = now = rss_mib()
    traced_outer = _traced_start()
    print(f"MEM {name} start {now:.0f}", file=sys.stderr, flush=True)
    try:
        yield
    finally:
        peak = max(_peak[0], rss_mib())
        print(f"MEM {name} end {rss_mib():.0f} peak {peak:.0f} private "
              f"{private_mib():.0f}", file=sys.stderr, flush=True)
        _peak[0] = max(outer, peak)
        _traced_end(name, traced_outer)


def _wrap(stage):
    @contextlib.contextmanager
    def metered(self, name, **kw):
        with _metering(name), stage(self, name, **kw):
            yield
    return metered


def _wrap_calls(spec: str) -> None:
    """``--calls mod:name,...``: each function ``name`` of module ``mod`` (where its callers
    find it: a name imported into another module is patched there) metered as a stage of its
    own, so a stage's peak can be split by the calls inside it."""
    import functools
    import importlib

    for item in filter(None, spec.split(",")):
        mod_name, _, path = item.partition(":")
        owner = importlib.import_module(mod_name)
        *outer, attr = path.split(".")          # "Class.method": a class's method
        for name in outer:
            owner = getattr(owner, name)
        fn = getattr(owner, attr)               # a classmethod comes bound

        def metered(*a, _fn=fn, _name=f"call {path}", **kw):
            with _metering(_name):
                return _fn(*a, **kw)
        wrapped = functools.wraps(fn)(metered)
        setattr(owner, attr, staticmethod(wrapped) if isinstance(owner, type) else wrapped)


_traced_peak = [0]


def _traced_start() -> int:
    """At a stage's start (with ``--traced``): the enclosing stage's traced peak so far,
    and tracemalloc's peak reset for this stage."""
    if not tracemalloc.is_tracing():
        return 0
    outer = max(_traced_peak[0], tracemalloc.get_traced_memory()[1])
    _traced_peak[0] = 0
    tracemalloc.reset_peak()
    return outer


def _traced_end(name: str, outer: int) -> None:
    """At a stage's end: its live and peak traced MiB (nested stages' peaks included)."""
    if not tracemalloc.is_tracing():
        return
    now, top = tracemalloc.get_traced_memory()
    top = max(top, _traced_peak[0])
    print(f"TRACED {name} end {now / 2**20:.1f} peak {top / 2**20:.1f}", file=sys.stderr,
          flush=True)
    _top_lines(name)
    _traced_peak[0] = max(outer, top)


_top = [0]


def _top_lines(name: str) -> None:
    """With ``--top N``: the N source lines holding the most live traced bytes now (a line in
    NumPy's or Ray's own code is where they allocated; the frames are tracemalloc's)."""
    if not _top[0]:
        return
    stats = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]).statistics("lineno")
    for st in stats[:_top[0]]:
        frame = st.traceback[0]
        print(f"TOP {name} {st.size / 2**20:.1f} {st.count} {frame.filename}:{frame.lineno}",
              file=sys.stderr, flush=True)


def main(argv=None) -> int:
    from jobs.cli import main as cli

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--whole-schedule" in argv:
        # the baseline in the same tree: the schedule stage emitted and replayed whole at
        # every size, as before planner/sliced.py (issue 37)
        argv.remove("--whole-schedule")
        from planner import sliced

        sliced.applies = lambda n, decision: False
    if "--top" in argv:
        # the largest live allocation sites at each stage's end (tracemalloc, by source line)
        i = argv.index("--top")
        _top[0] = int(argv[i + 1])
        del argv[i:i + 2]
        argv.append("--traced")
    if "--traced" in argv:
        # Python's own allocations besides the resident pages: what is alive at each stage's
        # end and the peak so far (tracemalloc; slower, and blind to Ray's mapped pages)
        argv.remove("--traced")
        tracemalloc.start()
    if "--whole-read" in argv:
        # the baseline in the same tree: the graph read whole on the driver and the engine
        # analyses on graphs it builds, as before planner/cg_shards.py (issue 37)
        argv.remove("--whole-read")
        from planner import api

        api._read_sharded = lambda path, opts: None
    if "--calls" in argv:
        i = argv.index("--calls")
        _wrap_calls(argv[i + 1])
        del argv[i:i + 2]
    progress.StageProgress.stage = _wrap(progress.StageProgress.stage)
    threading.Thread(target=_sample, daemon=True).start()
    return cli(argv)


if __name__ == "__main__":
    raise SystemExit(main())
