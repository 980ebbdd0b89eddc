"""The runner's side of the metric writers: the writers ``--log-to`` names (:func:`make_writers`), a
comparison cell's copies (:func:`for_cell`), the feed that turns a running simulator's checkpoints
into each writer's log (:class:`WriterFeed`), and the log of a finished run folder written from its
files (:func:`backfill`)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from ...fleet.simulator import Checkpoint
from .base import MetricWriter, Point, RunInfo, RunLog, WriterError, cell_log_name, warn_once
from .mlflow_writer import MLflowWriter
from .tensorboard_writer import TensorBoardWriter

WRITERS = {"tensorboard": TensorBoardWriter, "mlflow": MLflowWriter}


def make_writers(spec: str | Sequence | None) -> tuple[MetricWriter, ...]:
    """Writers from ``--log-to`` (``"tensorboard,mlflow"``, ``"none"``, empty) or a list of names and
    :class:`MetricWriter` objects; each checked (:meth:`MetricWriter.check`) so that a missing package
    is refused in one line before the run starts. An MLflow writer made from its name takes
    ``MLFLOW_TRACKING_URI`` as it is now (a Ray worker elsewhere gets the same store)."""
    if spec is None:
        return ()
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    writers, seen = [], set()
    for item in items:
        if isinstance(item, MetricWriter):
            writer = item
        elif item in ("", "none"):
            continue
        elif item in WRITERS:
            writer = (MLflowWriter(tracking_uri=os.environ.get("MLFLOW_TRACKING_URI") or None) if item == "mlflow"
                      else WRITERS[item]())
        else:
            raise WriterError(f"--log-to {item!r}: unknown writer; known: {', '.join(WRITERS)} (comma-separated), "
                              "or none")
        if writer.kind in seen:
            raise WriterError(f"--log-to lists {writer.kind} more than once")
        seen.add(writer.kind)
        writers.append(writer)
    for writer in writers:  # the list itself first (names, repeats), then the packages each one needs
        writer.check()
    return tuple(writers)


def for_cell(writers: Sequence[MetricWriter], comparison: Path, strategy: str, regime: str, seed) -> tuple:
    """The writers of one comparison cell: their logs under the comparison's folder, named
    ``strategy/regime/seed<k>``."""
    name = cell_log_name(strategy, regime, seed)
    return tuple(w.for_cell(comparison, name) for w in writers)


class WriterFeed:
    """The runner's side: opens each writer's log of a run, turns checkpoints into :class:`Point`
    (with the running simulator's accounting), skips the steps a log already holds, closes them."""

    def __init__(self, writers: Sequence[MetricWriter], info: RunInfo):
        self.logs: list[RunLog] = []
        try:
            for w in writers:
                try:
                    self.logs.append(w.open(info))
                except (ImportError, WriterError):
                    raise
                except Exception as e:  # a store that cannot be used: one line, before the event loop
                    first = (str(e).strip().splitlines() or [""])[0]
                    raise WriterError(f"--log-to {w.kind}: cannot start the run's log: {type(e).__name__}: "
                                      f"{first[:300]}") from e
        except BaseException:
            self.close(None, None, "FAILED")
            raise
        self._lengths = {"staleness": None, "agg_weights": None}

    def __call__(self, cp: Checkpoint, sim=None) -> None:
        point = Point(cp)
        mark = None if sim is None else getattr(sim, "checkpoint_accounting", None)
        if mark is not None:
            acct = sim.acct
            cut = {}
            for name in ("staleness", "agg_weights"):
                start = self._lengths[name]
                end = mark[name]
                cut[name] = np.asarray(getattr(acct, name)[start if start is not None else 0: end], np.float64)
                self._lengths[name] = end
            point = Point(cp, mark["bytes_down_train"] + mark["bytes_up_train"],
                          mark["bytes_down_eval"] + mark["bytes_up_eval"], mark["control_bytes"],
                          cut["staleness"], cut["agg_weights"])
        for log in self.logs:
            if log.last_step is not None and point.step <= log.last_step:
                continue
            try:
                log.write(point)
            except Exception as e:  # noqa: BLE001
                warn_once(log, f"{type(log).__name__.strip('_')}: cannot log a checkpoint", e)

    def restored(self, sim) -> None:
        """A resumed simulator's checkpoints up to its snapshot (no accounting: they are read back)."""
        for cp in sim.checkpoints:
            self(cp)
        self._lengths = {"staleness": len(sim.acct.staleness), "agg_weights": len(sim.acct.agg_weights)}

    def flush(self, *_args) -> None:
        for log in self.logs:
            try:
                log.flush()
            except Exception as e:  # noqa: BLE001
                warn_once(log, "cannot flush a metric log", e)

    def close(self, summary: dict | None, files_dir: Path | None, status: str) -> None:
        logs, self.logs = self.logs, []
        for log in logs:
            try:
                log.close(summary, files_dir, status)
            except Exception as e:  # noqa: BLE001
                warn_once(log, "cannot close a metric log", e)


def status_of(summary: dict) -> str:
    """An MLflow run status for a run's summary: KILLED for a run stopped by a signal (resumable)."""
    return "KILLED" if summary.get("stop_reason") == "interrupted" else "FINISHED"


def backfill(writers: Sequence[MetricWriter], run_dir: Path) -> int:
    """Logs a finished run folder (a comparison's cell kept from an earlier run) into each writer
    that holds no log of it yet, from its ``metrics.csv`` and ``summary.json``: the scalars of every
    checkpoint (no bytes by kind or histograms: the run is not running), the summary and the files.
    Returns the number of logs written."""
    from ..results import read_metrics_csv

    run_dir = Path(run_dir)
    try:
        config = json.loads((run_dir / "config.json").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return 0
    info = RunInfo(run_dir, run_dir, config, resume=True)
    written = 0
    for w in writers:
        try:
            if w.has_log(info):
                continue
            feed = WriterFeed([w], dataclasses.replace(info, resume=False))
            for cp in read_metrics_csv(run_dir / "metrics.csv"):
                feed(cp)
            feed.close(summary, run_dir, status_of(summary))
            written += 1
        except Exception as e:  # noqa: BLE001 - a kept cell's log is not worth stopping a comparison for
            print(f"felix-jax: {w.kind}: cannot log the kept cell {run_dir.name}: {type(e).__name__}: "
                  f"{(str(e).strip().splitlines() or [''])[0]}", file=sys.stderr, flush=True)
    return written
