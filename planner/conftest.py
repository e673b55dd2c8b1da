"""pytest rules for the planner's doctests (``pytest --doctest-modules planner``).

Modules whose examples drive a GPU are not collected on a machine without a working CUDA
device (:func:`planner.execute.backend.probe_cupy` says why); every other module's examples
run everywhere, so they cannot rot.
"""

from planner.execute.backend import probe_cupy

#: Paths (relative to this directory) whose examples need a CUDA device.
GPU_MODULES = ["execute/gpu_worker.py"]

collect_ignore = [] if probe_cupy()[0] is not None else list(GPU_MODULES)
