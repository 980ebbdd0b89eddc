"""What every metric writer shares: the stream a writer is fed (:class:`Point`, one per test
checkpoint, and its :func:`scalars`), the run it logs (:class:`RunInfo`), a writer's settings
(:class:`MetricWriter`) and its log of one run (:class:`RunLog`), the names of its files and logs,
and the one-line warning a writer's failure gives (:func:`warn_once`: the run goes on). The
writers themselves: tensorboard_writer.py and mlflow_writer.py."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np

from ...fleet.simulator import Checkpoint
from ...options import OptionError

TENSORBOARD_DIR = "tensorboard"  # a run's TensorBoard log, in its results folder (and a comparison's root)
MLFLOW_DB = "mlflow.db"  # the default MLflow store, in the results folder (a comparison: its folder)
MLFLOW_ARTIFACTS = "mlartifacts"
RUN_DIR_TAG = "felix_jax.results_folder"  # an MLflow run's results folder (absolute path)
ARTIFACT_FILES = ("config.json", "metrics.csv", "summary.json", "distributions.json", "events.csv", "accuracy.png",
                  "participation.png", "partition.csv", "partition.json", "partition.png", "partition.npz")
FINAL_STATUSES = ("FINISHED", "FAILED")


class WriterError(OptionError):
    """A writer that cannot be used (unknown, its package missing, its store unusable): one line."""


@dataclasses.dataclass(frozen=True)
class Point:
    """What a writer gets per test checkpoint: ``metrics.csv``'s row and, for a checkpoint of the
    running simulator, the bytes by kind at it and the updates aggregated since the previous one
    (None for the checkpoints a resumed run reads back from its snapshot)."""

    checkpoint: Checkpoint
    bytes_train: int | None = None
    bytes_eval: int | None = None
    bytes_control: int | None = None
    staleness: np.ndarray | None = None
    weights: np.ndarray | None = None

    @property
    def step(self) -> int:
        return int(self.checkpoint.version)


def scalars(point: Point) -> dict[str, float]:
    """The scalar tags of one checkpoint, as TensorBoard and MLflow get them (``metrics.csv``'s columns
    by other names, and the bytes by kind)."""
    cp = point.checkpoint
    out = {"test/accuracy": cp.accuracy, "test/loss": cp.loss, "time/virtual_hours": cp.time_s / 3600,
           "time/interval_s": cp.interval_s, "bytes/total": cp.bytes_total, "staleness/mean": cp.staleness_mean}
    for kind in ("train", "eval", "control"):
        value = getattr(point, f"bytes_{kind}")
        if value is not None:
            out[f"bytes/{kind}"] = value
    return {k: float(v) for k, v in out.items()}


def summary_scalars(summary: dict) -> dict[str, float]:
    """The summary's top-level finite numbers as ``summary/KEY`` (what is None or not a number is left out)."""
    out = {}
    for key, value in summary.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        out[f"summary/{key}"] = float(value)
    return out


def flatten(config: dict, prefix: str = "") -> dict[str, object]:
    """Nested dicts as dotted keys; lists as JSON text; None as ``"none"``."""
    out: dict[str, object] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + ".") if value else {name: "{}"})
        elif isinstance(value, (list, tuple)):
            out[name] = json.dumps(value, default=str)
        elif value is None:
            out[name] = "none"
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = str(value)
    return out


def run_label(config: dict) -> str:
    """``strategy/regime/seed<k>`` of a run's config (a trace file by its name)."""
    sc = config.get("scenario", {})
    regime = str(sc.get("availability", ""))
    return cell_log_name(str(sc.get("strategy", "")), regime, sc.get("seed", 0))


def cell_log_name(strategy: str, regime: str, seed) -> str:
    """A cell's log name, ``strategy/regime/seed<k>``: one path component each (a ``/`` inside one,
    a trace file's path or an option's value, becomes ``_``; a trace file is named by its name)."""
    if "/" in regime or "\\" in regime:
        regime = Path(regime).name
    parts = [strategy, regime]
    return "/".join(p.replace("/", "_").replace("\\", "_").replace(":", "_") or "_" for p in parts) + f"/seed{seed}"


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """The run a writer logs: its results folder (``out_dir``: where the results end up;
    ``write_dir``: where the run writes them now, a staging folder while it replaces earlier
    results), its ``config.json`` and whether it continues a snapshot."""

    out_dir: Path
    write_dir: Path
    config: dict
    resume: bool = False


@dataclasses.dataclass(frozen=True)
class MetricWriter:
    """A writer's settings (immutable, picklable: a sweep's threads, a process pool and Ray tasks
    get copies); :meth:`open` starts its log of one run. ``root``: the folder of a comparison's logs
    (None: the run's own folder); ``name``: the run's name in them (None: ``strategy/regime/seed<k>``)."""

    root: Path | None = None
    name: str | None = None

    kind = ""  # its --log-to name
    extra = ""  # the felix-jax extra that installs what it needs

    def modules(self) -> tuple:
        """The Python packages it needs."""
        return ()

    def missing(self) -> list[str]:
        """The Python packages this writer needs that are not installed."""
        return [m for m in self.modules() if importlib.util.find_spec(m) is None]

    def check(self) -> None:
        """Refuses (:class:`WriterError`, one line) when a package it needs is not installed."""
        gone = self.missing()
        if gone:
            raise WriterError(f"--log-to {self.kind} needs {', '.join(gone)}, which is not installed: "
                              f"pip install 'felix-jax[{self.extra}]'")

    def for_cell(self, comparison: Path, name: str) -> "MetricWriter":
        """This writer for a comparison's cell ``name``, its logs under the comparison's folder."""
        return dataclasses.replace(self, root=Path(comparison).resolve(), name=name)

    def prepare(self) -> None:
        """Before a comparison's cells run in several processes: anything shared made once."""

    def check_folder(self, out_dir: Path) -> None:
        """Before any work: refuses (:class:`WriterError`, one line naming the folder) a log this writer
        could not write for a run into ``out_dir`` (a writer that keeps its logs in a folder)."""

    def has_log(self, info: RunInfo) -> bool:
        raise NotImplementedError

    def open(self, info: RunInfo) -> "RunLog":
        raise NotImplementedError


class RunLog:
    """One run's log in one writer. ``last_step``: the last step already in it (a resumed log;
    None: nothing), steps up to which :class:`WriterFeed` does not write again."""

    last_step: int | None = None

    def write(self, point: Point) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        pass

    def close(self, summary: dict | None, files_dir: Path | None, status: str) -> None:
        raise NotImplementedError


def warn_once(log, what: str, error: BaseException) -> None:
    if not getattr(log, "_warned", False):
        log._warned = True
        text = str(error).strip().splitlines()
        print(f"felix-jax: {what}: {type(error).__name__}: {text[0] if text else ''} (the run goes on; its results "
              "folder has every number)", file=sys.stderr, flush=True)
