"""How hgraph reaches Ray: an embedded local Ray by default, an existing cluster by address,
Ray Jobs submission, and a local multi-node cluster for trying things.

* :mod:`cluster.connect` — the one place that connects a process to Ray (``ensure_ray``);
* :mod:`cluster.jobs_api` — ``hgraph submit JOB ... --address http://HOST:8265`` as a Ray Job;
* :mod:`cluster.ship_outputs` — result files back through the job's log;
* :mod:`cluster.commands_status`, :mod:`cluster.commands_logs` — ``hgraph status|logs JOB_ID``;
* :mod:`cluster.commands_cluster` — ``hgraph cluster up|down``;
* ``cluster/configs/`` — the image, a Ray autoscaler YAML and a KubeRay ``RayCluster``.
"""
