"""Reaching and operating Ray clusters: Ray Jobs submission, job status and logs, and a local
multi-node cluster for trying things. Connecting a process to Ray is the engine's own business
(:mod:`hgraph.runtime.ray_connect`); this package builds on it and the engine never imports it.

* :mod:`cluster.jobs_api` — ``hgraph submit JOB ... --address http://HOST:8265`` as a Ray Job;
* :mod:`cluster.submit_flags` — the flags of that (``--address``, ``--wait``/``--detach`` ...),
  which every ``hgraph submit`` parser has, without loading :mod:`cluster.jobs_api`;
* :mod:`cluster.ship_outputs` — result files back through the job's log;
* :mod:`cluster.commands_status`, :mod:`cluster.commands_logs` — ``hgraph status|logs JOB_ID``;
* :mod:`cluster.commands_cluster` — ``hgraph cluster up|down``;
* ``cluster/configs/`` — the image, a Ray autoscaler YAML and a KubeRay ``RayCluster``.
"""
