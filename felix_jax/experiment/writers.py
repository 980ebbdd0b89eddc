"""Metric writers: a run's test checkpoints into TensorBoard and MLflow (optional extras).

A writer is fed the stream that ``metrics.csv`` gets (one :class:`Point` per test checkpoint, see
``runner.run(..., writers=[...])`` and ``felix-jax run --log-to tensorboard,mlflow``), and writes
the same numbers where researchers already look:

* :class:`TensorBoardWriter` (``pip install 'felix-jax[tensorboard]'``: tensorboardX, no
  TensorFlow): the scalars of :func:`scalars` at step = model version (aggregations), each event's
  wall time set to the checkpoint's *virtual* time, so TensorBoard's "Relative" horizontal axis
  reads virtual hours; histograms of the staleness and the aggregation weights of the updates
  aggregated since the previous checkpoint; the config as text and the scenario as hparams; at the
  end the summary's numbers (``summary/...``). Into ``RUN/tensorboard/`` for a run, and into
  ``DIR/tensorboard/<strategy>/<regime>/seed<k>/`` for each cell of a comparison (one TensorBoard
  run per cell: ``tensorboard --logdir DIR/tensorboard`` overlays them).
* :class:`MLflowWriter` (``pip install 'felix-jax[mlflow]'``): one MLflow run per results folder,
  with the config's every setting as params (``scenario.seed``, ``fleet.concurrency``, ...), the
  same scalars as metrics at the same steps, the summary's numbers, and the folder's files as
  artifacts. The store is ``MLFLOW_TRACKING_URI`` when set, else ``sqlite:///RUN/mlflow.db`` (a
  comparison: ``DIR/mlflow.db``, one run per cell in one experiment) with artifacts beside it.

A resumed run continues its logs: steps up to the last one already logged are not written
again (a run killed after its last snapshot has logged checkpoints that the resumed run computes
again, identically). A run started afresh in a folder replaces that folder's TensorBoard events,
and the MLflow runs of the folder's earlier results are deleted (MLflow's soft delete) once it has
finished. A writer's failure after the run started is reported once on stderr and never stops the
run: the results folder holds every number.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import queue
import struct
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..fleet.simulator import Checkpoint
from ..options import OptionError

TENSORBOARD_DIR = "tensorboard"  # a run's TensorBoard log, in its results folder (and a comparison's root)
MLFLOW_DB = "mlflow.db"  # the default MLflow store, in the results folder (a comparison: its folder)
MLFLOW_ARTIFACTS = "mlartifacts"
RUN_DIR_TAG = "felix_jax.results_folder"  # an MLflow run's results folder (absolute path)
ARTIFACT_FILES = ("config.json", "metrics.csv", "summary.json", "distributions.json", "events.csv", "accuracy.png",
                  "participation.png")
FINAL_STATUSES = ("FINISHED", "FAILED")


class WriterError(OptionError):
    """A writer that cannot be used (unknown, its package missing, its store unusable): one line."""


# ------------------------------------------------------------------------------------------ the stream
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


# ------------------------------------------------------------------------------------------ specs
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


def _warn_once(log, what: str, error: BaseException) -> None:
    if not getattr(log, "_warned", False):
        log._warned = True
        text = str(error).strip().splitlines()
        print(f"felix-jax: {what}: {type(error).__name__}: {text[0] if text else ''} (the run goes on; its results "
              "folder has every number)", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------ TensorBoard
HPARAM_METRICS = ("test/accuracy", "test/loss", "summary/time_to_target_h", "summary/final_accuracy")


@dataclasses.dataclass(frozen=True)
class TensorBoardWriter(MetricWriter):
    """TensorBoard event files through tensorboardX (see the module docstring)."""

    flush_s: float = 10.0

    kind = "tensorboard"
    extra = "tensorboard"

    def modules(self) -> tuple:
        return ("tensorboardX",)

    def logdir(self, info: RunInfo) -> Path:
        if self.root is None:
            return Path(info.write_dir) / TENSORBOARD_DIR
        return Path(self.root) / TENSORBOARD_DIR / (self.name or run_label(info.config))

    def has_log(self, info: RunInfo) -> bool:
        return last_logged_step(self.logdir(info)) is not None

    def open(self, info: RunInfo) -> "_TensorBoardLog":
        return _TensorBoardLog(self, info)


def event_files(logdir: Path) -> list[Path]:
    return sorted(p for p in Path(logdir).glob("events.out.tfevents.*") if p.is_file())


def read_event_records(path: Path) -> Iterable[bytes]:
    """The records of a TensorBoard event file (TFRecord framing: a little-endian uint64 length, its
    masked CRC, the data, its masked CRC; the CRCs are not checked), up to the first incomplete one
    (a file cut short by a killed writer)."""
    with open(path, "rb") as f:
        while True:
            head = f.read(12)
            if len(head) < 12:
                return
            (length,) = struct.unpack("<Q", head[:8])
            data = f.read(length)
            if len(data) < length or len(f.read(4)) < 4:
                return
            yield data


def read_scalars(logdir: Path) -> dict[str, list[tuple[int, float, float]]]:
    """Every scalar in the event files of ``logdir`` (not its subfolders): tag -> [(step, wall_time,
    value), ...] in file order. Needs tensorboardX (its Event protocol buffer)."""
    from tensorboardX.proto import event_pb2

    out: dict[str, list] = {}
    for path in event_files(logdir):
        for data in read_event_records(path):
            event = event_pb2.Event()
            try:
                event.ParseFromString(data)
            except Exception:  # noqa: BLE001 - a damaged record ends what can be read of the file
                break
            if event.HasField("summary"):
                for v in event.summary.value:
                    if v.HasField("simple_value"):
                        out.setdefault(v.tag, []).append((int(event.step), float(event.wall_time),
                                                          float(v.simple_value)))
    return out


def last_logged_step(logdir: Path, tag: str = "test/accuracy") -> int | None:
    """The largest step of ``tag`` in the event files of ``logdir`` (None: none)."""
    if not Path(logdir).is_dir() or not event_files(logdir):
        return None
    steps = [s for s, _, _ in read_scalars(logdir).get(tag, [])]
    return max(steps) if steps else None


class _TensorBoardLog(RunLog):
    def __init__(self, spec: TensorBoardWriter, info: RunInfo):
        from tensorboardX import SummaryWriter

        self.logdir = spec.logdir(info)
        self.logdir.mkdir(parents=True, exist_ok=True)
        if info.resume:
            self.last_step = last_logged_step(self.logdir)
        else:  # a run started afresh: the folder's earlier events are not its own
            for path in event_files(self.logdir):
                path.unlink()
        # a unique file per writer (tensorboardX names files by the second and the host only)
        self.writer = SummaryWriter(logdir=str(self.logdir), flush_secs=spec.flush_s,
                                    filename_suffix=f".{os.getpid()}.{uuid.uuid4().hex[:8]}")
        self.fw = self.writer._get_file_writer()
        if self.last_step is None:  # a new log: what the run is
            self._describe(info.config)

    def _describe(self, config: dict) -> None:
        from tensorboardX.summary import hparams

        scenario = config.get("scenario", {})
        self.writer.add_text("config/scenario", "```\n" + json.dumps(scenario, indent=2, default=str) + "\n```",
                             0, walltime=0.0)
        resolved = {k: v for k, v in config.items() if k != "scenario"}
        self.writer.add_text("config/resolved", "```\n" + json.dumps(resolved, indent=2, default=str) + "\n```",
                             0, walltime=0.0)
        exp, ssi, _ = hparams(flatten(scenario), {tag: 0.0 for tag in HPARAM_METRICS})
        self.fw.add_summary(exp, 0, 0.0)
        self.fw.add_summary(ssi, 0, 0.0)

    def write(self, point: Point) -> None:
        step, wall = point.step, float(point.checkpoint.time_s)
        for tag, value in scalars(point).items():
            self.writer.add_scalar(tag, value, step, walltime=wall)
        for tag, values in (("distributions/staleness", point.staleness), ("distributions/agg_weight", point.weights)):
            if values is not None and len(values):
                self.writer.add_histogram(tag, np.asarray(values, np.float64), step, walltime=wall)

    def flush(self) -> None:
        self.writer.flush()

    def close(self, summary: dict | None, files_dir: Path | None, status: str) -> None:
        try:
            if summary is not None and status in FINAL_STATUSES:
                from tensorboardX.proto.api_pb2 import Status
                from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData, SessionEndInfo
                from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata

                step, wall = int(summary.get("aggregations") or 0), float(summary.get("end_time_s") or 0.0)
                for tag, value in summary_scalars(summary).items():
                    self.writer.add_scalar(tag, value, step, walltime=wall)
                end = SessionEndInfo(status=Status.Value("STATUS_SUCCESS" if status == "FINISHED"
                                                         else "STATUS_FAILURE"))
                content = HParamsPluginData(session_end_info=end, version=0).SerializeToString()
                meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="hparams", content=content))
                self.fw.add_summary(Summary(value=[Summary.Value(tag="_hparams_/session_end_info", metadata=meta)]),
                                    step, wall)
        finally:
            self.writer.close()


# ------------------------------------------------------------------------------------------ MLflow
MLFLOW_BATCH = 1000  # metrics per log_batch call (MLflow's limit)
MLFLOW_PARAMS_BATCH = 100  # params per call (MLflow's limit)
MLFLOW_PARAM_LENGTH = 6000  # MLflow's longest param value


@dataclasses.dataclass(frozen=True)
class MLflowWriter(MetricWriter):
    """MLflow tracking (see the module docstring). ``tracking_uri``: None, ``MLFLOW_TRACKING_URI``
    as the writer is made (:func:`make_writers`), else the sqlite store in the results folder;
    ``experiment``: None, the scenario's name (a comparison: its folder's name)."""

    tracking_uri: str | None = None
    experiment: str | None = None
    flush_s: float = 5.0

    kind = "mlflow"
    extra = "mlflow"

    def modules(self) -> tuple:
        uri = self.tracking_uri or ""
        return ("mlflow",) + (("sqlalchemy", "alembic") if not uri or uri.startswith("sqlite:") else ())

    def for_cell(self, comparison: Path, name: str) -> "MLflowWriter":
        comparison = Path(comparison).resolve()
        return dataclasses.replace(self, root=comparison, name=name, experiment=self.experiment or comparison.name)

    def store(self, info: RunInfo | None = None) -> tuple[str, str | None]:
        """(tracking URI, artifact location for a new experiment; None: the store's own)."""
        if self.tracking_uri:
            return self.tracking_uri, None
        folder = Path(self.root if self.root is not None else info.out_dir).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{folder / MLFLOW_DB}", (folder / MLFLOW_ARTIFACTS).as_uri()

    def experiment_name(self, info: RunInfo | None) -> str:
        if self.experiment:
            return self.experiment
        return str((info.config.get("scenario", {}) if info else {}).get("name") or "felix-jax")

    def client(self, info: RunInfo | None = None):
        from mlflow.tracking import MlflowClient

        uri, artifacts = self.store(info)
        client = MlflowClient(tracking_uri=uri)
        name = self.experiment_name(info)

        def experiment_id():
            exp = client.get_experiment_by_name(name)
            if exp is not None:
                return exp.experiment_id
            try:
                return client.create_experiment(name, artifact_location=artifacts)
            except Exception:  # noqa: BLE001 - another process made it first
                exp = client.get_experiment_by_name(name)
                if exp is None:
                    raise
                return exp.experiment_id

        return client, _retry(experiment_id)

    def prepare(self) -> None:
        self.client(None)  # the store and the experiment, once, before the cells' processes start

    def runs_of(self, client, experiment_id: str, folder: Path) -> list:
        """The (not deleted) MLflow runs of a results folder, newest first."""
        found = _retry(lambda: client.search_runs([experiment_id], filter_string=f"tags.`{RUN_DIR_TAG}` = "
                                                  f"'{_quote(str(Path(folder).resolve()))}'",
                                                  order_by=["attributes.start_time DESC"]))
        return list(found)

    def has_log(self, info: RunInfo) -> bool:
        client, exp_id = self.client(info)
        return bool(self.runs_of(client, exp_id, info.out_dir))

    def open(self, info: RunInfo) -> "_MLflowLog":
        return _MLflowLog(self, info)


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _retry(call, attempts: int = 30):
    """``call()``, again after a pause while a sqlite store is locked by another writer."""
    for i in range(attempts):
        try:
            return call()
        except Exception as e:  # noqa: BLE001
            if "locked" not in str(e).lower() or i == attempts - 1:
                raise
            time.sleep(min(0.1 * (i + 1), 1.0))


class _MLflowLog(RunLog):
    def __init__(self, spec: MLflowWriter, info: RunInfo):
        from mlflow.entities import Param

        self.spec, self.info = spec, info
        self.client, exp_id = spec.client(info)
        folder = Path(info.out_dir).resolve()
        self.fresh = True
        self.run_id = None
        if info.resume:
            runs = spec.runs_of(self.client, exp_id, folder)
            if runs:
                self.run_id, self.fresh = runs[0].info.run_id, False
                steps = [m.step for m in _retry(lambda: self.client.get_metric_history(self.run_id, "test/accuracy"))]
                self.last_step = max(steps) if steps else None
                _retry(lambda: self.client.update_run(self.run_id, status="RUNNING"))
        self.earlier = [] if not self.fresh else [r.info.run_id for r in spec.runs_of(self.client, exp_id, folder)]
        if self.run_id is None:
            sc = info.config.get("scenario", {})
            tags = {RUN_DIR_TAG: str(folder), "strategy": str(sc.get("strategy", "")),
                    "availability": str(sc.get("availability", "")), "seed": str(sc.get("seed", ""))}
            run = _retry(lambda: self.client.create_run(exp_id, run_name=spec.name or run_label(info.config),
                                                        tags=tags))
            self.run_id = run.info.run_id
            params = [Param(k, str(v)[:MLFLOW_PARAM_LENGTH]) for k, v in flatten(
                {k: v for k, v in info.config.items()}).items()]
            for i in range(0, len(params), MLFLOW_PARAMS_BATCH):
                chunk = params[i: i + MLFLOW_PARAMS_BATCH]
                _retry(lambda: self.client.log_batch(self.run_id, params=chunk))
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._flusher, daemon=True, name="felix-mlflow")
        self._thread.start()

    def write(self, point: Point) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        for tag, value in scalars(point).items():
            self._queue.put(Metric(tag, value, now, point.step))

    def _flusher(self) -> None:
        while not self._stop.wait(self.spec.flush_s):
            self.flush()

    def flush(self) -> None:
        with self._lock:
            batch = []
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                for i in range(0, len(batch), MLFLOW_BATCH):
                    chunk = batch[i: i + MLFLOW_BATCH]
                    _retry(lambda: self.client.log_batch(self.run_id, metrics=chunk))
            except Exception as e:  # noqa: BLE001 - reported once; the results folder has them
                _warn_once(self, "mlflow: cannot log metrics", e)

    def close(self, summary: dict | None, files_dir: Path | None, status: str) -> None:
        from mlflow.entities import Metric

        self._stop.set()
        self._thread.join(timeout=60)
        try:
            if summary is not None and status in FINAL_STATUSES:
                now, step = int(time.time() * 1000), int(summary.get("aggregations") or 0)
                for tag, value in summary_scalars(summary).items():
                    self._queue.put(Metric(tag, value, now, step))
            self.flush()
            if files_dir is not None:
                for name in ARTIFACT_FILES:
                    if (Path(files_dir) / name).is_file():
                        _retry(lambda: self.client.log_artifact(self.run_id, str(Path(files_dir) / name)))
            _retry(lambda: self.client.set_terminated(self.run_id, status=status))
            if self.fresh and status == "FINISHED":  # the folder's earlier results are replaced: so are their runs
                for run_id in self.earlier:
                    _retry(lambda: self.client.delete_run(run_id))
        except Exception as e:  # noqa: BLE001
            _warn_once(self, "mlflow: cannot finish the run's log", e)


# ------------------------------------------------------------------------------------------ choosing
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
        writer.check()
        writers.append(writer)
    return tuple(writers)


def for_cell(writers: Sequence[MetricWriter], comparison: Path, strategy: str, regime: str, seed) -> tuple:
    """The writers of one comparison cell: their logs under the comparison's folder, named
    ``strategy/regime/seed<k>``."""
    name = cell_log_name(strategy, regime, seed)
    return tuple(w.for_cell(comparison, name) for w in writers)


# ------------------------------------------------------------------------------------------ the feed
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
                _warn_once(log, f"{type(log).__name__.strip('_')}: cannot log a checkpoint", e)

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
                _warn_once(log, "cannot flush a metric log", e)

    def close(self, summary: dict | None, files_dir: Path | None, status: str) -> None:
        logs, self.logs = self.logs, []
        for log in logs:
            try:
                log.close(summary, files_dir, status)
            except Exception as e:  # noqa: BLE001
                _warn_once(log, "cannot close a metric log", e)


def status_of(summary: dict) -> str:
    """An MLflow run status for a run's summary: KILLED for a run stopped by a signal (resumable)."""
    return "KILLED" if summary.get("stop_reason") == "interrupted" else "FINISHED"


def backfill(writers: Sequence[MetricWriter], run_dir: Path) -> int:
    """Logs a finished run folder (a comparison's cell kept from an earlier run) into each writer
    that holds no log of it yet, from its ``metrics.csv`` and ``summary.json``: the scalars of every
    checkpoint (no bytes by kind or histograms: the run is not running), the summary and the files.
    Returns the number of logs written."""
    from .results import read_metrics_csv

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
