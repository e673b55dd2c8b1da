"""Carry a Ray job's result files back to the submitter through the job's log.

A Ray Job's entry point is ``python -m jobs.NAME ARGS && python -m cluster.ship_outputs FILE...``
(:mod:`cluster.jobs_api` builds it). After the job succeeded this module prints each result file
as a marked block — zlib-compressed, base64, with its size and SHA-256 — in the job's own log,
which the Jobs API serves to any client that can reach the dashboard. So results come back from
a remote cluster with no shared filesystem, object store access or extra service; the price is
that results travel through the log (fine for tables of a few hundred MB at most).

A job runs ``python -m cluster.ship_outputs --dir /tmp/tmp.x1 0-dist.tsv``; :func:`parse` reads
the blocks back from a log text and :func:`strip` removes them for display.

Example::

    >>> import io, os, tempfile
    >>> from cluster.ship_outputs import parse, ship, strip
    >>> path = os.path.join(tempfile.mkdtemp(), "d.tsv")
    >>> _ = open(path, "w").write("0\\t0.0\\n")
    >>> log = io.StringIO()
    >>> ship([path], out=log)
    >>> parse("job output\\n" + log.getvalue()) == {path: b"0\\t0.0\\n"}
    True
    >>> strip("job output\\n" + log.getvalue()) == f"job output\\n[result file {path} shipped]\\n"
    True
"""

from __future__ import annotations

import base64
import hashlib
import os
import sys
import zlib
from pathlib import Path

from hgraph.common.errors import HGraphError
from hgraph.common.fileio import write_stream

BEGIN = "=== hgraph-output-begin"
END = "=== hgraph-output-end ==="
LINE = 8192


def ship(paths, out=None) -> None:
    """Print every file in ``paths`` as one block on ``out`` (stdout), by the one writer (a
    log that cannot be written is one line)."""
    out = out or sys.stdout
    for path in paths:
        try:
            data = Path(path).read_bytes()
        except OSError as err:
            raise HGraphError(f"{path}: cannot read the result file: {err.strerror}") from None
        digest = hashlib.sha256(data).hexdigest()
        packed = base64.b64encode(zlib.compress(data, 6)).decode("ascii")
        write_stream(out, f"{BEGIN} {path} {len(data)} {digest} ===\n")
        for i in range(0, len(packed), LINE):
            write_stream(out, packed[i:i + LINE] + "\n")
        write_stream(out, END + "\n")


def parse(log: str) -> dict[str, bytes]:
    """The files shipped in ``log``: name -> content (size and SHA-256 checked)."""
    files: dict[str, bytes] = {}
    name = None
    chunks: list[str] = []
    for line in log.splitlines():
        if name is None:
            if line.startswith(BEGIN):
                head = line[len(BEGIN):].strip().rstrip("=").split()
                name, size, digest = head[0], int(head[1]), head[2]
                chunks = []
        elif line.strip() == END:
            data = zlib.decompress(base64.b64decode("".join(chunks)))
            if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
                raise ValueError(f"result file {name} arrived damaged in the job log")
            files[name] = data
            name = None
        else:
            chunks.append(line.strip())
    return files


#: The line :func:`strip` puts where a shipped block was: a status line, not the job's output.
PLACEHOLDER = "[result file {} shipped]"


def strip(log: str) -> str:
    """``log`` without the shipped blocks (each replaced by one line naming the file, which
    :func:`is_placeholder` recognises)."""
    kept, inside = [], False
    for line in log.splitlines(keepends=True):
        if not inside and line.startswith(BEGIN):
            inside = True
            kept.append(PLACEHOLDER.format(line[len(BEGIN):].split()[0]) + "\n")
        elif inside:
            inside = line.strip() != END
        else:
            kept.append(line)
    return "".join(kept)


def is_placeholder(line: str) -> bool:
    """Whether ``line`` is the line :func:`strip` left for a shipped block."""
    head, _, tail = PLACEHOLDER.partition("{}")
    text = line.rstrip("\n")
    return text.startswith(head) and text.endswith(tail) and not text.startswith(BEGIN)


def _main(argv: list[str]) -> int:
    """``python -m cluster.ship_outputs [--dir DIR] NAME...``: names are relative to DIR; the
    exit code (a file that cannot be read or a log that cannot be written: one line, 2)."""
    if argv[:1] == ["--dir"]:
        os.chdir(argv[1])
        argv = argv[2:]
    try:
        ship(argv)
    except HGraphError as err:
        print(f"hgraph: error: {err}", file=sys.stderr)
        return err.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
