"""Writing output files safely: one writer per file, a temporary name, then an atomic rename.

A crash or a bad input never leaves a half-written or truncated output behind, and an earlier
good file is kept until the new one is complete. Targets that are not regular files
(``/dev/stdout``, a pipe, a terminal) cannot be renamed over; they are written directly, and a
symbolic link is followed so the file it names is replaced, not the link.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from hgraph.common.errors import HGraphError


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
        return 0o666 & ~process_umask(path.parent)


def process_umask(directory: Path | str = ".") -> int:
    """This process's umask, read without changing it.

    ``os.umask`` can only read the mask by setting it, which for a moment changes it for every
    thread (Ray's included). Linux states it in ``/proc/self/status`` (``Umask:``); elsewhere a
    probe file is created in ``directory`` with mode 0o666 and the kernel's masking is read back
    (its read/write bits: all that matters for files created 0o666).
    """
    try:
        return int(_proc_status("Umask"), 8)
    except (TypeError, ValueError):
        pass
    # os.urandom(6).hex() is secrets.token_hex(6) without importing secrets (hmac, hashlib)
    probe = os.path.join(str(directory or "."), f".umask-probe.{os.getpid()}.{os.urandom(6).hex()}")
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        return 0o666 & ~os.fstat(fd).st_mode & 0o777
    finally:
        os.close(fd)
        os.unlink(probe)


def _proc_status(field: str) -> str | None:
    """A field of Linux's ``/proc/self/status`` (``Umask``, ``CapEff`` ...); None elsewhere."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name == field:
                    return value.strip()
    except OSError:
        pass
    return None


#: Linux capability bit that lets a process replace other users' files in sticky folders.
_CAP_FOWNER = 3


def _may_replace_others_files() -> bool:
    """Whether this process may rename over another user's file in a sticky folder (``/tmp``):
    the CAP_FOWNER capability where Linux states it, else being root."""
    caps = _proc_status("CapEff")
    try:
        return bool(int(caps, 16) >> _CAP_FOWNER & 1)
    except (TypeError, ValueError):
        return os.geteuid() == 0


def write_text(path, text: str) -> None:
    with atomic_write(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def write_bytes(path, data: bytes) -> None:
    with atomic_write(path, "wb") as handle:
        handle.write(data)


def check_writable(path, flag: str = "output") -> None:
    """Fail before a run, not after it, when an output path cannot be a file (one line naming
    ``flag`` and the path). ``-`` (stdout) and existing devices or pipes pass.

    Checked: a folder at the path, a folder that cannot take a new file (read-only, or a file
    where a folder should be), and an existing file that cannot be replaced — one this process
    may not write (read-only to it, immutable) or another user's file in a sticky folder such as
    ``/tmp``, where the kernel refuses the rename :func:`atomic_write` ends with."""
    if path is None or str(path) == "-":
        return
    p = Path(path)
    if p.is_dir():
        raise HGraphError(f"{flag} {p}: is a directory, expected an output file")
    if p.exists() and not p.is_file():
        return  # a device or pipe, written directly
    parent = p.resolve().parent
    while not parent.exists():
        parent = parent.parent
    try:  # probe: can a file be created where the output (or its new folders) will go?
        fd, probe = tempfile.mkstemp(prefix=".hgraph-probe.", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise HGraphError(f"{flag} {p}: cannot create a file in {parent}: {err.strerror}") from None
    target = p.resolve()
    if target.is_file():
        _check_replaceable(target, f"{flag} {p}")


def _check_replaceable(target: Path, what: str) -> None:
    """An existing regular file: may this process write it, and rename a new one over it?"""
    try:  # opened for writing without truncating: the content is untouched
        os.close(os.open(target, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK))
    except OSError as err:
        raise HGraphError(f"{what}: the existing file cannot be replaced: {err.strerror}") from None
    folder = target.parent.stat()
    if folder.st_mode & stat.S_ISVTX and not _may_replace_others_files():
        owner = target.stat().st_uid
        if os.geteuid() not in (owner, folder.st_uid):
            raise HGraphError(f"{what}: the existing file belongs to another user in a shared "
                              f"(sticky) folder {target.parent}, so it cannot be replaced")
