"""Sweep batches as Ray tasks (the optional ``ray`` extra): one batch per task, one task per
accelerator when the cluster has them.

``run_on_ray`` cuts the jobs into batches exactly as the local path does
(:func:`~felix_jax.experiment.sweep.plan_batches`) and runs each with
:func:`~felix_jax.experiment.sweep.run_sweep` inside a Ray task; every experiment writes
its usual results folder (on a cluster, give ``--out`` on a file system every node sees), so
the folders, and a half-finished sweep's resume, are the same as with the local path.
``ray.init(address=...)`` connects to the user's cluster (``address=None``: ``RAY_ADDRESS``,
or a local instance started here).
"""

from __future__ import annotations

import sys
from typing import Callable


def _ray():
    try:
        import ray
    except ImportError:
        raise ImportError("the ray executor needs Ray: pip install 'felix-jax[ray]' (or pip install ray)") from None
    return ray


def _run_batch(jobs, plot, wall_budget_s):
    """Inside a Ray worker: one batch; the summaries come back (records stay on the worker)."""
    from .sweep import run_sweep

    results = run_sweep(jobs, batch=len(jobs), plot=plot, wall_budget_s=wall_budget_s, log=lambda _line: None)
    return [None if r is None else r.summary for r in results]


def run_on_ray(jobs: list, batch: int, *, address: str | None = None, plot: bool = True,
               wall_budget_s: float | None = None, num_cpus: float = 1, num_gpus: float | None = None,
               log: Callable[[str], None] | None = None) -> list:
    """One summary dict per job (None for a job not run), batches dispatched as Ray tasks.

    ``num_gpus`` per task: default 1 when the cluster has GPUs (one batch per accelerator), else 0.
    """
    from .sweep import plan_batches

    ray = _ray()
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    if not ray.is_initialized():
        ray.init(address=address)
    if num_gpus is None:
        num_gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
    task = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus)(_run_batch)
    batches = plan_batches(jobs, batch)
    refs = {task.remote([jobs[i] for i in members], plot, wall_budget_s): members for members in batches}
    log(f"ray: {len(jobs)} experiments in {len(batches)} batches ({num_cpus} CPU, {num_gpus} GPU each)")
    summaries: list = [None] * len(jobs)
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            members = refs[done[0]]
            for i, summary in zip(members, ray.get(done[0])):
                summaries[i] = summary
            log(f"ray: batch of {len(members)} finished ({len(refs) - len(pending)}/{len(refs)})")
    except BaseException:
        for ref in pending:  # stop the rest; finished cells are on disk and kept on the next run
            ray.cancel(ref, force=True)
        raise
    return summaries
