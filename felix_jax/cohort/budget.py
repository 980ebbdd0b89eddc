"""The engine's memory budget: how many model updates a run may hold, measured per model and data shape.

What the cohort engine and the lazy executor hold on the device (host memory on a CPU) is

* fixed: the training data set and the held-out set on the device;
* the version store: one model per live version (a version lives while a pending task starts from it);
* the delta store: one model update per training task computed and not yet aggregated (the buffer's
  updates, and results computed before their reply is due);
* one device call at a time: its outputs (a padded bucket of updates) and XLA's temporaries, read from
  the compiled program's memory analysis (``Compiled.memory_analysis()``) for this model, local
  training and data shape;
* an aggregation: the buffer's updates gathered into one array, and a masked copy when the update guard
  rejects some (two buffers' worth).

A :class:`MemoryPlan` turns a budget (``memory_budget_gb``) into the most delta rows the executor may
hold (:meth:`MemoryPlan.max_rows`, less whatever the version store holds at the time), and the smallest
budget a run can make progress in: the aggregation's buffer held, plus one device call of the smallest
bucket. A budget below that is refused before the run, in one line (:func:`check_budget`). Where the
budget holds every task in flight with room to spare, nothing is measured and nothing changes: the
executor computes every pending task at each flush, as it always did.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import numpy as np

from ..options import OptionError
from .store import page_rows_for, tree_bytes

GB = 1024 ** 3
# The default budget: a quarter of the machine's physical memory on a CPU backend (the engine shares it
# with the fleet's host tables, which grow with the population, and with other processes), three
# quarters of the allocator's device memory on an accelerator (jax's own pool; host tables live apart).
CPU_SHARE = 0.25
ACCELERATOR_SHARE = 0.75


class BudgetError(OptionError):
    """A memory budget that cannot hold the run's minimal working set."""


def default_budget(backend: str | None = None) -> tuple[int, str]:
    """The default budget in bytes, and where it comes from (for config.json and messages)."""
    backend = backend or jax.default_backend()
    if backend != "cpu":
        try:
            limit = (jax.devices()[0].memory_stats() or {}).get("bytes_limit")
        except Exception:  # a backend without memory statistics
            limit = None
        if limit:
            return int(ACCELERATOR_SHARE * limit), (f"{ACCELERATOR_SHARE:.0%} of the device's {limit / GB:,.1f} GB "
                                                   "(jax's allocator limit)")
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        physical = 16 * GB
    return int(CPU_SHARE * physical), f"{CPU_SHARE:.0%} of this machine's {physical / GB:,.1f} GB of memory"


@dataclasses.dataclass(frozen=True)
class CallMemory:
    """One device call of ``tasks`` tasks: its output buffers and XLA's temporaries (bytes)."""

    tasks: int
    output_bytes: int
    temp_bytes: int
    measured: bool  # False: the output's size only (a backend without a memory analysis)

    @property
    def total(self) -> int:
        return self.output_bytes + self.temp_bytes


_CALL_MEMORY: dict[tuple, CallMemory] = {}


def call_memory(engine, tasks: int, stacked) -> CallMemory:
    """What one training call of ``tasks`` tasks holds beyond its arguments, from the compiled program's
    memory analysis (one compilation per model, local settings, data shape and size in the process).
    Several devices: each device's share of the call, which is what a device holds."""
    from .engine import _cohort_jit, pad_task_args

    per_device = max(1, tasks // engine.num_devices)
    cfg, scan_len = engine.train_cfg, engine.train_scan_len
    data_shape = tuple((tuple(np.shape(x)), str(x.dtype)) for x in jax.tree_util.tree_leaves(engine.data))
    key = (engine.model, cfg, engine.plan, scan_len, per_device, data_shape,
           tuple((tuple(np.shape(x)), str(x.dtype)) for x in jax.tree_util.tree_leaves(stacked)))
    if key in _CALL_MEMORY:
        return _CALL_MEMORY[key]
    one = np.zeros(1, np.int32)
    lengths = engine.num_train_steps(one, np.zeros(1, np.float32))
    args = pad_task_args(per_device, one, one, one, np.zeros(1, np.float32), np.asarray(lengths))
    jitted = _cohort_jit("train", engine.model, cfg)
    lowered = jitted.lower(stacked, engine.data, *(jax.numpy.asarray(a) for a in args),
                           jax.numpy.zeros(per_device, jax.numpy.int32), engine._key_data, scan_len=scan_len,
                           plan=engine.plan)
    out_bytes = tree_bytes(lowered.out_info)
    try:
        stats = lowered.compile().memory_analysis()
    except Exception:  # a backend that cannot say
        stats = None
    if stats is None:
        mem = CallMemory(per_device, out_bytes, 0, False)
    else:
        mem = CallMemory(per_device, int(stats.output_size_in_bytes), int(stats.temp_size_in_bytes), True)
    _CALL_MEMORY[key] = mem
    return mem


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """What a run may hold under its budget (see the module docstring). Bytes throughout."""

    budget_bytes: int
    source: str  # where the budget comes from: "memory_budget_gb=12" or the default's description
    row_bytes: int  # one model (an update, a version)
    fixed_bytes: int  # data set and held-out set on the device
    buffer_rows: int  # updates the aggregation holds at once (K, or a sync round's K fresh + stale)
    call: CallMemory | None  # the largest training call (None: not measured, the budget holds everything)
    call_tasks: int  # tasks in the largest device call
    bounded: bool  # False: the budget holds every task in flight with room to spare (nothing measured, no eviction)
    flush_tasks: int | None = None  # training results held ahead of their replies at most (None: as the budget allows)

    @property
    def reserved_bytes(self) -> int:
        """Everything but the two stores' rows: the data, one call, an aggregation's two copies, and a
        page of the delta store (it grows by pages, so it may hold up to a page more than its rows)."""
        call = self.call.total if self.call is not None else 2 * self.call_tasks * self.row_bytes  # unmeasured: a guess
        page = page_rows_for(self.row_bytes) * self.row_bytes
        return self.fixed_bytes + call + 2 * self.buffer_rows * self.row_bytes + page

    def max_rows(self, version_rows: int) -> int:
        """Delta rows the executor may hold while the version store holds ``version_rows`` rows (where the
        plan is not bounded, a number it never reaches in practice: flushes stay under it without evicting)."""
        return int((self.budget_bytes - self.reserved_bytes) // self.row_bytes) - int(version_rows)

    def to_dict(self) -> dict:
        """For summary.json: the budget and what it holds, in GB and rows."""
        return {"memory_budget_gb": round(self.budget_bytes / GB, 3), "memory_budget_source": self.source,
                "update_mb": round(self.row_bytes / 2 ** 20, 4), "bounded": self.bounded,
                "max_update_rows": self.max_rows(8), "call_tasks": self.call_tasks, "flush_tasks": self.flush_tasks,
                "call_mb": None if self.call is None else round(self.call.total / 2 ** 20, 1)}


def plan_memory(engine, stacked, *, budget_bytes: int, source: str, concurrency: int, aggregation_goal: int,
                buffer_rows: int, fixed_bytes: int, model_name: str, flush_tasks: int | None = None) -> MemoryPlan:
    """The run's :class:`MemoryPlan`; lowers ``engine.max_tasks_per_call`` (halving) where one call of
    that many tasks would not fit beside the buffer. Raises :class:`BudgetError` (one line) where even
    the smallest call does not fit."""
    row = tree_bytes(stacked) // max(1, int(np.shape(jax.tree_util.tree_leaves(stacked)[0])[0]))
    versions = 8  # the version store's first capacity
    page = row * page_rows_for(row)  # the delta store grows by pages
    ahead = concurrency if flush_tasks is None else min(concurrency, flush_tasks)
    want_rows = ahead + buffer_rows + engine.max_tasks_per_call
    # every task in flight computed at once, the buffer, a full call's output, twice over for temporaries
    loose = fixed_bytes + (versions + 2 * buffer_rows) * row + page + 2 * want_rows * row
    if loose <= budget_bytes:
        return MemoryPlan(budget_bytes, source, row, fixed_bytes, buffer_rows, None, engine.max_tasks_per_call, False,
                          flush_tasks)
    # the first size tried: the largest whose outputs alone (twice over) fit beside the buffer; then measured
    spare = budget_bytes - fixed_bytes - (versions + 3 * buffer_rows) * row - page
    tasks = engine.max_tasks_per_call
    while tasks > engine.min_tasks_per_call and 2 * tasks * row * 2 > spare:
        tasks //= 2
    while True:
        call = call_memory(engine, tasks, stacked)
        plan = MemoryPlan(budget_bytes, source, row, fixed_bytes, buffer_rows, call, tasks, True, flush_tasks)
        # the buffer and one call's tasks held, the first versions live
        if plan.max_rows(versions) >= buffer_rows + tasks:
            break
        if tasks <= engine.min_tasks_per_call:
            need = plan.reserved_bytes + (versions + buffer_rows + tasks) * row
            raise BudgetError(
                f"concurrency={concurrency} with aggregation_goal={aggregation_goal} needs at least {need / GB:,.2f} GB "
                f"for {model_name} ({row / 2 ** 20:,.2f} MB an update: {buffer_rows} buffered updates and two "
                f"copies at aggregation, one device call of {tasks} tasks ({call.total / 2 ** 20:,.0f} MB), "
                f"the data set ({fixed_bytes / 2 ** 20:,.0f} MB)); the budget is {budget_bytes / GB:,.2f} GB "
                f"({source}): raise memory_budget_gb or lower aggregation_goal")
        tasks //= 2
    engine.max_tasks_per_call = tasks
    return plan


# The largest budget held: 4 EiB, beyond any machine's memory. A larger one (1e300 GB, inf) bounds
# nothing either, so it is held as this: the engine holds what the run needs, nothing is measured.
UNBOUNDED_BYTES = 2 ** 62


def resolve_budget(memory_budget_gb: float | None) -> tuple[int, str]:
    """A scenario's ``memory_budget_gb`` in bytes and its source; None: :func:`default_budget`; any
    budget above :data:`UNBOUNDED_BYTES` (``inf`` included) is held as that: unbounded."""
    if memory_budget_gb is None:
        return default_budget()
    return int(min(float(memory_budget_gb) * GB, UNBOUNDED_BYTES)), f"memory_budget_gb={memory_budget_gb:g}"
