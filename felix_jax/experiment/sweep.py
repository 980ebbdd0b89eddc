"""A sweep as batches: many experiments in one process, their device work in shared calls.

``run_sweep`` groups the experiments that can share device calls (the same data set, training
and test subsets, model, execution plan and device count: :func:`share_key`) and runs each
group in batches of ``batch`` experiments. Each experiment of a batch runs its own
:func:`~felix_jax.experiment.runner.run` in a thread (its results folder, snapshots, resume),
and its engine's device calls go to the batch's :class:`BatchCoordinator`: a simulator that
needs a result waits; once every live simulator of the batch waits, one flush computes all
their pending training tasks together, then all their eval tasks, then all their due test
checkpoints (``cohort/group.py``), and every simulator goes on (training requests waiting
beside others are held back a flush or a few, so that the experiments train together:
:meth:`BatchCoordinator._maybe_flush`). Host-side work stays each
experiment's own; the results equal each experiment's solo run bit for bit under the CPU
plan (``lax.map``, one task at a time); under ``vmap`` on an accelerator a task's numbers may
round differently with its call's other tasks (docs/architecture.md, "Sweep batches").

Experiments may differ in seed, strategy, regime and every policy option; experiments with
other local-training settings (learning rate, steps, batch size) still share the flush, in
separate calls.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import jax
import numpy as np

from ..cohort.buckets import next_pow2
from ..cohort.evaluate import evaluate_many, evaluate_weighted_many
from ..cohort.group import Request, SharedCohort, array_fingerprint
from .results import compile_count
from .scenario import Scenario

# a flush holds waiting training requests back at most this many times in a row (_maybe_flush)
MAX_TRAIN_HOLDS = 4

SHARE_FIELDS = ("dataset", "num_train", "num_test", "model", "plan", "devices")


def share_key(sc: Scenario) -> tuple:
    """Scenarios with equal keys can share a batch: the fields of :data:`SHARE_FIELDS` and the
    client streams' window (static data has none, so it shares with streams that keep everything)."""
    stream = sc.resolve_stream()
    if stream.is_static:
        return tuple(str(getattr(sc, f)) for f in SHARE_FIELDS) + (math.inf, None)
    return tuple(str(getattr(sc, f)) for f in SHARE_FIELDS) + (float(stream.window_hours), stream.window_samples)


def default_batch(backend: str | None = None) -> int:
    """Experiments per batch by backend: 16 on an accelerator (one experiment fills a quarter of
    an H200 or less, BENCHMARKS.md), 1 on a CPU (compare's workers already use every core)."""
    return 1 if (backend or jax.default_backend()) == "cpu" else 16


@dataclasses.dataclass
class SweepJob:
    scenario: Scenario
    out_dir: Path | None = None
    resume: bool = False  # continue from the snapshot in out_dir
    writers: tuple = ()  # metric writers of this experiment (runner.run's ``writers``)


class _Ticket:
    __slots__ = ("kind", "payload", "result", "done", "owner")

    def __init__(self, kind, payload, owner):
        self.kind, self.payload, self.owner = kind, payload, owner
        self.result = None
        self.done = False


class BatchCoordinator:
    """Holds the batch's pending requests; see the module docstring."""

    def __init__(self, size: int):
        self._cv = threading.Condition()
        self._live = size
        self._waiting: list[_Ticket] = []
        self._engines: list = []
        self._sims: list = []
        self._group: SharedCohort | None = None
        self.flushes = 0
        self.held_flushes = 0  # flushes that held the waiting training requests back (see _maybe_flush)
        self._train_holds = 0
        self.test_calls = 0
        self._blocked: dict[int, float] = {}
        self._stop_reason: str | None = None
        self.test_seconds = 0.0
        self._first_flush: float | None = None  # the batch's event loops start (builds before)
        self._test_keys: dict[int, tuple] = {}  # id(test set) -> (the set, kept alive; its fingerprint)

    # ---- members ----------------------------------------------------------------------
    def member(self) -> "BatchMember":
        return BatchMember(self)

    def _attach(self, member: "BatchMember", sim) -> None:
        with self._cv:
            if self._group is not None:
                raise RuntimeError("an experiment joined a batch after its first shared flush")
            self._engines.append(sim.engine)
            self._sims.append(sim)
            member.index = len(self._engines) - 1
            self._blocked[member.index] = 0.0
            sim.engine.shared = lambda kind, *call: self._request(member, kind, Request(*call))
            sim.test_evaluator = lambda model, test, params, mixes: self._request(
                member, "test", (model, test, params, mixes))
            if self._stop_reason is not None:
                sim.request_stop(self._stop_reason)

    def _leave(self) -> None:
        with self._cv:
            self._live -= 1
            self._maybe_flush()

    def request_stop(self, reason: str) -> None:
        """Asks every simulator of the batch to stop after its current event (a signal)."""
        with self._cv:
            self._stop_reason = reason
            for sim in self._sims:
                sim.request_stop(reason)

    def progress_line(self) -> str:
        """Where the batch's experiments are: finished, aggregations, virtual hours reached."""
        with self._cv:
            sims = list(self._sims)
            live = self._live
        if not sims:
            return f"  batch: {live} experiments building"
        hours = [sim.now / 3600 for sim in sims]
        aggs = sum(max(len(sim.aggregation_times) - 1, 0) for sim in sims)
        return (f"  batch: {len(sims) - live} of {len(sims)} finished | {aggs} aggregations in all | "
                f"virtual hours {min(hours):.2f}-{max(hours):.2f} | {self.flushes} shared flushes")

    def blocked_seconds(self, member: "BatchMember") -> float:
        return self._blocked.get(member.index, 0.0)

    # ---- requests and flushes ---------------------------------------------------------
    def _request(self, member, kind, payload):
        t0 = time.perf_counter()
        with self._cv:
            ticket = _Ticket(kind, payload, member)
            self._waiting.append(ticket)
            self._maybe_flush()
            while not ticket.done:
                self._cv.wait()
        self._blocked[member.index] += time.perf_counter() - t0
        if isinstance(ticket.result, BaseException):
            raise ticket.result
        return ticket.result

    def _maybe_flush(self) -> None:
        """With the lock held: once every live member waits, computes the waiting requests.

        Training requests mixed with eval or test requests are held back (up to
        :data:`MAX_TRAIN_HOLDS` flushes in a row): the others are computed first, their
        experiments go on to their next request, usually a training one, and the experiments'
        training phases line up, so that one flush's training calls hold the tasks of all of them
        rather than of whichever happened to be training. Which flush computes a request does
        not change its result (a task's numbers depend on its own inputs and key alone).
        """
        if not self._waiting or len(self._waiting) < self._live:
            return
        kinds = {t.kind for t in self._waiting}
        if "train" in kinds and len(kinds) > 1 and self._train_holds < MAX_TRAIN_HOLDS:
            waiting = [t for t in self._waiting if t.kind != "train"]
            self._waiting = [t for t in self._waiting if t.kind == "train"]
            self._train_holds += 1
            self.held_flushes += 1
        else:
            waiting, self._waiting = self._waiting, []
            self._train_holds = 0
        if self._first_flush is None:
            self._first_flush = time.perf_counter()
        try:
            if self._group is None:
                self._group = SharedCohort(self._engines)
            for kind in ("train", "eval"):
                mine = [t for t in waiting if t.kind == kind]
                if mine:
                    run = self._group.train if kind == "train" else self._group.evaluate
                    for t, out in zip(mine, run([t.payload for t in mine])):
                        t.result = out
            tests = [t for t in waiting if t.kind == "test"]
            if tests:
                t0 = time.perf_counter()
                self._run_tests(tests)
                self.test_seconds += time.perf_counter() - t0
            self.flushes += 1
        except Exception as exc:  # every waiting experiment fails with it (one line in each run's error)
            for t in waiting:
                if t.result is None:
                    t.result = exc
        for t in waiting:
            t.done = True
        self._cv.notify_all()

    def _run_tests(self, tickets: list[_Ticket]) -> None:
        """All due test checkpoints in one call per (test set, kind)."""
        by_set: dict = {}
        for t in tickets:
            model, test, params, mixes = t.payload
            by_set.setdefault((self._test_key(test), mixes is None), []).append(t)
        for (_, plain), group in by_set.items():
            # the group's one model object: a jit's static argument, so one compiled program per size
            model, test = self._group.model, group[0].payload[1]
            versions = [p for t in group for p in t.payload[2]]
            pad = next_pow2(len(versions))
            if plain:
                metrics = evaluate_many(model, versions, test, pad_to=pad)
            else:
                metrics = evaluate_weighted_many(model, versions, test, [m for t in group for m in t.payload[3]],
                                                 pad_to=pad)
            self.test_calls += 1
            at = 0
            for t in group:
                n = len(t.payload[2])
                t.result, at = metrics[at: at + n], at + n

    def _test_key(self, test) -> tuple:
        """Equal for equal test sets (each experiment builds its own copy of the arrays)."""
        if id(test) not in self._test_keys:
            self._test_keys[id(test)] = (test, tuple(array_fingerprint(a) for a in jax.tree_util.tree_leaves(test)))
        return self._test_keys[id(test)][1]

    def summary(self) -> dict:
        """The batch's shared calls (each experiment's summary.json carries it as ``batch``)."""
        out: dict = {"experiments": len(self._engines), "flushes": self.flushes,
                     "held_flushes": self.held_flushes, "test_calls": self.test_calls,
                     "test_seconds": self.test_seconds}
        if self._first_flush is not None:  # from the batch's first shared flush to now (this run's end)
            out["loop_seconds"] = time.perf_counter() - self._first_flush
        if self._group is not None:
            for kind in ("train", "eval"):
                calls = [c for c in self._group.calls if c.kind == kind]
                if calls:
                    out[kind] = {"calls": len(calls), "tasks": int(sum(c.num_tasks for c in calls)),
                                 "mean_tasks_per_call": float(np.mean([c.num_tasks for c in calls])),
                                 "mean_experiments_per_call": float(np.mean([c.experiments for c in calls])),
                                 "compiles": int(sum(c.compiled for c in calls)),
                                 "seconds": float(sum(c.seconds for c in calls))}
        return out


class BatchMember:
    """One experiment's place in a batch (given to :func:`runner.run` as ``batch``)."""

    def __init__(self, coordinator: BatchCoordinator):
        self.coordinator = coordinator
        self.index = -1
        self._left = False

    def attach(self, sim) -> None:
        self.coordinator._attach(self, sim)

    def leave(self) -> None:
        if not self._left:
            self._left = True
            self.coordinator._leave()

    def summary(self) -> dict:
        out = self.coordinator.summary()
        out["blocked_seconds"] = self.coordinator.blocked_seconds(self)
        return out


def plan_batches(jobs: list[SweepJob], batch: int) -> list[list[int]]:
    """Job indices in batches: jobs that can share (equal :func:`share_key`) in order of first
    appearance, ``batch`` at a time."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1 experiments, got {batch}")
    groups: dict[tuple, list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(share_key(job.scenario), []).append(i)
    return [members[k: k + batch] for members in groups.values() for k in range(0, len(members), batch)]


def run_sweep(jobs: list[SweepJob], batch: int | None = None, *, plot: bool = True,
              snapshot_every: int | None = None, snapshot_minutes: float | None = None,
              stop_on_signals=False, wall_budget_s: float | None = None, deadline: float = math.inf,
              log: Callable[[str], None] | None = None, progress_every_s: float = 60.0) -> list:
    """Runs ``jobs`` in batches (see the module docstring); one RunResult per job, in order.

    ``batch``: experiments per batch (default :func:`default_batch`). ``stop_on_signals``: from
    the main thread, SIGINT / SIGTERM stop every running experiment after its current event,
    each writing its stop snapshot (``resume=True`` jobs continue from there); the jobs of later
    batches are not started (their entries are None); a :class:`~.stops.StopOnSignals` guard there is
    shared (a comparison's: its :attr:`~.stops.StopOnSignals.signum` says a signal came). An
    experiment that fails does not stop the others of its batch; the first error is raised once the batch has finished.
    Two jobs with the same ``out_dir`` are refused before anything runs, and a folder that another
    run or sweep (of this process or another) is writing is refused by its folder lock.
    ``wall_budget_s``: each experiment's (``runner.run``); batches that would start after
    ``deadline`` (``time.time()``) are not started. Every ``progress_every_s`` seconds of a batch
    one line says how far its experiments got (``log``, default stderr).
    """
    from .cells import regime_label
    from .progress import comparison_eta
    from .runner import run

    batch = default_batch() if batch is None else batch
    folders: dict[Path, int] = {}
    for i, job in enumerate(jobs):  # one writer per results folder: two jobs never share one
        if job.out_dir is not None:
            first = folders.setdefault(Path(job.out_dir).resolve(), i)
            if first != i:
                raise ValueError(f"sweep jobs {first} and {i} both write the results folder {job.out_dir}; "
                                 "give each job its own out_dir")
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    results: list = [None] * len(jobs)
    from .stops import StopOnSignals

    signals = StopOnSignals.of(stop_on_signals)  # a comparison's guard, or one for this sweep
    t_start = time.perf_counter()
    compiles_at_start = compile_count()
    walls: list[float] = []  # wall seconds per experiment of each finished batch: the sweep's ETA
    with signals:
        batches = plan_batches(jobs, batch)
        for b_i, members in enumerate(batches):
            if signals.signum is not None or time.time() > deadline:
                break
            coordinator = BatchCoordinator(len(members))
            signals.attach(coordinator)
            errors: list = [None] * len(members)

            def work(slot, i, member):
                job = jobs[i]
                try:
                    results[i] = run(job.scenario, job.out_dir, plot=plot, snapshot_every=snapshot_every,
                                     snapshot_minutes=snapshot_minutes, resume=job.resume,
                                     wall_budget_s=wall_budget_s, batch=member, writers=job.writers)
                except BaseException as exc:  # noqa: BLE001 - reported after the batch
                    errors[slot] = exc
                finally:
                    member.leave()

            threads = [threading.Thread(target=work, args=(s, i, coordinator.member()), daemon=True,
                                        name=f"felix-sweep-{i}") for s, i in enumerate(members)]
            left = sum(len(m) for m in batches[b_i:])
            log(f"batch {b_i + 1}/{len(batches)}: {len(members)} experiments{comparison_eta(walls, left)}")
            t_batch = time.perf_counter()
            for t in threads:
                t.start()
            last_line = time.perf_counter()
            for t in threads:
                while t.is_alive():
                    t.join(0.2)  # the main thread stays free for signals
                    if time.perf_counter() - last_line >= progress_every_s:
                        last_line = time.perf_counter()
                        log(coordinator.progress_line())
            signals.detach(coordinator)
            walls += [(time.perf_counter() - t_batch) / len(members)] * len(members)
            for i in members:
                r = results[i]
                if r is not None:
                    log(f"  {r.scenario.strategy} on {regime_label(r.scenario.availability)}, seed {r.scenario.seed}: "
                        f"{r.summary['stop_reason']} after {r.summary['aggregations']} aggregations")
            failed = [e for e in errors if e is not None]
            if failed:
                raise failed[0]
    stopped = sum(r is not None and r.summary["stop_reason"] == "interrupted" for r in results)
    log(f"sweep: {sum(r is not None for r in results)}/{len(jobs)} experiments"
        + (f" ({stopped} stopped by a signal, resumable)" if stopped else "") + " in "
        f"{time.perf_counter() - t_start:.1f} s, {compile_count() - compiles_at_start} XLA compilations")
    return results
