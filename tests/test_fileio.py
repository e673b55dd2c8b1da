"""Output files: all or nothing for regular files; devices, pipes and symlinks still work."""

from __future__ import annotations

import os
import threading

import pytest

from hgraph.common.fileio import atomic_write, write_text


def test_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "out.tsv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_write(target) as handle:
            handle.write("half")
            raise RuntimeError("bad input halfway")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tsv"]


def test_text_in_chunks_is_written_whole_or_not_at_all(tmp_path):
    """A large output streams as an iterable of chunks (a schedule's pieces); a chunk that
    fails to come leaves the earlier file as it was, and no temporary file."""
    target = tmp_path / "out.txt"
    write_text(target, iter(["a\n", "b\n"]))
    assert target.read_text() == "a\nb\n"

    def broken():
        yield "c\n"
        raise RuntimeError("the plan failed halfway")

    with pytest.raises(RuntimeError):
        write_text(target, broken())
    assert target.read_text() == "a\nb\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_missing_parent_folders_are_created(tmp_path):
    write_text(tmp_path / "a" / "b" / "out.txt", "x")
    assert (tmp_path / "a" / "b" / "out.txt").read_text() == "x"


def test_symlink_is_followed_not_replaced(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_a_pipe_is_written_directly(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()), daemon=True)
    reader.start()
    write_text(fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert got == ["through the pipe\n"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_new_files_get_umask_permissions_and_old_files_keep_theirs(tmp_path):
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "new.txt", "x")
        assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o644
        kept = tmp_path / "kept.txt"
        kept.write_text("old")
        kept.chmod(0o640)
        write_text(kept, "new")
        assert kept.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


def test_new_files_get_the_umask_without_changing_it(tmp_path, monkeypatch):
    """The process umask is read, never set (setting it, even for a moment, races other threads)."""
    from hgraph.common.fileio import process_umask

    old = os.umask(0o027)
    try:
        def no_umask(_mask):
            raise AssertionError("os.umask called: it changes the process state")

        monkeypatch.setattr(os, "umask", no_umask)
        write_text(tmp_path / "new.txt", "x")
        assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o640
        assert process_umask(tmp_path) == 0o027
        # Without /proc: a probe file created with 0o666 shows the kernel's masking, and goes.
        real_open = open

        def no_proc(path, *args, **kwargs):
            if str(path).startswith("/proc/"):
                raise OSError("no /proc here")
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr("builtins.open", no_proc)
        assert 0o666 & ~process_umask(tmp_path) == 0o640
        assert sorted(p.name for p in tmp_path.iterdir()) == ["new.txt"]
    finally:
        monkeypatch.undo()
        os.umask(old)


def test_check_writable_leaves_an_existing_file_untouched(tmp_path):
    """The up-front check opens an existing output for writing without truncating it."""
    from hgraph.common.fileio import check_writable

    target = tmp_path / "out.txt"
    target.write_text("old\n")
    before = target.stat()
    check_writable(target, "--out")
    after = target.stat()
    assert target.read_text() == "old\n" and after.st_mtime_ns == before.st_mtime_ns
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]      # no probe left behind
