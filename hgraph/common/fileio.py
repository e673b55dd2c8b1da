"""The one writer of every output: files through a temporary name and an atomic rename, streams
directly, and any failure one line naming what could not be written.

Every output a command writes (schedules, reports, plots, graphs, engine results, stats, the
summary table, cluster state, fetched job results, checkpoints) goes through :func:`write_text`
or :func:`write_bytes`, and a stream (stdout, stderr) through :func:`write_stream`, so a full
disk, a read-only folder or a closed pipe is the same one line everywhere (``PATH: cannot
write: No space left on device``, an :class:`HGraphError`, exit 2), never a traceback.

A crash, a bad input or a failed write never leaves a half-written or truncated output behind,
nor a temporary file or a folder made for it, and an earlier good file is kept until the new
one is complete. ``-`` is standard output. Targets that are not regular files
(``/dev/stdout``, ``/dev/full``, a pipe, a terminal) cannot be renamed over; they are written
directly, and a symbolic link is followed so the file it names is replaced, not the link
(``private=True``, for state files, replaces the link instead and makes the file 0600).
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from pathlib import Path

from hgraph.common.errors import HGraphError

#: The output name that means standard output.
STDOUT = "-"


def write_text(path, text, *, private: bool = False) -> None:
    """Write ``text`` (UTF-8) to the output ``path`` (``-``: stdout); see the module docstring.
    ``text`` is a string or an iterable of strings written one after the other, so that a
    large output (a schedule of millions of lines) is never one string in memory; a chunk
    that fails to come (an exception from the iterable) leaves no output, as a failed write.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "out.txt")
    >>> write_text(path, "ok\\n"); open(path).read()
    'ok\\n'
    >>> write_text("/dev/full", "ok\\n")
    Traceback (most recent call last):
    hgraph.common.errors.HGraphError: /dev/full: cannot write: No space left on device
    """
    _write(path, text, private)


def write_bytes(path, data: bytes, *, private: bool = False) -> None:
    """Write ``data`` to the output ``path`` (``-``: stdout); see the module docstring."""
    _write(path, data, private)


def _write(path, data, private: bool) -> None:
    whole = isinstance(data, (str, bytes, bytearray))
    chunks = (data,) if whole else data
    if str(path) == STDOUT:
        for chunk in chunks:
            write_stream(sys.stdout, chunk)
        return
    binary = whole and not isinstance(data, str)
    try:
        with atomic_write(path, "wb" if binary else "w", private=private,
                          **({} if binary else {"encoding": "utf-8"})) as handle:
            for chunk in chunks:
                handle.write(chunk)
    except OSError as err:
        raise cannot_write(path, err) from None


def write_stream(stream, data) -> None:
    """Write ``data`` (text, or bytes to the stream's buffer) to an open stream and flush it.

    A failure is one line naming the stream (:func:`cannot_write`); stdout is then pointed at
    ``/dev/null``, so that what stays in its buffer cannot fail a second time when the
    interpreter flushes it at exit (``Exception ignored ... BrokenPipeError``, exit 120)."""
    try:
        if isinstance(data, str):
            stream.write(data)
        else:
            stream.flush()
            stream.buffer.write(data)
        stream.flush()
    except OSError as err:
        if stream in (sys.stdout, sys.__stdout__):
            _drop_stdout()
        raise cannot_write(_stream_name(stream), err) from None


def flush_stdout() -> None:
    """Flush what ``print`` left in stdout's buffer (:func:`write_stream`'s errors): called by
    the command line before it exits, so that a full disk or a closed pipe is still one line."""
    write_stream(sys.stdout, "")


def cannot_write(name, err: OSError) -> HGraphError:
    """The one line for an output that could not be written: ``NAME: cannot write: REASON``."""
    return HGraphError(f"{name}: cannot write: {err.strerror or err}")


def _stream_name(stream) -> str:
    if stream in (sys.stdout, sys.__stdout__):
        return "stdout"
    if stream in (sys.stderr, sys.__stderr__):
        return "stderr"
    return str(getattr(stream, "name", "output"))


def _drop_stdout() -> None:
    """Point file descriptor 1 (when stdout has one) at ``/dev/null`` (Python's documented way
    out of a broken stdout, "Note on SIGPIPE")."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):      # a StringIO, a closed stream
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


@contextlib.contextmanager
def atomic_write(path, mode: str = "w", *, private: bool = False, **kwargs):
    """Open a temporary file beside ``path``; on success rename it over ``path``. Folders made
    for it are removed again when the write fails. Raises what ``open`` raises: the callers
    are :func:`write_text` / :func:`write_bytes`, which turn it into one line.

    ``private``: the file is 0600 and replaces whatever is at ``path``, a symbolic link, a
    device or a pipe included, instead of writing through it."""
    path = Path(path)
    if path.is_symlink() and not private:
        path = path.resolve()
    if path.exists() and not path.is_file() and not private:   # a device, pipe or terminal
        with open(path, mode, **kwargs) as handle:
            yield handle
        return
    made = _make_folders(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                   dir=str(path.parent or "."))
    except BaseException:
        _remove_folders(made)
        raise
    try:
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600 if private else _mode_for(path))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        _remove_folders(made)
        raise


def _make_folders(folder: Path) -> list[Path]:
    """Create ``folder`` and the folders missing above it; the ones made, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    made: list[Path] = []
    try:
        for one in reversed(missing):
            try:
                one.mkdir()
            except FileExistsError:
                continue
            made.insert(0, one)
    except BaseException:
        _remove_folders(made)
        raise
    return made


def _remove_folders(made: list[Path]) -> None:
    """Remove folders :func:`_make_folders` made (deepest first) if they are still empty."""
    for folder in made:
        with contextlib.suppress(OSError):
            folder.rmdir()


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
