"""One place that decides how to reach Ray.

* no address and no ``RAY_ADDRESS``: start an embedded local Ray with laptop settings (no
  dashboard, a bounded object store, quiet logs, token auth off);
* ``address="HOST:PORT"`` or ``RAY_ADDRESS``: join that cluster.
"""

from __future__ import annotations

import os

from hgraph.errors import HGraphError

#: Object store for the embedded Ray: bounded so a laptop keeps its memory.
EMBEDDED_OBJECT_STORE_BYTES = 512 * 2**20


def ensure_ray(address: str | None = None, *, num_cpus: int | None = None) -> None:
    """Connect this process to Ray once; later calls are no-ops."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address and address.startswith("http"):
        raise HGraphError(f"{address} is a Ray Jobs (dashboard) address; the engine joins a cluster "
                          "by its GCS address HOST:PORT")
    try:
        if address:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        else:
            ray.init(address="local", num_cpus=num_cpus or max(4, os.cpu_count() or 1),
                     include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                     object_store_memory=EMBEDDED_OBJECT_STORE_BYTES)
    except (ConnectionError, ValueError, RuntimeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise HGraphError(f"cannot reach Ray at {address or 'local'}: {first}") from None
