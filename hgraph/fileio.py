"""Temporary alias of :mod:`hgraph.common.fileio` while in-flight branches move over; removed in
this session (issue 25)."""

from hgraph.common.fileio import *  # noqa: F401,F403
