"""A device-side store of live model versions.

Tasks may start from different model versions (async FL); the cohort engine
gathers each task's start parameters from one stacked array by slot index,
inside the jitted call, so no per-task host->device copy happens. The host keeps
the version -> slot map and frees slots when no pending task needs a version.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..models.base import Params


def _append_zero_rows(stacked: Params, n: int) -> Params:
    return jax.tree_util.tree_map(lambda s: jnp.concatenate([s, jnp.zeros((n,) + s.shape[1:], s.dtype)]), stacked)


@partial(jax.jit, donate_argnums=0)
def _write_slot(stacked: Params, slot: jax.Array, params: Params) -> Params:
    return jax.tree_util.tree_map(lambda s, p: s.at[slot].set(p.astype(s.dtype)), stacked, params)


class VersionStore:
    """Stacked parameters with ``capacity`` slots (leaves shaped (capacity, ...))."""

    def __init__(self, template: Params, capacity: int = 8):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.stacked = jax.tree_util.tree_map(lambda p: jnp.zeros((self.capacity,) + p.shape, p.dtype), template)
        self._slot_of: dict[int, int] = {}
        self._free = list(range(self.capacity))

    def __contains__(self, version: int) -> bool:
        return version in self._slot_of

    def __len__(self) -> int:
        return len(self._slot_of)

    @property
    def versions(self) -> list[int]:
        return sorted(self._slot_of)

    def put(self, version: int, params: Params) -> int:
        """Stores ``params`` as ``version`` (overwrites it if present); returns its slot."""
        if version in self._slot_of:
            slot = self._slot_of[version]
        else:
            if not self._free:
                self._grow()
            slot = self._free.pop(0)
            self._slot_of[version] = slot
        self.stacked = _write_slot(self.stacked, jnp.int32(slot), params)
        return slot

    def slot(self, version: int) -> int:
        try:
            return self._slot_of[version]
        except KeyError:
            raise KeyError(f"model version {version} is not in the store (live: {self.versions})") from None

    def slots(self, versions) -> list[int]:
        return [self.slot(int(v)) for v in versions]

    def params(self, version: int) -> Params:
        slot = self.slot(version)
        return jax.tree_util.tree_map(lambda s: s[slot], self.stacked)

    def release(self, version: int) -> None:
        """Frees a version's slot (its parameters may be overwritten by a later put)."""
        slot = self._slot_of.pop(version)
        self._free.append(slot)
        self._free.sort()

    def state_dict(self) -> dict:
        """Host bookkeeping plus the live versions' parameters as device rows (snapshots).

        Only live slots are kept: a free slot is always written before it is read.
        ``rows`` has leaves (live versions, ...) in ``versions`` order, or is None.
        """
        versions = self.versions
        slots = [self._slot_of[v] for v in versions]
        rows = _gather_rows(self.stacked, jnp.asarray(np.asarray(slots, np.int32))) if slots else None
        return {"capacity": self.capacity, "versions": versions, "slots": slots, "free": list(self._free),
                "rows": rows}

    def load_state_dict(self, state: dict) -> None:
        self.capacity = int(state["capacity"])
        self.stacked = _stack_rows(self.stacked, self.capacity, state["slots"], state["rows"])
        self._slot_of = {int(v): int(s) for v, s in zip(state["versions"], state["slots"])}
        self._free = [int(s) for s in state["free"]]

    def _grow(self) -> None:
        # Doubling keeps the number of distinct store shapes (and recompiles) logarithmic.
        old = self.capacity
        self.capacity *= 2
        self.stacked = _append_zero_rows(self.stacked, old)
        self._free.extend(range(old, self.capacity))


@partial(jax.jit, donate_argnums=0)
def _scatter_rows(stacked: Params, slots: jax.Array, rows: Params) -> Params:
    return jax.tree_util.tree_map(lambda s, r: s.at[slots].set(r.astype(s.dtype)), stacked, rows)


@jax.jit
def _gather_rows(stacked: Params, slots: jax.Array) -> Params:
    return jax.tree_util.tree_map(lambda s: s[slots], stacked)


def _stack_rows(like: Params, size: int, slots, rows: Params | None) -> Params:
    """A stacked store of ``size`` zero rows (shapes and dtypes of ``like``'s rows) with ``rows`` at ``slots``."""
    stacked = jax.tree_util.tree_map(lambda s: jnp.zeros((size,) + s.shape[1:], s.dtype), like)
    if rows is None:
        return stacked
    return _scatter_rows(stacked, jnp.asarray(np.asarray(slots, np.int32)), rows)


class DeltaStore:
    """Device rows for model updates waiting to be aggregated (fixed shapes, no eager gathers).

    ``write`` scatters a whole padded cohort output at once (padded rows go to a
    trash row), ``gather`` takes K rows for an aggregation; both are jitted, so
    they compile once per bucket size / K, not once per flush. The host hands out
    and frees row ids; the store doubles when full.
    """

    def __init__(self, template: Params, capacity: int = 64):
        self.capacity = int(capacity)
        self.stacked = jax.tree_util.tree_map(lambda p: jnp.zeros((self.capacity + 1,) + p.shape, p.dtype), template)
        self._free = list(range(self.capacity))

    @property
    def trash(self) -> int:
        return self.capacity

    def write(self, rows: Params, real: np.ndarray) -> np.ndarray:
        """Stores rows ``real`` of ``rows`` (leaves (B, ...)); returns their slots (same order)."""
        real = np.asarray(real, np.int64)
        while len(self._free) < len(real):
            self._grow()
        slots = np.array([self._free.pop() for _ in real], np.int64)
        size = jax.tree_util.tree_leaves(rows)[0].shape[0]
        target = np.full(size, self.trash, np.int32)
        target[real] = slots
        self.stacked = _scatter_rows(self.stacked, jnp.asarray(target), rows)
        return slots

    def gather(self, slots) -> Params:
        return _gather_rows(self.stacked, jnp.asarray(np.asarray(slots, np.int32)))

    def free(self, slots) -> None:
        self._free.extend(int(s) for s in slots)

    @property
    def num_used(self) -> int:
        return self.capacity - len(self._free)

    def state_dict(self) -> dict:
        """Host bookkeeping plus the rows in use as device rows (snapshots); free rows and the trash row
        are always written before they are read, so they are not kept."""
        free = set(self._free)
        used = [s for s in range(self.capacity) if s not in free]
        rows = self.gather(used) if used else None
        return {"capacity": self.capacity, "used": used, "free": list(self._free), "rows": rows}

    def load_state_dict(self, state: dict) -> None:
        self.capacity = int(state["capacity"])
        self.stacked = _stack_rows(self.stacked, self.capacity + 1, state["used"], state["rows"])
        self._free = [int(s) for s in state["free"]]

    def _grow(self) -> None:
        old = self.capacity
        self.capacity *= 2
        # the old trash row (index old) becomes an ordinary free row; the new trash is the last
        self.stacked = _append_zero_rows(self.stacked, old)
        self._free.extend(range(old, self.capacity))
