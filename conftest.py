"""pytest rules for the docstring examples (``--doctest-modules`` over the packages).

Every module's examples run in the test suite, so they cannot rot. Modules whose examples drive
a GPU are not collected where no CUDA device works (:func:`planner.execute.backend.probe_cupy`
says why); benches are scripts, not packages, and are not collected.
"""

from planner.execute.backend import probe_cupy

#: Paths (relative to the repository root) whose examples need a CUDA device.
GPU_MODULES = ["jobs/gpu_actor.py"]

#: Scripts that tests run as child processes: importing them would change this process (Ray's
#: environment, patched scheduling strategies), so their doctests are not collected.
SCRIPTS = ["tests/cluster_scenarios.py"]

collect_ignore = SCRIPTS + ([] if probe_cupy()[0] is not None else GPU_MODULES)
