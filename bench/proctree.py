"""Peak memory of a whole process tree (a planner run and the Ray processes it starts).

``getrusage(RUSAGE_CHILDREN)`` reports the largest *single* finished child, which misses Ray's
raylet, GCS and worker processes and counts a generator child as if it were the planner. Ray
workers descend from the driver (driver -> raylet -> workers), so this module samples the tree
under one pid from ``/proc`` and keeps the peak of the *sum*: RSS (counts shared pages once per
process, an upper bound) and PSS (shared pages split between their users, what the tree really
costs the machine). Linux only; no third-party dependency.

RSS comes from ``/proc/PID/statm`` (kernel counters: free to read) every ``interval``; PSS only
from ``/proc/PID/smaps_rollup``, which walks the page tables of the process under its memory
lock: one read of a 3 GiB process took 16 ms against 0.07 ms for ``statm``, and page faults of
the sampled process wait for it. Read every 0.25 s it slowed the DP stage of a 100,012-node
plan (bench/scale_bench.py, DP 53.7 / 58.4 s, against 30–34 s for the same command unsampled
on the same loaded machine). PSS is therefore read only when
the summed RSS has grown by :data:`PSS_STEP` since the last PSS reading (and at the start), so a
few dozen times a run, at the moments the peak can move.

    >>> import os
    >>> s = TreeSampler(os.getpid()); s.sample(); s.peak_rss_bytes > 0
    True
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["TreeSampler", "tree_pids"]

_PAGE = os.sysconf("SC_PAGE_SIZE")

#: Read PSS again once the tree's summed RSS exceeds the RSS of the last PSS reading by this
#: fraction (PSS ≤ RSS, so the PSS peak is taken where the RSS one can be).
PSS_STEP = 1 / 32


def tree_pids(root: int) -> list[int]:
    """``root`` and all its descendants now alive (one pass over /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _pss(pid: int, rss: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return rss


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:80].strip()
    except OSError:
        return "?"


class TreeSampler:
    """Samples the summed RSS/PSS of ``root``'s process tree; ``start()`` runs it on a thread."""

    def __init__(self, root: int, interval: float = 0.25):
        self.root, self.interval = root, interval
        self.peak_rss_bytes = self.peak_pss_bytes = self.peak_processes = 0
        self.pss_reads = 0
        self._rss_at_pss = -1               # summed RSS at the last PSS reading
        #: [(PSS bytes, process name)] at the PSS peak, largest first
        self.peak_breakdown: list[tuple[int, str]] = []
        #: pid -> (peak RSS bytes, peak PSS bytes at the PSS readings, name): each process's
        #: own peak (the driver's, a worker's), not its share of the tree's summed peak
        self.per_process: dict[int, list] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        pids = tree_pids(self.root)
        rss = [_rss(p) for p in pids]
        total = sum(rss)
        self.peak_rss_bytes = max(self.peak_rss_bytes, total)
        self.peak_processes = max(self.peak_processes, len(pids))
        for pid, r in zip(pids, rss):
            own = self.per_process.get(pid)
            if own is None:
                own = self.per_process[pid] = [0, 0, _name(pid)]
            elif r > own[0]:
                own[2] = _name(pid)          # a Ray worker (ray::IDLE) renames itself once
                #                              it has an actor, and grows from then on
            own[0] = max(own[0], r)
        if self._rss_at_pss >= 0 and total <= self._rss_at_pss * (1 + PSS_STEP):
            return
        self._rss_at_pss, self.pss_reads = total, self.pss_reads + 1
        sizes = [_pss(p, r) for p, r in zip(pids, rss)]
        for pid, b in zip(pids, sizes):
            self.per_process[pid][1] = max(self.per_process[pid][1], b)
        pss = sum(sizes)
        if pss > self.peak_pss_bytes:            # who holds the memory at the peak
            self.peak_pss_bytes = pss
            self.peak_breakdown = sorted(((b, _name(pid)) for pid, b in zip(pids, sizes)),
                                         reverse=True)

    def peaks(self, pid: int | None = None, contains: str | None = None) -> tuple[int, int]:
        """``(peak RSS, peak PSS)`` bytes of the one process ``pid``, or the largest of the
        processes whose command line contains ``contains`` (0, 0 when none ran)."""
        rows = [v for p, v in self.per_process.items()
                if (pid is not None and p == pid) or (contains is not None and contains in v[2])]
        return (max((v[0] for v in rows), default=0), max((v[1] for v in rows), default=0))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> "TreeSampler":
        self.sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
