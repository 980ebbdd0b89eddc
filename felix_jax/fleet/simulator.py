"""The fleet clock: a discrete-event loop over virtual time (docs/architecture.md).

Events (``events.py``): task replies, TierTrack notifications that a running
client left, per-task timeouts, and wake-ups when availability may have changed.
The simulator does the mechanics (dispatch, timelines, bytes, the view, lazy
execution, aggregation); *what* to dispatch and when to aggregate is decided by
the mode (``modes.py``) and the strategy's selector / aggregator.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import time
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np

from ..cohort import CohortEngine, VersionStore, evaluate, evaluate_hits, evaluate_many, evaluate_weighted
from ..cohort.budget import MemoryPlan
from ..data.federated import HeldOutSet
from ..memory import FreeMemoryRelease
from ..models.base import Model, Params
from ..policies.aggregators.base import Aggregator, BufferInfo
from ..plugin_calls import defined_at
from ..policies.aggregators.deltas import update_norms
from ..policies.selectors.base import SelectionContext, Selector
from ..traces import AvailabilityTrace, DeviceProfile, Tier
from ..traces.generators import always_available
from ..traces.on_demand import CyclicTrace
from .accounting import Accounting
from .clientmap import ClientMap
from .config import FleetConfig, StopRule
from .event_stream import EventStream
from .events import EventKind, EventQueue
from .executor import EvalOutcome, LazyExecutor
from .knowledge import Knowledge, ViewTracker
from .lifecycle import Interruption, Timeline, first_leave, first_return, partial_work, task_timeline
from .records import Checkpoint, Update  # noqa: F401  (importable from here, as before)
from .running_sum import Arrived, RunningSum, folds_on_arrival
from .server_optimizer import make_server_optimizer, server_step, weighted_mean_delta
from .snapshot import SnapshotPolicy, load_snapshot, save_snapshot
from .tasks import Task
from .update_guard import (UpdateGuardConfig, Verdict, judge_arrival, judge_updates, remember_norms,
                           surely_accepted_below, tree_all_finite, update_health, zero_rejected)

TRAIN_TIERS = frozenset({int(Tier.AVL_TRAIN)})
EVAL_TIERS = frozenset({int(Tier.AVL_TRAIN), int(Tier.AVL_EVAL)})


class PolicyError(RuntimeError):
    """A selector or aggregator (a plugin's, typically) broke its contract: bad client ids, bad
    weights. One line naming the policy and what it returned."""


class RunFailed(RuntimeError):
    """A run stopped mid-way by a failure that is not a plugin's (a policy's contract check, the device):
    one line with the failure, what its results folder holds and the next command."""


@dataclasses.dataclass
class _PendingCheckpoint:
    """A test checkpoint whose evaluation waits for its batch (``StopRule.eval_batch``), with
    what the run's record was at that point, to return to if the stop rule fires there."""

    params: Params
    version: int
    time_s: float
    bytes_total: int
    staleness_mean: float
    interval_s: float
    accounting: dict  # Accounting.mark()
    num_aggregation_times: int
    events: tuple | None = None  # EventStream.mark() (None: the log is held in Accounting.events)


@dataclasses.dataclass
class RunRecord:
    checkpoints: list[Checkpoint]
    aggregation_times: list[float]
    accounting: Accounting
    stop_reason: str
    time_to_target_s: float | None
    end_time_s: float
    host_seconds: float
    events_processed: int
    params: Params
    test_eval_calls: int = 0  # device calls that evaluated test checkpoints (the whole run, across resumes)
    num_clients: int = 0  # the population (participation statistics count clients that never took part)
    events_path: Any = None  # the events.csv the run streamed its log to (None: in accounting.events)
    # StopRule.keep_hits: np.packbits of each checkpoint's per-test-sample correctness, in checkpoint order
    test_hits: list | None = None
    num_test: int = 0  # test samples each checkpoint evaluated


def _finite_utility(u) -> float:
    """A reported utility for the client map: a non-finite one (a diverging client's loss) reads as 0,
    so it can neither win nor poison a selector's score sampling."""
    u = float(u)
    return u if math.isfinite(u) else 0.0


class FleetSimulator:
    """Runs one strategy on one fleet; ``run()`` returns a :class:`RunRecord`.

    Resumable (``snapshot.py``): under a :class:`~.snapshot.SnapshotPolicy` the
    run writes snapshots between events; ``restore(path)`` on a simulator freshly
    built from the same scenario, then ``run()``, continues the run exactly.
    """

    def __init__(self, *, model: Model, engine: CohortEngine, trace: AvailabilityTrace, profile: DeviceProfile,
                 test: HeldOutSet, init_params: Params, config: FleetConfig, selector: Selector,
                 aggregator: Aggregator, mode: Any, stop: StopRule, seed: int = 0,
                 eval_selector: Selector | None = None, eval_budget: int = 0,
                 on_checkpoint: Callable[[Checkpoint], None] | None = None,
                 update_guard: UpdateGuardConfig = UpdateGuardConfig(), snapshot: SnapshotPolicy | None = None,
                 live_mix: Callable[[float], np.ndarray] | None = None, memory: MemoryPlan | None = None):
        if trace.num_clients < engine.data.num_clients:
            raise ValueError(f"trace has {trace.num_clients} clients but the data has {engine.data.num_clients}")
        self.model, self.engine, self.trace, self.profile = model, engine, trace, profile
        # adversarial clients (cohort/adversary.py): a boolean per client, fixed over the run; None: none
        self._adversarial = engine.adversarial
        self.test, self.cfg, self.stop = test, config, stop
        self.reading = config.reading
        # the FeLiX code's oracle runs (reading.oracle_clients): clients that never leave, while the
        # oracle server still reads the run's trace (client_trace); one recorded client for a trace held
        # as a function (the same answers as a row for every client)
        self._clients_always_on = None
        if config.knowledge is Knowledge.ORACLE and self.reading.oracle_clients == "always_available":
            self._clients_always_on = (always_available(trace.num_clients) if trace.form == "table"
                                       else CyclicTrace(always_available(1), trace.num_clients))
        self.selector, self.aggregator, self.mode = selector, aggregator, mode
        self.eval_selector, self.eval_budget = eval_selector, eval_budget
        self.on_checkpoint = on_checkpoint
        self.update_guard = update_guard
        self.seed = seed
        self.snapshot = snapshot
        # client streams: the population's class mix at a time; test checkpoints are then weighted to it
        self.live_mix = live_mix
        # a sweep batch: ``test_evaluator(model, test, params_list, mixes or None) -> [HeldOutMetrics]``
        # evaluates checkpoints together with the batch's other experiments (experiment/sweep.py)
        self.test_evaluator: Callable | None = None
        self._guard_norms = np.zeros(0, np.float64)  # norms of recently accepted updates, oldest first
        self._guard_empty_buffers = 0  # buffers in a row without an accepted update
        # per-update weights: each update folded into the aggregation's running sum as it arrives (running_sum.py);
        # None: the buffer is gathered at the aggregation
        self._running = (RunningSum(init_params, aggregator.transform_deltas)
                         if folds_on_arrival(aggregator, config) else None)
        counts = engine.counts
        # training samples a task processes, per client (for the compute time model)
        t0 = np.zeros(len(counts))  # client streams: the data held at the start (static data: always)
        steps = engine.num_train_steps(np.arange(len(counts)), t0)
        self._train_samples = steps * np.minimum(engine.train_cfg.batch_size, counts)
        # a client registers with its profile's training-task duration (Oort's system metric before it is explored)
        self.view = ClientMap.create(counts, profile.train_duration_s(np.arange(len(counts)), model.bytes_on_wire,
                                                                      self._train_samples))
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
        self.queue = EventQueue()
        self.acct = Accounting()
        self.acct.adversarial_clients = 0 if self._adversarial is None else int(self._adversarial.sum())
        # the event log streamed to a file (stream_events); None: its rows are held in acct.events
        self.event_stream: EventStream | None = None
        self._restored_event_log: dict | None = None  # a snapshot's streamed log, until stream_events
        self.params = init_params
        self.server_opt = make_server_optimizer(config.server_optimizer, aggregator.server_lr, config.server_momentum,
                                                config.server_tau)
        self.server_opt_state = self.server_opt.init(init_params)
        self.version = 0
        # memory: the run's memory budget (cohort/budget.py); None: every pending task computed at each flush
        self.executor = LazyExecutor(engine, VersionStore(init_params, capacity=8), memory)
        if self._running is not None:  # each update's norm measured as it is stored, read at its arrival
            self.executor.measure = self._running.measure
        self.executor.publish(0, init_params)
        self.tasks: dict[int, Task] = {}
        # tasks in self.tasks that are in flight and not replied, per kind (in_flight_count); None: count
        # them from the tasks at the next call (a restored simulator)
        self._in_flight_n: dict[str, int] | None = {"train": 0, "eval": 0}
        self.now = 0.0
        self._next_task_id = 0
        self._sel_state = selector.init()
        self._eval_sel_state = eval_selector.init() if eval_selector else None
        self._evals_this_round = 0
        self._last_notify_t = 0.0
        # the view, wake-ups and notification counts follow the trace's changes only (knowledge.py)
        self._tracker = ViewTracker(config.knowledge, trace, config.sees_eval_tier)
        self._wake_pending: bool | None = None  # a WAKE event is queued (None: ask the queue)
        self.checkpoints: list[Checkpoint] = []
        self.aggregation_times: list[float] = [0.0]
        self._accuracies: list[float] = []
        # stop.keep_hits: np.packbits of every checkpoint's per-test-sample correctness, one per checkpoint
        self.test_hits: list[np.ndarray] = []
        self._pending: list[_PendingCheckpoint] = []  # checkpoints not evaluated yet (eval_batch > 1)
        # Accounting.mark() at the checkpoint being reported to on_checkpoint (metric writers read the bytes
        # by kind and the updates aggregated since the previous one from it)
        self.checkpoint_accounting: dict | None = None
        self._test_eval_calls = 0
        self._stop_reason: str | None = None
        self._time_to_target: float | None = None
        self._events = 0  # events processed
        self._started = False  # the initial checkpoint and first dispatch are done (run() or restore())
        self._stop_requested: str | None = None  # request_stop(): the stop reason, taken between events
        self._stop_at_events = 0  # request_stop(at_events=N): taken once N events are handled
        self._settled: int | None = None  # events fully handled (None: the run's start is not done)
        self._snapshot_version = 0  # model version at the last snapshot (or restore)
        self._snapshot_clock = 0.0  # host perf_counter at the last snapshot (or at run() start)
        self._free_memory = FreeMemoryRelease()  # the allocator's free pages back to the system (memory.py)
        self._utility_by_eval = np.zeros(len(counts), bool)  # a client's utility came from an eval reply
        # a serial server (reading.serial_server): replies wait in arrival order; the server is busy until
        # _server_free_at (a message in processing, or the blocking work after an aggregation)
        self._server_queue: list[int] = []
        self._serving = False  # a SERVED event is queued for the head of _server_queue
        self._server_free_at = 0.0
        # every async strategy excludes a picked client for the rest of the round (reading.async_exclusion)
        self._excludes_until_aggregation = config.mode == "async" and self.reading.async_exclusion == "every_async"
        # a sync server that selects busy clients (reading.sync_busy_selectable): a client's tasks queue,
        # each starting when the one before it ends (_client_free_at: when its queued work ends)
        self._queues_busy = config.mode == "sync" and self.reading.sync_busy_selectable
        self._client_free_at = np.zeros(len(counts), np.float64)
        self._eval_samples = np.minimum(counts, engine.num_eval_batches(np.arange(len(counts)), t0)
                                        * engine.train_cfg.batch_size)

    # ------------------------------------------------------------------ public
    @property
    def client_trace(self) -> AvailabilityTrace:
        """The trace the clients follow (task timelines): the run's, unless they never leave."""
        return self.trace if self._clients_always_on is None else self._clients_always_on

    @property
    def round(self) -> int:
        return self.version

    @property
    def aggregation_path(self) -> str:
        """"running sum": updates folded in as they arrive (:mod:`.running_sum`); "buffer": gathered at the end."""
        return "buffer" if self._running is None else "running sum"

    def in_flight(self, kind: str = "train") -> list[Task]:
        return [t for t in self.tasks.values() if t.kind == kind and t.in_flight and not t.replied]

    def in_flight_count(self, kind: str = "train") -> int:
        """``len(self.in_flight(kind))`` in O(1): a running count kept where a task enters or leaves
        flight (dispatch, reply, client left, timeout)."""
        if self._in_flight_n is None:  # restored: count once from the tasks
            self._in_flight_n = {"train": 0, "eval": 0}
            for t in self.tasks.values():
                if t.in_flight and not t.replied:
                    self._in_flight_n[t.kind] = self._in_flight_n.get(t.kind, 0) + 1
        return self._in_flight_n.get(kind, 0)

    def _leaves_flight(self, task: Task) -> None:
        """``task`` stops counting toward its kind's in-flight count (call before clearing its flags)."""
        if task.in_flight and not task.replied and self._in_flight_n is not None:
            self._in_flight_n[task.kind] -= 1

    def run(self) -> RunRecord:
        """Runs to a stop; after :meth:`restore`, continues the restored run from its snapshot."""
        t_host = time.perf_counter()
        self._snapshot_clock = t_host
        if self._restored_event_log is not None and self.event_stream is None:
            raise RuntimeError("this run's snapshot streamed its event log to events.csv: call "
                               "stream_events(path) with that file before run()")
        if not self._started:
            self._started = True
            self._checkpoint()  # accuracy of the initial model at t=0
            self.mode.refill(self)
        self._settled = self._events
        while self._stop_reason is None:
            if self._stop_requested is not None and self._events >= self._stop_at_events:
                self._stop_reason = self._stop_requested  # honoured between events, where the state is consistent
                break
            if not len(self.queue):
                # Every task waits on a client that is not back within the horizon (task timelines end
                # there): the run is stuck until it, so that is when it ends in virtual time.
                if math.isfinite(self.stop.max_virtual_s):
                    self.now = max(self.now, self.stop.max_virtual_s)
                self._stop_reason = ("stalled: no pending events (every task waits on a client that does not "
                                     "return within the run's horizon)")
                break
            if self.queue.peek_time() > self.stop.max_virtual_s:
                self.now = self.stop.max_virtual_s
                self._stop_reason = "max_virtual_s"
                break
            ev = self.queue.pop()
            self.now = ev.time
            self._events += 1
            handler = {EventKind.REPLY: self._on_reply, EventKind.CLIENT_LEFT: self._on_client_left,
                       EventKind.TIMEOUT: self._on_timeout, EventKind.WAKE: self._on_wake,
                       EventKind.SERVED: self._on_served, EventKind.SERVER_FREE: self._on_server_free}[ev.kind]
            handler(ev.payload)
            self._settled = self._events
            if self.snapshot is not None and self._stop_reason is None:
                self._maybe_snapshot()
        self._resolve_checkpoints()  # may roll the record back to a target found late
        self._count_notifications()
        if self.event_stream is not None:
            self.event_stream.flush(self.now)  # the rows up to the run's end; later ones stay held
        return RunRecord(self.checkpoints, self.aggregation_times, self.acct, self._stop_reason,
                         self._time_to_target, self.now, time.perf_counter() - t_host, self._events, self.params,
                         self._test_eval_calls, self.view.num_clients,
                         None if self.event_stream is None else self.event_stream.path,
                         self.test_hits if self.stop.keep_hits else None, int(self.test.y.shape[0]))

    def stream_events(self, path, chunk_rows: int | None = None) -> EventStream:
        """From now on the event log goes to ``path`` (``events.csv``) as the run goes, in chunks of
        ``chunk_rows`` rows (:mod:`.event_stream`), instead of ``acct.events``. Call it before
        :meth:`run`, after :meth:`restore` when resuming: the file is then cut back to the
        snapshot's length (rows a snapshot held in memory are written first)."""
        if self.event_stream is not None:
            raise RuntimeError("the event log is already streamed to " + str(self.event_stream.path))
        kwargs = {} if chunk_rows is None else {"chunk_rows": chunk_rows}
        self.event_stream = EventStream(path, state=self._restored_event_log, earlier_rows=self.acct.events,
                                        now=self.now, **kwargs)
        self.acct.events = []
        self._restored_event_log = None
        return self.event_stream

    def restore(self, path) -> None:
        """Loads a snapshot (a snapshot root or one snapshot folder) into this freshly built simulator.

        The simulator must come from the scenario that wrote the snapshot (else a
        :class:`~.snapshot.SnapshotError`, one line) and must not have run yet;
        ``run()`` then continues where the snapshot was taken.
        """
        if self._started:
            raise RuntimeError("restore() needs a freshly built simulator; this one has already run")
        if self.event_stream is not None:
            raise RuntimeError("restore() comes before stream_events(): the snapshot says where the log resumes")
        load_snapshot(self, path)
        self._in_flight_n = None  # recounted from the restored tasks
        for task in self.tasks.values():  # partial updates still to compute run the steps they finished
            if task.steps is not None and task.steps < task.full_steps:
                self.engine.set_step_limit(task.task_id, task.steps)
        self._started = True
        self._settled = self._events
        self._snapshot_version = self.version

    def _maybe_snapshot(self) -> None:
        """Between two events (a consistent point): a snapshot if the policy says one is due."""
        policy = self.snapshot
        n = policy.every_aggregations
        by_count = n is not None and self.version // n > self._snapshot_version // n  # at multiples of n
        by_clock = (policy.every_minutes is not None
                    and time.perf_counter() - self._snapshot_clock >= 60.0 * policy.every_minutes)
        if not (by_count or by_clock):
            return
        self._resolve_checkpoints()  # a snapshot holds no unevaluated checkpoint
        if self._stop_reason is not None:
            return
        path = save_snapshot(self, policy.path, keep=policy.keep)
        self._snapshot_version, self._snapshot_clock = self.version, time.perf_counter()
        if policy.on_saved is not None:
            policy.on_saved(path)

    # --------------------------------------------------------------- dispatch
    def refresh_view(self) -> None:
        self._tracker.refresh(self.view, self.now, self._last_notify_t)

    def select_and_dispatch(self, k: int, kind: str = "train") -> int:
        """Asks the (train or eval) selector for up to ``k`` clients and dispatches them."""
        if k <= 0:
            return 0
        if kind == "train":
            # a server that selects busy clients still picks a client once per round
            once = self.cfg.detaches_on_departure or self._excludes_until_aggregation or self._queues_busy
            eligible = self.view.trainable(self.round, once)
            num_eligible = self.view.num_trainable(self.round, once)
            selector, state = self.selector, self._sel_state
        else:
            eligible = self.view.evaluable()
            num_eligible = self.view.num_evaluable()
            selector, state = self.eval_selector, self._eval_sel_state
        if not num_eligible:
            return 0
        ctx = SelectionContext(self.view, eligible, self.round, self.now, self.rng,
                               self.trace if self.cfg.knowledge is Knowledge.ORACLE else None, num_eligible)
        t0 = time.perf_counter()
        clients, state = selector.select(state, ctx, k)
        self.acct.selection_seconds.append(time.perf_counter() - t0)
        if kind == "train":
            self._sel_state = state
        else:
            self._eval_sel_state = state
        raw = np.asarray(clients)
        n = len(eligible)
        # the selector as a broken contract names it: a plugin's with its file:line (looked up only then)
        who = lambda: f"selector {selector.name}{defined_at(selector.select)}"  # noqa: E731
        if raw.ndim != 1 or (raw.size and raw.dtype.kind not in "iu"):  # not ids (floats, a boolean mask...)
            raise PolicyError(f"{who()} returned {raw.ravel()[:8].tolist()!r} (dtype "
                               f"{raw.dtype}, shape {raw.shape}): expected a 1-D array of integer client ids "
                               f"in [0, {n})")
        clients = raw.astype(np.int64)
        if len(clients) > k:
            raise PolicyError(f"{who()} returned {len(clients)} clients when asked for at most {k}")
        if np.any((clients < 0) | (clients >= n)):
            bad = clients[(clients < 0) | (clients >= n)]
            raise PolicyError(f"{who()} returned client ids {bad[:8].tolist()} outside [0, {n})")
        if len(clients) and not eligible[clients].all():
            raise PolicyError(f"{who()} picked ineligible clients "
                              f"{clients[~eligible[clients]][:8].tolist()}")
        if len(np.unique(clients)) != len(clients):
            raise PolicyError(f"{who()} picked a client twice")
        for c in clients:
            self._dispatch(int(c), kind)
        return len(clients)

    def _task_samples(self, clients: np.ndarray, kind: str) -> np.ndarray:
        """Samples a task on ``clients`` processes (for its compute time); with client streams, those
        the client holds now (a task trains on the data of its dispatch time)."""
        if self.engine.streams is None:
            return (self._train_samples if kind == "train" else self._eval_samples)[clients]
        times = np.full(len(clients), self.now)
        counts = self.engine.sample_counts(clients, times)
        batch = self.engine.train_cfg.batch_size
        if kind == "train":
            return self.engine.num_train_steps(clients, times) * np.minimum(batch, counts)
        return np.minimum(counts, self.engine.eval_cfg.num_batches(counts) * batch)

    def _dispatch(self, client: int, kind: str) -> None:
        tid = self._next_task_id
        self._next_task_id += 1
        mb = self.model.bytes_on_wire
        cl = np.array([client])
        if kind == "train":
            work = float(self.profile.train_duration_s(cl, mb, self._task_samples(cl, "train"))[0]
                         + self.reading.train_overhead(self.seed, client, tid))
            allowed = TRAIN_TIERS
            self.acct.bytes_down_train += mb
            self.acct.dispatched_train += 1
            known = self.view.utility_round[client] >= 0
            age = self.round - self.view.utility_round[client] if known else -1
            self.acct.utility_age.append(int(age))
            known_s = self.view.duration_s[client]  # measured durations: what the server knows at the pick
            measured = self.reading.duration_source == "measured" and np.isfinite(known_s)
            self.acct.picked_duration_s.append(float(known_s) if measured else work)
            if self._queues_busy and self._client_free_at[client] > self.now:
                self.acct.train_picks_busy += 1  # queued behind the client's earlier tasks
            if not known:
                self.acct.train_picks_unexplored += 1
            else:
                self.acct.picked_utility.append(float(self.view.utility[client]))
                self.acct.train_picks_eval_utility += int(self._utility_by_eval[client])
            self.view.mark_selected(client, self.round)  # once per round counts training picks only
        else:
            work = float(self.profile.eval_duration_s(cl, mb, self._task_samples(cl, "eval"))[0])
            allowed = EVAL_TIERS
            self.acct.bytes_down_eval += mb
            self.acct.dispatched_eval += 1
            self._evals_this_round += 1
            if self.client_trace.state_of(self.now, client) == Tier.AVL_EVAL:
                self.acct.evals_on_avl_eval += 1
            else:
                self.acct.evals_on_avl_train += 1
        starts = max(self.now, float(self._client_free_at[client])) if self._queues_busy else self.now
        policy = self.cfg.interruption
        if kind == "eval" and policy is Interruption.PARTIAL:
            policy = Interruption.ABANDON  # a forward pass cut short has no partial result worth sending
        timeline = task_timeline(self.client_trace, client, starts, work, allowed, policy,
                                 horizon_s=self.stop.max_virtual_s)
        steps = full_steps = None
        if math.isfinite(timeline.worked_s):  # interruption=partial: cut short by its client's departure
            timeline, steps, full_steps = self._partial(client, timeline, work)
        if self._queues_busy:
            self._client_free_at[client] = timeline.finish_s
        task = Task(tid, client, kind, self.version, self.round, self.now, work, timeline)
        sends_partial = bool(steps)  # a partial update is on its way (none: the task was abandoned at once)
        if sends_partial:
            task.steps, task.full_steps = steps, full_steps
            if steps < full_steps:
                self.engine.set_step_limit(tid, steps)
            self.acct.partial_updates += 1
        if self.engine.streams is not None and kind == "train":
            task.label_time_s, task.proxy_fraction = self.engine.streams.label_report(client, self.now)
        self._log(self.now, "dispatch", client, kind, self.version)
        if kind == "train" and self._adversarial is not None and self._adversarial[client]:
            self._log(self.now, "adversarial", client, kind, self.version)  # the task's update will be corrupted
            self.acct.adversarial_tasks += 1
        if timeline.start_s > self.now and math.isfinite(timeline.start_s):
            self._log(timeline.start_s, "start", client, kind, self.version)
        if math.isfinite(timeline.first_stop_s):
            self._log(timeline.first_stop_s, "leave", client, kind, self.version)
            back = first_return(self.client_trace, client, timeline.first_stop_s, timeline.finish_s, allowed)
            if math.isfinite(back):
                self._log(back, "return", client, kind, self.version)
        if sends_partial:  # the steps its update holds, in the staleness column (event_log.py)
            self._log(timeline.first_stop_s, "partial", client, kind, self.version, steps)
        self.tasks[tid] = task
        if self._in_flight_n is not None:
            self._in_flight_n[kind] = self._in_flight_n.get(kind, 0) + 1
        if not self._queues_busy:  # a server that selects busy clients does not mark them
            self.view.set_busy(client, True)
        self.executor.submit(tid, client, self.version, kind, self.now, need_s=timeline.finish_s)
        if timeline.interruptions:
            self.acct.interrupted_tasks += 1
        if math.isfinite(timeline.finish_s):
            self.queue.push(timeline.finish_s, EventKind.REPLY, tid)
        if timeline.abandoned:
            self.acct.abandoned_tasks += 1
        left_s = timeline.first_stop_s
        if self.client_trace is not self.trace and self.cfg.detaches_on_departure:
            # clients that never leave: the oracle frees the slot when the run's trace says the client left
            left_s = first_leave(self.trace, client, self.now, timeline.finish_s, allowed)
        if self.cfg.detaches_on_departure and math.isfinite(left_s) and not sends_partial:
            # a partial update's departure is its reply: the task keeps its slot until it arrives
            self.queue.push(left_s, EventKind.CLIENT_LEFT, tid)
        if math.isfinite(self.cfg.timeout_s):
            self.queue.push_timer(self.now + self.cfg.timeout_s, EventKind.TIMEOUT, tid)  # a reply withdraws it

    def _partial(self, client: int, timeline: Timeline, work_s: float) -> tuple[Timeline, int, int]:
        """A training task cut short by its client's departure (``interruption=partial``): its timeline
        with the partial update's arrival (or abandoned, with no step done), the steps that update holds,
        and the steps the whole task has (:func:`~.lifecycle.partial_work`: download, computation and
        upload from the device profile; the computation is the rest of the task's ``work_s``)."""
        cl, mb = np.array([client]), self.model.bytes_on_wire
        down, up = float(self.profile.download_s(cl, mb)[0]), float(self.profile.upload_s(cl, mb)[0])
        full = int(self.engine.num_train_steps(cl, np.array([self.now]))[0])
        timeline, steps = partial_work(timeline, full, down, work_s - down - up, up)
        return timeline, steps, full

    def _log(self, t: float, event: str, client: int, kind: str, version: int, staleness: int = -1,
             weight: float | None = None) -> None:
        """One row of the event log (the streamed ``events.csv``, or ``Accounting.events``): the
        client's true tier at ``t`` with it."""
        tier = int(self.client_trace.state_of(t, client)) if client >= 0 else -1
        row = (float(t), event, int(client), kind, int(version), int(staleness),
               None if weight is None else float(weight), tier)
        if self.event_stream is None:
            self.acct.events.append(row)
        else:
            self.event_stream.append(row, self.now)

    def schedule_wake(self) -> None:
        """Under oracle/TierTrack, retry selection when the next client changes tier."""
        if self.cfg.knowledge is Knowledge.NONE:
            return
        if self._wake_pending is None:  # a fresh or restored simulator: the queue knows
            self._wake_pending = self.queue.has(EventKind.WAKE)
        if self._wake_pending:
            return
        t = self._tracker.next_change(self.now, self._last_notify_t)
        if math.isfinite(t):
            self.queue.push(t, EventKind.WAKE)
            self._wake_pending = True

    # ----------------------------------------------------------------- events
    def _on_reply(self, tid: int) -> None:
        """A reply reaches the server: handled now, or (a serial server) queued behind earlier ones."""
        if not self.reading.serial_server:
            self._handle_reply(tid)
            self._refill()
            return
        self._server_queue.append(tid)
        if not self._serving:
            self._serve_next()

    def _serve_next(self) -> None:
        """The serial server takes the reply at the head of its queue once it is free."""
        self._serving = True
        self._server_free_at = max(self.now, self._server_free_at) + self.reading.per_message_s(self.cfg.mode)
        self.queue.push(self._server_free_at, EventKind.SERVED, None)

    def _on_served(self, _payload) -> None:
        """The serial server finished processing one reply: its effects happen now; an aggregation it
        completed blocks the server for ``server_per_aggregation_s`` more (the inline test evaluation)."""
        self._serving = False
        version = self.version
        self._handle_reply(self._server_queue.pop(0))
        if self.version > version:
            self._server_free_at = self.now + self.reading.server_per_aggregation_s
        if self._server_free_at > self.now:
            self.queue.push(self._server_free_at, EventKind.SERVER_FREE, None)
        else:
            self._refill()
        if self._server_queue:
            self._serve_next()

    def _on_server_free(self, _payload) -> None:
        self._refill()

    def _refill(self) -> None:
        """The mode refills its slots, unless a serial server is busy (it refills when it is free)."""
        if self._stop_reason is None and self.now >= self._server_free_at:
            self.mode.refill(self)

    def _handle_reply(self, tid: int) -> None:
        task = self.tasks.pop(tid)
        self.queue.cancel_timer(tid)  # its timeout would find the task gone and do nothing
        self._leaves_flight(task)
        task.replied = True
        c = task.client
        self.view.set_busy(c, False)
        if self.cfg.knowledge is Knowledge.NONE:
            self.view.set_tier(c, Tier.AVL_TRAIN, self.now)  # a reply proves the client is there
        outcome = self.executor.result(tid)
        if task.steps is not None:
            self.engine.set_step_limit(tid, None)  # its result is taken: never computed again
        reading, n = self.reading, self.view.num_samples[c]
        self._log(self.now, "reply", c, task.kind, task.version, self.version - task.version if task.kind == "train"
                  else -1)
        if task.kind == "train":
            self.acct.bytes_up_train += self.model.bytes_on_wire
            self.acct.replies_train += 1
            staleness = self.version - task.version
            # the sync OORT code skips a straggler's reply before any bookkeeping (reading.sync_records_stale)
            if self.cfg.mode == "async" or staleness == 0 or reading.sync_records_stale:
                stats = outcome.first_batch if self.cfg.utility_from == "first_batch" else outcome.all_steps
                self.view.record_utility(c, _finite_utility(reading.utility(stats.count, stats.sumsq, n)), self.round)
                took = self.now - task.dispatch_s if reading.duration_source == "measured" else task.work_s
                self.view.record_training(c, took)
                self._utility_by_eval[c] = False
            self.mode.on_train_reply(self, Update(task, outcome, staleness, float(self.view.utility[c])))
        else:
            assert isinstance(outcome, EvalOutcome)
            self.acct.bytes_up_eval += self.profile.eval_upload_bytes
            self.acct.replies_eval += 1
            previous = float(self.view.utility[c]) if self.view.utility_round[c] >= 0 else 0.0
            sumsq = outcome.stats.sumsq
            if self.engine.takes_no_step(c, n):
                sumsq = 0.0  # B6: the code's drop_last loader gives a small client no eval batch either
            u = reading.utility(outcome.stats.count, sumsq, n, previous)
            self.view.record_utility(c, _finite_utility(u), self.round)
            self._utility_by_eval[c] = True

    def _on_client_left(self, tid: int) -> None:
        task = self.tasks.get(tid)
        if task is None or task.replied:
            return
        if task.in_flight:
            self._leaves_flight(task)
            task.in_flight = False
            self.acct.detached_tasks += 1
            self._log(self.now, "detached", task.client, task.kind, task.version)
            self.mode.on_task_detached(self, task)
            self._release_exclusion(task)
        self._refill()

    def _on_timeout(self, tid: int) -> None:
        task = self.tasks.get(tid)
        if task is None or task.replied:
            return
        task.timed_out = True
        self.acct.timeouts += 1
        self._log(self.now, "timeout", task.client, task.kind, task.version)
        self._release_exclusion(task)
        if task.timeline.abandoned:  # the client dropped it: the server gives up on it now
            self.tasks.pop(tid)
            self.executor.discard(tid)
            self.view.set_busy(task.client, False)
            self._leaves_flight(task)
            task.in_flight = False
            # No reply will ever clear a timeout mark, so a blind server does not set one:
            # the client stays a candidate (it may well be away, which a blind server cannot know).
        else:
            if self.cfg.knowledge is Knowledge.NONE:
                self.view.set_tier(task.client, Tier.UN_AVL, self.now)  # until its reply proves it is back
            if self.cfg.timeout_frees_slot and task.in_flight:
                self._leaves_flight(task)
                task.in_flight = False
        self._refill()

    def _release_exclusion(self, task: Task) -> None:
        """The FeLiX code releases a client's per-round exclusion at its departure or its task's timeout."""
        if self._excludes_until_aggregation and task.kind == "train" \
                and self.view.last_selected_round[task.client] == self.round:
            self.view.mark_selected(task.client, -1)

    def _on_wake(self, _payload) -> None:
        self._wake_pending = False  # WAKE events come only from schedule_wake, one at a time
        self._refill()

    # ------------------------------------------------------------ aggregation
    def aggregate(self, updates: list[Update]) -> None:
        """Applies the aggregator to ``updates`` and publishes a new model version.

        The update guard (:mod:`.update_guard`) drops non-finite and out-of-bounds
        updates first: the aggregator sees only the K' accepted ones, and its
        step divides by K' (``normalize=False``) or by their total weight. The
        round closes either way: a buffer whose updates were all rejected
        advances the version without a step, as one whose weights are all zero
        does, until ``max_empty_buffers`` such buffers in a row stop the run as
        diverged. A model that is non-finite after the step is not published; the
        run stops as diverged, keeping the last finite model. An aggregator with its
        own rule (``combine``: a trimmed mean, a median) replaces the weighted mean
        only; its weights still count and log the updates (:meth:`_combined_update`).
        Where the aggregator's weights are per update, each update was folded into a
        running sum as it arrived (:meth:`receive_update`) and the buffer is not
        gathered: the same verdicts, weights and step, up to the order of the sum.
        """
        taken = self._running_update(updates) if self._running is not None else self._buffered_update(updates)
        if taken is None:
            return  # diverged: no update accepted in too many buffers in a row (the stop reason says so)
        keep, weights, reduce = taken
        if self._adversarial is not None:
            self._count_adversarial(updates, weights)
        if self.aggregator.combine is None and not self.aggregator.normalize and 0 < keep.sum() < len(updates):
            # the reduction divides by the K rows it is given; the aggregator's K is the accepted K'
            weights *= len(updates) / keep.sum()
        if weights.sum() > 0:
            mean = reduce(weights)
            params, opt_state = server_step(self.server_opt, self.params, self.server_opt_state, mean)
            if not bool(tree_all_finite(params)):
                self._stop_reason = f"diverged: global model is non-finite after aggregation {self.version + 1}"
                return
            self.params, self.server_opt_state = params, opt_state
            self.acct.model_steps += 1
        for u, w in zip(updates, weights):
            self._log(self.now, "aggregated", u.task.client, "train", u.task.version, u.staleness, float(w))
        self.version += 1
        self._log(self.now, "aggregation", -1, "", self.version)
        self._evals_this_round = 0
        self.aggregation_times.append(self.now)
        self.executor.publish(self.version, self.params)
        self._free_memory.tick()  # at most every 10 s of wall time; changes no result
        if self.version % self.stop.eval_every == 0:
            self._checkpoint()
        if self.version >= self.stop.max_aggregations and self._stop_reason is None:
            self._stop_reason = "max_aggregations"

    def _buffered_update(self, updates: list[Update]):
        """The buffer gathered from the delta store, judged, weighed: (accepted mask, weights, the reduction of
        the buffer by final weights), or None when the run stops as diverged."""
        deltas = self.executor.take_deltas([u.outcome for u in updates])
        finite, raw_norms = update_health(deltas)
        keep = self._judge(finite, raw_norms).accepted
        if self._empty_buffers_diverged():
            return None
        if not keep.all():
            deltas = zero_rejected(deltas, jnp.asarray(keep))
        norms = raw_norms
        if self.aggregator.transform_deltas is not None:
            deltas = self.aggregator.transform_deltas(deltas)
            norms = update_norms(deltas)
        info = self._buffer_info(updates, norms)
        weights = np.zeros(len(updates), np.float64)
        if keep.any():
            weights[keep] = self._accepted_weights(info, deltas, keep)

        def reduce(final: np.ndarray):
            if self.aggregator.combine is None:
                return weighted_mean_delta(deltas, jnp.asarray(final, jnp.float32), normalize=self.aggregator.normalize)
            return self._combined_update(deltas, keep & (final > 0), final)

        return keep, weights, reduce

    def _running_update(self, updates: list[Update]):
        """The running sum's aggregation (:mod:`.running_sum`): the last group of arrivals judged and folded
        in; the verdicts and weights are those the arrivals gave, and the updates the guard's median over the
        whole buffer held until now are judged by the whole buffer and, where accepted, weighed and folded in.
        Returns what :meth:`_buffered_update` does (the reduction: the sum over K' or over the total weight),
        or None when the run stops as diverged."""
        rs = self._running
        self._fold_arrivals()
        arrived = [rs.arrivals[u.task.task_id] for u in updates]
        finite = np.array([a.finite for a in arrived], bool)
        norms = np.array([a.norm for a in arrived], np.float64)
        at_arrival = None
        if self.update_guard.median_over == "arrivals":  # every verdict given at its arrival
            at_arrival = Verdict(np.array([a.accepted for a in arrived], bool),
                                 np.array([a.nonfinite for a in arrived], bool),
                                 np.array([a.over_norm for a in arrived], bool), None)
            whole = judge_updates(finite, norms, self._guard_norms, self.update_guard)  # what the buffer's says
            self.acct.guard_verdicts_unlike_buffer += int((whole.accepted != at_arrival.accepted).sum())
        keep = self._judge(finite, norms, at_arrival).accepted
        # a verdict given at an arrival is the buffer's (judge_arrival's bound): the running sum holds what the
        # buffered path accepts
        assert all(ok == a.accepted for a, ok in zip(arrived, keep) if a.decided), "an arrival's verdict changed"
        held, rs.held = rs.held, []
        if self._empty_buffers_diverged():
            for u in held:
                self.executor.drop_delta(u.outcome)
            rs.reset()
            return None
        for u, ok in zip(updates, keep):  # the held ones: the buffer's verdict
            a = rs.arrivals[u.task.task_id]
            if not a.decided:
                a.decided, a.accepted = True, bool(ok)
        self._fold_decided(held)
        weights = np.array([a.weight if ok else 0.0 for a, ok in zip(arrived, keep)], np.float64)
        self.acct.staleness.extend(int(u.staleness) for u, ok in zip(updates, keep) if ok)
        self.acct.agg_weights.extend(float(w) for w in weights[keep])
        self.acct.zero_weight_updates += int((weights[keep] == 0).sum())
        mean = None
        if weights.sum() > 0:  # the buffered path's denominator: the accepted K', or their total weight
            mean = rs.mean(weights.sum() if self.aggregator.normalize else keep.sum())
        rs.reset()
        return keep, weights, lambda _final: mean

    def receive_update(self, update: Update) -> None:
        """``update`` joins the aggregation in progress (the mode calls this as it buffers it). Where the run
        folds updates in as they arrive (:mod:`.running_sum`), it waits for its group (``RunningSum.group``
        arrivals), which is then judged by the update guard in arrival order, weighed and folded into the
        running sum where its rows lie in the delta store (:meth:`_fold_arrivals`)."""
        rs = self._running
        if rs is None:
            return
        rs.pending.append(update)
        if len(rs.pending) >= rs.group:
            self._fold_arrivals()

    def _fold_arrivals(self) -> None:
        """The updates received since the last group, judged one by one in arrival order as the update guard
        judges them at their arrival (their norms were measured as they were stored), the accepted ones
        weighed and folded into the running sum, their rows freed. An update the guard's median over the
        whole buffer may still reject (``median_over="buffer"``) keeps its row; it is judged again with each
        group (the median's lower bound rises as the buffer fills), and at the aggregation."""
        rs = self._running
        group, rs.pending = rs.pending, []
        if not group:
            return
        before = len(rs.arrivals)
        if rs.pool is None:  # the aggregation's first arrivals: the median's pool starts from the recent norms
            rs.pool = sorted(float(v) for v in self._guard_norms)
        for i, u in enumerate(group):
            finite, norm, transformed = self._health(u)
            if finite and math.isfinite(norm):
                bisect.insort(rs.pool, norm)
            word = self._judge_arrival(finite, norm, before + i + 1)
            rs.arrivals[u.task.task_id] = Arrived(norm, finite, transformed, word.decided, word.accepted,
                                                  word.nonfinite, word.over_norm)
        decided = [u for u in group if rs.arrivals[u.task.task_id].decided]
        rs.held.extend(u for u in group if not rs.arrivals[u.task.task_id].decided)
        if rs.held and decided:  # the held ones the buffer so far decides (the median's lowest reach has risen)
            bound = surely_accepted_below(rs.pool, self._remaining(len(rs.arrivals)), self.update_guard)
            now = [u for u in rs.held if rs.arrivals[u.task.task_id].norm <= bound]
            for u in now:
                a = rs.arrivals[u.task.task_id]
                a.decided = a.accepted = True
            decided += now
            rs.held = [u for u in rs.held if not rs.arrivals[u.task.task_id].decided]
        self._fold_decided(decided)

    def _health(self, update: Update) -> tuple[bool, float, float]:
        """(finite, L2 norm, norm after transform_deltas) of an update, as measured when it was stored."""
        health = update.outcome.health
        if health is None:  # computed where the store's rows were not measured: measured now
            rows = self.executor.deltas.gather([update.outcome.slot])
            finite, norms, transformed = self._running.measure(rows)
            health = (bool(finite[0]), float(norms[0]), float(transformed[0]))
        return health

    def _judge_arrival(self, finite: bool, norm: float, arrived: int):
        """The guard's word on an update with the buffer's first ``arrived`` updates judged
        (:func:`~.update_guard.judge_arrival`)."""
        return judge_arrival(finite, norm, self._running.pool, self._remaining(arrived), self.update_guard)

    def _remaining(self, arrived: int) -> int | None:
        """The updates the aggregation in progress takes after its first ``arrived`` (None: not known, a sync
        round that keeps late updates)."""
        if self.cfg.mode == "sync" and self.aggregator.accepts_stale:
            return None
        return max(0, self.cfg.aggregation_goal - arrived)

    def _weigh(self, updates: list[Update], taken: np.ndarray) -> np.ndarray:
        """The aggregator's weights of ``updates`` where ``taken`` (accepted), 0 elsewhere; noted on their
        arrivals."""
        rs = self._running
        weights = np.zeros(len(updates), np.float64)
        if taken.any():
            weights[taken] = self._arrival_weights(
                [u for u, ok in zip(updates, taken) if ok],
                [rs.arrivals[u.task.task_id].delta_norm for u, ok in zip(updates, taken) if ok])
        for u, w, ok in zip(updates, weights, taken):
            if ok:
                a = rs.arrivals[u.task.task_id]
                a.weight, a.folded = float(w), bool(w > 0)
        return weights

    def _fold_decided(self, updates: list[Update]) -> None:
        """Updates whose verdict is final: the accepted ones weighed and folded into the running sum from the
        delta store; every row freed."""
        taken = np.array([self._running.arrivals[u.task.task_id].accepted for u in updates], bool)
        weights = self._weigh(updates, taken)
        self._running.fold(self.executor.deltas, [u.outcome.slot for u in updates], weights)
        for u in updates:
            self.executor.drop_delta(u.outcome)

    def _arrival_weights(self, updates: list[Update], delta_norms) -> np.ndarray:
        """The aggregator's weights of accepted ``updates`` (a per-update aggregator's weights are each
        row's own: the same for a group as for the whole buffer)."""
        weights = np.asarray(self.aggregator.weights(self._buffer_info(updates, delta_norms)), np.float64)
        if weights.shape != (len(updates),) or not np.all(np.isfinite(weights)) or (weights < 0).any():
            raise PolicyError(f"aggregator {self.aggregator.name} returned bad weights {weights}")
        return weights

    def _buffer_info(self, updates: list[Update], norms) -> BufferInfo:
        """The aggregator's view of ``updates``: one row each (``norms``: their L2 norms after
        ``transform_deltas``)."""
        outcomes = [u.outcome for u in updates]
        return BufferInfo(
            staleness=np.array([u.staleness for u in updates], np.int64),
            num_samples=np.array([self.view.num_samples[u.task.client] for u in updates], np.float64),
            utility=np.array([self.view.utility[u.task.client] if u.utility is None else u.utility
                              for u in updates], np.float64),
            loss_mean=np.array([o.all_steps.sum / max(o.all_steps.count, 1.0) for o in outcomes]),
            delta_norms=np.asarray(norms, np.float64),
            label_time_s=np.array([u.task.label_time_s for u in updates], np.float64),
            proxy_fraction=np.array([u.task.proxy_fraction for u in updates], np.float64),
            start_loss=np.array([o.first_batch.sum / max(o.first_batch.count, 1.0) for o in outcomes], np.float64),
            work_fraction=np.array([1.0 if u.task.steps is None else u.task.steps / max(u.task.full_steps, 1)
                                    for u in updates], np.float64),
        )

    def _empty_buffers_diverged(self) -> bool:
        """Whether ``max_empty_buffers`` buffers in a row had no update accepted: the run then stops as
        diverged (its stop reason set here)."""
        limit = self.update_guard.max_empty_buffers
        if limit is None or self._guard_empty_buffers < limit:
            return False
        self._stop_reason = (f"diverged: no client update accepted in the last {limit} buffers "
                             f"({self.acct.rejected_updates_nonfinite} non-finite, "
                             f"{self.acct.rejected_updates_norm} over the norm bound so far)")
        return True

    def _count_adversarial(self, updates: list[Update], weights: np.ndarray) -> None:
        """The buffer's updates from adversarial clients, those accepted (weight > 0) and the total weight
        the aggregator gave them (its own weights, as ``agg_weights`` records them), for ``summary.json``."""
        adversarial = self._adversarial[np.array([u.task.client for u in updates], np.int64)]
        self.acct.adversarial_updates += int(adversarial.sum())
        self.acct.adversarial_updates_accepted += int((adversarial & (weights > 0)).sum())
        self.acct.adversarial_weight_total += float(weights[adversarial].sum())

    def _judge(self, finite: np.ndarray, norms: np.ndarray, verdict: Verdict | None = None) -> Verdict:
        """The guard's verdict on one buffer (``verdict``: the one its arrivals gave, ``median_over="arrivals"``);
        counts rejections and remembers accepted norms."""
        if verdict is None:
            verdict = judge_updates(finite, norms, self._guard_norms, self.update_guard)
        self.acct.rejected_updates_nonfinite += int(verdict.nonfinite.sum())
        self.acct.rejected_updates_norm += int(verdict.over_norm.sum())
        self._guard_norms = remember_norms(self._guard_norms, norms, verdict, self.update_guard)
        self._guard_empty_buffers = 0 if verdict.accepted.any() else self._guard_empty_buffers + 1
        return verdict

    def _accepted_weights(self, info: BufferInfo, deltas, keep: np.ndarray) -> np.ndarray:
        """The aggregator's weights for the accepted rows ``keep`` only: (K',) float64.

        ``augment_info`` works on the whole (K, ...) buffer (fixed shapes); a rejected
        row reaches it as padding: a zero delta with staleness -1, neither fresh
        nor stale. Every per-row field is then cut to the accepted rows.
        """
        if self.aggregator.augment_info is not None:
            padded = info._replace(staleness=np.where(keep, info.staleness, -1))
            info = self.aggregator.augment_info(padded, deltas)
        if not keep.all():
            info = info._make(None if field is None else np.asarray(field)[keep] for field in info)
        weights = np.asarray(self.aggregator.weights(info), np.float64)
        if weights.shape != (int(keep.sum()),) or not np.all(np.isfinite(weights)) or (weights < 0).any():
            raise PolicyError(f"aggregator {self.aggregator.name} returned bad weights {weights}")
        self.acct.staleness.extend(int(s) for s in info.staleness)
        self.acct.agg_weights.extend(float(w) for w in weights)
        self.acct.zero_weight_updates += int((weights == 0).sum())
        return weights

    def _combined_update(self, deltas, keep: np.ndarray, weights: np.ndarray):
        """The server's update from the aggregator's own rule (``Aggregator.combine``) over all K rows:
        ``keep`` the rows that count (accepted and weighted > 0; the others are zeros to ignore),
        ``weights`` as the aggregator gave them. Fixed shapes: one compilation whatever the mask.
        What it returns must have the deltas' tree and leaf shapes without K."""
        from ..policies.aggregators.base import update_mismatch

        update = self.aggregator.combine(deltas, jnp.asarray(keep), jnp.asarray(weights, jnp.float32))
        why = update_mismatch(deltas, update)
        if why is not None:
            raise PolicyError(f"aggregator {self.aggregator.name}'s combine returned {why}")
        return update

    def _checkpoint(self) -> None:
        """A test checkpoint of the current model: evaluated now, or queued until ``eval_batch``
        are waiting (:meth:`_resolve_checkpoints`)."""
        self._count_notifications()
        interval = self.aggregation_times[-1] - self.aggregation_times[-2] if len(self.aggregation_times) > 1 else 0.0
        stale = self.acct.staleness[-self.cfg.aggregation_goal:] if self.acct.staleness else [0]
        self._pending.append(_PendingCheckpoint(self.params, self.version, self.now, self.acct.bytes_total,
                                                float(np.mean(stale)), interval, self.acct.mark(),
                                                len(self.aggregation_times),
                                                None if self.event_stream is None else self.event_stream.mark(self.now)))
        if len(self._pending) >= self.stop.eval_batch:
            self._resolve_checkpoints()

    def _resolve_checkpoints(self) -> None:
        """Evaluates the waiting checkpoints (one device call) and applies the stop rule to each in
        order. If the target is reached at one that the run has gone past, the record goes back to
        it: clock, version, model, aggregation times and accounting, as if the run had stopped there."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        hits = [None] * len(pending)
        # keep_hits: the fixed test set (a live mix is refused with test_hits), its bits kept; in a sweep
        # batch too, whose shared evaluator returns metrics only, so these runs evaluate on their own
        if self.stop.keep_hits:
            out = evaluate_hits(self.model, [p.params for p in pending], self.test,
                                pad_to=self.stop.eval_batch if self.stop.eval_batch > 1 else None)
            metrics, hits = [m for m, _ in out], [h for _, h in out]
            self._test_eval_calls += 1
        elif self.test_evaluator is not None:  # a sweep batch evaluates every experiment's checkpoints together
            mixes = None if self.live_mix is None else [self.live_mix(p.time_s) for p in pending]
            metrics = self.test_evaluator(self.model, self.test, [p.params for p in pending], mixes)
            # counted as this run alone would call (the batch's shared calls are in summary["batch"])
            self._test_eval_calls += len(pending) if self.live_mix is not None or self.stop.eval_batch == 1 else 1
        elif self.live_mix is not None:  # the live distribution at each checkpoint's time
            metrics = [evaluate_weighted(self.model, p.params, self.test, self.live_mix(p.time_s)) for p in pending]
            self._test_eval_calls += len(pending)
        elif self.stop.eval_batch == 1:
            metrics = [evaluate(self.model, p.params, self.test) for p in pending]
            self._test_eval_calls += len(pending)
        else:
            metrics = evaluate_many(self.model, [p.params for p in pending], self.test, pad_to=self.stop.eval_batch)
            self._test_eval_calls += 1
        for p, m, h in zip(pending, metrics, hits):
            cp = Checkpoint(p.time_s, p.version, m.accuracy, m.loss, p.bytes_total, p.staleness_mean, p.interval_s)
            self.checkpoints.append(cp)
            if h is not None:
                self.test_hits.append(h)
            self._accuracies.append(m.accuracy)
            self.checkpoint_accounting = p.accounting
            if self.on_checkpoint:
                self.on_checkpoint(cp)
            if self._time_to_target is None and self.stop.reached(self._accuracies):
                self._time_to_target = p.time_s
                if not self.stop.stop_at_target:
                    continue
                self._stop_reason = "target"
                self.now, self.version, self.params = p.time_s, p.version, p.params
                del self.aggregation_times[p.num_aggregation_times:]
                self.acct.rollback(p.accounting)
                if p.events is not None:
                    self.event_stream.rollback(p.events)
                return

    def _count_notifications(self) -> None:
        if self.cfg.knowledge is not Knowledge.TIERTRACK or self.now <= self._last_notify_t:
            return
        n = self._tracker.notifications(self.now, self._last_notify_t)
        self._last_notify_t = self.now
        self.acct.control_messages += n
        self.acct.control_bytes += n * self.cfg.control_message_bytes

    def request_stop(self, reason: str, at_events: int = 0) -> None:
        """Stops ``run()`` after the event in progress (e.g. on a signal), with ``reason`` as its
        stop reason; a run that already has a stop reason keeps it. ``at_events``: not before that
        many events have been handled (a replay to a given point). Safe to call from a signal
        handler: the loop checks the request only between events."""
        if self._stop_reason is None and self._stop_requested is None:
            self._stop_at_events = at_events
            self._stop_requested = reason

    @property
    def settled_events(self) -> int | None:
        """Events handled to the end (the count a snapshot taken now would hold): where a run that
        raised in the middle of an event (a plugin's error) was last consistent. None before the
        run's start (the initial checkpoint and dispatch) is done."""
        return self._settled
