"""``run(scenario) -> RunResult``: builds the fleet from a scenario and runs it (host)."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import math
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np

from ..cohort import CohortEngine, LocalEvalConfig, LocalTrainConfig
from ..data.federated import held_out_to_device, to_device
from ..data.loaders import load_dataset
from ..data.streams import build_streams, streams_to_device
from ..data.partition import (Partition, dirichlet_partition, dirichlet_sized_partition, iid_partition, partition_by_key,
                              pool_partition, scale_counts)
from ..traces import load_reference_clients
from ..fleet.config import StopRule
from ..memory import check_fits
from ..fleet.modes import AsyncMode, SyncMode
from ..fleet.simulator import Checkpoint, FleetSimulator, RunRecord
from ..options import OptionError, to_json
from ..plugin_calls import PluginError
from ..policies import make_aggregator, make_selector
from .progress import format_seconds
# what a scenario resolves to and the checks across its fields (resolution.py): importable from here too
from .resolution import (RECORD_SECTIONS, RESOLVED_SECTIONS, check_fleet, check_recorded_config,  # noqa: F401
                         fleet_config, resolved_sections, stop_rule)
from .registry import make_model, make_profile, make_trace
from ..fleet.snapshot import SnapshotPolicy, save_snapshot
from .results import (SNAPSHOT_DIR, MetricsStream, folder_lock, live_metrics, prepare_out_dir, staged_results,
                      summarize, write_config, write_results)
from .scenario import Scenario


@dataclasses.dataclass
class RunResult:
    scenario: Scenario
    record: RunRecord
    summary: dict
    out_dir: Path | None
    interrupted_by: int | None = None  # the signal that stopped the run (stop_reason "interrupted")
    plugin_error: PluginError | None = None  # what stopped the run (stop_reason "plugin_error"); run() raises it


def build_simulator(sc: Scenario, on_checkpoint=None) -> FleetSimulator:
    """The fleet for ``sc``. Raises :class:`~felix_jax.options.OptionError` (one line) for a
    scenario that is valid field by field but not as a whole, or not for its data."""
    resolved = sc.resolve_strategy()
    strategy = resolved.strategy
    check_fleet(sc, strategy)
    ds = load_dataset(sc.dataset)
    for field, wanted, have, kind in (("num_train", sc.num_train, len(ds.train_y), "training"),
                                      ("num_test", sc.num_test, len(ds.test_y), "test")):
        if wanted is not None and wanted > have:  # refused, not silently clamped
            raise OptionError(f"{field}={wanted}: data set {sc.dataset!r} has only {have} {kind} samples")
    if sc.num_train is not None or sc.num_test is not None:
        ds = ds.subset(sc.num_train, sc.num_test)
    seeds = np.random.SeedSequence(sc.seed).spawn(5)  # partition, trace, profile, model init, streams
    part_seed = int(seeds[0].generate_state(1)[0])
    _check_population(sc, len(ds.train_y))
    try:
        part = _partition(sc, ds, part_seed)
    except OptionError:
        raise
    except ValueError as e:  # what the data cannot give (too few samples of a key, of a class...): one line
        raise OptionError(f"partition={sc.partition} of {sc.num_clients} clients over data set {sc.dataset!r}: "
                          f"{e}") from None
    model = make_model(sc.model, ds.input_shape, ds.num_classes)
    reading = sc.resolve_reading()
    train_cfg = LocalTrainConfig(batch_size=sc.batch_size, learning_rate=sc.learning_rate, mode=sc.local_mode,
                                 local_epochs=sc.local_epochs, local_steps=sc.local_steps, augment=sc.augment,
                                 min_one_step=reading.small_clients != "zero_step",
                                 utility_on_augmented=reading.utility_augmented)
    eval_cfg = LocalEvalConfig(batch_size=sc.batch_size, max_batches=sc.eval_max_batches)
    streams = None
    stream_cfg = sc.resolve_stream()
    if not stream_cfg.is_static:  # client data streams over the run's horizon (data/streams.py)
        streams = build_streams(part, ds.train_y, ds.num_classes, stream_cfg, sc.max_virtual_hours * 3600,
                                seed=seeds[4])
        part = Partition(streams.index_table, part.counts, part.num_samples, part.method + "+stream")
    data = to_device(ds, part)
    if streams is not None:
        data = data.replace(streams=streams_to_device(streams))
    engine = CohortEngine(model, data, train_cfg, eval_cfg, seed=sc.seed, plan=sc.plan, devices=sc.devices,
                          streams=streams, no_step=reference_zero_step(sc, reading.small_clients))
    trace = make_trace(sc.availability, sc.num_clients, int(seeds[1].generate_state(1)[0]), sc.slot_s,
                       sc.max_virtual_hours * 3600, start_s=sc.trace_start_s, speedup=sc.trace_speedup,
                       form=sc.trace_form)
    profile = make_profile(sc.device_profile, sc.num_clients, int(seeds[2].generate_state(1)[0]))
    fleet_cfg = fleet_config(sc, strategy)
    aggregator = make_aggregator(strategy.aggregator, resolved.aggregator)
    stop = stop_rule(sc)
    init = model.init(jax.random.key(int(seeds[3].generate_state(1)[0])))
    eval_selector = make_selector(strategy.eval_selector, resolved.eval_selector) if strategy.eval_selector else None
    return FleetSimulator(
        model=model, engine=engine, trace=trace, profile=profile, test=held_out_to_device(ds), init_params=init,
        config=fleet_cfg, selector=make_selector(strategy.selector, resolved.selector), aggregator=aggregator,
        mode=SyncMode() if strategy.mode == "sync" else AsyncMode(), stop=stop, seed=sc.seed,
        eval_selector=eval_selector, update_guard=sc.resolve_update_guard(),
        eval_budget=resolved.eval_selector.budget(sc.aggregation_goal) if eval_selector else 0,
        on_checkpoint=on_checkpoint,
        live_mix=streams.schedule.population_mix if streams is not None and stream_cfg.live_eval else None)


def _partition(sc: Scenario, ds, part_seed: int) -> Partition:
    """The scenario's split of the training data over its clients."""
    if sc.partition == "dirichlet":
        return dirichlet_partition(ds.train_y, sc.num_clients, sc.alpha, seed=part_seed)
    elif sc.partition == "iid":
        return iid_partition(len(ds.train_y), sc.num_clients, seed=part_seed)
    elif sc.partition in ("natural", "speaker"):
        if ds.train_keys is None:
            raise OptionError(f"partition={sc.partition!r}: data set {ds.name} has no per-sample client ids "
                              "(speakers, writers...) to partition by")
        return partition_by_key(ds.train_keys, sc.num_clients, seed=part_seed)
    elif sc.partition == "reference":
        return dirichlet_sized_partition(ds.train_y, reference_sizes(sc.num_clients, len(ds.train_y)), sc.alpha,
                                         seed=part_seed)
    elif sc.partition == "pool":  # a population larger than the data: clients draw from the whole pool
        base = reference_sizes(min(300, len(ds.train_y)), len(ds.train_y))  # the paper's clients on this pool
        return pool_partition(ds.train_y, base[np.arange(sc.num_clients) % base.size], sc.alpha, seed=part_seed)
    else:
        raise KeyError(f"unknown partition {sc.partition!r}; known: dirichlet, iid, natural (speaker), reference, "
                       "pool")


def reference_zero_step(sc: Scenario, small_clients: str) -> np.ndarray | None:
    """``reading.small_clients=zero_step_reference``: the clients the FeLiX code's loader never trained in
    the paper's runs, those whose own size in the paper (the reference file, before a subset scaled it
    down) is under one batch (drop_last, AS-RUN A2: 57 of the 300 at batch 32), as a boolean per client;
    None for any other value. Needs the paper's clients (``partition=reference``) and the epoch loader
    (checked by :func:`check_fleet`)."""
    if small_clients != "zero_step_reference":
        return None
    return paper_client_sizes(sc.num_clients) < sc.batch_size


# a client's host and device memory besides its data rows (server view, trace rows, profile, counts): an
# upper estimate (avail50 holds ~650 bytes of trace rows per client over a day)
CLIENT_OVERHEAD_BYTES = 1024


def _check_population(sc: Scenario, num_samples: int) -> None:
    """The population against the data: every client of a split partition holds samples of its own, so
    more clients than training samples is refused (``pool`` clients draw from the whole set); and the
    clients' tables (the int32 index table, ``num_clients x`` the largest client, on the host and the
    device, and each client's bookkeeping) must fit in memory. Raises OptionError naming the field."""
    if sc.partition != "pool" and sc.num_clients > num_samples:
        raise OptionError(f"num_clients={sc.num_clients}: data set {sc.dataset!r} has {num_samples} training "
                          f"samples{' (num_train)' if sc.num_train is not None else ''}, fewer than the clients, "
                          f"and partition={sc.partition} gives each client samples of its own; use at most "
                          f"{num_samples} clients, more data, or partition=pool (clients draw from the whole set)")
    if sc.partition == "pool":  # the widest row: the largest of the paper's sizes on this pool
        widest = int(reference_sizes(min(300, num_samples), num_samples).max())
    else:  # rows of a split: the clients share the samples
        widest = -(-num_samples // sc.num_clients)
    row = 2 * 4 * widest + CLIENT_OVERHEAD_BYTES
    check_fits(sc.num_clients * row, f"num_clients={sc.num_clients}",
               f"the clients' tables (about {row:,} bytes per client)")


def reference_sizes(num_clients: int, num_samples: int) -> np.ndarray:
    """The paper's per-client CIFAR-10 sizes (shared reference file; cycled past 300
    clients), scaled in proportion when the data set holds fewer samples."""
    sizes = paper_client_sizes(num_clients)
    return scale_counts(sizes, num_samples) if sizes.sum() > num_samples else sizes


def paper_client_sizes(num_clients: int) -> np.ndarray:
    """Each client's own CIFAR-10 size in the paper (the shared reference file, cycled past its 300)."""
    return load_reference_clients().num_samples[np.arange(num_clients) % 300]


@dataclasses.dataclass(frozen=True)
class StopProgress:
    """How far a run is toward each part of its stop rule (fractions in [0, 1]).

    ``accuracy`` is the mean of the last ``window`` test accuracies over the target (the
    paper's rule, :class:`~felix_jax.fleet.config.StopRule`); ``eta_s`` is the wall time to
    the nearest cap (aggregations or virtual hours) at the recent rate, None until there is
    a rate. Reaching the target may end the run sooner.
    """

    aggregations: float
    accuracy: float | None  # None: no target
    virtual_time: float | None  # None: no virtual-time limit
    eta_s: float | None
    shown: float = 0.0  # what the bar shows: the largest ``overall`` so far (it never goes backwards)

    @property
    def overall(self) -> float:
        """Progress toward whichever stop comes first."""
        return max(f for f in (self.aggregations, self.accuracy, self.virtual_time) if f is not None)


class _Progress:
    """Progress toward the stop rule: the share shown is the nearest of aggregations / cap, accuracy
    (last-``window`` mean) / target and virtual hours / limit, and never goes backwards (the largest
    so far: a falling accuracy does not undo it); the text shows each part and a wall-clock ETA to
    the nearest cap from the rate over the last ``recent`` checkpoints, once there are at least 3
    (before that, and once a stop is reached, ``ETA -``). The checkpoint at t = 0 (the initial model,
    no aggregation yet) moves nothing: the share stays 0% until the first checkpoint after it, though
    its accuracy enters the window's mean as the stop rule counts it. The target gives no ETA, when accuracy
    will reach it has no basis: with a target the ETA reads ``<= T`` (the cap's, an upper bound).

    On a terminal a tqdm bar; elsewhere (a notebook, a log file) plain lines, at most one per
    ``every_s`` seconds of wall time and one at the end. Fed every checkpoint; ``latest`` holds the
    last :class:`StopProgress` with or without a display.
    """

    def __init__(self, sc: Scenario, enabled: bool, clock: Callable[[], float] = time.perf_counter,
                 recent: int = 10, every_s: float = 15.0, terminal: bool | None = None):
        self.stop = StopRule(target_accuracy=sc.target_accuracy, max_virtual_s=sc.max_virtual_hours * 3600,
                             max_aggregations=sc.max_aggregations, stop_at_target=sc.stop_at_target)
        self.clock = clock
        self.accuracies: list[float] = []
        self.samples: collections.deque[tuple[float, int, float]] = collections.deque(maxlen=max(recent, 2))
        self.latest: StopProgress | None = None
        self.bar = None
        self.lines = False  # plain periodic lines instead of a bar
        self.every_s, self._last_line, self._last_cp = every_s, -math.inf, None
        self._shown = 0.0
        self.label = f"{sc.strategy}/{Path(sc.availability).name}"
        if enabled:
            terminal = sys.stderr.isatty() if terminal is None else terminal
            if terminal:
                from tqdm import tqdm

                self.bar = tqdm(total=1.0, file=sys.stderr, leave=True, desc=self.label,
                                bar_format="{desc}: {percentage:3.0f}% to the stop rule|{bar}| [{elapsed}{postfix}]")
            else:
                self.lines = True

    def update(self, cp: Checkpoint) -> StopProgress:
        stop = self.stop
        self.accuracies.append(cp.accuracy)
        self.samples.append((self.clock(), cp.version, cp.time_s))
        recent = self.accuracies[-stop.window:]
        accuracy = (None if stop.target_accuracy is None or not stop.stop_at_target  # the target ends no run
                    else min(sum(recent) / len(recent) / stop.target_accuracy, 1.0))
        timed = math.isfinite(stop.max_virtual_s)
        virtual_time = min(cp.time_s / stop.max_virtual_s, 1.0) if timed else None
        p = StopProgress(min(cp.version / stop.max_aggregations, 1.0), accuracy, virtual_time, self._eta(cp))
        if cp.version > 0 or cp.time_s > 0:  # the initial model's accuracy is no progress toward the target
            self._shown = max(self._shown, p.overall)
        if p.overall >= 1.0:
            p = dataclasses.replace(p, eta_s=None)  # a stop is reached: nothing left to estimate
        self.latest = dataclasses.replace(p, shown=self._shown)
        return self.latest

    def _eta(self, cp: Checkpoint) -> float | None:
        """Wall seconds to the nearest cap at the rate since the oldest recent sample."""
        wall0, version0, time0 = self.samples[0]
        wall1 = self.samples[-1][0]
        if len(self.samples) < 3 or wall1 <= wall0:  # no rate to speak of yet
            return None
        etas = []
        for done, before, cap in ((cp.version, version0, self.stop.max_aggregations),
                                  (cp.time_s, time0, self.stop.max_virtual_s)):
            rate = (done - before) / (wall1 - wall0)
            if rate > 0 and math.isfinite(cap):
                etas.append(max(cap - done, 0) / rate)
        return min(etas) if etas else None

    def describe(self, cp: Checkpoint) -> str:
        """The postfix: each part of the stop rule and the ETA."""
        p, stop = self.latest, self.stop
        recent = self.accuracies[-stop.window:]
        acc = f"last-{stop.window} acc {sum(recent) / len(recent):.3f}"
        if stop.target_accuracy is not None:
            acc += f" -> {stop.target_accuracy:g}"
        hours = f"{cp.time_s / 3600:.2f}"
        hours += f" of {stop.max_virtual_s / 3600:g} virtual h" if p.virtual_time is not None else " virtual h"
        eta = "-" if p.eta_s is None else format_seconds(p.eta_s)
        if p.eta_s is not None and p.accuracy is not None:  # the target may end the run before the cap
            eta = "<= " + eta
        return f"{acc} | agg {cp.version}/{stop.max_aggregations} | {hours} | ETA {eta}"

    def __call__(self, cp: Checkpoint) -> None:
        self.update(cp)
        self._last_cp = cp
        if self.bar is not None:
            self.bar.n = round(self.latest.shown, 4)
            self.bar.set_postfix_str(self.describe(cp), refresh=True)
        elif self.lines and self.clock() - self._last_line >= self.every_s:
            self._print_line(cp)

    def _print_line(self, cp: Checkpoint) -> None:
        self._last_line = self.clock()
        print(f"{self.label}: {100 * self.latest.shown:3.0f}% to the stop rule | {self.describe(cp)}",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.lines and self._last_cp is not None and self._last_line != self.clock():
            self._print_line(self._last_cp)


class _StopOnSignals:
    """While active, SIGINT and SIGTERM ask the simulator to stop after the event in progress
    (stop reason ``"interrupted"``); a second signal stops at once (KeyboardInterrupt for SIGINT,
    SystemExit(128 + signal) for SIGTERM). The previous handlers come back on exit. Only the main
    thread may install handlers; elsewhere this does nothing. A SIGINT that is ignored (a shell's
    background job) stays ignored."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, enabled: bool):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.signum: int | None = None
        self._sim: FleetSimulator | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "_StopOnSignals":
        if self.enabled:
            for sig in self.SIGNALS:
                previous = signal.getsignal(sig)
                if sig == signal.SIGINT and previous == signal.SIG_IGN:
                    continue
                self._previous[sig] = previous
                signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame) -> None:
        if self.signum is not None:
            self._restore()
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(128 + signum)
        self.signum = signum
        if self._sim is not None:
            self._sim.request_stop("interrupted")

    def attach(self, sim: FleetSimulator) -> None:
        """From now on a signal stops ``sim``; one that came while it was being built stops it now."""
        self._sim = sim
        if self.signum is not None:
            sim.request_stop("interrupted")

    def _restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous = {}

    def __exit__(self, *exc) -> None:
        self._restore()


PLUGIN_ERROR = "plugin_error"  # the stop reason of a run that a plugin's error stopped


def _replay_to_last_event(sc: Scenario, settled: int | None, seen: list[Checkpoint], snap_dir: Path,
                          failure: PluginError) -> tuple[FleetSimulator, RunRecord]:
    """The run that ``failure`` stopped, as it stood after its last whole event: a plugin raises in
    the middle of an event, where half of the event's work is done, so a fresh simulator replays the
    run to that point, from the newest snapshot before it (or from the start), and stops there with
    stop reason ``plugin_error``; its snapshot resumes the run as a signal's would. The replay must
    meet the failed run's checkpoints (a plugin that keeps state of its own outside its init/select
    state may not replay the same): else ``failure`` is raised, saying why no stop snapshot was written
    (and as it is when the run failed before its first event). ``settled``: the failed simulator's
    :attr:`~FleetSimulator.settled_events`; ``seen``: its checkpoints."""
    if settled is None:  # nothing done yet: as if the run had failed while it was built
        raise failure
    sim = build_simulator(sc)
    start = _snapshot_before(snap_dir, settled)
    if start is not None:
        sim.restore(start)
    sim.request_stop(PLUGIN_ERROR, at_events=settled)
    try:
        record = sim.run()
    except PluginError as e:
        failure.no_snapshot = f"replaying its events to the failure, the plugin failed earlier ({e})"
        raise failure
    common = min(len(record.checkpoints), len(seen))
    if record.events_processed != settled or repr(record.checkpoints[:common]) != repr(seen[:common]):
        failure.no_snapshot = ("replaying its events did not give the same run (does the plugin keep state "
                               "outside the value its init() returns?)")
        raise failure
    return sim, record


def _snapshot_before(snap_dir: Path, events: int) -> Path | None:
    """The newest snapshot folder under ``snap_dir`` taken at or before ``events`` events that
    verifies; None if there is none."""
    from ..fleet.snapshot import SnapshotError, verify_snapshot

    found = []
    for p in snap_dir.glob("snap-*") if snap_dir.is_dir() else ():
        parts = p.name.split("-")  # snap-VERSION-EVENTS[-n]
        if p.is_dir() and len(parts) >= 3 and parts[2].isdigit() and int(parts[2]) <= events:
            found.append((int(parts[2]), p.name, p))
    for _, _, p in sorted(found, reverse=True):
        try:
            verify_snapshot(p)
        except SnapshotError:
            continue
        return p
    return None


def run_config(sc: Scenario, sim: FleetSimulator) -> dict[str, Any]:
    """``config.json``: the scenario and everything resolved from it (known before the run starts)."""
    resolved = sc.resolve_strategy()
    return {"scenario": sc.to_json(), "strategy": resolved.strategy.to_json(), "policies": resolved.to_json(),
            "update_guard": to_json(sim.update_guard), "fleet": to_json(sim.cfg),
            "stop": to_json(sim.stop), "model": {"name": sim.model.name, "num_params": sim.model.num_params,
                      "bytes_on_wire": sim.model.bytes_on_wire},
            "backend": jax.default_backend(), "jax": jax.__version__}


def run(sc: Scenario, out_dir: str | Path | None = None, progress: bool = False, plot: bool = True,
        stop_on_signals: bool = False, snapshot_every: int | None = None, snapshot_minutes: float | None = None,
        resume: bool = False, wall_budget_s: float | None = None, batch=None, writers=None) -> RunResult:
    """Builds and runs ``sc``; with ``out_dir``, writes its results folder as the run goes.

    The folder is checked (created, writable, not a comparison's, nothing a run did not write
    under a result's name) before any work; a previous run's results in it are replaced only
    when this run has finished (it writes to a staging folder inside, swapped in at the end: a
    run that fails leaves them as they were); ``config.json`` is written once the fleet is built,
    ``metrics.csv`` gains a flushed row at every test checkpoint, and ``summary.json``,
    ``distributions.json`` and ``accuracy.png`` are written when the run stops.
    ``stop_on_signals``: during the run, SIGINT / SIGTERM stop it after the current event;
    the results are then complete up to that point, with stop reason ``"interrupted"`` and
    ``RunResult.interrupted_by`` set to the signal (the ``felix-jax run`` command uses this).
    ``snapshot_every`` aggregations and/or ``snapshot_minutes`` of wall time, the run writes a
    snapshot to ``out_dir/snapshot`` (and one more when a signal stops it); ``resume=True``
    continues the run whose snapshot ``out_dir`` holds (``sc`` must be its scenario, e.g.
    ``Scenario.from_file(out_dir / "config.json")``): the finished run's files equal an
    uninterrupted run's.
    ``batch``: a :class:`~felix_jax.experiment.sweep.BatchMember`: the run shares its device calls
    with the other experiments of a sweep batch (``run_sweep`` passes it; the results are the same).
    ``wall_budget_s``: seconds of wall time (from this call, the build included) after which the
    run stops after the current event, with stop reason ``"wall_budget"`` (a snapshot then, as
    for a signal): a run's results are complete up to there, but where it ends depends on the
    machine's speed, which the stop reason says.
    ``writers``: metric writers fed every test checkpoint as ``metrics.csv`` is (``"tensorboard"``,
    ``"mlflow"`` or :class:`~felix_jax.experiment.writers.MetricWriter` objects; needs ``out_dir``;
    ``experiment/writers.py``): a resumed run continues their logs without repeating a step.
    """
    from .writers import make_writers

    writers = make_writers(writers)  # a missing package is refused here, before any work
    if writers and out_dir is None:
        raise ValueError("writers need the run's results folder (out_dir)")
    # one writer per results folder, for the whole run (re-entrant within a process)
    with folder_lock(out_dir, "felix-jax run") if out_dir is not None else contextlib.nullcontext():
        return _run(sc, out_dir, progress, plot, stop_on_signals, snapshot_every, snapshot_minutes, resume,
                    wall_budget_s, batch, writers)


def _run(sc, out_dir, progress, plot, stop_on_signals, snapshot_every, snapshot_minutes, resume,
         wall_budget_s, batch=None, writers=()) -> RunResult:
    t_call = time.perf_counter()
    if wall_budget_s is not None and not wall_budget_s > 0:
        raise ValueError(f"wall_budget_s must be > 0 seconds, got {wall_budget_s}")
    if resume and out_dir is None:
        raise ValueError("resume needs the results folder of the run to continue")
    snap_dir = None if out_dir is None else Path(out_dir) / SNAPSHOT_DIR
    if resume:
        finished = finished_stop_reason(Path(out_dir))
        if finished is not None:  # its results are complete: there is nothing to continue
            raise FileNotFoundError(f"{out_dir}: that run finished (stop reason: {finished}); nothing to resume "
                                    "(rerun it with --overwrite, or give --out another folder)")
    if resume and not (snap_dir / "LATEST").is_file():
        raise FileNotFoundError(f"{out_dir} holds no snapshot to resume ({snap_dir}/LATEST is missing); "
                                "a run writes snapshots with --snapshot-every N")
    if out_dir is None:
        return _run_into(sc, None, None, progress, plot, stop_on_signals, snapshot_every, snapshot_minutes, resume,
                         wall_budget_s, batch, t_call)
    out = prepare_out_dir(out_dir, clear=not resume)
    # a run replacing earlier results writes aside and swaps them in once it has finished
    with staged_results(out, replace=not resume) as write_dir:
        try:
            result = _run_into(sc, write_dir, write_dir / SNAPSHOT_DIR, progress, plot, stop_on_signals,
                               snapshot_every, snapshot_minutes, resume, wall_budget_s, batch, t_call,
                               writers=writers, final_out=out)
        except PluginError as e:
            if not resume and e.stopped_after is None and e.no_snapshot is None:  # failed before its first event
                for name in ("config.json", "metrics.csv"):  # nothing to keep: the folder is left as it was
                    (write_dir / name).unlink(missing_ok=True)
            raise
    if result.plugin_error is not None:  # its results so far are in place (as an interrupted run's): say why
        raise result.plugin_error
    return dataclasses.replace(result, out_dir=out)


def finished_stop_reason(out_dir: Path) -> str | None:
    """The stop reason of the finished run whose results ``out_dir`` holds (its ``summary.json``), None
    when there is none or it stopped to be resumed (``interrupted``, ``wall_budget``, ``plugin_error``)."""
    try:
        summary = json.loads((out_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    reason = summary.get("stop_reason") if isinstance(summary, dict) else None
    return reason if isinstance(reason, str) and reason not in ("interrupted", "wall_budget", PLUGIN_ERROR) else None


def _run_into(sc, out, snap_dir, progress, plot, stop_on_signals, snapshot_every, snapshot_minutes, resume,
              wall_budget_s, batch, t_call, writers=(), final_out=None) -> RunResult:
    bar = _Progress(sc, progress)
    stream: MetricsStream | None = None
    feed = None  # the metric writers' logs (experiment/writers.py)
    timer: threading.Timer | None = None
    failure: PluginError | None = None  # a plugin's error that stopped the run
    stop_snapshot: Path | None = None
    sim = None

    def on_checkpoint(cp: Checkpoint) -> None:
        if stream is not None:
            stream(cp)
        if feed is not None:
            feed(cp, sim)
        bar(cp)

    with _StopOnSignals(stop_on_signals) as signals:
        try:
            sim = build_simulator(sc, on_checkpoint=on_checkpoint)
            if batch is not None:
                batch.attach(sim)
            if resume:
                sim.restore(snap_dir)
            config = run_config(sc, sim)
            config["snapshot"] = {"every_aggregations": snapshot_every, "every_minutes": snapshot_minutes}
            if out is not None:
                write_config(out, config)
                stream = MetricsStream(out / "metrics.csv")
                for cp in sim.checkpoints:  # rows up to the snapshot; a killed run may have written more
                    stream(cp)
                if writers:
                    from .writers import RunInfo, WriterFeed

                    feed = WriterFeed(writers, RunInfo(Path(final_out or out), out, config, resume))
                    feed.restored(sim)  # a resumed run's checkpoints so far: those not logged yet
                if snapshot_every is not None or snapshot_minutes is not None:
                    sim.snapshot = SnapshotPolicy(snap_dir, every_aggregations=snapshot_every,
                                                  every_minutes=snapshot_minutes,
                                                  on_saved=None if feed is None else feed.flush)
            signals.attach(sim)
            if wall_budget_s is not None:
                left = wall_budget_s - (time.perf_counter() - t_call)
                timer = threading.Timer(max(left, 0.0), sim.request_stop, args=("wall_budget",))
                timer.daemon = True
                timer.start()
            try:
                record = sim.run()
            except PluginError as e:
                if out is None:  # no folder to keep anything in
                    raise
                failure = e
            if failure is not None:  # stopped inside an event: the state after the last whole one
                if timer is not None:
                    timer.cancel()
                settled, seen = sim.settled_events, sim.checkpoints
                del sim  # its memory, before the replay takes as much
                sim, record = _replay_to_last_event(sc, settled, seen, snap_dir, failure)
            if out is not None and record.stop_reason in ("interrupted", "wall_budget", PLUGIN_ERROR):
                stop_snapshot = save_snapshot(sim, snap_dir)  # between events: --resume continues from here
        except BaseException:
            if feed is not None:
                feed.close(None, None, "FAILED")
            raise
        finally:
            if timer is not None:
                timer.cancel()
            bar.close()
            if stream is not None:
                stream.close()
    summary = summarize(record, sc.seed, sim.engine.batch_summary())
    summary["flush_tasks_mean"] = float(np.mean(sim.executor.flush_sizes)) if sim.executor.flush_sizes else 0.0
    if batch is not None:  # shared calls: the batch's statistics; compilations are the process's, not this run's
        summary["batch"] = batch.summary()
        summary["xla_compilations"] = None
    if sim.engine.streams is not None:
        summary.update(live_metrics(record.checkpoints, sim.engine.streams.cfg.shift_times_s(), sc.target_accuracy))
    if out is not None:  # a replayed run's metrics.csv is rewritten: the failed event may have added a row
        try:
            write_results(out, config, record, summary, plot=plot, streamed=failure is None)
        finally:
            if feed is not None:
                from .writers import status_of

                feed.close(summary, out, status_of(summary))
    if failure is not None:
        failure.stopped_after, failure.snapshot = summary["aggregations"], stop_snapshot
        if stop_snapshot is None:  # the replay met the stop rule first (a target found late, eval_batch > 1)
            failure.no_snapshot = (f"replayed to the failure, the run ends before it (stop reason "
                                   f"{record.stop_reason}): its results are complete")
    return RunResult(sc, record, summary, out, interrupted_by=signals.signum if record.stop_reason == "interrupted"
                     else None, plugin_error=failure)
