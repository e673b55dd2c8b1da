"""Writing output files safely: one writer per file, a temporary name, then an atomic rename.

A crash or a bad input never leaves a half-written or truncated output behind, and an earlier
good file is kept until the new one is complete. Targets that are not regular files
(``/dev/stdout``, a pipe, a terminal) cannot be renamed over; they are written directly, and a
symbolic link is followed so the file it names is replaced, not the link.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_write(path, mode: str = "w", **kwargs):
    """Open a temporary file beside ``path``; on success rename it over ``path``.

    >>> with atomic_write("/tmp/hgraph-doc.txt") as f:
    ...     _ = f.write("ok\\n")
    """
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    if path.exists() and not path.is_file():          # a device, pipe or terminal: no rename
        with open(path, mode, **kwargs) as handle:
            yield handle
        return
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent or "."))
    try:
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, _mode_for(path))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _mode_for(path: Path) -> int:
    """The permissions a plain ``open(path, "w")`` would give: the old file's, else 0o666 & ~umask.

    ``mkstemp`` creates 0o600 files; renamed as they are, outputs would be unreadable to others.
    """
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_text(path, text: str) -> None:
    with atomic_write(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def write_bytes(path, data: bytes) -> None:
    with atomic_write(path, "wb") as handle:
        handle.write(data)
