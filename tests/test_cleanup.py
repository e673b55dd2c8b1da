"""Issue 11 item 14: a test run cleans up what it created (the session Ray's temp folder)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PROBE = '''
import os
from pathlib import Path


def test_probe(ray_session):
    node = ray_session._private.worker._global_node
    Path(os.environ["PROBE_OUT"]).write_text(node.get_session_dir_path())
'''


def test_the_session_ray_leaves_no_temp_folder(tmp_path):
    """A pytest session that used the ``ray_session`` fixture leaves no Ray temp folder behind
    (it used to leave /tmp/hgr*, a Ray session with its logs, after every run)."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    out = tmp_path / "session.txt"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PROBE_OUT=str(out))
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest",
                           "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "base"),
                           str(tmp_path / "test_probe.py")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    session = Path(out.read_text())
    assert session.parent.name.startswith("hgr"), session       # the fixture's own folder
    assert not session.parent.exists(), f"left behind: {sorted(session.parent.iterdir())}"
