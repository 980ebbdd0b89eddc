"""Sweep batches as Ray tasks (the optional ``ray`` extra): one batch per task, one task per
accelerator when the cluster has them.

``run_on_ray`` cuts the jobs into batches exactly as the local path does
(:func:`~felix_jax.experiment.sweep.plan_batches`) and runs each with
:func:`~felix_jax.experiment.sweep.run_sweep` inside a Ray task; every experiment writes
its usual results folder (on a cluster, give ``--out`` on a file system every node sees), so
the folders, and a half-finished sweep's resume, are the same as with the local path.
``ray.init(address=...)`` connects to the user's cluster (``address=None``: ``RAY_ADDRESS``,
or a local instance started here).

A batch whose node leaves the cluster while it runs is run again elsewhere (Ray's task retries,
``max_retries``; its cells start over, or from their snapshots); once the retries are spent, or
for any other failure of the cluster itself, :class:`ClusterError` says in one line which cells
were lost, and the same command run again keeps every finished cell and runs the rest. A cell
that fails by itself fails the sweep with its own error, as on the local path.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable


def _ray():
    try:
        import ray
    except ImportError:
        raise ImportError("the ray executor needs Ray: pip install 'felix-jax[ray]' (or pip install ray)") from None
    return ray


class ClusterError(RuntimeError):
    """The cluster lost a batch (its node died, its worker crashed, ...): one line naming its cells."""


def _run_batch(jobs, plot, wall_budget_s):
    """Inside a Ray worker: one batch; the summaries come back (records stay on the worker), with
    where it ran."""
    import socket

    import ray

    from .sweep import run_sweep

    results = run_sweep(jobs, batch=len(jobs), plot=plot, wall_budget_s=wall_budget_s, log=lambda _line: None)
    return {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(),
            "summaries": [None if r is None else r.summary for r in results]}


def _cell_names(jobs, members) -> str:
    names = []
    for i in members:
        sc = jobs[i].scenario
        names.append(f"{sc.strategy}/{sc.availability}/seed{sc.seed}")
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _lost(ray, error, jobs, members, out_hint: str) -> BaseException:
    """What a batch's failure raises: the cell's own error when the batch itself raised it, else a
    :class:`ClusterError` (one line)."""
    if isinstance(error, ray.exceptions.RayTaskError):
        cause = getattr(error, "cause", None)
        if isinstance(cause, BaseException):
            return cause
        return error.as_instanceof_cause()
    first = (str(error).strip().splitlines() or [""])[0]
    lost = ClusterError(f"ray: the batch of {_cell_names(jobs, members)} was lost ({type(error).__name__}: "
                        f"{first[:200]}); its node may have left the cluster. Finished cells are kept{out_hint}: "
                        "run the same command again to continue")
    lost.members = list(members)
    return lost


def run_on_ray(jobs: list, batch: int, *, address: str | None = None, plot: bool = True,
               wall_budget_s: float | None = None, num_cpus: float = 1, num_gpus: float | None = None,
               log: Callable[[str], None] | None = None, max_retries: int = 3) -> list:
    """One summary dict per job (None for a job not run), batches dispatched as Ray tasks.

    ``num_gpus`` per task: default 1 when the cluster has GPUs (one batch per accelerator), else 0.
    ``max_retries``: times a batch is run again when its worker or node dies (Ray's task retries).
    Each finished batch's log line names the node (and host) it ran on.
    """
    from .sweep import plan_batches

    ray = _ray()
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    if not ray.is_initialized():
        ray.init(address=address)
    if num_gpus is None:
        num_gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
    task = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_retries=max_retries)(_run_batch)
    batches = plan_batches(jobs, batch)
    refs = {task.remote([jobs[i] for i in members], plot, wall_budget_s): members for members in batches}
    log(f"ray: {len(jobs)} experiments in {len(batches)} batches ({num_cpus} CPU, {num_gpus} GPU each)")
    summaries: list = [None] * len(jobs)
    pending = list(refs)
    folders = {str(Path(j.out_dir).parent) for j in jobs if j.out_dir is not None}
    out_hint = f" in {folders.pop()}" if len(folders) == 1 else ""
    lost: list[ClusterError] = []  # batches the cluster lost: the others finish first
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            members = refs[done[0]]
            try:
                result = ray.get(done[0])
            except ray.exceptions.RayError as e:
                error = _lost(ray, e, jobs, members, out_hint)
                if not isinstance(error, ClusterError):
                    raise error from None
                log(f"{error} (waiting for the other batches)" if pending else str(error))
                lost.append(error)
                continue
            for i, summary in zip(members, result["summaries"]):
                summaries[i] = summary
            log(f"ray: batch of {len(members)} finished on node {result['node'][:12]} ({result['host']}) "
                f"({len(refs) - len(pending)}/{len(refs)})")
    except BaseException:
        for ref in pending:  # stop the rest; finished cells are on disk and kept on the next run
            ray.cancel(ref, force=True)
        raise
    if len(lost) == 1:
        raise lost[0]
    if lost:
        cells = sum(len(e.members) for e in lost)
        raise ClusterError(f"ray: {len(lost)} batches ({cells} cells) were lost, the first: {lost[0]}")
    return summaries
