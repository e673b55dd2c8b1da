"""Temporary alias of :mod:`hgraph.common.progress` while in-flight branches move over; removed in
this session (issue 25)."""

from hgraph.common.progress import *  # noqa: F401,F403
