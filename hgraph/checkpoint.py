"""Checkpoints of a running job, written by the driver so they outlive any worker.

A checkpoint taken after superstep ``s`` holds everything needed to run ``s + 1`` again:

* every worker's vertex state (values, active and respond flags), as the worker returned it;
* the message blocks produced in ``s`` (they are the inbox of ``s + 1``);
* the master's state: global aggregates, the hybrid switcher, the stats rows so far.

It is one file ``step-NNNNNN.ckpt`` per checkpoint — a msgpack map whose arrays are raw NumPy
buffers (:func:`hgraph.wire.pack_arrays`) — written to a temporary name and renamed, then named
in ``LATEST``; a crash while writing leaves the previous checkpoint intact. Older files are
removed once a newer one is complete.

Example::

    >>> import tempfile
    >>> from hgraph.checkpoint import CheckpointStore
    >>> store = CheckpointStore(tempfile.mkdtemp())
    >>> _ = store.save(3, {"aggregates": {}}, [b"state0"], [[b"", b"blk"]])
    >>> store.load().superstep
    3
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import msgpack

from hgraph.common.fileio import write_bytes, write_text

VERSION = 1


@dataclass
class Checkpoint:
    superstep: int
    master: dict
    states: list          # bytes per task
    outbound: list        # outbound[src][dst]: bytes


class CheckpointStore:
    """Checkpoints of one run under ``directory``."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, superstep: int) -> Path:
        return self.directory / f"step-{superstep:06d}.ckpt"

    def save(self, superstep: int, master: dict, states, outbound) -> Path:
        data = msgpack.packb({"v": VERSION, "superstep": superstep, "master": master,
                              "states": list(states),
                              "outbound": [list(row) for row in outbound]}, use_bin_type=True)
        path = self._path(superstep)
        previous = self.latest_path()
        write_bytes(path, data)
        write_text(self.directory / "LATEST", path.name + "\n")
        if previous is not None and previous != path and previous.exists():
            os.unlink(previous)
        return path

    def latest_path(self) -> Path | None:
        marker = self.directory / "LATEST"
        if not marker.exists():
            return None
        path = self.directory / marker.read_text().strip()
        return path if path.exists() else None

    def load(self) -> Checkpoint | None:
        path = self.latest_path()
        if path is None:
            return None
        obj = msgpack.unpackb(path.read_bytes(), raw=False)
        if obj.get("v") != VERSION:
            raise ValueError(f"{path}: unknown checkpoint version {obj.get('v')!r}")
        return Checkpoint(obj["superstep"], obj["master"], obj["states"], obj["outbound"])
