"""``hgraph status JOB_ID``: the state of a Ray Job submitted with ``hgraph submit --address``.

Prints one line: job id, state (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED), the hgraph job
name, run time, and Ray's message. Exit 0 when the cluster answered (whatever the job's state);
an unknown job or an unreachable cluster is one error line and a non-zero exit.

Command: ``hgraph status raysubmit_8Wb3... --address http://127.0.0.1:8265`` (docs/cluster.md;
``tests/test_ray_jobs.py`` runs it).
"""

from __future__ import annotations

import sys
import time

NAME = "status"
HELP = "state of a Ray Job submitted with `hgraph submit ... --address http://HOST:8265`"


def add_arguments(parser) -> None:
    parser.add_argument("job_id", metavar="JOB_ID", help="the id `hgraph submit --detach` printed")
    parser.add_argument("--address", default=None,
                        help="Ray Jobs address http://HOST:8265 (default: RAY_ADDRESS)")


def main(args) -> int:
    from cluster import jobs_api
    from hgraph.common.fileio import write_stream

    client = jobs_api.connect(args.address)
    info = jobs_api.job_info(client, args.job_id)
    status = str(getattr(info.status, "value", info.status))
    name = (info.metadata or {}).get("hgraph_job", "?")
    started = (info.start_time or 0) / 1000.0
    ended = (info.end_time or 0) / 1000.0 or time.time()
    took = f"{ended - started:.1f}s" if started else "-"
    message = " ".join((info.message or "").split())
    write_stream(sys.stdout, f"{args.job_id}\t{status}\t{name}\t{took}\t{message}\n")
    return 0
