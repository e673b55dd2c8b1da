"""Array backend choice: NumPy forced, env override, never raising on import."""

import numpy as np
import pytest

from hgraph.common.errors import HGraphError
from planner.execute import backend


def test_numpy_forced_by_name():
    b = backend.get("numpy")
    assert b.name == "numpy" and b.xp is np and not b.is_gpu
    assert b.to_numpy(b.xp.arange(3)).tolist() == [0, 1, 2]


def test_env_forces_numpy(monkeypatch):
    monkeypatch.setenv(backend.ENV, "numpy")
    assert backend.get().name == "numpy"


def test_env_rejects_unknown(monkeypatch):
    monkeypatch.setenv(backend.ENV, "tpu")
    with pytest.raises(HGraphError, match="expected numpy, cupy or auto"):
        backend.get()


def test_auto_picks_a_working_backend():
    ok, reason = backend.gpu_available()
    b = backend.get("auto")
    assert b.name == ("cupy" if ok else "numpy")
    assert isinstance(reason, str) and reason


def test_forcing_cupy_without_a_device_is_a_clear_error(monkeypatch):
    ok, reason = backend.gpu_available()
    if ok:
        assert backend.get("cupy").is_gpu
        return
    monkeypatch.setenv(backend.ENV, "cupy")
    with pytest.raises(HGraphError, match="backend cupy requested but unusable"):
        backend.get()
