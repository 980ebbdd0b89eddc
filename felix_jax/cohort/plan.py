"""How a batch of per-client tasks is laid onto the device: vmap, lax.map, or chunks.

vmap runs every task at once (best on accelerators, memory grows with K);
lax.map runs tasks one after the other inside one compiled call (least memory,
no per-task dispatch); ``chunked`` is lax.map over vmapped chunks. Under every
plan a chunk stops stepping when its longest task is done (``cohort_scan``). The choice per
backend comes from measurements recorded in BENCHMARKS.md (``auto_plan``).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Literal

import jax
import jax.numpy as jnp


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
