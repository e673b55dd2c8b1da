"""Independent NumPy jobs side by side on threads, one per core the process may use.

Why: NumPy releases the GIL inside its loops, so array jobs that share no state — the
knapsack's blocks of states (:mod:`planner.dp.knapsack`) — run on every core at once. The
results are the same on any number of threads: :func:`map_ordered` returns them in input
order and every job is a pure function of its input.

Jobs should be big array operations: a job that runs many small ones holds the GIL between
them, and the others wait on it (the chain bound's walk beside the knapsack's blocks sped
the pair up no more than running it after them).

``HGRAPH_THREADS=N`` sets the number of threads (``1``: every job runs inline, in the
caller's thread — the baseline ``bench/threads_bench.py`` at 78975d9 compares against). Jobs
must not wait on this pool themselves (a job blocked on another job could hold the last worker).

Example::

    >>> map_ordered(lambda x: x * x, range(5))
    [0, 1, 4, 9, 16]
"""

from __future__ import annotations

import os

__all__ = ["workers", "map_ordered"]

_pool = None                # a concurrent.futures.ThreadPoolExecutor, imported on first use


def workers() -> int:
    """Threads to run jobs on: ``HGRAPH_THREADS``, else the cores this process may run on."""
    env = os.environ.get("HGRAPH_THREADS", "").strip()
    if env:
        return max(1, int(env))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                      # not Linux
        return os.cpu_count() or 1


def _executor():
    """The process's pool, made on first use (and again in a forked child: threads do not
    survive a fork, so a child never reuses its parent's). Imported then too: a small plan
    that runs every job inline never loads ``concurrent.futures`` (and ``logging``)."""
    global _pool
    if _pool is None:
        from concurrent.futures import ThreadPoolExecutor

        _pool = ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="hgraph")
    return _pool


def _forget_pool() -> None:
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def map_ordered(fn, items) -> list:
    """``[fn(x) for x in items]``, the calls spread over :func:`workers` threads."""
    items = list(items)
    if workers() == 1 or len(items) < 2:
        return [fn(x) for x in items]
    return list(_executor().map(fn, items))
