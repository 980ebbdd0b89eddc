"""A device-side store of live model versions.

Tasks may start from different model versions (async FL); the cohort engine
gathers each task's start parameters from one stacked array by slot index,
inside the jitted call, so no per-task host->device copy happens. The host keeps
the version -> slot map and frees slots when no pending task needs a version.
"""

from __future__ import annotations

import heapq
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


# A DeltaStore page's size, about; its rows are a power of two in [64, 4096]. A write scatters a cohort
# call's output (up to 256 rows) into each page its slots fall in, so it costs about rows x pages touched:
# 256 MiB pages hold a call of the tiny MLP's 0.79 MB updates in one or two pages, where 64 MiB pages
# (64 rows) took four or five (a 256-row write: 50 ms against 188 ms on 2 CPU cores; BENCHMARKS.md,
# "Memory bounded by a budget"). The budget reserves a page (cohort/budget.py).
PAGE_BYTES = 256 * 2 ** 20


def tree_bytes(tree) -> int:
    """Bytes of a pytree's arrays (shapes and dtypes only: nothing is read; leaves without a dtype count 0)."""
    return int(sum(int(np.prod(np.shape(x))) * np.dtype(x.dtype).itemsize for x in jax.tree_util.tree_leaves(tree)
                   if hasattr(x, "dtype")))


def page_rows_for(row_bytes: int, page_bytes: int = PAGE_BYTES) -> int:
    """Rows in a :class:`DeltaStore` page: the largest power of two whose rows fit ``page_bytes``,
    at least 64 (a page of large rows) and at most 4,096 (a page of small ones)."""
    rows = max(1, int(page_bytes) // max(1, int(row_bytes)))
    return int(min(4096, max(64, 1 << (rows.bit_length() - 1))))


@partial(jax.jit, donate_argnums=0)
def _gather_into(out: Params, page: Params, rows: jax.Array, take: jax.Array) -> Params:
    """``out`` with its rows where ``take`` holds replaced by ``page[rows]`` (the other rows kept exactly)."""
    def one(o, s):
        mask = take.reshape((-1,) + (1,) * (o.ndim - 1))
        return jnp.where(mask, s[rows], o)
    return jax.tree_util.tree_map(one, out, page)


class DeltaStore:
    """Device rows for model updates waiting to be aggregated, in fixed-size pages.

    ``write`` scatters a whole padded cohort output at once into the pages its slots fall in (padded
    rows go to a page's trash row), ``gather`` takes K rows for an aggregation, page by page; both are
    jitted on a page's shape, which never changes, so they compile once per bucket size / K. The host
    hands out the lowest free slot first, so the rows in use stay packed in the first pages.

    When every row is taken the store adds a page: nothing is copied, so memory follows the rows held
    (to within a page) and no growth holds an old and a new array at once, as a doubling array would.
    What bounds it is the number of updates held (tasks in flight plus detached ones whose client has
    not come back), not the run's length (docs/architecture.md, "What a run holds").
    """

    def __init__(self, template: Params, capacity: int = 64, page_rows: int | None = None):
        row_bytes = tree_bytes(template)
        self.page_rows = int(page_rows) if page_rows is not None else page_rows_for(row_bytes)
        if self.page_rows < 1:
            raise ValueError(f"page_rows must be >= 1, got {page_rows}")
        self._row = jax.tree_util.tree_map(lambda p: jax.ShapeDtypeStruct(np.shape(p), p.dtype), template)
        self.pages: list[Params] = []
        self._free: list[int] = []  # a heap: the lowest free slot is taken first
        self._add_pages(max(1, -(-int(capacity) // self.page_rows)))

    @property
    def capacity(self) -> int:
        return len(self.pages) * self.page_rows

    @property
    def trash(self) -> int:
        """The row (in every page) that padded rows are written to."""
        return self.page_rows

    @property
    def stacked(self) -> Params:
        """Every page's rows, trash rows included, as one array (a copy; tests and inspection only)."""
        return jax.tree_util.tree_map(lambda *leaves: jnp.concatenate(leaves), *self.pages)

    def write(self, rows: Params, real: np.ndarray) -> np.ndarray:
        """Stores rows ``real`` of ``rows`` (leaves (B, ...)); returns their slots (same order)."""
        real = np.asarray(real, np.int64)
        short = len(real) - len(self._free)
        if short > 0:
            self._add_pages(-(-short // self.page_rows))
        slots = np.array([heapq.heappop(self._free) for _ in real], np.int64)
        size = jax.tree_util.tree_leaves(rows)[0].shape[0]
        page_of = slots // self.page_rows
        for page in np.unique(page_of):
            mine = page_of == page
            target = np.full(size, self.trash, np.int32)
            target[real[mine]] = slots[mine] - page * self.page_rows
            self.pages[page] = _scatter_rows(self.pages[page], jnp.asarray(target), rows)
        return slots

    def gather(self, slots, into: Params | None = None) -> Params:
        """The rows at ``slots``, stacked in that order (leaves (len(slots), ...)). ``into``: an array of that
        shape to write them into, donated (it is deleted; the result takes its memory): a fresh buffer of K
        updates costs its page faults at every aggregation (~0.7 s for 1,000 updates of 0.79 MB on 2 CPU
        cores), a reused one none."""
        slots = np.asarray(slots, np.int64).reshape(-1)
        page_of, row = np.divmod(slots, self.page_rows)
        pages = np.unique(page_of) if len(slots) else np.zeros(1, np.int64)
        if into is None:  # the first page's rows make the array
            out, pages = _gather_rows(self.pages[pages[0]], jnp.asarray(
                np.where(page_of == pages[0], row, 0).astype(np.int32))), pages[1:]
        else:
            out = into
        for page in pages:
            take = page_of == page
            out = _gather_into(out, self.pages[page], jnp.asarray(np.where(take, row, 0).astype(np.int32)),
                               jnp.asarray(take))
        return out

    def locate(self, slot: int) -> tuple[Params, int]:
        """The page holding ``slot`` and the slot's row in it (for reading a row where it lies)."""
        page, row = divmod(int(slot), self.page_rows)
        return self.pages[page], row

    def free(self, slots) -> None:
        for s in slots:
            heapq.heappush(self._free, int(s))

    @property
    def num_used(self) -> int:
        return self.capacity - len(self._free)

    def state_dict(self) -> dict:
        """Host bookkeeping plus the rows in use as device rows (snapshots); free rows and the trash rows
        are always written before they are read, so they are not kept."""
        free = set(self._free)
        used = [s for s in range(self.capacity) if s not in free]
        rows = self.gather(used) if used else None
        return {"capacity": self.capacity, "page_rows": self.page_rows, "used": used, "free": sorted(self._free),
                "rows": rows}

    def load_state_dict(self, state: dict) -> None:
        """Restores a snapshot's rows; one written by a doubling store (no ``page_rows``) is laid out in
        this store's pages, its slots unchanged."""
        capacity = int(state["capacity"])
        self.pages, self._free = [], []
        self._add_pages(max(1, -(-capacity // self.page_rows)))
        self._free = sorted({int(s) for s in state["free"]} | set(range(capacity, self.capacity)))
        used = np.asarray(state["used"], np.int64)
        if state["rows"] is None or not len(used):
            return
        page_of = used // self.page_rows
        for page in np.unique(page_of):
            mine = np.flatnonzero(page_of == page)
            part = jax.tree_util.tree_map(lambda r: jnp.asarray(r)[mine], state["rows"])
            self.pages[page] = _scatter_rows(self.pages[page], jnp.asarray(
                (used[mine] - page * self.page_rows).astype(np.int32)), part)

    def _add_pages(self, n: int) -> None:
        for _ in range(n):
            first = self.capacity
            self.pages.append(jax.tree_util.tree_map(
                lambda r: jnp.zeros((self.page_rows + 1,) + r.shape, r.dtype), self._row))
            # every new slot exceeds every slot already in the heap, so appending them in order keeps it a heap
            self._free.extend(range(first, first + self.page_rows))
