"""Run a function in a forked child under a wall-clock limit (benches whose rows may not finish).

A forked child shares what the parent already loaded (a parsed graph) and can be killed
without leaving the parent in a half-finished state.
"""

from __future__ import annotations

import multiprocessing as mp

TIMEOUT = "TIMEOUT"


def _child(q, fn, args):
    q.put(fn(*args))


def run_limited(limit: float, fn, *args):
    """``fn(*args)`` in a forked child: its result, :data:`TIMEOUT` after ``limit`` seconds, or
    ``"CRASHED rc=N"`` when the child died without a result."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q, fn, args))
    p.start()
    p.join(limit)
    if p.is_alive():
        p.terminate()
        p.join()
        return TIMEOUT
    if q.empty():
        return f"CRASHED rc={p.exitcode}"
    return q.get()
