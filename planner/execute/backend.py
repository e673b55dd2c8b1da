"""Choose the array module the executor runs on: CuPy where a CUDA device answers, else NumPy.

The choice never raises. ``cupy`` is an optional extra: on a machine without it (or without a
driver, or without NVRTC for elementwise kernels) the probe fails quietly and NumPy is used.
``HGRAPH_BACKEND=numpy|cupy`` forces one; forcing ``cupy`` where it cannot work is an error at
:func:`get` time (not at import), with the probe's reason in the message.

>>> from planner.execute import backend
>>> b = backend.get("numpy")
>>> b.name, b.xp.__name__, b.costs.alignment
('numpy', 'numpy', 64)
"""

from __future__ import annotations

import dataclasses
import functools
import os

import numpy

from hgraph.common.errors import HGraphError
from planner.backend_costs import BY_NAME, BackendCosts

ENV = "HGRAPH_BACKEND"


@dataclasses.dataclass(frozen=True)
class Backend:
    """An array module and what it runs on."""

    name: str            # "numpy" | "cupy"
    xp: object           # the module
    device: str          # "cpu" or the CUDA device's name

    @property
    def is_gpu(self) -> bool:
        return self.name == "cupy"

    @property
    def costs(self) -> BackendCosts:
        """What this backend adds to a step beside its arrays' data (the allocator's rounding,
        the interpreter's objects), as the whole-step prediction prices it
        (:mod:`planner.backend_costs`)."""
        return BY_NAME[self.name]

    def to_numpy(self, array):
        """Copy an array of this backend to host NumPy (a no-op on NumPy)."""
        return self.xp.asnumpy(array) if self.is_gpu else numpy.asarray(array)

    def synchronize(self) -> None:
        if self.is_gpu:
            self.xp.cuda.Device().synchronize()


@functools.lru_cache(maxsize=1)
def probe_cupy() -> tuple[object | None, str]:
    """(cupy module or None, reason). Imports cupy and runs a tiny allocate-and-sum on the device."""
    try:
        import cupy
    except Exception as err:  # ImportError, or a broken install raising anything
        return None, f"cupy does not import ({type(err).__name__}: {err})"
    try:
        if not cupy.cuda.is_available():
            return None, "cupy imports but no CUDA device is available"
        total = float(cupy.arange(4, dtype=cupy.float32).sum())   # alloc + reduction kernel
        if total != 6.0:
            return None, f"cupy smoke test returned {total}, expected 6"
        (cupy.ones(2, dtype=cupy.float32) * 2).get()                # an elementwise (NVRTC) kernel
    except Exception as err:
        return None, f"cupy device check failed ({type(err).__name__}: {err})"
    return cupy, "ok"


def _device_name(cupy) -> str:
    try:
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return "cuda"


def get(name: str | None = None) -> Backend:
    """The backend named (``"numpy"``/``"cupy"``), else ``$HGRAPH_BACKEND``, else the best that works."""
    wanted = (name or os.environ.get(ENV) or "auto").strip().lower()
    if wanted not in ("auto", "numpy", "cupy"):
        raise HGraphError(f"{ENV}={wanted!r}: expected numpy, cupy or auto")
    if wanted == "numpy":
        return Backend("numpy", numpy, "cpu")
    cupy, reason = probe_cupy()
    if cupy is not None:
        return Backend("cupy", cupy, _device_name(cupy))
    if wanted == "cupy":
        raise HGraphError(f"backend cupy requested but unusable: {reason}")
    return Backend("numpy", numpy, "cpu")


def gpu_available() -> tuple[bool, str]:
    """Whether CuPy finds a working device, and why not."""
    cupy, reason = probe_cupy()
    return cupy is not None, reason
