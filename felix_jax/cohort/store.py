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

from ..models.base import Params


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

    def _grow(self) -> None:
        # Doubling keeps the number of distinct store shapes (and recompiles) logarithmic.
        old = self.capacity
        self.capacity *= 2
        self.stacked = jax.tree_util.tree_map(
            lambda s: jnp.concatenate([s, jnp.zeros((old,) + s.shape[1:], s.dtype)]), self.stacked)
        self._free.extend(range(old, self.capacity))
