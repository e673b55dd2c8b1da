"""Kept columns as inputs of a run: which pieces of which task's kept values a task reads.

Why: a :class:`hgraph.session.Session` run can leave its per-vertex values on the workers
(``keep=``), one handle per task of that run's partition; a later run takes them as a vertex
column (``inputs=``). The later run's partition may cut the vertices elsewhere (other tasks),
so each of its tasks is handed the handles that overlap its range with the rows to take from
each (:func:`task_pieces`, on the driver: handles and bounds only, never the data), and the
worker joins the pieces into its column (:func:`assemble`, where the data is). The same two
functions serve every runtime, so a kept column reads the same in-process and on Ray.

    >>> import numpy as np
    >>> kept = Kept(handles=[np.arange(3), np.arange(3, 6)], bounds=np.array([0, 3, 6]))
    >>> spec, handles = task_pieces({"x": kept}, 2, 5)
    >>> spec, [h.tolist() for h in handles]
    ([('x', [(2, 3), (0, 2)])], [[0, 1, 2], [3, 4, 5]])
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

__all__ = ["Kept", "task_pieces", "assemble"]


@dataclass
class Kept:
    """A run's values left on its workers: ``handles[t]`` holds rows ``bounds[t]:bounds[t+1]``
    (a Ray object reference, or the array itself in-process); ``shape``/``dtype``: the rows'
    trailing shape and type."""

    handles: list
    bounds: np.ndarray
    shape: tuple = ()
    dtype: Any = None

    @property
    def n(self) -> int:
        return int(self.bounds[-1])


def task_pieces(inputs: Mapping[str, Kept], lo: int, hi: int) -> tuple[list, list]:
    """``(spec, handles)`` for the task holding vertices ``lo:hi``: ``spec`` lists, per column
    name, the ``(a, b)`` rows taken from each handle in order; ``handles`` are those handles,
    flat, in the same order (a Ray runtime passes them as call arguments, resolved where the
    worker is)."""
    spec, handles = [], []
    for name, kept in inputs.items():
        bounds = np.asarray(kept.bounds, np.int64)
        first = int(np.searchsorted(bounds, lo, side="right")) - 1
        last = int(np.searchsorted(bounds, hi, side="left"))
        rows = []
        for s in range(first, last):        # the few handles overlapping this task's range
            a, b = max(lo, int(bounds[s])), min(hi, int(bounds[s + 1]))
            rows.append((a - int(bounds[s]), b - int(bounds[s])))
            handles.append(kept.handles[s])
        spec.append((name, rows))
    return spec, handles


def assemble(part, spec, arrays):
    """``part`` (a :class:`hgraph.partition.TaskSlice`) with the kept columns of ``spec``
    joined from ``arrays`` (the resolved handles, in :func:`task_pieces`' order) added to its
    vertex columns; a column read whole from one handle is used as it is, not copied."""
    if not spec:
        return part
    columns = dict(part.columns)
    k = 0
    for name, rows in spec:
        pieces = []
        for a, b in rows:
            arr = arrays[k]
            k += 1
            pieces.append(arr if (a, b) == (0, len(arr)) else arr[a:b])
        columns[name] = pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=0)
    return dataclasses.replace(part, columns=columns)
