"""The memory budget: how many model updates a run may hold, measured per model and data shape.

What the cohort engine and the lazy executor hold on the device (host memory on a CPU) is

* fixed: the training data set and the held-out set on the device;
* the version store: one model per live version (a version lives while a pending task starts from it);
* the delta store: one model update per training task computed and not yet aggregated (the buffer's
  updates, and results computed before their reply is due), in pages (a page of rows is allocated at
  once, so it may hold up to a page more than its rows; under a tight budget the pages are smaller);
* one device call at a time: its outputs (a padded bucket of updates) and XLA's temporaries, read from
  the compiled program's memory analysis (``Compiled.memory_analysis()``) for this model, local
  training and data shape;
* an aggregation: the buffer's updates gathered into one array, and a masked copy when the update guard
  rejects some (two buffers' worth); or, where the aggregator's weights are per update, a running sum folding
  the updates in as they arrive, a group at a time (fleet/running_sum.py: the group's rows gathered and the
  sum, whatever K), plus the rows the update guard's median over the whole buffer holds until it closes.

On a CPU backend the engine's memory is the process's own, and the budget bounds the process's peak
resident memory: the rest of the process is counted first (``besides``, named parts: the runtime
measured when the plan is made, the population's tables, what the run grows by, the figures written at
its end; experiment/build.py counts them) and the engine gets what is left.

A :class:`MemoryPlan` turns a budget (``memory_budget_gb``) into the most delta rows the executor may
hold (:meth:`MemoryPlan.max_rows`, less whatever the version store holds at the time), and the smallest
budget a run can make progress in: the rest of the process, the aggregation's buffer held, plus one
device call of the smallest bucket and a page. A budget below that is refused before the run, in one
line naming every part (:func:`plan_memory`). Where the budget holds every task in flight with room to
spare, nothing is measured and nothing changes: the executor computes every pending task at each flush,
as it always did.
"""

from __future__ import annotations

import dataclasses
import math
import os

import jax
import numpy as np

from ..options import OptionError
from .store import page_rows_for, tree_bytes

GB = 1024 ** 3
MB = 1024 ** 2
# The default budget: half of the machine's physical memory on a CPU backend, for the whole process (the
# runtime, the fleet's host tables, which grow with the population, and the engine; other processes have the
# rest; it was a quarter when it bounded the engine alone), three quarters of the allocator's device memory on
# an accelerator (jax's own pool, the engine's; host tables live apart).
CPU_SHARE = 0.5
ACCELERATOR_SHARE = 0.75
# A bounded budget's delta-store page is at most this share of what the engine may hold (halving the
# rows down to MIN_PAGE_ROWS): the default page of 256 MB was most of a 1 GB budget's minimum
PAGE_SHARE = 1 / 8
MIN_PAGE_ROWS = 8
# A run whose peak resident memory exceeds its budget by more than this share says so in its warnings
PEAK_TOLERANCE = 0.10


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
    # the rest of the process, counted against the budget before the engine: (what, bytes), named for the
    # refusal and summary.json (experiment/build.py's process_share; empty: the budget is the engine's alone)
    besides: tuple[tuple[str, int], ...] = ()
    page_rows: int | None = None  # the delta store's page (None: its default, page_rows_for)
    # the aggregation folds its updates into a running sum as they arrive, this many at a time (fleet/running_sum.py;
    # buffer_rows then counts that group and the updates the guard's median holds); None: it gathers its buffer
    fold_rows: int | None = None

    @property
    def page_bytes(self) -> int:
        return (self.page_rows or page_rows_for(self.row_bytes)) * self.row_bytes

    @property
    def aggregation_bytes(self) -> int:
        """What an aggregation allocates beside the delta store: the buffer gathered and a masked copy, or a
        running sum's group of rows gathered and the sum."""
        rows = 2 * self.buffer_rows if self.fold_rows is None else self.fold_rows + 1
        return rows * self.row_bytes

    @property
    def besides_bytes(self) -> int:
        return sum(b for _, b in self.besides)

    @property
    def reserved_bytes(self) -> int:
        """Everything but the two stores' rows: the rest of the process, the data, one call, an
        aggregation's two copies, and a page of the delta store (it grows by pages, so it may hold up to a
        page more than its rows)."""
        call = self.call.total if self.call is not None else 2 * self.call_tasks * self.row_bytes  # unmeasured: a guess
        return self.besides_bytes + self.fixed_bytes + call + self.aggregation_bytes + self.page_bytes

    def max_rows(self, version_rows: int) -> int:
        """Delta rows the executor may hold while the version store holds ``version_rows`` rows (where the
        plan is not bounded, a number it never reaches in practice: flushes stay under it without evicting)."""
        return int((self.budget_bytes - self.reserved_bytes) // self.row_bytes) - int(version_rows)

    def to_dict(self) -> dict:
        """For summary.json: the budget and what it holds, in GB, MB and rows."""
        return {"memory_budget_gb": round(self.budget_bytes / GB, 3), "memory_budget_source": self.source,
                "update_mb": round(self.row_bytes / MB, 4), "bounded": self.bounded,
                "max_update_rows": self.max_rows(8), "call_tasks": self.call_tasks, "flush_tasks": self.flush_tasks,
                "call_mb": None if self.call is None else round(self.call.total / MB, 1),
                "page_rows": self.page_rows or page_rows_for(self.row_bytes),
                # a list of [part, MB]: the parts' names carry numbers (clients, tasks), never keys of a record
                "besides_mb": [[what, round(b / MB, 1)] for what, b in self.besides]}


def peak_warning(peak_bytes: int | None, budget_bytes: int, source: str,
                 tolerance: float = PEAK_TOLERANCE) -> str | None:
    """The warning of a run whose measured peak resident memory went over its budget by more than
    ``tolerance`` (a share of the budget); None otherwise, or with no measurement."""
    if peak_bytes is None or peak_bytes <= budget_bytes * (1 + tolerance):
        return None
    return (f"peak resident memory {peak_bytes / GB:,.2f} GB, {peak_bytes / budget_bytes - 1:.0%} over the "
            f"memory budget of {budget_bytes / GB:,.2f} GB ({source}; the tolerance is {tolerance:.0%}): a part "
            "the plan counts grew past its share (docs/architecture.md, 'The memory budget')")


def plan_memory(engine, stacked, *, budget_bytes: int, source: str, concurrency: int, aggregation_goal: int,
                buffer_rows: int, fixed_bytes: int, model_name: str, flush_tasks: int | None = None,
                besides: tuple[tuple[str, int], ...] = (), fold_rows: int | None = None) -> MemoryPlan:
    """The run's :class:`MemoryPlan`; the engine gets the budget less ``besides`` (the rest of the
    process). Under a bounded budget it halves the delta store's page to at most :data:`PAGE_SHARE` of
    that, and ``engine.max_tasks_per_call`` where one call of that many tasks would not fit beside the
    buffer. Raises :class:`BudgetError` (one line, every part of the minimum named) where even the
    smallest call does not fit. ``fold_rows``: the aggregation is a running sum folding that many arrivals at a
    time (``buffer_rows``: those and the rows the guard's median holds); None: it gathers ``buffer_rows``."""
    row = tree_bytes(stacked) // max(1, int(np.shape(jax.tree_util.tree_leaves(stacked)[0])[0]))
    versions = 8  # the version store's first capacity
    besides = tuple((str(what), int(b)) for what, b in besides)
    others = sum(b for _, b in besides)
    page_rows = page_rows_for(row)
    ahead = concurrency if flush_tasks is None else min(concurrency, flush_tasks)
    want_rows = ahead + buffer_rows + engine.max_tasks_per_call
    # every task in flight computed at once, the buffer, a full call's output, twice over for temporaries
    copies = 2 * buffer_rows if fold_rows is None else fold_rows + 1  # what an aggregation allocates
    loose = others + fixed_bytes + (versions + copies) * row + page_rows * row + 2 * want_rows * row
    if loose <= budget_bytes:
        return MemoryPlan(budget_bytes, source, row, fixed_bytes, buffer_rows, None, engine.max_tasks_per_call, False,
                          flush_tasks, besides, fold_rows=fold_rows)
    # a page a small share of what the engine may hold: memory follows the rows held to within a page
    engine_bytes = budget_bytes - others
    while page_rows > MIN_PAGE_ROWS and page_rows * row > PAGE_SHARE * engine_bytes:
        page_rows //= 2
    page = page_rows * row
    # the first size tried: the largest whose outputs alone (twice over) fit beside the buffer; then measured
    spare = engine_bytes - fixed_bytes - (versions + buffer_rows + copies) * row - page
    tasks = engine.max_tasks_per_call
    while tasks > engine.min_tasks_per_call and 2 * tasks * row * 2 > spare:
        tasks //= 2
    while True:
        call = call_memory(engine, tasks, stacked)
        plan = MemoryPlan(budget_bytes, source, row, fixed_bytes, buffer_rows, call, tasks, True, flush_tasks,
                          besides, page_rows, fold_rows)
        # the buffer and one call's tasks held, the first versions live
        if plan.max_rows(versions) >= buffer_rows + tasks:
            break
        if page_rows > MIN_PAGE_ROWS:  # a smaller page first (no compilation), then a smaller call
            page_rows //= 2
            continue
        if tasks <= engine.min_tasks_per_call:  # the smallest page and call: the minimum said is the least
            raise BudgetError(_refusal(plan, versions, concurrency, aggregation_goal, model_name))
        tasks //= 2
    engine.max_tasks_per_call = tasks
    return plan


def minimum_parts(plan: MemoryPlan, versions: int = 8) -> list[tuple[str, int]]:
    """The parts of the smallest budget ``plan``'s run makes progress in, (what, bytes), which add up
    to it: the rest of the process, the data, the buffer held and its two copies at aggregation (or a running
    sum's group, its copy and the sum, and the updates the guard's median holds), the live versions, one device
    call of ``plan.call_tasks`` tasks and its updates stored, a page."""
    row, tasks = plan.row_bytes, plan.call_tasks
    call = plan.call.total if plan.call is not None else 2 * tasks * row
    if plan.fold_rows is None:
        aggregation = [(f"{plan.buffer_rows:,} buffered updates and two copies at aggregation",
                        3 * plan.buffer_rows * row)]
    else:
        group, held = plan.fold_rows, plan.buffer_rows - plan.fold_rows
        aggregation = [(f"a running sum of the updates as they arrive ({group} at a time, their copy and the sum)",
                        (2 * group + 1) * row)]
        if held:
            aggregation.append((f"{held:,} updates held for the update guard's median", held * row))
    return [*plan.besides, ("the data set and held-out set", plan.fixed_bytes), *aggregation,
            (f"{versions} live versions", versions * row), (f"one device call of {tasks} tasks", call),
            (f"its {tasks} updates stored", tasks * row),
            (f"a delta-store page of {plan.page_rows or page_rows_for(row)} updates", plan.page_bytes)]


def _refusal(plan: MemoryPlan, versions: int, concurrency: int, aggregation_goal: int, model_name: str) -> str:
    """The one line of a budget too small for the run: its minimum, every part of it, the budget."""
    parts = minimum_parts(plan, versions)
    need = sum(b for _, b in parts)
    engine = need - plan.besides_bytes
    held = (plan.buffer_rows * plan.row_bytes + plan.aggregation_bytes) if plan.fold_rows is None else \
        (plan.buffer_rows - plan.fold_rows) * plan.row_bytes
    lower = ""
    if held >= engine / 4:  # what the aggregation holds is much of it: K, or the rows the guard's median holds
        lower = (" or lower aggregation_goal" if plan.fold_rows is None else
                 ", set update_guard.median_over=arrivals (no update held for the median) or lower aggregation_goal")
    return (f"concurrency={concurrency} with aggregation_goal={aggregation_goal} needs at least {need / MB:,.1f} MB "
            f"({need / GB:,.2f} GB) for {model_name} ({plan.row_bytes / MB:,.2f} MB an update): "
            + ", ".join(f"{what} {b / MB:,.1f} MB" for what, b in parts if b >= MB / 20)  # none that reads 0.0
            + f"; the budget is {plan.budget_bytes / GB:,.2f} GB ({plan.source}): raise memory_budget_gb to at "
              f"least {math.ceil(need / GB * 100) / 100:,.2f}{lower}")


# The largest budget held: 4 EiB, beyond any machine's memory. A larger one (1e300 GB, inf) bounds
# nothing either, so it is held as this: the engine holds what the run needs, nothing is measured.
UNBOUNDED_BYTES = 2 ** 62


def resolve_budget(memory_budget_gb: float | None) -> tuple[int, str]:
    """A scenario's ``memory_budget_gb`` in bytes and its source; None: :func:`default_budget`; any
    budget above :data:`UNBOUNDED_BYTES` (``inf`` included) is held as that: unbounded."""
    if memory_budget_gb is None:
        return default_budget()
    return int(min(float(memory_budget_gb) * GB, UNBOUNDED_BYTES)), f"memory_budget_gb={memory_budget_gb:g}"
