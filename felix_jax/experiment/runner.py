"""``run(scenario) -> RunResult``: builds the fleet from a scenario (build.py) and runs it (host),
writing its results folder as it goes (results.py): the progress bar (progress.py), signals, the
wall budget and a plugin's error (stops.py), snapshots and resume, and the metric writers
(writers/) are wired together here."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from pathlib import Path
from typing import Callable

from ..cohort.budget import GB, PEAK_TOLERANCE, MemoryPlan, peak_warning
from ..fleet.simulator import Checkpoint, RunFailed, RunRecord
from ..fleet.snapshot import SnapshotPolicy, save_snapshot
from ..memory import peak_resident_bytes, reset_peak_resident
from ..plugin_calls import PluginError
# the fleet a scenario builds (build.py), its progress (progress.py), how a run stops (stops.py) and what a
# scenario resolves to (resolution.py): importable from here too, as before
from .build import (CLIENT_OVERHEAD_BYTES, build_simulator, paper_client_sizes, reference_sizes,  # noqa: F401
                    reference_zero_step, run_config)
from .inputs import INPUTS_SECTION, InputsChanged, changed_in_folder, fingerprint_inputs
from .progress import RunProgress, StopProgress  # noqa: F401
from .resolution import (RECORD_SECTIONS, RESOLVED_SECTIONS, check_fleet, check_recorded_config,  # noqa: F401
                         fleet_config, resolved_sections, run_warnings, stop_rule)
from .event_log import EVENTS_FILE
from .results import (SNAPSHOT_DIR, MetricsStream, folder_lock, live_metrics, prepare_out_dir, run_title,
                      staged_results, summarize, write_config, write_results)
from .split import SPLIT_FILES, Split, write_split
from .scenario import Scenario
from .stops import (FAILURE_TYPES, RESUMABLE_STOPS, StopOnSignals, failure_line, failure_message,
                    finished_stop_reason, replay_to_last_event)


@dataclasses.dataclass
class RunResult:
    scenario: Scenario
    record: RunRecord
    summary: dict
    out_dir: Path | None
    interrupted_by: int | None = None  # the signal that stopped the run (stop_reason "interrupted")
    # what stopped the run inside an event (stop_reason "plugin_error", "policy_error" or "device_error");
    # run() raises it (a policy's or the device's as a RunFailed saying what the folder holds)
    plugin_error: BaseException | None = None


def run(sc: Scenario, out_dir: str | Path | None = None, progress: bool | RunProgress = False, plot: bool = True,
        stop_on_signals: bool = False, snapshot_every: int | None = None, snapshot_minutes: float | None = None,
        resume: bool = False, wall_budget_s: float | None = None, batch=None, writers=None,
        scenario_file: str | Path | None = None, on_built: Callable[[], None] | None = None) -> RunResult:
    """Builds and runs ``sc``; with ``out_dir``, writes its results folder as the run goes.

    The folder is checked (created, writable, not a comparison's, nothing a run did not write
    under a result's name) before any work; a previous run's results in it are replaced only
    when this run has finished (it writes to a staging folder inside, swapped in at the end: a
    run that fails leaves them as they were); ``config.json`` is written once the fleet is built,
    ``metrics.csv`` gains a flushed row at every test checkpoint, and ``summary.json``,
    ``distributions.json`` and ``accuracy.png`` are written when the run stops. ``progress``: a bar
    (plain lines off a terminal), or a :class:`~.progress.RunProgress` of the caller's (a comparison's
    cell, labelled as the comparison names it).
    ``stop_on_signals``: during the run, SIGINT / SIGTERM stop it after the current event;
    the results are then complete up to that point, with stop reason ``"interrupted"`` and
    ``RunResult.interrupted_by`` set to the signal (the ``felix-jax run`` command uses this). A
    :class:`~.stops.StopOnSignals` guard there is shared (a comparison's, which keeps a signal that
    comes between its cells or while a cell writes its files, to stop once the cell is whole).
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
    ``experiment/writers/``): a resumed run continues their logs without repeating a step.
    ``scenario_file``: the file ``sc`` was read from, fingerprinted with the run's other input files
    (config.json's ``inputs``, :mod:`~felix_jax.experiment.inputs`); a run whose data set, trace, device
    profile or plugin files changed since it started is not resumed (:class:`InputsChanged`).
    ``on_built()``: called once the fleet is built and its memory plan made (a budget too small refused),
    before anything is written or run (``felix-jax run`` prints its header there, so that a refusal is
    the only line).
    ``summary.json``'s ``memory`` holds the budget's plan and the process's peak resident memory over
    this call (``peak_rss_gb``, read after the figures are written); a peak past the budget by more than
    :data:`~felix_jax.cohort.budget.PEAK_TOLERANCE` is said in its ``warnings``.
    """
    from .writers.feed import make_writers

    writers = make_writers(writers)  # a missing package is refused here, before any work
    if writers and out_dir is None:
        raise ValueError("writers need the run's results folder (out_dir)")
    for writer in writers:  # and a log folder that cannot be written (a file there, read-only)
        writer.check_folder(Path(out_dir))
    # one writer per results folder, for the whole run (re-entrant within a process)
    with folder_lock(out_dir, "felix-jax run") if out_dir is not None else contextlib.nullcontext():
        return _run(sc, out_dir, progress, plot, stop_on_signals, snapshot_every, snapshot_minutes, resume,
                    wall_budget_s, batch, writers, scenario_file, on_built)


def _run(sc, out_dir, progress, plot, stop_on_signals, snapshot_every, snapshot_minutes, resume,
         wall_budget_s, batch=None, writers=(), scenario_file=None, on_built=None) -> RunResult:
    t_call = time.perf_counter()
    reset_peak_resident()  # the peak summary.json records is this run's (a process may have run others)
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
        raise FileNotFoundError(f"{out_dir} holds no snapshot to resume ({snap_dir}/LATEST is missing; a run writes "
                                "snapshots with --snapshot-every N): run it again there with felix-jax run --config "
                                f"{Path(out_dir) / 'config.json'} --out {out_dir} --overwrite, or choose another "
                                "--out")
    if resume:
        changed = changed_in_folder(Path(out_dir))
        if changed:
            more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
            raise InputsChanged(f"{out_dir}: cannot resume: a file it reads changed since it ran: {changed[0]}{more}; "
                                "rerun it with --overwrite, or give --out another folder")
    if out_dir is None:
        return _run_into(sc, None, None, progress, plot, stop_on_signals, snapshot_every, snapshot_minutes, resume,
                         wall_budget_s, batch, t_call, scenario_file=scenario_file, on_built=on_built)
    out = prepare_out_dir(out_dir, clear=not resume)
    # a run replacing earlier results writes aside and swaps them in once it has finished
    with staged_results(out, replace=not resume) as write_dir:
        try:
            result = _run_into(sc, write_dir, write_dir / SNAPSHOT_DIR, progress, plot, stop_on_signals,
                               snapshot_every, snapshot_minutes, resume, wall_budget_s, batch, t_call,
                               writers=writers, final_out=out, scenario_file=scenario_file, on_built=on_built)
        except FAILURE_TYPES as e:
            if not resume and getattr(e, "stopped_after", None) is None and getattr(e, "no_snapshot", None) is None:
                for name in ("config.json", "metrics.csv", EVENTS_FILE, *SPLIT_FILES):  # failed before its first event
                    (write_dir / name).unlink(missing_ok=True)
            raise
        failed = result.plugin_error
        if failed is not None and not isinstance(failed, PluginError) and write_dir != out:
            # replacing earlier results: a run a policy or the device stopped leaves them as they were
            raise RunFailed(failure_line(failed)) from failed
    if result.plugin_error is not None:  # its results so far are in place (as an interrupted run's): say why
        if isinstance(result.plugin_error, PluginError):
            raise result.plugin_error
        raise RunFailed(failure_message(result.plugin_error, out)) from result.plugin_error
    return dataclasses.replace(result, out_dir=out)


def record_peak(summary: dict, plan: MemoryPlan | None) -> None:
    """The process's peak memory since the run began beside its budget in ``summary["memory"]``
    (``peak_rss_gb``: resident; on an accelerator also the device's, ``device_peak_gb``), and a warning
    where the one the budget bounds went over it by more than the tolerance (cohort/budget.py)."""
    if plan is None:
        return
    memory = summary.setdefault("memory", {})
    rss = peak_resident_bytes()
    memory["peak_rss_gb"] = None if rss is None else round(rss / GB, 3)
    if plan.besides:  # a CPU run: the budget bounds the process
        bounded = rss
    else:  # an accelerator's budget bounds its memory (jax's allocator); elsewhere nothing is measured
        bounded = device_peak_bytes()
        memory["device_peak_gb"] = None if bounded is None else round(bounded / GB, 3)
    memory["peak_tolerance"] = PEAK_TOLERANCE
    warning = peak_warning(bounded, plan.budget_bytes, plan.source)
    memory["over_budget"] = warning is not None
    if warning is not None:
        summary["warnings"] = [*summary.get("warnings", []), warning]


def device_peak_bytes() -> int | None:
    """The first device's peak bytes in use (jax's allocator statistics); None on a CPU, or where the
    backend keeps none."""
    import jax

    if jax.default_backend() == "cpu":
        return None
    try:
        return (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use")
    except Exception:  # a backend without memory statistics
        return None


def _run_into(sc, out, snap_dir, progress, plot, stop_on_signals, snapshot_every, snapshot_minutes, resume,
              wall_budget_s, batch, t_call, writers=(), final_out=None, scenario_file=None,
              on_built=None) -> RunResult:
    bar = progress if isinstance(progress, RunProgress) else RunProgress(sc, progress)
    stream: MetricsStream | None = None
    feed = None  # the metric writers' logs (experiment/writers/)
    timer: threading.Timer | None = None
    failure: BaseException | None = None  # what stopped the run inside an event (stops.RUN_FAILURES)
    stop_snapshot: Path | None = None
    sim = attached = None

    def on_checkpoint(cp: Checkpoint) -> None:
        if stream is not None:
            stream(cp)
        if feed is not None:
            feed(cp, sim)
        bar(cp)

    with StopOnSignals.of(stop_on_signals) as signals:
        try:
            splits = []  # the clients' split, on record in the folder (split.py)
            sim = build_simulator(sc, on_checkpoint=on_checkpoint, on_partition=None if out is None else
                                  lambda part, labels, k: splits.append(Split.of(part, labels, k)))
            if batch is not None:
                batch.attach(sim)
            if resume:
                sim.restore(snap_dir)
            if on_built is not None:
                on_built()
            config = run_config(sc, sim)
            config["snapshot"] = {"every_aggregations": snapshot_every, "every_minutes": snapshot_minutes}
            config[INPUTS_SECTION] = fingerprint_inputs(sc, scenario_file)
            if out is not None:
                write_config(out, config)
                write_split(out, splits[0], plot=plot, title=run_title(config))
                # rows go to events.csv as the run goes (a resumed run's file is cut back to its snapshot)
                sim.stream_events(out / EVENTS_FILE)
                stream = MetricsStream(out / "metrics.csv")
                for cp in sim.checkpoints:  # rows up to the snapshot; a killed run may have written more
                    stream(cp)
                if writers:
                    from .writers.base import RunInfo
                    from .writers.feed import WriterFeed

                    feed = WriterFeed(writers, RunInfo(Path(final_out or out), out, config, resume))
                    feed.restored(sim)  # a resumed run's checkpoints so far: those not logged yet
                if snapshot_every is not None or snapshot_minutes is not None:
                    sim.snapshot = SnapshotPolicy(snap_dir, every_aggregations=snapshot_every,
                                                  every_minutes=snapshot_minutes,
                                                  on_saved=None if feed is None else feed.flush)
            signals.attach(sim)
            attached = sim
            if wall_budget_s is not None:
                left = wall_budget_s - (time.perf_counter() - t_call)
                timer = threading.Timer(max(left, 0.0), sim.request_stop, args=("wall_budget",))
                timer.daemon = True
                timer.start()
            try:
                record = sim.run()
            except FAILURE_TYPES as e:
                if out is None:  # no folder to keep anything in
                    raise
                failure = e
            if failure is not None:  # stopped inside an event: the state after the last whole one
                if timer is not None:
                    timer.cancel()
                settled, seen = sim.settled_events, sim.checkpoints
                sim.event_stream.close()  # the replay cuts events.csv back and writes it on
                sim = None  # its memory, before the replay takes as much
                sim, record = replay_to_last_event(sc, settled, seen, snap_dir, failure, out / EVENTS_FILE)
            if out is not None and record.stop_reason in RESUMABLE_STOPS:
                stop_snapshot = save_snapshot(sim, snap_dir)  # between events: --resume continues from here
        except BaseException:
            if feed is not None:
                feed.close(None, None, "FAILED")
            raise
        finally:
            if attached is not None:  # a signal from here on (writing the files) waits for the caller
                signals.detach(attached)
            if timer is not None:
                timer.cancel()
            bar.close()
            if stream is not None:
                stream.close()
            if sim is not None and sim.event_stream is not None:
                sim.event_stream.close()
    with bar.writing("summary.json (the participation over events.csv)"):
        summary = summarize(record, sc.seed, sim.engine.batch_summary())
    summary["warnings"] = run_warnings(sc)  # said once (felix-jax run prints them as it starts)
    ex = sim.executor
    summary["flush_tasks_mean"] = ex.flushed_tasks / ex.flushes if ex.flushes else 0.0
    summary["flush_train_tasks_max"] = ex.largest_flush
    if ex.memory is not None:  # the budget and what it held (cohort/budget.py); evicted: results computed again
        summary["memory"] = {**ex.memory.to_dict(), "evicted_results": ex.evicted}
    if batch is not None:  # shared calls: the batch's statistics; compilations are the process's, not this run's
        summary["batch"] = batch.summary()
        summary["xla_compilations"] = None
    if sim.engine.streams is not None:
        summary.update(live_metrics(record.checkpoints, sim.engine.streams.cfg.shift_times_s(), sc.target_accuracy))
    if failure is not None:  # what stopped it inside an event, beside the stop reason
        summary["stopped_by"] = f"{type(failure).__name__}: {(str(failure).strip().splitlines() or [''])[0]}"
    if out is None:
        record_peak(summary, ex.memory)
    else:  # a replayed run's metrics.csv is rewritten: the failed event may have added a row
        try:  # the peak read once the figures are drawn, as summary.json is written
            write_results(out, config, record, summary, plot=plot, streamed=failure is None, writing=bar.writing,
                          before_summary=lambda s: record_peak(s, ex.memory))
        finally:
            if feed is not None:
                from .writers.feed import status_of

                feed.close(summary, out, status_of(summary))
    if failure is not None:
        failure.stopped_after, failure.snapshot = summary["aggregations"], stop_snapshot
        if stop_snapshot is None:  # the replay met the stop rule first (a target found late, eval_batch > 1)
            failure.no_snapshot = (f"replayed to the failure, the run ends before it (stop reason "
                                   f"{record.stop_reason}): its results are complete")
    return RunResult(sc, record, summary, out, interrupted_by=signals.signum if record.stop_reason == "interrupted"
                     else None, plugin_error=failure)
