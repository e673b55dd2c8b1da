"""``python -m cluster.ray_node start ...``: ``ray start`` that keeps a loopback node address.

``hgraph cluster up`` binds its nodes to loopback by default (:mod:`cluster.commands_cluster`).
Plain ``ray start --node-ip-address 127.0.0.1`` cannot: Ray "resolves" a loopback address to
the machine's network address (``services.resolve_ip_for_localhost``), and its servers then
listen on every interface. Ray's own switch, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, keeps every
Ray process (the node's agents, job drivers and workers inherit it) on 127.0.0.1 — but also
makes ``ray start --address`` refuse to start any node but the head. So the nodes run with that
variable set, and this entry point runs Ray's own ``ray`` command with only that refusal lifted
(and a loopback ``--node-ip-address`` kept as given) in the ``ray start`` process itself.
Measured with ``ss -ltn`` / ``/proc/net/tcp``: every port of a cluster started this way listens
on 127.0.0.1 only (``tests/test_ray_jobs.py``).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from ray._private import ray_constants, services
    from ray.scripts.scripts import main as ray_main

    ray_constants.ENABLE_RAY_CLUSTER = True               # let a second node join
    services.resolve_ip_for_localhost = lambda host: host  # and keep its loopback address
    sys.argv = ["ray", *argv]
    return ray_main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
