"""Shared fixtures: one Ray instance per test session, paths to the shared data."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

#: Seconds any ray.get in a test may wait.
RAY_TIMEOUT = 120


def shared_path(*parts: str) -> Path:
    """A file under ../shared; missing data fails under CI and skips elsewhere."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"shared data missing: {path}")
        pytest.skip(f"shared data missing: {path}")
    return path


@pytest.fixture(scope="session")
def ray_session():
    """An embedded Ray for the whole session, with a short temp dir (Unix-socket path limit)
    that is removed, Ray's session logs and all, when the session ends."""
    import ray

    temp_dir = None
    if not ray.is_initialized():
        temp_dir = tempfile.mkdtemp(prefix="hgr", dir="/tmp")
        ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False,
                 object_store_memory=200 * 2**20, _temp_dir=temp_dir, logging_level="ERROR")
    try:
        yield ray
    finally:
        ray.shutdown()
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
