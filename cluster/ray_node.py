"""``python -m cluster.ray_node start ...``: ``ray start`` that keeps a loopback node address.

``hgraph cluster up`` binds its nodes to loopback by default (:mod:`cluster.commands_cluster`).
Plain ``ray start --node-ip-address 127.0.0.1`` cannot: Ray "resolves" a loopback address to
the machine's network address (``services.resolve_ip_for_localhost``), and its servers then
listen on every interface. The only switch Ray offers (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``)
also refuses to start any node but the head. So this entry point runs Ray's own ``ray`` command
with that one rewrite turned off — a loopback address stays loopback — and changes nothing else
(measured with ``ss -ltn``: every port of a 2-node cluster started this way listens on
127.0.0.1 only).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from ray._private import services
    from ray.scripts.scripts import main as ray_main

    services.resolve_ip_for_localhost = lambda host: host
    sys.argv = ["ray", *argv]
    return ray_main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
