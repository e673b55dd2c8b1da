"""pytest rules for the docstring examples (``--doctest-modules`` over the packages).

Every module's examples run in the test suite, so they cannot rot. Modules whose examples drive
a GPU are not collected where no CUDA device works (:func:`planner.execute.backend.probe_cupy`
says why); benches are scripts, not packages, and are not collected. An example's temporary
files (``tempfile.mkdtemp()``, what a user would type) go under pytest's own temporary folder
for the example (:func:`_examples_write_under_pytests_temp`), not into the machine's.
"""

import tempfile

import pytest

from planner.execute.backend import probe_cupy

#: Paths (relative to the repository root) whose examples need a CUDA device.
GPU_MODULES = ["jobs/gpu_actor.py"]

#: Scripts that tests run as child processes: importing them would change this process (Ray's
#: environment, patched scheduling strategies), so their doctests are not collected.
SCRIPTS = ["tests/cluster_scenarios.py"]

collect_ignore = SCRIPTS + ([] if probe_cupy()[0] is not None else GPU_MODULES)


@pytest.fixture(autouse=True)
def _examples_write_under_pytests_temp(request):
    """For a docstring example: ``tempfile``'s folder is the example's ``tmp_path`` while it
    runs. Ten examples (``d = tempfile.mkdtemp()``, then a graph, a plan or a checkpoint in it)
    left a folder with their files in the machine's temp folder on every test run; under
    ``tmp_path`` pytest removes them with its old runs. Other tests are left as they are."""
    if not isinstance(request.node, pytest.DoctestItem):
        yield
        return
    before = tempfile.tempdir
    tempfile.tempdir = str(request.getfixturevalue("tmp_path"))
    try:
        yield
    finally:
        tempfile.tempdir = before
