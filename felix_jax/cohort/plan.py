"""How a batch of per-client tasks is laid onto the device: vmap, lax.map, or chunks.

vmap runs every task at once (best on accelerators, memory grows with K);
lax.map runs tasks one after the other inside one compiled call (least memory,
no per-task dispatch); ``chunked`` is lax.map over vmapped chunks. The choice per
backend comes from measurements recorded in BENCHMARKS.md (``auto_plan``).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Literal

import jax


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


def run_plan(fn: Callable, plan: ExecutionPlan, args: tuple) -> object:
    """Applies per-task ``fn(*task_args)`` over the leading axis of ``args``."""
    k = jax.tree_util.tree_leaves(args)[0].shape[0]
    if plan.kind == "vmap" or (plan.kind == "chunked" and plan.chunk >= k):
        return jax.vmap(fn)(*args)
    if plan.kind == "map" or plan.chunk == 1:
        return jax.lax.map(lambda a: fn(*a), args)
    c = plan.chunk
    chunks = jax.tree_util.tree_map(lambda a: a.reshape((k // c, c) + a.shape[1:]), args)
    out = jax.lax.map(lambda a: jax.vmap(fn)(*a), chunks)
    return jax.tree_util.tree_map(lambda o: o.reshape((k,) + o.shape[2:]), out)


def auto_plan(backend: str | None = None) -> ExecutionPlan:
    """The measured-fastest plan for a backend (see BENCHMARKS.md, "plan sweep")."""
    backend = backend or jax.default_backend()
    if backend == "cpu":
        return CPU_PLAN
    return ExecutionPlan("vmap")


# Set from benchmarks/cohort_throughput.py --sweep-plans on the 2-core CI machine.
CPU_PLAN = ExecutionPlan("chunked", 8)
