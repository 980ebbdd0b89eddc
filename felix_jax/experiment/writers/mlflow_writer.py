"""``--log-to mlflow``: one MLflow run per results folder (see the package docstring), its metrics
sent from a thread of its own in batches, every store call tried again while a sqlite store is
locked by another writer (:func:`_retry`)."""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from pathlib import Path

from .base import (ARTIFACT_FILES, FINAL_STATUSES, MLFLOW_ARTIFACTS, MLFLOW_DB, RUN_DIR_TAG, MetricWriter, Point,
                   RunInfo, RunLog, flatten, run_label, scalars, summary_scalars, warn_once)

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
                warn_once(self, "mlflow: cannot log metrics", e)

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
            warn_once(self, "mlflow: cannot finish the run's log", e)
