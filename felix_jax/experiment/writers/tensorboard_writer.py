"""``--log-to tensorboard``: TensorBoard event files through tensorboardX (no TensorFlow), one log
per run or per comparison cell (see the package docstring), and the event-file reader
(:func:`read_scalars`) that resumes a log where it stopped without repeating a step."""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterable

import numpy as np

from .base import (FINAL_STATUSES, TENSORBOARD_DIR, MetricWriter, Point, RunInfo, RunLog, WriterError, flatten,
                   run_label, scalars, summary_scalars)

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

    def check_folder(self, out_dir: Path) -> None:
        """The log's folder (``OUT/tensorboard``, or the comparison's ``tensorboard/NAME``) or, where it is
        not made yet, the nearest folder above it, must be a folder this process can write in: checked
        by a write, as the results folder is, so a run is not refused only once it has finished."""
        logdir = Path(out_dir) / TENSORBOARD_DIR if self.root is None else \
            Path(self.root) / TENSORBOARD_DIR / (self.name or "")
        there = logdir
        while not there.exists() and there != there.parent:
            there = there.parent
        if not there.is_dir():
            raise WriterError(f"--log-to tensorboard: cannot write its log to {logdir}: {there} is a file, "
                              "not a folder")
        try:
            with tempfile.TemporaryFile(dir=there):
                pass
        except OSError as e:
            where = "" if there == logdir else f"{there}: "
            raise WriterError(f"--log-to tensorboard: cannot write its log to {logdir}: {where}{e.strerror or e}") \
                from None

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


def file_suffix() -> str:
    """The end of a new event file's name: unique per writer (tensorboardX names files by the second and
    the host only), and ordered in time within a second (the nanosecond, zero-padded, before the process
    and a random part), so that a run resumed within the same second is read after what it continues:
    the readers (tensorboard's and :func:`event_files`) take a folder's files in name order."""
    return f".{time.time_ns():020d}.{os.getpid()}.{uuid.uuid4().hex[:8]}"


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
        self.writer = SummaryWriter(logdir=str(self.logdir), flush_secs=spec.flush_s, filename_suffix=file_suffix())
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
