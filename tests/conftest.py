"""Shared fixtures: one Ray instance per test session, paths to the test data.

The oracle data live in the repository (``tests/data``: the reference's graphs, its results.csv
and the schedules it emitted; the format is ``docs/FORMAT.md``), so a clone alone runs every
test. ResNet-50's graph is the one the package ships (``jobs/data/cg_resnet50.txt``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
#: Graphs the package ships (``jobs/data``) are not copied into ``tests/data``.
SHIPPED_GRAPHS = ROOT / "jobs" / "data"

#: Seconds any ray.get in a test may wait.
RAY_TIMEOUT = 120


def MEAN(out):
    """The mean of a model's output as its loss: the torch tests' small models return a
    tensor, and planner.torch has no default loss for one (issue 39: a forgotten ``loss=``
    would train on the mean without a word)."""
    return out.mean()


def traced_peak(fn):
    """``(fn(), bytes)``: tracemalloc's peak during the call above what was traced when it
    started -- a kernel's temporaries, held in the kernel tests against what the plan predicts
    for them (``planner.ops.kernel_temp_bytes`` and the like). Starts and stops tracemalloc
    unless it is already tracing."""
    import tracemalloc

    mine = not tracemalloc.is_tracing()
    if mine:
        tracemalloc.start()
    try:
        c0 = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        got = fn()
        return got, tracemalloc.get_traced_memory()[1] - c0
    finally:
        if mine:
            tracemalloc.stop()


def data_path(*parts: str) -> Path:
    """A file of the test data, ``data_path("graphs", "cg_vgg19.txt")`` or
    ``data_path("reference", "results.csv")``; graphs the package ships are read from there.
    Missing data is an error, never a skip."""
    path = DATA.joinpath(*parts)
    if not path.exists() and parts[:1] == ("graphs",):
        path = SHIPPED_GRAPHS.joinpath(*parts[1:])
    if not path.exists():
        raise FileNotFoundError(f"test data missing: {DATA.joinpath(*parts)}")
    return path


@pytest.fixture(scope="session")
def ray_session():
    """An embedded Ray for the whole session, started as the CLI starts one
    (:func:`hgraph.runtime.ray_connect.start_local`: bound to loopback, a short session folder
    removed when the session ends), never a cluster ``RAY_ADDRESS`` names.
    ``tests/test_ray_loopback.py`` checks what it listens on."""
    import ray

    from hgraph.runtime import ray_connect

    if not ray.is_initialized():
        ray_connect.start_local(num_cpus=4, object_store_bytes=200 * 2**20)
    try:
        yield ray
    finally:
        ray_connect.stop_local()
