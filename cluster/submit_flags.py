"""The Ray Jobs flags of ``hgraph submit JOB`` and the test for "submit this as a Ray Job".

Every ``hgraph submit`` builds its parser with these flags and asks :func:`wants_ray_job`, but
only a submission needs :mod:`cluster.jobs_api` (staging, the Jobs SDK, log streaming); keeping
the flags here lets a local run (``--runtime local``) start without loading any of that.
"""

from __future__ import annotations

import argparse
import os

from hgraph.common.errors import HGraphError
from hgraph.runtime.ray_connect import is_dashboard_address

DEFAULT_JOB_TIMEOUT_S = 3600.0


def add_submit_arguments(parser: argparse.ArgumentParser) -> None:
    """The Ray Jobs flags every ``hgraph submit JOB`` takes (``--address`` if the job lacks it)."""
    if "--address" not in parser._option_string_actions:  # noqa: SLF001 - argparse has no API
        parser.add_argument("--address", default=None,
                            help="Ray cluster: HOST:PORT joins it, http://HOST:8265 submits a Ray Job")
    group = parser.add_argument_group("Ray Jobs (with --address http://HOST:8265)")
    how = group.add_mutually_exclusive_group()
    how.add_argument("--wait", dest="detach", action="store_false", default=None,
                     help="stream the job's log and fetch its result files when it ends (default)")
    how.add_argument("--detach", dest="detach", action="store_true",
                     help="submit, print the job id and return")
    group.add_argument("--job-timeout", type=float, default=DEFAULT_JOB_TIMEOUT_S, metavar="SECONDS",
                       help=f"give up waiting after this long (default {DEFAULT_JOB_TIMEOUT_S:g})")
    group.add_argument("--python", default=None, metavar="EXE",
                       help="interpreter on the cluster (default: $HGRAPH_JOB_PYTHON or python3)")


def wants_ray_job(args: argparse.Namespace) -> bool:
    """True when ``hgraph submit`` should go through the Jobs API rather than run here."""
    address = getattr(args, "address", None) or ""
    if is_dashboard_address(address):
        return True
    if getattr(args, "detach", None) is not None:
        if not address and is_dashboard_address(os.environ.get("RAY_ADDRESS", "")):
            return True
        raise HGraphError("--detach/--wait submit a Ray Job: give --address http://HOST:8265")
    return False
