"""Peak memory of a whole process tree (a planner run and the Ray processes it starts).

``getrusage(RUSAGE_CHILDREN)`` reports the largest *single* finished child, which misses Ray's
raylet, GCS and worker processes and counts a generator child as if it were the planner. Ray
workers descend from the driver (driver -> raylet -> workers), so this module samples the tree
under one pid from ``/proc`` and keeps the peak of the *sum*: RSS (counts shared pages once per
process, an upper bound) and PSS (shared pages split between their users, what the tree really
costs the machine). Linux only; no third-party dependency.

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


def _rss_pss(pid: int) -> tuple[int, int]:
    try:
        rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0, 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return rss, int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return rss, rss


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
        #: [(PSS bytes, process name)] at the PSS peak, largest first
        self.peak_breakdown: list[tuple[int, str]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        pids = tree_pids(self.root)
        sizes = [_rss_pss(p) for p in pids]
        self.peak_rss_bytes = max(self.peak_rss_bytes, sum(r for r, _ in sizes))
        pss = sum(p for _, p in sizes)
        if pss > self.peak_pss_bytes:       # who holds the memory at the peak
            self.peak_pss_bytes = pss
            self.peak_breakdown = sorted(((p, _name(pid)) for pid, (_, p) in zip(pids, sizes)),
                                         reverse=True)
        self.peak_processes = max(self.peak_processes, len(pids))

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
