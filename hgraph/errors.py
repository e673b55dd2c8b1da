"""Temporary alias of :mod:`hgraph.common.errors` while in-flight branches move over; removed in
this session (issue 25)."""

from hgraph.common.errors import *  # noqa: F401,F403
