"""A run's results folder: config.json, metrics.csv, events.csv, summary.json, distributions.json, accuracy.png.

Nothing is held back until the end: ``config.json`` is written when the run
starts, ``metrics.csv`` gains one flushed row per test checkpoint
(:class:`MetricsStream`), ``events.csv`` a chunk of rows at a time
(:mod:`felix_jax.fleet.event_stream`), and the rest is written when the run stops (also when
it is interrupted). The folder is checked before any training
(:func:`prepare_out_dir`); a run that replaces earlier results writes them aside and swaps
them in only once it has finished (:func:`staged_results`).
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import json
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import IO

import jax
import numpy as np

from ..fleet.simulator import Checkpoint, RunRecord
from .event_log import EVENT_COLUMNS, EVENTS_FILE, participation, plot_participation, write_event_log
from .test_hits import TEST_HITS_FILE, write_test_hits
from ..traces.data_paths import DataFileError, reading

METRIC_COLUMNS = ["time_s", "hours", "version", "accuracy", "loss", "bytes_total", "staleness_mean", "interval_s"]
# what a run writes into its folder (a replacing run replaces these and its snapshot, nothing else)
RESULT_FILES = ("config.json", "metrics.csv", "summary.json", "distributions.json", "accuracy.png", EVENTS_FILE,
                "participation.png", "tensorboard", TEST_HITS_FILE,  # tensorboard/: --log-to tensorboard (experiment/writers/)
                "partition.csv", "partition.json", "partition.png", "partition.npz")  # the clients' split (split.py)
SNAPSHOT_DIR = "snapshot"  # a run's snapshots (felix_jax.fleet.snapshot), for --resume


class OutputDirError(ValueError):
    """The results folder cannot be used; the message is one line naming it."""


LOCK_FILE = ".felix-jax.lock"  # held (flock) by the one process writing a results folder
# this process's held folder locks: [file, depth, holding thread, what] (re-entrant in that thread only)
_HELD: dict[Path, list] = {}
_HELD_GUARD = threading.Lock()


@contextlib.contextmanager
def folder_lock(out_dir: str | Path, what: str = "felix-jax"):
    """Holds the results folder ``out_dir`` for one writer (created if needed) for the ``with`` block.

    An exclusive ``flock`` on ``out_dir/.felix-jax.lock``: a second process is refused with an
    :class:`OutputDirError` naming the holder's pid; the kernel drops the lock of a process that
    dies (``kill -9`` included), so a stale lock file never blocks the next run. Re-entrant within
    the thread that holds it (the CLI holds a run's folder, then the run takes it again); another
    thread of the same process (a second sweep, a second batch member with the same folder) is
    refused like another process.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise OutputDirError(f"results folder {out} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputDirError(f"cannot write results to {out}: {e.strerror or e}") from None
    key = out.resolve()
    with _HELD_GUARD:
        held = _HELD.get(key)
        if held is not None and held[2] != threading.get_ident():  # another thread of this process writes it
            raise OutputDirError(f"results folder {out} is being written by another run of this process "
                                 f"({held[3]}); wait for it to finish or choose another folder")
        if held is not None:
            held[1] += 1
    if held is not None:
        try:
            yield out
        finally:
            held[1] -= 1
        return
    try:
        f = open(out / LOCK_FILE, "a+")
    except OSError as e:
        raise OutputDirError(f"cannot write results to {out}: {e.strerror or e}") from None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip() or "unknown"
        f.close()
        raise OutputDirError(f"results folder {out} is being written by another process ({holder}); wait for "
                             "it to finish or choose another --out") from None
    with _HELD_GUARD:  # (another thread's open file of the same lock is refused by flock itself)
        f.seek(0)
        f.truncate()
        f.write(f"{what}, pid {os.getpid()}\n")
        f.flush()
        _HELD[key] = [f, 1, threading.get_ident(), f"{what}, thread {threading.current_thread().name}"]
    try:
        yield out
    finally:
        with _HELD_GUARD:
            _HELD[key][1] -= 1
            if _HELD[key][1] == 0:
                del _HELD[key]
                fcntl.flock(f, fcntl.LOCK_UN)
                f.close()


def remove_if_unused(out_dir: str | Path) -> None:
    """Removes a results folder that holds nothing but its lock file (a run refused before it wrote)."""
    out = Path(out_dir)
    try:
        if out.is_dir() and {p.name for p in out.iterdir()} <= {LOCK_FILE}:
            (out / LOCK_FILE).unlink(missing_ok=True)
            out.rmdir()
    except OSError:
        pass


# a replacing run's results until it has finished, and the results it replaces while they are swapped
STAGING_DIR = ".felix-jax-new"
RETIRED_DIR = ".felix-jax-old"
# a run's own results (not a comparison's: compare also writes an accuracy.png)
RUN_MARKERS = ("config.json", "metrics.csv", "summary.json", "distributions.json", SNAPSHOT_DIR)
COMPARE_MARKERS = ("summary.csv", "runs")  # what makes a folder a comparison's (matrix.py)


def _json_object_with(path: Path, key: str) -> bool:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and key in data


def _first_bytes(path: Path, n: int) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


_SNAPSHOT_ENTRY = re.compile(r"(LATEST|\.LATEST\.tmp|snap-[\w.-]+|\.tmp-snap-[\w.-]+)")
# how each entry that a replacing run replaces looks when a run wrote it
_WRITTEN_BY_A_RUN = {
    "config.json": lambda p: p.is_file() and _json_object_with(p, "scenario"),
    "metrics.csv": lambda p: p.is_file() and _first_bytes(p, 200).split(b"\n")[0].strip() == ",".join(
        METRIC_COLUMNS).encode(),
    "summary.json": lambda p: p.is_file() and _json_object_with(p, "stop_reason"),
    "distributions.json": lambda p: p.is_file() and _json_object_with(p, "staleness"),
    "accuracy.png": lambda p: p.is_file() and _first_bytes(p, 8) == b"\x89PNG\r\n\x1a\n",
    "participation.png": lambda p: p.is_file() and _first_bytes(p, 8) == b"\x89PNG\r\n\x1a\n",
    EVENTS_FILE: lambda p: p.is_file() and _first_bytes(p, 200).split(b"\n")[0].strip() == ",".join(
        EVENT_COLUMNS).encode(),
    SNAPSHOT_DIR: lambda p: p.is_dir() and all(_SNAPSHOT_ENTRY.fullmatch(q.name) for q in p.iterdir()),
    "tensorboard": lambda p: p.is_dir() and all(q.is_file() and q.name.startswith("events.out.tfevents.")
                                                for q in p.iterdir()),
}


def not_written_by_a_run(out_dir: str | Path) -> list[str]:
    """The entries of ``out_dir`` that a replacing run would replace (:data:`RESULT_FILES`, the
    snapshot folder) but that are not what a run writes there: a user's own ``config.json``, a
    ``snapshot`` folder of photos..."""
    out = Path(out_dir)
    return [name for name, written in _WRITTEN_BY_A_RUN.items() if (out / name).exists() and not written(out / name)]


def holds_earlier_run(out_dir: str | Path) -> bool:
    """Whether ``out_dir`` holds an earlier run (:data:`RUN_MARKERS`: its config, metrics, summary or
    snapshot), not only what a run leaves beside them (a ``tensorboard/`` log, plots, the split)."""
    out = Path(out_dir)
    return out.is_dir() and any((out / name).exists() for name in RUN_MARKERS)


def holds_run_results(out_dir: str | Path) -> bool:
    """Whether ``out_dir`` holds a run's results (or a snapshot) that a new run would replace."""
    out = Path(out_dir)
    return out.is_dir() and any((out / name).exists() for name in (*RESULT_FILES, SNAPSHOT_DIR))


def _listing(out: Path, names) -> str:
    shown = sorted(f"{n}/" if (out / n).is_dir() else n for n in names)
    return ", ".join(shown[:5]) + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")


def prepare_out_dir(out_dir: str | Path, clear: bool = False, refuse_existing: bool = False,
                    kind: str = "run") -> Path:
    """Creates ``out_dir`` if needed and checks that it can take the results (before any training).

    Nothing is removed here: a run that replaces earlier results writes beside them and swaps
    them in once it has finished (:func:`staged_results`). ``kind="run"``: a comparison's folder
    is refused; ``refuse_existing``: a folder that already holds a run's ``config.json`` is
    refused unless ``clear`` (the new run may replace those results); with either, a folder
    holding files under a result's name that felix-jax did not write is refused (it is not a
    run's folder), before a run starts rather than when it writes them. ``kind="compare"``: a
    folder holding a run's results is refused. Raises :class:`OutputDirError` (one line naming
    the folder and what is there).
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise OutputDirError(f"results folder {out} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):  # a write test: permissions, read-only mounts, /proc
            pass
        names = [p.name for p in out.iterdir()]
    except OSError as e:
        raise OutputDirError(f"cannot write results to {out}: {e.strerror or e}") from None
    if kind == "compare":
        runs = [n for n in RUN_MARKERS if n in names]
        if runs:
            raise OutputDirError(f"{out} holds a run's results ({_listing(out, runs)}), not a comparison's: "
                                 "choose another --out for the comparison")
        return out
    finish_replacement(out)  # a replacement killed half-way is completed (or undone) first
    names = [p.name for p in out.iterdir()]
    compared = [n for n in COMPARE_MARKERS if n in names]
    if compared:
        raise OutputDirError(f"{out} holds a comparison's results ({_listing(out, compared)}), not a run's: "
                             "choose another --out for the run")
    if clear or refuse_existing:  # only what a run wrote is replaced; other files in the folder are left as they are
        foreign = not_written_by_a_run(out)
        if foreign:
            raise OutputDirError(f"{out} holds {_listing(out, foreign)} that felix-jax did not write (not a run's "
                                 "results): a run never replaces them; move them or choose another --out")
    if clear:
        check_replaceable(out)
    if refuse_existing and not clear and (out / "config.json").exists() and not (out / "summary.json").exists() \
            and not (out / "snapshot" / "LATEST").is_file():
        raise OutputDirError(f"{out} holds a run that stopped before its end with nothing to resume (config.json, "
                             "no summary.json, no snapshot): pass --overwrite to run it again there (felix-jax run "
                             f"--config {out / 'config.json'} --out {out} --overwrite), or choose another --out")
    if refuse_existing and not clear and (out / "config.json").exists():
        raise OutputDirError(f"{out} already holds a run's results (config.json): pass --overwrite to replace "
                             "them or choose another --out (to continue a run, see felix-jax run --help)")
    return out


def check_replaceable(out_dir: str | Path) -> None:
    """Refuses (:class:`OutputDirError`, one line naming it) an earlier result folder that a replacing run
    could not move aside (:func:`_swap_in`): a folder moves to another parent only if it can be written
    (its ``..`` entry changes), e.g. a read-only ``tensorboard/``. Checked by a write, before any work,
    not found once the run has finished."""
    out = Path(out_dir)
    for name in (*RESULT_FILES, SNAPSHOT_DIR):
        path = out / name
        if not path.is_dir() or path.is_symlink():
            continue
        try:
            with tempfile.TemporaryFile(dir=path):
                pass
        except OSError as e:
            raise OutputDirError(f"cannot replace the earlier results in {out}: {path} cannot be written "
                                 f"({e.strerror or e}), so it cannot be moved aside: make it writable, or choose "
                                 "another --out") from None


def finish_replacement(out_dir: str | Path) -> None:
    """Completes a swap of results that a killed process left half-done (:func:`staged_results`):
    a finished replacement (both folders there) is moved in, a replacement that never finished
    (only its folder there) is dropped, and the earlier results stay."""
    out = Path(out_dir)
    staging, retired = out / STAGING_DIR, out / RETIRED_DIR
    if retired.is_dir() and staging.is_dir():
        _swap_in(staging, out)
    elif staging.is_dir():
        shutil.rmtree(staging)
    if retired.is_dir():
        shutil.rmtree(retired)


def _swap_in(staging: Path, out: Path) -> None:
    """Moves the finished results in ``staging`` into ``out``: every earlier result entry goes to
    the retired folder first, then each new entry is renamed into place (both steps can be redone
    after a kill: :func:`finish_replacement`), and the retired ones are removed last."""
    retired = out / RETIRED_DIR
    all_retired = retired / ".all-retired"  # from here on, a result entry in ``out`` is a new one
    if not all_retired.exists():
        retired.mkdir(exist_ok=True)
        for name in (*RESULT_FILES, SNAPSHOT_DIR):
            if (out / name).exists():
                os.replace(out / name, retired / name)
        all_retired.touch()
    for entry in staging.iterdir():
        os.replace(entry, out / entry.name)
    staging.rmdir()
    shutil.rmtree(retired)


@contextlib.contextmanager
def staged_results(out_dir: str | Path, replace: bool):
    """The folder a run writes its results to: ``out_dir`` itself, or, when ``replace`` and
    ``out_dir`` holds an earlier run's results, a staging folder inside it whose contents replace
    those results only when the ``with`` block ends normally: a run that fails, or is stopped at
    once, leaves the earlier results as they were. A swap that fails (:func:`check_replaceable` refuses
    what it can foresee) puts the earlier results back and keeps the finished run in
    ``OUT/felix-jax-new-results`` (:data:`UNSWAPPED_DIR`), never only in the staging folder, which the
    next run in ``out`` drops; an :class:`OutputDirError` says so."""
    out = Path(out_dir)
    if not (replace and holds_run_results(out)):
        yield out
        return
    staging = out / STAGING_DIR
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        _swap_in(staging, out)
    except OSError as e:  # never a finished run left only in the staging folder (the next run drops it)
        if not staging.exists():  # all of it in place: only the earlier results' removal failed (finish_replacement)
            return
        raise OutputDirError(_unswapped(staging, out, e)) from e


UNSWAPPED_DIR = "felix-jax-new-results"  # a finished replacing run that could not be swapped in


def _unswapped(staging: Path, out: Path, e: OSError) -> str:
    """After a swap that failed half-way: the earlier results moved back, the finished run's kept in a
    folder of its own in ``out`` (not the staging folder, which the next run would drop); the message."""
    retired = out / RETIRED_DIR
    reason = f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e)
    try:
        if (retired / ".all-retired").exists():  # the new entries moved in so far go back first
            for name in (*RESULT_FILES, SNAPSHOT_DIR):
                if os.path.lexists(out / name):
                    os.replace(out / name, staging / name)
        if retired.is_dir():
            for entry in retired.iterdir():
                if entry.name != ".all-retired":
                    os.replace(entry, out / entry.name)
            shutil.rmtree(retired)
        kept = out / UNSWAPPED_DIR
        if kept.exists():
            kept = Path(tempfile.mkdtemp(prefix=UNSWAPPED_DIR + "-", dir=out))
            kept.rmdir()
        os.replace(staging, kept)
    except OSError:  # as it is: the next run in the folder completes the swap (finish_replacement)
        return (f"the run finished but its results could not be put in place in {out} ({reason}); they are in "
                f"{staging}, the earlier ones in {retired}: the next run there completes the swap")
    return f"the run finished but its results could not be put in place in {out} ({reason}); they are in {kept}"


def write_config(out_dir: str | Path, config: dict) -> Path:
    path = Path(out_dir) / "config.json"
    path.write_text(json.dumps(config, indent=2, default=str))
    return path


def metric_row(cp: Checkpoint) -> list:
    """One ``metrics.csv`` row (:data:`METRIC_COLUMNS`) for a test checkpoint."""
    return [cp.time_s, cp.time_s / 3600, cp.version, cp.accuracy, cp.loss, cp.bytes_total, cp.staleness_mean,
            cp.interval_s]


def write_metrics_csv(path: str | Path, checkpoints: list[Checkpoint]) -> Path:
    """``metrics.csv`` in one go (the same bytes as a :class:`MetricsStream` over these checkpoints)."""
    with MetricsStream(path) as stream:
        for cp in checkpoints:
            stream(cp)
    return Path(path)


def read_metrics_csv(path: str | Path) -> list[Checkpoint]:
    """The checkpoints of a run's ``metrics.csv``; a :class:`DataFileError` naming the file (one line)
    when it is not one: unreadable, missing columns, a row that is not numbers, or no rows at all."""
    path = Path(path)
    needed = ("time_s", "version", "accuracy", "loss", "bytes_total", "staleness_mean", "interval_s")
    with reading(path, "a run's metrics.csv"):
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None:
                raise DataFileError(path, "the file is empty (not even the header): nothing to plot")
            missing = [c for c in needed if c not in reader.fieldnames]
            if missing:
                raise DataFileError(path, f"not a run's metrics.csv: no column {', '.join(missing)} "
                                          f"(expected the header {','.join(METRIC_COLUMNS)})")
            checkpoints = []
            for line, r in enumerate(reader, start=2):
                bad = next((c for c in needed if not _is_number(r.get(c))), None)
                if bad is not None:
                    raise DataFileError(path, f"line {line}: {bad} is {r.get(bad)!r}, not a number")
                checkpoints.append(Checkpoint(float(r["time_s"]), int(float(r["version"])), float(r["accuracy"]),
                                              float(r["loss"]), int(float(r["bytes_total"])),
                                              float(r["staleness_mean"]), float(r["interval_s"])))
    if not checkpoints:
        raise DataFileError(path, "no checkpoint rows (a header only): nothing to plot")
    return checkpoints


def _is_number(text) -> bool:
    try:
        float(text)
        return True
    except (TypeError, ValueError):
        return False


class MetricsStream:
    """Writes ``metrics.csv`` as a run goes: the header on opening, then one row per checkpoint,
    flushed to the operating system at once, so a killed run keeps every checkpoint it reached.
    Use it as the simulator's ``on_checkpoint`` callback."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file: IO[str] | None = open(self.path, "w", newline="")
        self._writer = csv.writer(self._file)
        self._write(METRIC_COLUMNS)

    def _write(self, row: list) -> None:
        assert self._file is not None, "metrics stream is closed"
        self._writer.writerow(row)
        self._file.flush()

    def __call__(self, cp: Checkpoint) -> None:
        self._write(metric_row(cp))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "MetricsStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_compiles = {"total": 0, "at_last_summary": 0}


def _count_compile(event: str, _seconds: float, **_kwargs) -> None:
    if event == _COMPILE_EVENT:
        _compiles["total"] += 1


jax.monitoring.register_event_duration_secs_listener(_count_compile)


def compile_count() -> int:
    """XLA programs compiled in this process so far."""
    return _compiles["total"]


def summarize(record: RunRecord, seed: int, batches: dict) -> dict:
    """The run's summary.json. ``xla_compilations``: XLA programs compiled in this process since
    the previous summary (or since start): a run's build and run when runs go one after another."""
    intervals = np.diff(record.aggregation_times) if len(record.aggregation_times) > 1 else np.zeros(0)
    acc = [c.accuracy for c in record.checkpoints]
    finite = [a for a in acc if np.isfinite(a)]  # an evaluation of non-finite logits reports no accuracy
    out = {
        "time_to_target_s": record.time_to_target_s,
        "time_to_target_h": None if record.time_to_target_s is None else record.time_to_target_s / 3600,
        "bytes_total": record.accounting.bytes_total,
        "aggregations": len(record.aggregation_times) - 1,
        "final_accuracy": acc[-1] if acc and np.isfinite(acc[-1]) else None,
        "best_accuracy": max(finite) if finite else None,
        "seed": seed,
        "agg_interval_p50_s": float(np.percentile(intervals, 50)) if len(intervals) else None,
        "agg_interval_p95_s": float(np.percentile(intervals, 95)) if len(intervals) else None,
        "stop_reason": record.stop_reason,
        "end_time_s": record.end_time_s,
        "host_seconds": record.host_seconds,
        "events": record.events_processed,
        "host_ms_per_event": 1000 * record.host_seconds / max(record.events_processed, 1),
        "cohort": batches,
        "xla_compilations": _compiles["total"] - _compiles["at_last_summary"],
        "test_eval_calls": record.test_eval_calls,
    }
    _compiles["at_last_summary"] = _compiles["total"]
    out.update(record.accounting.summary())
    if str(record.stop_reason).startswith("diverged"):  # only the aggregations whose step was taken count
        out["aggregations"] = out["model_steps"]
    out["evals_per_aggregation"] = (record.accounting.dispatched_eval / out["aggregations"]
                                    if out["aggregations"] else None)
    out.update(participation(_event_rows(record), record.num_clients))
    return out


def _event_rows(record: RunRecord):
    """The run's event log: the ``events.csv`` it streamed, or the rows it held."""
    return record.accounting.events if record.events_path is None else record.events_path


def live_metrics(checkpoints, shift_times_s: list[float], target: float | None) -> dict:
    """Metrics of a run on drifting data: the time-mean of the test accuracy (each checkpoint's
    accuracy holds until the next) and, per sudden shift at time s, the adaptation lag: the first
    checkpoint at or after s whose accuracy is at the target, minus s (None: never within the run)."""
    times = np.array([c.time_s for c in checkpoints], np.float64)
    acc = np.array([c.accuracy for c in checkpoints], np.float64)
    if len(times) > 1 and times[-1] > times[0]:
        mean = float((acc[:-1] * np.diff(times)).sum() / (times[-1] - times[0]))
    else:
        mean = float(acc[-1]) if len(acc) else None
    lags = []
    for s in shift_times_s:
        if not len(times) or s > times[-1]:
            continue  # the run ended before this shift
        after = np.flatnonzero((times >= s) & (acc >= target)) if target is not None else np.zeros(0, int)
        lags.append({"shift_s": float(s), "lag_s": float(times[after[0]] - s) if len(after) else None})
    return {"accuracy_time_mean": mean, "adaptation_lags": lags}


def write_results(out_dir: str | Path, config: dict, record: RunRecord, summary: dict, plot: bool = True,
                  streamed: bool = False, writing=None, before_summary=None) -> Path:
    """The whole results folder; ``streamed``: config.json and metrics.csv were written as the run
    went (:func:`write_config`, :class:`MetricsStream`), only the end-of-run files remain.
    ``summary.json`` comes last: its presence says the folder is whole. ``writing(name)``: a context
    manager around each figure (:meth:`~felix_jax.experiment.progress.RunProgress.writing`: a line
    where one is slow). ``before_summary(summary)``: called once every other file is written, before
    ``summary.json`` (the run's peak memory, read after the figures)."""
    writing = writing or (lambda _name: contextlib.nullcontext())
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not streamed:
        write_config(out, config)
        write_metrics_csv(out / "metrics.csv", record.checkpoints)
    a = record.accounting
    (out / "distributions.json").write_text(json.dumps({
        **a.distributions(),
        "aggregation_times_s": record.aggregation_times}))
    if record.events_path is None or Path(record.events_path).resolve() != (out / EVENTS_FILE).resolve():
        write_event_log(out / EVENTS_FILE, a.events, record.end_time_s)  # (a streamed log is already there)
    if record.test_hits is not None:
        write_test_hits(out / TEST_HITS_FILE, record.test_hits, record.num_test, record.checkpoints)
    if plot:
        with writing("accuracy.png"):
            plot_accuracy(record, out / "accuracy.png", title=run_title(config),
                          target=config.get("scenario", {}).get("target_accuracy"))
        with writing(f"participation.png ({record.num_clients:,} clients)"):
            plot_participation(_event_rows(record), record.num_clients, out / "participation.png",
                               run_title(config))
    if before_summary is not None:
        before_summary(summary)
    # last, and whole (renamed into place): a folder with a summary.json holds every file of the run, so a
    # process killed while it wrote the others never leaves a run that a comparison takes as finished
    tmp = out / ".summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2, default=str))
    os.replace(tmp, out / "summary.json")
    return out


def run_title(config: dict) -> str:
    """A run's figure title: strategy (with any component swapped in: ``felix[aggregator=median]``),
    regime (a trace file by its name) and seed."""
    from .naming import recorded_strategy_label

    sc = config.get("scenario", {})
    regime = str(sc.get("availability", ""))
    if "/" in regime or "\\" in regime:
        regime = Path(regime).name
    return f"{recorded_strategy_label(config)} | {regime} | seed {sc.get('seed', '')}"


def plot_accuracy(record: RunRecord, path: Path, title: str = "", target: float | None = None) -> None:
    """``accuracy.png`` of a record's test checkpoints (drawn by
    :func:`~felix_jax.experiment.figures.run.accuracy_figure`). A record without checkpoints (every run has
    one at t=0: what is plotted came from an empty or unreadable ``metrics.csv``) is refused with a
    ValueError naming that file, never drawn as an empty figure."""
    if not record.checkpoints:
        raise DataFileError(Path(path).parent / "metrics.csv",
                            f"no test checkpoints to plot (empty, header only, or not a run's metrics.csv "
                            f"with the header {','.join(METRIC_COLUMNS)})")
    from .figures.run import accuracy_figure

    accuracy_figure(record.checkpoints, path, title, target)
