"""``hgraph logs JOB_ID``: the log of a Ray Job submitted with ``hgraph submit --address``.

Prints the job's log so far (result-file blocks shown as one line each). ``--follow`` keeps
streaming until the job ends (within ``--timeout`` seconds) and exits non-zero, with the job's
error line, when it failed. ``--fetch`` writes the job's result files under ``--to DIR`` (default:
the current directory), at the paths named when it was submitted, made relative (an absolute
path loses its root; a path with ``..`` is refused): the job's metadata comes from the cluster,
so it must not be able to write anywhere else. This is the way to collect the results of
``hgraph submit ... --detach``.

Command: ``hgraph logs raysubmit_8Wb3... --address http://127.0.0.1:8265 --follow --fetch --to
results/`` (docs/cluster.md; ``tests/test_ray_jobs.py`` runs it).
"""

from __future__ import annotations

import sys

NAME = "logs"
HELP = "log (and result files, --fetch) of a Ray Job submitted with `hgraph submit --address`"


def add_arguments(parser) -> None:
    parser.add_argument("job_id", metavar="JOB_ID", help="the id `hgraph submit --detach` printed")
    parser.add_argument("--address", default=None,
                        help="Ray Jobs address http://HOST:8265 (default: RAY_ADDRESS)")
    parser.add_argument("--follow", action="store_true", help="stream until the job ends")
    parser.add_argument("--fetch", action="store_true",
                        help="write the job's result files, at the paths given at submission, "
                             "under --to DIR")
    parser.add_argument("--to", default=".", metavar="DIR",
                        help="with --fetch: the directory the result files go under (default: "
                             "the current one; absolute paths lose their root, '..' is refused)")
    parser.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                        help="with --follow: give up after this long (default 3600)")


def main(args) -> int:
    from cluster import jobs_api, ship_outputs
    from hgraph.common.errors import HGraphError
    from hgraph.common.fileio import write_stream

    client = jobs_api.connect(args.address)
    if args.follow:
        return jobs_api.follow(client, args.job_id, timeout=args.timeout, fetch=args.fetch,
                               to=args.to)
    info = jobs_api.job_info(client, args.job_id)
    log = ship_outputs.strip(jobs_api.job_logs(client, args.job_id))
    write_stream(sys.stdout, jobs_api.job_output(log))
    if args.fetch:
        status = str(getattr(info.status, "value", info.status))
        if status != "SUCCEEDED":
            raise HGraphError(f"Ray job {args.job_id} is {status}: no result files to fetch", exit_code=1)
        jobs_api.fetch_outputs(client, args.job_id, info, to=args.to)
    return 0
