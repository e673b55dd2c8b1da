"""Numbers as people read them: the one byte formatter every report, error line and progress
bar uses (the engine's superstep lines and the planner's reports said the same size two ways).

Example::

    >>> format_bytes(1536), format_bytes(4004508676), format_bytes(12)
    ('1.50 KiB', '3.73 GiB', '12 B')
"""

from __future__ import annotations

__all__ = ["format_bytes"]


def format_bytes(n: int) -> str:
    """Human-readable bytes with binary units (``3.73 GiB``)."""
    n = int(n)
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"
