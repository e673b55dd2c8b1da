"""Run the executor on a GPU of the Ray cluster: an actor with ``num_gpus=1`` (``hgraph submit
execute --runtime ray``).

It lives with the execute job, not in the planner: the planner never imports Ray. Ray is
imported inside these functions only, when the job asks for a cluster. The actor receives the
graph and schedule as text (small) and returns the report of
:func:`planner.execute.executor.evaluate`, computed on CuPy in the actor.
"""

from __future__ import annotations


def cluster_gpus() -> float:
    """GPUs the connected Ray cluster offers (0 when Ray is not initialised)."""
    import ray

    if not ray.is_initialized():
        return 0.0
    return float(ray.cluster_resources().get("GPU", 0.0))


def _evaluate_text(graph_text: str, schedule_text: str, options: dict) -> dict:
    from planner import cg
    from planner.execute import executor
    from planner.schedule import Schedule

    g = cg.loads(graph_text, path=options.pop("graph_name", "<graph>"))
    return executor.evaluate(g, Schedule.loads(schedule_text), **options)


def evaluate_on_gpu(graph_text: str, schedule_text: str, options: dict, timeout: float = 600.0,
                    num_gpus: float = 1, backend: str = "cupy") -> dict:
    """Evaluate in a Ray actor holding ``num_gpus`` GPUs (the caller has checked :func:`cluster_gpus`).

    ``num_gpus=0, backend="numpy"`` runs the same actor path on a CPU-only cluster (tests).
    """
    import ray

    @ray.remote
    class GPUWorker:
        def evaluate(self, graph_text, schedule_text, options):
            report = _evaluate_text(graph_text, schedule_text, dict(options, backend=backend))
            report["worker_pid"] = __import__("os").getpid()
            return report

    worker = GPUWorker.options(num_gpus=num_gpus).remote()
    try:
        return ray.get(worker.evaluate.remote(graph_text, schedule_text, options), timeout=timeout)
    finally:
        ray.kill(worker)
