"""Metric writers (``--log-to tensorboard,mlflow``): the events and the MLflow store read back with the
libraries' own readers equal ``metrics.csv``; a resumed run continues its logs without repeating a
step; a comparison logs one run per cell; a missing extra is refused in one line before the run."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from felix_jax.experiment import get_preset
from felix_jax.experiment.writers import (MLflowWriter, TensorBoardWriter, WriterError, cell_log_name, make_writers,
                                          read_scalars)

HAS_TBX = importlib.util.find_spec("tensorboardX") is not None
HAS_TB = importlib.util.find_spec("tensorboard") is not None
HAS_MLFLOW = all(importlib.util.find_spec(m) is not None for m in ("mlflow", "sqlalchemy", "alembic"))
needs_tbx = pytest.mark.skipif(not HAS_TBX, reason="needs tensorboardX: pip install 'felix-jax[tensorboard]'")
needs_mlflow = pytest.mark.skipif(not HAS_MLFLOW, reason="needs mlflow with sqlalchemy and alembic: "
                                                         "pip install 'felix-jax[mlflow]'")

SETS = ["--set", "max_aggregations=6", "--set", "target_accuracy=none", "--set", "strategy=felix",
        "--set", "availability=avail50"]


def metrics_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]


def f32(x: float) -> float:
    """What a TensorBoard scalar holds of ``x`` (a float32)."""
    return float(np.float32(x))


def tensorboard_scalars(logdir: Path) -> dict[str, list[tuple[int, float, float]]]:
    """tag -> [(step, wall_time, value)], read by tensorboard's own EventAccumulator when tensorboard
    is installed, else by the event-file reader of felix_jax.experiment.writers."""
    if not HAS_TB:
        return read_scalars(logdir)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    acc.Reload()
    return {tag: [(e.step, e.wall_time, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def assert_events_equal_metrics(logdir: Path, rows: list[dict]) -> None:
    scalars = tensorboard_scalars(logdir)
    for tag, column, scale in (("test/accuracy", "accuracy", 1), ("test/loss", "loss", 1),
                               ("bytes/total", "bytes_total", 1), ("time/virtual_hours", "time_s", 1 / 3600),
                               ("staleness/mean", "staleness_mean", 1), ("time/interval_s", "interval_s", 1)):
        logged = scalars[tag]
        assert [s for s, _, _ in logged] == [int(r["version"]) for r in rows], tag  # each step once, in order
        assert [w for _, w, _ in logged] == [r["time_s"] for r in rows], tag  # wall time = virtual time
        assert [v for _, _, v in logged] == [f32(r[column] * scale) for r in rows], tag


# ------------------------------------------------------------------ choosing writers
def test_log_to_names_and_missing_extras_are_refused_in_one_line(monkeypatch, tmp_path):
    assert make_writers(None) == () and make_writers("none") == () and make_writers("") == ()
    with pytest.raises(WriterError, match="unknown writer; known: tensorboard, mlflow"):
        make_writers("tensorboard,wandb")
    with pytest.raises(WriterError, match="more than once"):
        make_writers(["mlflow", MLflowWriter()])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("tensorboardX", "mlflow")
                        else real(name, *a))
    with pytest.raises(WriterError, match=r"needs tensorboardX, which is not installed: pip install "
                                          r"'felix-jax\[tensorboard\]'"):
        make_writers("tensorboard")
    with pytest.raises(WriterError, match=r"pip install 'felix-jax\[mlflow\]'"):
        make_writers("mlflow")
    from felix_jax.cli import main

    out = tmp_path / "never"
    with pytest.raises(SystemExit) as refused:  # before the run starts: no folder, no training
        main(["run", "--preset", "tiny", "--log-to", "mlflow", "--out", str(out), "--quiet"])
    message = str(refused.value.code)
    assert message.startswith("felix-jax run: --log-to mlflow needs mlflow") and "\n" not in message
    assert not out.exists()
    with pytest.raises(SystemExit, match="felix-jax compare: --log-to 'x': unknown writer"):
        main(["compare", "--scenario", "tiny", "--log-to", "x", "--out", str(out)])
    assert not out.exists()


def test_the_tracking_uri_is_taken_as_the_writer_is_made_and_log_names_are_one_folder_each(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    monkeypatch.setattr(MLflowWriter, "check", lambda self: None)  # whether mlflow is installed or not
    (writer,) = make_writers("mlflow")
    assert writer.tracking_uri == "http://127.0.0.1:5000" and writer.modules() == ("mlflow",)
    assert MLflowWriter().modules() == ("mlflow", "sqlalchemy", "alembic")  # the default store is sqlite
    assert cell_log_name("felix@device_profile=a/b.csv", "/data/x/my_trace.csv", 2) == \
        "felix@device_profile=a_b.csv/my_trace.csv/seed2"
    assert cell_log_name("oort", "ref:mobiperf", 0) == "oort/ref_mobiperf/seed0"


# ------------------------------------------------------------------ one run
@needs_tbx
def test_run_log_to_writes_events_and_an_mlflow_run_equal_to_metrics_csv(tmp_path):
    """``felix-jax run --preset tiny --log-to tensorboard[,mlflow]``: the events that tensorboard reads
    hold metrics.csv's every row at its step and virtual time, the bytes by kind add up, the histograms
    hold every aggregated update's staleness and weight, the scenario is there as text and hparams;
    the MLflow store holds the same numbers, the config as params and the folder's files."""
    from felix_jax.cli import main

    out = tmp_path / "r"
    log_to = "tensorboard,mlflow" if HAS_MLFLOW else "tensorboard"
    assert main(["run", "--preset", "tiny", *SETS, "--log-to", log_to, "--out", str(out), "--quiet"]) == 0
    rows = metrics_rows(out / "metrics.csv")
    assert len(rows) == 7
    logdir = out / "tensorboard"
    assert_events_equal_metrics(logdir, rows)
    scalars = tensorboard_scalars(logdir)
    for (_, _, train), (_, _, ev), (_, _, ctl), row in zip(scalars["bytes/train"], scalars["bytes/eval"],
                                                           scalars["bytes/control"], rows):
        assert train + ev + ctl == pytest.approx(row["bytes_total"], rel=1e-6)
    summary = json.loads((out / "summary.json").read_text())
    assert scalars["summary/aggregations"] == [(6, summary["end_time_s"], 6.0)]
    assert scalars["summary/bytes_total"][0][2] == f32(summary["bytes_total"])
    dist = json.loads((out / "distributions.json").read_text())
    if HAS_TB:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(str(logdir), size_guidance={"histograms": 0, "tensors": 0})
        acc.Reload()
        for tag, key in (("distributions/staleness", "staleness"), ("distributions/agg_weight", "agg_weights")):
            hist = [e.histogram_value for e in acc.Histograms(tag)]
            assert sum(h.num for h in hist) == len(dist[key])
            assert sum(h.sum for h in hist) == pytest.approx(sum(dist[key]), rel=1e-9)
        assert {"config/scenario/text_summary", "config/resolved/text_summary"} <= set(acc.Tags()["tensors"])
        text = acc.Tensors("config/scenario/text_summary")[0].tensor_proto.string_val[0].decode()
        assert '"strategy": "felix"' in text
        hparams = acc.PluginTagToContent("hparams")
        assert set(hparams) == {"_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info"}
        from tensorboard.plugins.hparams import plugin_data_pb2

        start = plugin_data_pb2.HParamsPluginData.FromString(hparams["_hparams_/session_start_info"])
        assert start.session_start_info.hparams["strategy"].string_value == "felix"
        assert start.session_start_info.hparams["max_aggregations"].number_value == 6
    if not HAS_MLFLOW:
        return
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    (mlrun,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert mlrun.info.status == "FINISHED" and mlrun.info.run_name == "felix/avail50/seed0"
    assert mlrun.data.tags["felix_jax.results_folder"] == str(out.resolve())
    history = client.get_metric_history(mlrun.info.run_id, "test/accuracy")
    assert [(m.step, m.value) for m in history] == [(int(r["version"]), r["accuracy"]) for r in rows]  # doubles
    bytes_total = client.get_metric_history(mlrun.info.run_id, "bytes/total")
    assert [m.value for m in bytes_total] == [r["bytes_total"] for r in rows]
    assert mlrun.data.metrics["summary/aggregations"] == 6
    config = json.loads((out / "config.json").read_text())
    assert mlrun.data.params["scenario.seed"] == "0" and mlrun.data.params["scenario.strategy"] == "felix"
    assert mlrun.data.params["fleet.concurrency"] == str(config["fleet"]["concurrency"])
    artifacts = {a.path for a in client.list_artifacts(mlrun.info.run_id)}
    assert {"config.json", "metrics.csv", "summary.json", "distributions.json", "events.csv"} <= artifacts


@needs_tbx
def test_event_files_of_one_second_sort_in_the_order_they_were_opened(tmp_path, monkeypatch):
    """tensorboardX names an event file by the second and the host; a run resumed within the same second
    (or any two logs of one folder) must still be read in the order written: the writer's suffix carries
    the nanosecond before its random part. (Its uuid alone ordered a fast resume at random.)"""
    import time as time_module

    from tensorboardX import SummaryWriter

    from felix_jax.experiment.writers.tensorboard_writer import event_files, file_suffix

    monkeypatch.setattr(time_module, "time", lambda: 1_700_000_000.0)  # every file in the same second
    made = []
    for _ in range(12):
        before = set(event_files(tmp_path))
        SummaryWriter(logdir=str(tmp_path), filename_suffix=file_suffix()).close()
        (new,) = set(event_files(tmp_path)) - before
        made.append(new)
    assert event_files(tmp_path) == made and len({p.name.split(".")[3] for p in made}) == 1  # one second


def test_a_resumed_run_continues_its_logs_without_repeating_a_step(tmp_path, monkeypatch):
    """A run that dies at version 6 with its last snapshot at 4 (its logs hold 0-6), resumed: the
    resumed run computes 5 and 6 again, and the logs hold every step 0-10 once, equal to the finished
    metrics.csv; MLflow (a file store here) keeps one run, finished."""
    from felix_jax.experiment.runner import run
    from felix_jax.fleet.simulator import FleetSimulator

    sc = get_preset("tiny").with_overrides({"strategy": "felix", "availability": "avail50", "max_aggregations": "10",
                                            "target_accuracy": "none", "eval_selector.min_age": "2"})
    writers = [TensorBoardWriter()]
    if HAS_MLFLOW:
        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        writers.append(MLflowWriter(tracking_uri=(tmp_path / "mlruns").as_uri(), experiment="resume"))
    out = tmp_path / "r"
    original = FleetSimulator._checkpoint

    def dies_at_version_6(self):
        original(self)
        if self.version == 6:
            raise RuntimeError("the process died here")

    monkeypatch.setattr(FleetSimulator, "_checkpoint", dies_at_version_6)
    with pytest.raises(RuntimeError, match="died"):
        run(sc, out, plot=False, snapshot_every=4, writers=writers)
    assert [s for s, _, _ in read_scalars(out / "tensorboard")["test/accuracy"]] == list(range(7))
    monkeypatch.setattr(FleetSimulator, "_checkpoint", original)
    done = run(sc, out, plot=False, resume=True, writers=writers)
    assert done.summary["aggregations"] == 10
    rows = metrics_rows(out / "metrics.csv")
    assert len(rows) == 11 and len(list((out / "tensorboard").glob("events.out.tfevents.*"))) == 2
    assert_events_equal_metrics(out / "tensorboard", rows)
    if HAS_MLFLOW:
        from mlflow.tracking import MlflowClient

        client = MlflowClient((tmp_path / "mlruns").as_uri())
        runs = client.search_runs([client.get_experiment_by_name("resume").experiment_id])
        assert len(runs) == 1 and runs[0].info.status == "FINISHED"
        history = client.get_metric_history(runs[0].info.run_id, "test/accuracy")
        assert [(m.step, m.value) for m in history] == [(int(r["version"]), r["accuracy"]) for r in rows]


# ------------------------------------------------------------------ a comparison
def finished_cell(out: Path, sc, label: str, accuracy: list[float]) -> Path:
    """A finished comparison cell written by hand (no training): what ``run`` leaves in its folder."""
    from felix_jax.experiment.compare import cell_dir
    from felix_jax.experiment.results import METRIC_COLUMNS

    run_dir = cell_dir(out, label, sc.availability, sc.seed)
    run_dir.mkdir(parents=True)
    lines = [",".join(METRIC_COLUMNS)]
    for i, a in enumerate(accuracy):
        lines.append(f"{60.0 * i},{60.0 * i / 3600},{i},{a},{2.0 - a},{1000 * i},0.5,60.0")
    (run_dir / "metrics.csv").write_text("\n".join(lines) + "\n")
    (run_dir / "config.json").write_text(json.dumps({"scenario": json.loads(json.dumps(sc.to_json(), default=str))}))
    (run_dir / "summary.json").write_text(json.dumps({
        "stop_reason": "max_aggregations", "aggregations": len(accuracy) - 1, "end_time_s": 60.0 * len(accuracy),
        "time_to_target_s": None, "time_to_target_h": None, "bytes_total": 1000 * len(accuracy), "bytes_train": 900,
        "bytes_eval": 100, "control_bytes": 0, "final_accuracy": accuracy[-1], "best_accuracy": max(accuracy)}))
    (run_dir / "distributions.json").write_text(json.dumps({"staleness": [0, 1], "agg_weights": [1.0, 0.5],
                                                            "utility_age": [0], "aggregation_times_s": [0.0]}))
    return run_dir


@needs_tbx
def test_a_comparison_logs_one_run_per_cell_and_kept_cells_are_logged_from_their_files(tmp_path, monkeypatch):
    """Every cell finished earlier (kept): ``run_matrix(..., writers=...)`` logs each from its files,
    one TensorBoard run per cell under DIR/tensorboard/<strategy>/<regime>/seed<k> and one MLflow run
    per cell in the comparison's experiment; run again, nothing is logged twice."""
    from felix_jax.experiment.compare import run_matrix

    base = get_preset("tiny").with_overrides({"max_aggregations": "3"})
    out = tmp_path / "cmp"
    cells = {}
    for label in ("felix", "fedbuff@timeout_s=30"):
        for seed in (0, 1):
            from felix_jax.experiment.compare import cell_overrides

            sc = base.with_overrides({**cell_overrides(label), "availability": "avail50", "seed": seed})
            cells[label, seed] = finished_cell(out, sc, label, [0.1, 0.2 + 0.1 * seed, 0.3, 0.35])
    writers = ["tensorboard"]
    if HAS_MLFLOW:
        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        writers.append(MLflowWriter(tracking_uri=(tmp_path / "mlruns").as_uri()))
    for _ in range(2):
        rows = run_matrix(base, ["felix", "fedbuff@timeout_s=30"], ["avail50"], [0, 1], out, progress=False,
                          log=lambda _line: None, writers=writers)
        assert all(r["_kept"] for r in rows)
    runs = sorted(p.parent.relative_to(out / "tensorboard").as_posix()
                  for p in (out / "tensorboard").rglob("events.out.tfevents.*"))
    assert runs == ["fedbuff@timeout_s=30/avail50/seed0", "fedbuff@timeout_s=30/avail50/seed1",
                    "felix/avail50/seed0", "felix/avail50/seed1"]
    for (label, seed), run_dir in cells.items():
        logged = read_scalars(out / "tensorboard" / label / "avail50" / f"seed{seed}")
        rows = metrics_rows(run_dir / "metrics.csv")
        assert [(s, v) for s, _, v in logged["test/accuracy"]] == [(int(r["version"]), f32(r["accuracy"]))
                                                                   for r in rows]
        assert "bytes/train" not in logged  # not known from the files: only what metrics.csv holds
    if HAS_MLFLOW:
        from mlflow.tracking import MlflowClient

        client = MlflowClient((tmp_path / "mlruns").as_uri())
        found = client.search_runs([client.get_experiment_by_name("cmp").experiment_id])
        assert sorted(r.info.run_name for r in found) == runs


@needs_tbx
def test_the_writer_overhead_benchmark_prints_its_ratio_and_the_same_results(tmp_path, capsys):
    import runpy

    bench = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "writer_overhead.py"))
    result = bench["main"](["--aggregations", "3", "--reps", "1", "--writers", "tensorboard",
                            "--json", str(tmp_path / "w.json")])
    assert result["same_results"] and result["ratio_ms_per_event"] > 0
    assert json.loads((tmp_path / "w.json").read_text())["writers"] == "tensorboard"
    assert "ratio with/without: host ms/event x" in capsys.readouterr().out


@needs_tbx
def test_a_log_that_cannot_start_is_refused_in_one_line_before_the_event_loop(tmp_path):
    from felix_jax.experiment.runner import run

    (tmp_path / "not-a-folder").write_text("a file where the logs would go")
    sc = get_preset("tiny").with_overrides({"max_aggregations": "2"})
    with pytest.raises(WriterError) as refused:
        run(sc, tmp_path / "r", plot=False, writers=[TensorBoardWriter(root=tmp_path / "not-a-folder", name="x")])
    # the log's folder is checked before any work: not even the results folder is made
    assert str(refused.value) == (f"--log-to tensorboard: cannot write its log to "
                                  f"{tmp_path}/not-a-folder/tensorboard/x: {tmp_path}/not-a-folder is a file, not a folder")
    assert not (tmp_path / "r").exists()
    (tmp_path / "r").mkdir()  # a run's own log folder: a file where it would go
    (tmp_path / "r" / "tensorboard").write_text("not a folder")
    with pytest.raises(WriterError, match=r"^--log-to tensorboard: cannot write its log to .*/r/tensorboard: "
                                          r".*/r/tensorboard is a file, not a folder$"):
        TensorBoardWriter().check_folder(tmp_path / "r")


def _no_root_override() -> list[str] | None:
    """A command prefix under which a read-only folder really refuses writes: none for a user; for root,
    ``setpriv`` without the capabilities that override file permissions (None where that cannot be had)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    probe = tempfile.mkdtemp()
    try:
        os.chmod(probe, 0o555)
        done = subprocess.run([*prefix, "sh", "-c", f"touch {probe}/x"], capture_output=True)
        return prefix if done.returncode != 0 else None
    except OSError:
        return None
    finally:
        os.chmod(probe, 0o755)
        shutil.rmtree(probe)


@needs_tbx
def test_a_log_folder_that_cannot_be_written_is_refused_before_any_work_and_no_run_is_stranded(tmp_path):
    """The reported case: --overwrite --log-to tensorboard into a folder whose tensorboard/ could not be
    written finished the run, then could not swap it in: it stayed in .felix-jax-new/ (dropped by the next
    run), the earlier results half in .felix-jax-old/, and the message said they were kept. Root ignores
    a read-only folder: the runs go through setpriv without the capabilities that override it."""
    from felix_jax.cli import main

    prefix = _no_root_override()
    if prefix is None:
        pytest.skip("needs a user, or root with setpriv, for a read-only folder to refuse writes")
    tiny = ["--preset", "tiny", "--quiet", "--set", "max_aggregations=2", "--set", "target_accuracy=none"]

    def cli(*argv) -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, sys.executable, "-m", "felix_jax.cli", "run", *tiny, *argv],
                              capture_output=True, text=True, timeout=300)

    # an earlier run, its tensorboard/ made read-only: the replacing run is refused before any work
    out = tmp_path / "r1"
    assert main(["run", *tiny, "--out", str(out), "--log-to", "tensorboard"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}
    (out / "tensorboard").chmod(0o555)
    try:
        for log_to in (["--log-to", "tensorboard"], []):
            done = cli("--out", str(out), "--overwrite", *log_to)
            assert done.returncode == 1 and "Traceback" not in done.stderr
            line = done.stderr.strip()
            assert "\n" not in line and line.startswith(f"felix-jax run: cannot replace the earlier results in {out}: "
                                                         f"{out}/tensorboard cannot be written"), line
            assert "results written" not in done.stdout  # refused before the run, not after it
            assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.startswith(".")} \
                == before
            assert not any(p.name.startswith(".felix-jax-") for p in out.iterdir() if p.is_dir())
    finally:
        (out / "tensorboard").chmod(0o755)
    # a first run into a folder holding only a read-only tensorboard/: refused before any work, nothing staged
    out = tmp_path / "r2"
    (out / "tensorboard").mkdir(parents=True)
    (out / "tensorboard").chmod(0o555)
    try:
        done = cli("--out", str(out), "--log-to", "tensorboard")
    finally:
        (out / "tensorboard").chmod(0o755)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().startswith(f"felix-jax run: --log-to tensorboard: cannot write its log to "
                                          f"{out}/tensorboard: "), done.stderr
    assert "are kept" not in done.stderr  # there were no earlier results to keep
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".felix-jax.lock")) == ["tensorboard"]


def test_a_swap_that_fails_puts_the_earlier_results_back_and_keeps_the_finished_run(tmp_path, monkeypatch):
    """What a check cannot foresee: a swap failing half-way never leaves the finished run only in the
    staging folder (which the next run drops), nor the earlier results in the retired one."""
    from felix_jax.experiment import results
    from felix_jax.experiment.results import (RETIRED_DIR, STAGING_DIR, UNSWAPPED_DIR, OutputDirError,
                                              staged_results)

    out = tmp_path / "r"
    (out / "tensorboard").mkdir(parents=True)
    for name in ("config.json", "metrics.csv", "summary.json", "tensorboard/events.out.tfevents.1"):
        (out / name).write_text(f"old {name}")
    real = results.os.replace
    for fail_on in ("tensorboard", "summary.json"):  # while retiring the old entries; while moving the new in
        tried = []

        def replace(src, dst):  # the old tensorboard/ as it is set aside; the new summary.json as it moves in
            tried.append(Path(src).name)
            if Path(src).name == fail_on and tried.count(fail_on) == (1 if fail_on == "tensorboard" else 2):
                raise PermissionError(13, "Permission denied", str(src))
            return real(src, dst)

        monkeypatch.setattr(results.os, "replace", replace)
        with pytest.raises(OutputDirError) as failed:
            with staged_results(out, replace=True) as write_dir:
                assert write_dir == out / STAGING_DIR
                (write_dir / "tensorboard").mkdir()
                for name in ("config.json", "metrics.csv", "summary.json", "tensorboard/events.out.tfevents.2"):
                    (write_dir / name).write_text(f"new {name}")
        monkeypatch.setattr(results.os, "replace", real)
        kept = out / UNSWAPPED_DIR
        assert str(failed.value) == (f"the run finished but its results could not be put in place in {out} "
                                     f"({out if fail_on == 'tensorboard' else out / STAGING_DIR}/{fail_on}: "
                                     f"Permission denied); they are in {kept}")
        assert not (out / STAGING_DIR).exists() and not (out / RETIRED_DIR).exists()
        for name in ("config.json", "metrics.csv", "summary.json", "tensorboard/events.out.tfevents.1"):
            assert (out / name).read_text() == f"old {name}"  # the earlier results, in place
        assert not (out / "tensorboard/events.out.tfevents.2").exists()
        for name in ("config.json", "metrics.csv", "summary.json", "tensorboard/events.out.tfevents.2"):
            assert (kept / name).read_text() == f"new {name}"  # the finished run, in a folder of its own
        shutil.rmtree(kept)
