"""How a batch of per-client tasks is laid onto the device: vmap, lax.map, or chunks.

vmap runs every task at once (best on accelerators, memory grows with K);
lax.map runs tasks one after the other inside one compiled call (least memory,
no per-task dispatch); ``chunked`` is lax.map over vmapped chunks. Under every
plan a chunk stops stepping when its longest task is done (``cohort_scan``). The choice per
backend comes from measurements recorded in BENCHMARKS.md (``auto_plan``). With several
devices the plan applies per device, to each device's share of the tasks (bottom of file).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


@dataclasses.dataclass(frozen=True)
class ExecutionPlan:
    kind: Literal["vmap", "map", "chunked"] = "vmap"
    chunk: int = 1  # tasks per vmapped chunk when kind == "chunked"

    def __post_init__(self):
        if self.kind not in ("vmap", "map", "chunked"):
            raise ValueError(f"unknown plan kind {self.kind!r}")
        if self.chunk < 1 or self.chunk & (self.chunk - 1):
            raise ValueError(f"chunk must be a power of two >= 1, got {self.chunk}")

    @staticmethod
    def parse(text: str) -> "ExecutionPlan":
        """'vmap', 'map', or 'chunked:8'."""
        kind, _, chunk = text.partition(":")
        return ExecutionPlan(kind, int(chunk) if chunk else 1)  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"chunked:{self.chunk}" if self.kind == "chunked" else self.kind


def cohort_scan(init_fn: Callable, step_fn: Callable, final_fn: Callable, plan: ExecutionPlan, args: tuple,
                lengths: jax.Array, scan_len: int):
    """Runs per-task ``init -> scan(step) -> final`` for a batch of tasks under ``plan``.

    ``init_fn(*task_args) -> (ctx, carry)``, ``step_fn(ctx, carry, s, length) -> carry``
    (a no-op for ``s >= length``), ``final_fn(ctx, carry, length) -> out``. The step
    scan runs *outside* the vmap over a chunk's tasks, and each step is skipped by
    ``lax.cond`` once every task of the chunk is done: a chunk costs its longest
    task, not ``scan_len``, so one compiled scan length serves every bucket, and a
    chunk of padded tasks (length 0) costs nothing. Callers sort tasks by length
    so chunks are homogeneous.
    """
    k = lengths.shape[0]
    chunk = k if plan.kind == "vmap" else (1 if plan.kind == "map" else min(plan.chunk, k))

    def run_chunk(task_args, lens):
        ctx, carry = jax.vmap(init_fn)(*task_args)
        longest = lens.max()
        vstep = jax.vmap(step_fn, in_axes=(0, 0, None, 0))

        def body(c, s):
            return jax.lax.cond(s < longest, lambda c: vstep(ctx, c, s, lens), lambda c: c, c), None

        carry, _ = jax.lax.scan(body, carry, jnp.arange(scan_len))
        return jax.vmap(final_fn)(ctx, carry, lens)

    if chunk >= k:
        return run_chunk(args, lengths)
    split = lambda a: a.reshape((k // chunk, chunk) + a.shape[1:])  # noqa: E731
    out = jax.lax.map(lambda a: run_chunk(*a), (jax.tree_util.tree_map(split, args), split(lengths)))
    return jax.tree_util.tree_map(lambda o: o.reshape((k,) + o.shape[2:]), out)


def auto_plan(backend: str | None = None) -> ExecutionPlan:
    """The measured-fastest plan for a backend (see BENCHMARKS.md, "plan sweep")."""
    backend = backend or jax.default_backend()
    if backend == "cpu":
        return CPU_PLAN
    return ExecutionPlan("vmap")


# Set from benchmarks/cohort_throughput.py --sweep-plans on the 2-core CI machine.
CPU_PLAN = ExecutionPlan("map")


# ---- several devices ---------------------------------------------------------------------------
# A flush's tasks are split over a one-axis Mesh named "clients": the task arrays (slots, clients,
# task ids, lengths) are sharded along it, the client data set and the version store are replicated
# (every device holds them), and each device runs ``cohort_scan`` with the per-device plan on its
# share. The outputs come back replicated (one all-gather per call), so every process reads the
# whole flush on its own first device and the host code after the call is unchanged.
CLIENTS_AXIS = "clients"


def cohort_devices(devices: int | None = None) -> list:
    """The devices a cohort runs on: all of ``jax.devices()`` (None) or its first ``devices``.

    ``jax.devices()`` spans every host after ``jax.distributed.initialize``; a run over several
    hosts takes all of them (each host runs the same simulation and owns its share of each flush).
    """
    every = jax.devices()
    if devices is None:
        return every
    if not 1 <= devices <= len(every):
        raise ValueError(f"devices must be in [1, {len(every)}] (the devices jax sees), got {devices}")
    if devices < len(every) and jax.process_count() > 1:
        raise ValueError("a run over several hosts shards over all their devices (devices=None)")
    return every[:devices]


def task_layout(num_tasks: int, num_devices: int) -> np.ndarray:
    """Where each task of a bucket goes: ``sharded[p] = tasks[layout[p]]``.

    Buckets arrive sorted by length (padding last); dealing them out round-robin
    (device ``j`` gets tasks ``j, j + d, j + 2d, ...``) gives every device a sorted share
    of about the same work, where contiguous blocks would leave the longest tasks, and so
    the whole call's duration, to the last device.
    """
    if num_tasks % num_devices:
        raise ValueError(f"{num_tasks} tasks do not split over {num_devices} devices")
    return np.arange(num_tasks).reshape(num_tasks // num_devices, num_devices).T.reshape(-1)


def sharded_cohort(run: Callable, mesh: Mesh, num_task_args: int) -> Callable:
    """``run(stacked, data, *task_args)`` over ``mesh``: task arrays split along "clients".

    ``jax.shard_map`` (each device runs ``run`` on its share, so per-device plans such as
    lax.map keep their meaning: the partitioner never sees a scan over a sharded axis)
    under ``jax.jit`` with ``out_shardings`` replicated: XLA gathers the per-device
    outputs into every device's copy. Callers place the inputs (see ``place_replicated``
    and ``place_by_task``), so the same code runs on one host or several.
    """
    by_task = PartitionSpec(CLIENTS_AXIS)
    # check_vma=False: per-task carries start from constants (zero statistics), which the checker
    # types as equal on every device, and the steps make them per-device; ``run`` uses no
    # collectives, so the check has nothing to protect.
    mapped = jax.shard_map(run, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec()) + (by_task,) * num_task_args,
                           out_specs=by_task, check_vma=False)
    return jax.jit(mapped, out_shardings=NamedSharding(mesh, PartitionSpec()))


def place_replicated(tree, mesh: Mesh):
    """``tree``'s arrays copied onto every device of ``mesh`` (a no-op for arrays already there).

    Built from per-device copies (``make_array_from_single_device_arrays``): each process
    supplies its own devices' copies, which is what several hosts need.
    """
    sharding = NamedSharding(mesh, PartitionSpec())

    def place(a):
        if isinstance(a, jax.Array) and a.sharding.is_equivalent_to(sharding, a.ndim):
            return a
        local = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
        return jax.make_array_from_single_device_arrays(a.shape, sharding, [jax.device_put(a, d) for d in local])

    return jax.tree_util.tree_map(place, tree)


def place_by_task(host_array: np.ndarray, mesh: Mesh) -> jax.Array:
    """A host array (the same on every process) split along its first axis over ``mesh``."""
    sharding = NamedSharding(mesh, PartitionSpec(CLIENTS_AXIS))
    return jax.make_array_from_callback(host_array.shape, sharding, lambda index: host_array[index])


def local_copy(tree, device):
    """The shard of each replicated output array that lives on ``device`` (no copy)."""
    def pick(a):
        for shard in a.addressable_shards:
            if shard.device == device:
                return shard.data
        raise ValueError(f"no copy of this output on {device}")

    return jax.tree_util.tree_map(pick, tree)
