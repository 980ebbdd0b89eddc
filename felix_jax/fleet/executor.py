"""Lazy batched execution of tasks (docs/architecture.md, "Lazy batched execution").

Dispatch records a task and computes nothing. The first time the server needs a
result, pending tasks are computed in one cohort call per kind (train, eval),
bucketed and vmapped by the cohort engine. Start parameters come from the device
:class:`VersionStore`; a version is kept while pending tasks need it, so a task
that is far from its reply holds its start version's slot (shared by every task
of that version), never an update.

A flush computes every pending eval task (a few numbers each) and training tasks
until the plan's ``flush_tasks`` results are held ahead of their replies
(:class:`~felix_jax.cohort.budget.MemoryPlan`; computing further ahead only holds
memory, and computes tasks that time out or are abandoned: BENCHMARKS.md, "Memory
bounded by a budget"), and no more than the delta store may hold under the
budget. Where that is fewer than are pending, it takes them in the order their
results will be needed (reply time, then dispatch order); the rest stay pending.
When the task needed now finds a bounded store full of results computed ahead, the
ones needed latest
go back to pending (their rows freed, their start versions kept) and are computed
again when they are due: a task's result depends only on its start model, its
client's data and its key, so recomputing changes nothing (on a CPU, bit for
bit). Without a plan, every pending task is computed at each flush.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from typing import Callable

import jax
import numpy as np

from ..cohort import CohortEngine, DeltaStore, LossStats, VersionStore
from ..cohort.budget import MemoryPlan
from ..models.base import Params


def _rows_of(stacked: Params) -> int:
    return int(jax.tree_util.tree_leaves(stacked)[0].shape[0])


@dataclasses.dataclass
class _Pending:
    task_id: int
    client: int
    version: int
    kind: str  # "train" | "eval"
    time_s: float = 0.0  # dispatch time: with client streams, the task uses the data held then
    need_s: float = math.inf  # when the server will need its result (its reply time; inf: never)

    @property
    def due(self) -> tuple[float, int]:
        """The order results are needed in: reply time, then dispatch order (a snapshot's record written
        before reply times were kept has none: last)."""
        return getattr(self, "need_s", math.inf), self.task_id


@dataclasses.dataclass(frozen=True)
class TrainOutcome:
    """One training task's result (host statistics; the delta stays in the device delta store)."""

    slot: int  # its row in the executor's DeltaStore
    first_batch: LossStats  # python floats
    all_steps: LossStats
    num_steps: int
    # (finite, L2 norm, norm after the aggregator's transform_deltas), measured as the update is stored where the
    # aggregation folds updates in as they arrive (LazyExecutor.measure, fleet/running_sum.py); else None
    health: tuple[bool, float, float] | None = None


@dataclasses.dataclass(frozen=True)
class EvalOutcome:
    stats: LossStats
    correct: float


class LazyExecutor:
    def __init__(self, engine: CohortEngine, store: VersionStore, memory: MemoryPlan | None = None):
        self.engine = engine
        self.store = store
        self.memory = memory  # the run's memory plan; None: every pending task at each flush
        # a bounded plan's pages (a small share of what its engine may hold), one to start with; else the default
        page_rows = memory.page_rows if memory is not None else None
        self.deltas = DeltaStore(store.params(store.versions[0]) if len(store) else
                                 jax.tree_util.tree_map(lambda s: s[0], store.stacked),
                                 **({} if page_rows is None else {"capacity": page_rows, "page_rows": page_rows}))
        self._pending: dict[int, _Pending] = {}
        self._done: dict[int, TrainOutcome | EvalOutcome] = {}
        # bounded: the training tasks computed ahead of their reply (their records, to compute them again
        # after an eviction; they keep their start versions live)
        self._ahead: dict[int, _Pending] = {}
        self._held_ahead = 0  # training results computed and not yet taken (TrainOutcomes in _done)
        self.flushes = 0  # flushes that computed something, and their tasks (a mean, not a list: bounded)
        self.flushed_tasks = 0
        self.largest_flush = 0  # training tasks computed by one flush, at most
        self.evicted = 0  # results computed ahead and given back to pending (computed again when due)
        self.current_version: int | None = None
        self._taken: Params | None = None  # what take_deltas returned last: the next one of its size is written into it
        # measure(rows) -> (finite, norms, norms after transform) of a device call's updates as they are stored
        # (each update's TrainOutcome.health): a running aggregation reads them at the update's arrival
        self.measure: Callable[[Params], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    @property
    def bounded(self) -> bool:
        return self.memory is not None and self.memory.bounded

    def publish(self, version: int, params: Params) -> None:
        """Makes ``version`` the current model (dispatches start from it)."""
        self.store.put(version, params)
        self.current_version = version
        self._release_unused()

    def submit(self, task_id: int, client: int, version: int, kind: str, time_s: float = 0.0,
               need_s: float = math.inf) -> None:
        """Records a task; ``need_s``: when its result will be needed (its reply time; inf: never)."""
        if version not in self.store:
            raise KeyError(f"task {task_id}: model version {version} is not in the store")
        self._pending[task_id] = _Pending(task_id, client, version, kind, time_s, float(need_s))

    def result(self, task_id: int) -> TrainOutcome | EvalOutcome:
        """The task's result, flushing pending tasks first if needed (then forgets it)."""
        if task_id not in self._done:
            if task_id not in self._pending:
                raise KeyError(f"unknown task {task_id}")
            self.flush(need=task_id)
        self._ahead.pop(task_id, None)
        outcome = self._done.pop(task_id)
        self._held_ahead -= isinstance(outcome, TrainOutcome)
        return outcome

    def discard(self, task_id: int) -> None:
        """Forgets a task whose result will never be needed (abandoned)."""
        self._pending.pop(task_id, None)
        self._ahead.pop(task_id, None)
        done = self._done.pop(task_id, None)
        if isinstance(done, TrainOutcome):
            self._held_ahead -= 1
            self.deltas.free([done.slot])
        self._release_unused()

    def take_deltas(self, outcomes: list[TrainOutcome]) -> Params:
        """Stacked deltas (K, ...) of ``outcomes``, in order; frees their rows. They are written into the array
        the previous call of the same K returned (donated: that one is deleted), not into a fresh one: a fresh
        buffer costs its page faults at every aggregation, ~0.7 s for 1,000 updates of 0.79 MB on 2 CPU cores
        (BENCHMARKS.md, "Memory bounded by a budget")."""
        slots = [o.slot for o in outcomes]
        reuse = self._taken if self._taken is not None and _rows_of(self._taken) == len(slots) else None
        stacked = self.deltas.gather(slots, into=reuse)
        self._taken = stacked
        self.deltas.free(slots)
        return stacked

    def locate(self, outcome: TrainOutcome) -> tuple[Params, int]:
        """The delta-store page that holds ``outcome``'s update, and its row there (read in place)."""
        return self.deltas.locate(outcome.slot)

    def drop_delta(self, outcome: TrainOutcome) -> None:
        """Frees the row of an update that will not be gathered (a discarded late update; one folded into the
        running sum as it arrived)."""
        self.deltas.free([outcome.slot])

    def state_dict(self) -> dict:
        """Pending (not yet computed) tasks in submission order, computed results not yet taken, and
        both device stores (snapshots). Pending tasks stay pending: a resumed run computes them in the
        same flush as an uninterrupted one."""
        return {"pending": list(self._pending.values()), "done": dict(self._done), "ahead": list(self._ahead.values()),
                "flushes": self.flushes, "flushed_tasks": self.flushed_tasks, "largest_flush": self.largest_flush,
                "evicted": self.evicted, "current_version": self.current_version,
                "store": self.store.state_dict(), "deltas": self.deltas.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self._pending = {p.task_id: p for p in state["pending"]}
        self._done = dict(state["done"])
        # a snapshot written before results were computed ahead under a budget: none can be evicted
        self._ahead = {p.task_id: p for p in state.get("ahead", [])}
        self._held_ahead = sum(isinstance(o, TrainOutcome) for o in self._done.values())
        if "flush_sizes" in state:  # a snapshot from when every flush's size was kept
            self.flushes, self.flushed_tasks = len(state["flush_sizes"]), int(sum(state["flush_sizes"]))
        else:
            self.flushes, self.flushed_tasks = int(state["flushes"]), int(state["flushed_tasks"])
        self.largest_flush, self.evicted = int(state.get("largest_flush", 0)), int(state.get("evicted", 0))
        self.current_version = state["current_version"]
        self.store.load_state_dict(state["store"])
        self.deltas.load_state_dict(state["deltas"])

    @property
    def num_pending(self) -> int:
        return len(self._pending)

    def flush(self, need: int | None = None) -> None:
        """Computes every pending eval task and the training tasks :meth:`_train_share` picks; ``need`` (a
        task id), the result wanted now, is among them."""
        if not self._pending:
            return
        pending = list(self._pending.values())
        trains = self._train_share([p for p in pending if p.kind == "train"], need)
        chosen = [p for p in pending if p.kind == "eval"] + trains
        if not chosen:
            return
        for p in chosen:
            del self._pending[p.task_id]
        self.flushes += 1
        self.flushed_tasks += len(chosen)
        self.largest_flush = max(self.largest_flush, len(trains))
        for kind in ("train", "eval"):
            tasks = [p for p in chosen if p.kind == kind]
            if not tasks:
                continue
            ids = np.array([p.task_id for p in tasks])
            clients = np.array([p.client for p in tasks])
            times = np.array([p.time_s for p in tasks], np.float64)
            slots = np.array(self.store.slots([p.version for p in tasks]))
            if kind == "train":
                task_slot = np.zeros(len(ids), np.int64)
                health: list = [None] * len(ids)

                def sink(part, positions, rows):  # each device call's deltas into the store as it ends
                    task_slot[positions] = self.deltas.write(part, rows)
                    if self.measure is not None:
                        finite, norms, transformed = self.measure(part)
                        for i, r in zip(positions, rows):
                            health[i] = (bool(finite[r]), float(norms[r]), float(transformed[r]))

                out = self.engine.train(self.store.stacked, slots, clients, ids, times, sink=sink)
                for i, tid in enumerate(ids):
                    self._done[int(tid)] = TrainOutcome(
                        int(task_slot[i]), LossStats(*(float(v[i]) for v in out.first_batch)),
                        LossStats(*(float(v[i]) for v in out.all_steps)), int(out.num_steps[i]), health[i])
                self._held_ahead += len(tasks)
                if self.bounded:
                    self._ahead.update((p.task_id, p) for p in tasks)
            else:
                out = self.engine.evaluate(self.store.stacked, slots, clients, ids, times)
                for i, tid in enumerate(ids):
                    self._done[int(tid)] = EvalOutcome(LossStats(*(float(v[i]) for v in out.stats)),
                                                       float(out.correct[i]))
        self._release_unused()

    def _train_share(self, trains: list[_Pending], need: int | None) -> list[_Pending]:
        """The training tasks a flush computes, in dispatch order: every one, or where fewer fit, the ones
        due first. What fits: the plan's ``flush_tasks`` less the results already computed ahead and not
        yet taken (so at most that many are held ahead of their replies, however many flushes), and no
        more rows than the delta store may hold under a bounded budget. The task needed now always
        (under a full bounded budget, evicting results computed ahead and due later than it)."""
        room = len(trains)
        if self.memory is not None and self.memory.flush_tasks is not None:
            room = min(room, self.memory.flush_tasks - self._held_ahead)
        needed = self._pending.get(need) if need is not None else None
        if needed is not None and needed.kind != "train":
            needed = None
        if self.memory is not None:
            free = self.memory.max_rows(self.store.capacity) - self.deltas.num_used
            if needed is not None and free < 1 and self.bounded:
                free += self._evict(1 - free, after=needed.due)
            room = min(room, free)
        if needed is not None:
            room = max(room, 1)  # what cannot be evicted is the buffer's: go over rather than stall
        if room >= len(trains):
            return trains
        if room <= 0:
            return []
        take = heapq.nsmallest(room, trains, key=lambda p: p.due)
        if needed is not None and needed.due > take[-1].due:
            take = [needed] + take[:-1]
        return sorted(take, key=lambda p: p.task_id)

    def _evict(self, rows: int, after: tuple[float, int]) -> int:
        """Gives up to ``rows`` results computed ahead, due after ``after``, back to pending (latest due
        first); returns how many rows it freed."""
        later = sorted((p for p in self._ahead.values() if p.due > after and p.task_id in self._done),
                       key=lambda p: p.due, reverse=True)[:rows]
        for p in later:
            del self._ahead[p.task_id]
            outcome = self._done.pop(p.task_id)
            self.deltas.free([outcome.slot])
            self._pending[p.task_id] = p
        self._held_ahead -= len(later)
        self.evicted += len(later)
        return len(later)

    def _release_unused(self) -> None:
        needed = {p.version for p in self._pending.values()} | {p.version for p in self._ahead.values()}
        needed.add(self.current_version)
        for v in self.store.versions:
            if v not in needed:
                self.store.release(v)
