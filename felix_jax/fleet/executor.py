"""Lazy batched execution of tasks (docs/architecture.md, "Lazy batched execution").

Dispatch records a task and computes nothing. The first time the server needs
any result, every pending task is computed in one cohort call per kind (train,
eval), bucketed and vmapped by the cohort engine. Start parameters come from the
device :class:`VersionStore`; a version is kept while pending tasks need it.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from ..cohort import CohortEngine, DeltaStore, LossStats, VersionStore
from ..models.base import Params


@dataclasses.dataclass
class _Pending:
    task_id: int
    client: int
    version: int
    kind: str  # "train" | "eval"
    time_s: float = 0.0  # dispatch time: with client streams, the task uses the data held then


@dataclasses.dataclass(frozen=True)
class TrainOutcome:
    """One training task's result (host statistics; the delta stays in the device delta store)."""

    slot: int  # its row in the executor's DeltaStore
    first_batch: LossStats  # python floats
    all_steps: LossStats
    num_steps: int


@dataclasses.dataclass(frozen=True)
class EvalOutcome:
    stats: LossStats
    correct: float


class LazyExecutor:
    def __init__(self, engine: CohortEngine, store: VersionStore):
        self.engine = engine
        self.store = store
        self.deltas = DeltaStore(store.params(store.versions[0]) if len(store) else
                                 jax.tree_util.tree_map(lambda s: s[0], store.stacked))
        self._pending: dict[int, _Pending] = {}
        self._done: dict[int, TrainOutcome | EvalOutcome] = {}
        self.flushes = 0  # flushes that computed something, and their tasks (a mean, not a list: bounded)
        self.flushed_tasks = 0
        self.current_version: int | None = None

    def publish(self, version: int, params: Params) -> None:
        """Makes ``version`` the current model (dispatches start from it)."""
        self.store.put(version, params)
        self.current_version = version
        self._release_unused()

    def submit(self, task_id: int, client: int, version: int, kind: str, time_s: float = 0.0) -> None:
        if version not in self.store:
            raise KeyError(f"task {task_id}: model version {version} is not in the store")
        self._pending[task_id] = _Pending(task_id, client, version, kind, time_s)

    def result(self, task_id: int) -> TrainOutcome | EvalOutcome:
        """The task's result, flushing every pending task first if needed (then forgets it)."""
        if task_id not in self._done:
            if task_id not in self._pending:
                raise KeyError(f"unknown task {task_id}")
            self.flush()
        return self._done.pop(task_id)

    def discard(self, task_id: int) -> None:
        """Forgets a task whose result will never be needed (abandoned)."""
        self._pending.pop(task_id, None)
        done = self._done.pop(task_id, None)
        if isinstance(done, TrainOutcome):
            self.deltas.free([done.slot])
        self._release_unused()

    def take_deltas(self, outcomes: list[TrainOutcome]) -> Params:
        """Stacked deltas (K, ...) of ``outcomes``, in order; frees their rows."""
        slots = [o.slot for o in outcomes]
        stacked = self.deltas.gather(slots)
        self.deltas.free(slots)
        return stacked

    def drop_delta(self, outcome: TrainOutcome) -> None:
        """Frees the row of an update that will not be aggregated (discarded late update)."""
        self.deltas.free([outcome.slot])

    def state_dict(self) -> dict:
        """Pending (not yet computed) tasks in submission order, computed results not yet taken, and
        both device stores (snapshots). Pending tasks stay pending: a resumed run computes them in the
        same flush as an uninterrupted one."""
        return {"pending": list(self._pending.values()), "done": dict(self._done),
                "flushes": self.flushes, "flushed_tasks": self.flushed_tasks, "current_version": self.current_version,
                "store": self.store.state_dict(), "deltas": self.deltas.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self._pending = {p.task_id: p for p in state["pending"]}
        self._done = dict(state["done"])
        if "flush_sizes" in state:  # a snapshot from when every flush's size was kept
            self.flushes, self.flushed_tasks = len(state["flush_sizes"]), int(sum(state["flush_sizes"]))
        else:
            self.flushes, self.flushed_tasks = int(state["flushes"]), int(state["flushed_tasks"])
        self.current_version = state["current_version"]
        self.store.load_state_dict(state["store"])
        self.deltas.load_state_dict(state["deltas"])

    @property
    def num_pending(self) -> int:
        return len(self._pending)

    def flush(self) -> None:
        pending = list(self._pending.values())
        self._pending.clear()
        if not pending:
            return
        self.flushes += 1
        self.flushed_tasks += len(pending)
        for kind in ("train", "eval"):
            tasks = [p for p in pending if p.kind == kind]
            if not tasks:
                continue
            ids = np.array([p.task_id for p in tasks])
            clients = np.array([p.client for p in tasks])
            times = np.array([p.time_s for p in tasks], np.float64)
            slots = np.array(self.store.slots([p.version for p in tasks]))
            if kind == "train":
                out = self.engine.train(self.store.stacked, slots, clients, ids, times)
                task_slot = np.zeros(len(ids), np.int64)
                for p, part in enumerate(out.parts):
                    mine = np.flatnonzero(out.part_of == p)
                    task_slot[mine] = self.deltas.write(part, out.rows[mine])
                for i, tid in enumerate(ids):
                    self._done[int(tid)] = TrainOutcome(
                        int(task_slot[i]), LossStats(*(float(v[i]) for v in out.first_batch)),
                        LossStats(*(float(v[i]) for v in out.all_steps)), int(out.num_steps[i]))
            else:
                out = self.engine.evaluate(self.store.stacked, slots, clients, ids, times)
                for i, tid in enumerate(ids):
                    self._done[int(tid)] = EvalOutcome(LossStats(*(float(v[i]) for v in out.stats)),
                                                       float(out.correct[i]))
        self._release_unused()

    def _release_unused(self) -> None:
        needed = {p.version for p in self._pending.values()} | {self.current_version}
        for v in self.store.versions:
            if v not in needed:
                self.store.release(v)
