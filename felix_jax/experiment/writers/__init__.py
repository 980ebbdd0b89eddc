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

The package: base.py (the stream, a writer's settings and its log of a run), tensorboard_writer.py,
mlflow_writer.py, and feed.py (choosing the writers, feeding them a run, logging a kept run folder).
Everything is importable from here.
"""

from .base import (ARTIFACT_FILES, FINAL_STATUSES, MLFLOW_ARTIFACTS, MLFLOW_DB, RUN_DIR_TAG, TENSORBOARD_DIR, MetricWriter,
                   Point, RunInfo, RunLog, WriterError, cell_log_name, flatten, run_label, scalars, summary_scalars,
                   warn_once)
from .feed import WRITERS, WriterFeed, backfill, for_cell, make_writers, status_of
from .mlflow_writer import MLFLOW_BATCH, MLFLOW_PARAM_LENGTH, MLFLOW_PARAMS_BATCH, MLflowWriter
from .tensorboard_writer import (HPARAM_METRICS, TensorBoardWriter, event_files, last_logged_step, read_event_records,
                                 read_scalars)

__all__ = [
    # base.py
    "ARTIFACT_FILES", "FINAL_STATUSES", "MLFLOW_ARTIFACTS", "MLFLOW_DB", "RUN_DIR_TAG", "TENSORBOARD_DIR",
    "MetricWriter", "Point", "RunInfo", "RunLog", "WriterError", "cell_log_name", "flatten", "run_label", "scalars",
    "summary_scalars", "warn_once",
    # feed.py
    "WRITERS", "WriterFeed", "backfill", "for_cell", "make_writers", "status_of",
    # mlflow_writer.py
    "MLFLOW_BATCH", "MLFLOW_PARAM_LENGTH", "MLFLOW_PARAMS_BATCH", "MLflowWriter",
    # tensorboard_writer.py
    "HPARAM_METRICS", "TensorBoardWriter", "event_files", "last_logged_step", "read_event_records", "read_scalars",
]
