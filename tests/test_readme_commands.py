"""The README's commands and the docs' (docs/*.md), run as a new user runs them (issues 25, 38).

A fresh virtual environment (no system site packages, nothing of the test extra), a copy of the
repository's files, and then every command of the README's ``bash`` blocks in order, then those
of :data:`DOCS`. The README's first block makes a venv (``python3 -m venv .venv && .
.venv/bin/activate``: it runs, in its own shell, as a check that the line works; the steps after
it run in the test's venv, which is that line's equivalent) and then runs the Quick start's
``python3 -m pip install -e . && hgraph submit plan ...``: so the install is only what ``pip
install -e .`` brings (the base dependencies, from the machine's package index). The ``python``
blocks run too, as scripts, after the commands before them (docs/python.md's reads the
``vgg.txt`` its own first line writes). Every command must exit 0.

A line that cannot run in that environment says so in the README with a trailing
``# needs: WHAT`` comment, and a ``python`` block whose first line is such a comment; WHAT is
one of :data:`NEEDS`: the ``torch`` extra (the PyTorch section), the whole ``test`` suite (the
CI command, which is this suite, with the test extra), or a ``cluster`` (``hgraph cluster up``
starts three Ray nodes on the fixed ports 6379/8265 and the jobs submitted to it: on a shared CI
machine they would collide with any other Ray there; ``tests/test_cluster.py`` runs them on
free ports). :func:`test_every_readme_command_runs_or_says_what_it_needs` checks those markers
(fast, no venv): a line that names torch, a cluster address or the test extra without its
marker fails it.

:func:`test_readme_commands_in_a_fresh_venv` is the run itself, marked ``slow``: on this
2-core machine, shared, the whole test took 240 s with a fresh venv (``pytest --durations``,
one run) and the 18 steps 188 s in another, busier one with the dependencies already
installed (two of them start an embedded Ray: 57 s and 24 s; the rows + DP plan 34 s):
past a 2-3 minute CI slot. The cheaper way keeps every command and the install step:
``HGRAPH_README_VENV=DIR`` makes the venv in DIR once per set of base dependencies (the
directory is named by a hash of pyproject.toml's ``dependencies`` and the Python version) and
reuses it, so a run costs the commands and ``pip install -e .`` finding them installed; the
test still checks that nothing of the test extra is in it. Timings:
``python3 tests/test_readme_commands.py WORKDIR [VENV]``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The README's first line: a venv, as a new user makes one before installing.
VENV_LINE = "python3 -m venv .venv && . .venv/bin/activate"


def docs() -> list[Path]:
    """The pages whose commands run after the README's: every docs/*.md, in name order."""
    return sorted((ROOT / "docs").glob("*.md"))


def all_steps() -> list[tuple[str, str, str | None]]:
    """The README's steps, then each page of :func:`docs`'s."""
    out = steps(README.read_text(encoding="utf-8"))
    for page in docs():
        out += steps(page.read_text(encoding="utf-8"))
    return out
#: What a ``# needs:`` marker may name.
NEEDS = ("torch", "test", "cluster")
_NEEDS = re.compile(r"#\s*needs:\s*(\w+)")
#: Text that shows a command needs one of :data:`NEEDS`.
_SIGNS = {"torch": re.compile(r"\btorch\b"),
          "test": re.compile(r"\[test\]|\bpytest\b"),
          "cluster": re.compile(r"\bcluster (up|down)\b|--address\s+http|\bJOB_ID\b")}


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block (``bash`` or ``python``), in order."""
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r"^```(bash|python)\n(.*?)^```", text, flags=re.M | re.S)]


def commands(body: str) -> list[str]:
    """The command lines of a ``bash`` block (``\\`` continuations joined)."""
    out, cur = [], ""
    for line in body.splitlines():
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        if cur.strip():
            out.append(cur.strip())
        cur = ""
    return out


def needs(text: str) -> str | None:
    """What a command line (or a python block's first line) says it needs, else None."""
    m = _NEEDS.search(text)
    return m.group(1) if m else None


def steps(text: str) -> list[tuple[str, str, str | None]]:
    """(kind ``sh``/``py``, command or script, what it needs) of the README, in order."""
    out = []
    for lang, body in blocks(text):
        if lang == "bash":
            out += [("sh", c, needs(c)) for c in commands(body)]
        else:
            first = body.splitlines()[0] if body.strip() else ""
            out.append(("py", body, needs(first) if first.lstrip().startswith("#") else None))
    return out


def test_every_readme_command_runs_or_says_what_it_needs():
    found = all_steps()
    assert sum(kind == "sh" for kind, _, _ in found) >= 20
    assert found[0][1] == VENV_LINE, found[0][1]
    assert found[1][1].startswith("python3 -m pip install -e . &&"), found[1][1]
    assert found[1][2] is None                   # the install itself runs
    assert {p.name for p in docs()} >= {"cli.md", "rows.md", "torch.md", "cluster.md", "python.md"}
    for kind, cmd, need in found:
        assert need in (None, *NEEDS), (need, cmd)
        if need is None:
            for what, sign in _SIGNS.items():
                assert not sign.search(cmd), f"needs {what} but has no '# needs: {what}': {cmd}"
    # and the markers are not spent on what runs: each one names what its command shows
    for kind, cmd, need in found:
        if need in ("torch", "test") and kind == "sh":
            assert _SIGNS[need].search(cmd.split("#")[0]) or "g.txt" in cmd, cmd


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_is_short_and_its_links_resolve():
    """Issue 38: a README a newcomer reads in ten minutes (at most ~150 lines, the details in
    docs/); every relative link of the README and of docs/*.md names a file of the repository,
    and a ``#anchor`` names a heading of that file."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    for page in (README, *docs()):
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            assert file.exists(), f"{page.name}: {target} does not exist"
            if anchor:
                headings = re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), flags=re.M)
                assert anchor in {_anchor(h) for h in headings}, f"{page.name}: {target}"


def _copy_repo(dest: Path) -> None:
    """The repository's files (git's list: what a clone has, with this tree's contents)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def run_readme(workdir: Path, python: str = sys.executable, timeout: float = 900,
               venv: Path | None = None) -> list:
    """Make a fresh venv in ``workdir`` (or use ``venv``, one this function made before: for
    timing the commands without the install) and run the README's steps there, in a copy of
    the repository; (step, seconds) of each run; raises AssertionError naming the first step
    that fails."""
    import time

    repo = workdir / "repo"
    repo.mkdir(parents=True)
    _copy_repo(repo)
    if venv is None:
        venv = workdir / "venv"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv),
               PYTHONNOUSERSITE="1", RAY_AUTH_MODE=env.get("RAY_AUTH_MODE", "disabled"),
               RAY_USAGE_STATS_ENABLED="0", HGRAPH_BACKEND="numpy")
    done = []
    for kind, cmd, need in all_steps():
        if need is not None:
            continue
        argv = ["bash", "-c", f"set -eo pipefail; {cmd}"] if kind == "sh" else ["python3", "-"]
        t0 = time.perf_counter()
        r = subprocess.run(argv, cwd=repo, env=env, input=None if kind == "sh" else cmd,
                           capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, (f"README command exits {r.returncode}: {cmd}\n"
                                   f"{(r.stdout + r.stderr)[-3000:]}")
        done.append((cmd, time.perf_counter() - t0))
    return done


def cached_venv(base: Path, python: str = sys.executable) -> Path:
    """A venv under ``base`` for this Python and these base dependencies (made if missing)."""
    import hashlib
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    key = hashlib.sha256(repr((sorted(deps), sys.version_info[:2])).encode()).hexdigest()[:12]
    venv = base / f"readme-{key}"
    if not (venv / "bin" / "python3").exists():
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    return venv


@pytest.mark.slow
def test_readme_commands_in_a_fresh_venv(tmp_path):
    cache = os.environ.get("HGRAPH_README_VENV")
    venv = cached_venv(Path(cache)) if cache else None
    done = run_readme(tmp_path, venv=venv)
    assert len(done) >= 15
    # the venv has the base install only: none of the test extra's packages
    venv_py = (venv or tmp_path / "venv") / "bin" / "python3"
    probe = subprocess.run([str(venv_py), "-c", "import importlib.util as u; print("
                            "[m for m in ('torch', 'pytest', 'networkx') if u.find_spec(m)])"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "[]", probe.stdout


if __name__ == "__main__":     # python3 tests/test_readme_commands.py [WORKDIR [VENV]]: timings
    import tempfile

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="readme"))
    for cmd, sec in run_readme(out, venv=Path(sys.argv[2]) if len(sys.argv) > 2 else None):
        print(f"{sec:7.1f} s  {cmd.splitlines()[0][:100]}", flush=True)
