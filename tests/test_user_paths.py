"""felix-jax run the way its users run it: the ``felix-jax`` command in a subprocess, started from a
folder of the user's own files (a trace CSV and NPZ written by hand, a plugin, a scenario file, a data
set, a device profile), every file and folder named by a relative path, real signals to a real
``compare``, a printed resume command copied from the output and run as printed, and ``report --out``
aimed at a result file. Each test here failed before paths were resolved at the command line's edge
and ``compare`` stopped its running cell on a signal (docs/tests.md, "The user's paths")."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

FAST = ["--set", "target_accuracy=none", "--quiet"]  # the tiny preset (12 clients, an MLP) runs in seconds


def felix_jax_command() -> list[str]:
    """The ``felix-jax`` script that ``pip install`` put beside this Python, as a user types it."""
    script = Path(sys.executable).parent / "felix-jax"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "felix_jax.cli"]


def felix(home: Path, *args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*felix_jax_command(), *args], cwd=home, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def start(home: Path, *args: str) -> subprocess.Popen:
    """A command started as a terminal starts it: SIGINT at its default (a suite run in the background
    hands its children SIGINT ignored, which felix-jax then leaves ignored)."""
    return subprocess.Popen([*felix_jax_command(), *args], cwd=home, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def rows_in(path: Path) -> int:
    try:
        return len(path.read_text().splitlines()) - 1
    except OSError:
        return -1


def signal_when(proc: subprocess.Popen, metrics: Path, rows: int, sig: int) -> str:
    """Sends ``sig`` once ``metrics`` (a running cell's metrics.csv) holds ``rows`` checkpoints; the
    process's stderr once it has exited."""
    deadline = time.time() + 240
    try:
        while time.time() < deadline and proc.poll() is None and rows_in(metrics) < rows:
            time.sleep(0.05)
        assert proc.poll() is None, f"it ended before the signal: {proc.stderr.read()[-2000:]}"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    return err


def one_line_error(proc: subprocess.CompletedProcess, command: str) -> str:
    assert proc.returncode != 0, proc.stdout[-1000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"felix-jax {command}: "), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    return lines[0]


# ------------------------------------------------------------------------ the user's folder
def diurnal_rows(num_clients: int = 12, seed: int = 0) -> list[tuple[int, float, str]]:
    """Each client online and offline in turns of 200-2,000 s, as a researcher's own trace would be."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(num_clients):
        t, online = 0.0, c % 3 != 0
        while t < 30_000:
            rows.append((c, t, "AVL_TRAIN" if online else "UN_AVL"))
            t = round(t + float(rng.uniform(200, 2000)), 1)
            online = not online
    return rows


PLUGIN = '''
# my_policies.py: the docstring's selector, and a switch that makes it fail mid-run while FAIL exists
import dataclasses
from pathlib import Path

import numpy as np
from felix_jax import plugins
from felix_jax.policies import Selector


@dataclasses.dataclass(frozen=True)
class GreedyConfig:
    fraction: float = 1.0


@plugins.selector("greedy-utility", config=GreedyConfig)
def make_greedy(config):
    def select(calls, ctx, k):
        if calls >= 12 and Path("FAIL").exists():  # the working folder: the user's own
            raise RuntimeError("a bug in my selector")
        ids = np.flatnonzero(ctx.eligible)
        best = ids[np.argsort(-ctx.view.utility[ids], kind="stable")]
        return best[: max(1, int(config.fraction * k))], calls + 1
    return Selector("greedy-utility", lambda: 0, select)


plugins.strategy("felix-greedy", mode="async", knowledge="tiertrack", selector="greedy-utility",
                 aggregator="tierfuse", eval_selector="tierselect-eval")
'''


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """The user's working folder: files written by hand, not by felix-jax's own writers."""
    home = tmp_path_factory.mktemp("user")
    rows = diurnal_rows()
    (home / "diurnal.csv").write_text("client,time_s,state\n" + "".join(f"{c},{t},{s}\n" for c, t, s in rows))
    (home / "traces").mkdir()
    np.savez(home / "traces" / "diurnal.npz", client=np.array([r[0] for r in rows], np.int64),
             time_s=np.array([r[1] for r in rows]), state=np.array([2 if r[2] == "AVL_TRAIN" else 0 for r in rows],
                                                                   np.int8))
    (home / "my_policies.py").write_text(PLUGIN)
    rng = np.random.default_rng(1)
    centers = rng.normal(size=(4, 6, 6, 1)).astype(np.float32)
    train_y, test_y = rng.integers(0, 4, 240), rng.integers(0, 4, 80)
    np.savez(home / "my_data.npz", train_x=centers[train_y] + 0.5 * rng.normal(size=(240, 6, 6, 1)).astype(np.float32),
             train_y=train_y, test_x=centers[test_y] + 0.5 * rng.normal(size=(80, 6, 6, 1)).astype(np.float32),
             test_y=test_y)
    (home / "devices.csv").write_text("train_delay_s\n" + "".join(f"{2 + 3 * (c % 5)}\n" for c in range(12)))
    (home / "scenarios").mkdir()
    (home / "scenarios" / "mine.json").write_text(json.dumps({  # its file names relative to its own folder
        "name": "mine", "dataset": "../my_data.npz", "model": "mlp", "num_clients": 12, "availability":
        "../diurnal.csv", "device_profile": "../devices.csv", "plugins": "../my_policies.py",
        "strategy": "felix-greedy", "concurrency": 4, "aggregation_goal": 2, "max_aggregations": 6,
        "target_accuracy": None, "slot_s": 30.0}))
    return home


# ------------------------------------------------------------------------ compare on relative trace files
def compare_on_traces(home: Path, traces: str, out: str) -> subprocess.CompletedProcess:
    proc = felix(home, "compare", "--scenario", "tiny", "--strategies", "felix,fedbuff", "--availability", traces,
                 "--set", "max_aggregations=4", *FAST, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def compared(home) -> tuple[Path, Path, str]:
    """The same comparison twice: its traces and folder by relative paths, then by absolute ones."""
    relative = compare_on_traces(home, "diurnal.csv,./traces/../traces/diurnal.npz", "cmp")
    compare_on_traces(home, f"{home / 'diurnal.csv'},{home / 'traces' / 'diurnal.npz'}", str(home / "cmp_abs"))
    return home / "cmp", home / "cmp_abs", relative.stdout


def table_rows(table: str) -> list[str]:
    return [line for line in table.splitlines() if line.startswith(("diurnal.csv ", "diurnal.npz "))]


def test_compare_on_relative_trace_paths_fills_every_output_as_absolute_paths_do(compared):
    rel, abs_, printed = compared
    table = (rel / "table.txt").read_text()
    assert len(table_rows(table)) == 4, table  # 2 strategies x 2 trace files, none left out
    assert table == (abs_ / "table.txt").read_text()
    assert table_rows(printed) == table_rows(table)  # the terminal's table too
    assert (rel / "summary_pooled.csv").read_text() == (abs_ / "summary_pooled.csv").read_text()
    pooled = (rel / "summary_pooled.csv").read_text().splitlines()
    assert len(pooled) == 1 + 4
    import csv

    with open(rel / "summary.csv", newline="") as f:
        regimes = {row["availability"] for row in csv.DictReader(f)}
    assert len(regimes) == 2 and all(Path(r).is_absolute() and Path(r).is_file() for r in regimes), regimes
    for figure in ("accuracy.png", "cdfs.png", "bytes.png"):
        assert (rel / figure).read_bytes() == (abs_ / figure).read_bytes(), figure
    html = (rel / "report.html").read_text()
    assert "no seed both reached" not in html and "diurnal.npz" in html and "diurnal.csv" in html


def test_cells_record_every_file_by_its_absolute_path(compared, home):
    rel, _, _ = compared
    for cell in (rel / "runs").iterdir():
        scenario = json.loads((cell / "config.json").read_text())["scenario"]
        assert Path(scenario["availability"]).is_absolute() and Path(scenario["availability"]).is_file()
        assert Path(scenario["availability"]).parent in (home, home / "traces")


def refused_in(home: Path, monkeypatch, *args: str) -> str:
    """The one line a command refuses with, run in this process from ``home`` (quicker than a process, the
    same path handling)."""
    from felix_jax.cli import main

    monkeypatch.chdir(home)
    with pytest.raises(SystemExit) as refused:
        main(list(args))
    return str(refused.value.code)


def test_report_and_plot_take_relative_folders_and_never_replace_a_result_file(compared, home, monkeypatch):
    rel, _, _ = compared
    cell = next(p for p in (rel / "runs").iterdir() if p.is_dir())
    relcell = cell.relative_to(home)
    for folder, target in (("cmp", "cmp/summary.csv"), (str(relcell), f"{relcell}/metrics.csv"),
                           ("cmp", "cmp/table.txt"), ("cmp", "cmp/../cmp/accuracy.png")):
        before = (home / target).read_bytes()
        assert "not a report felix-jax wrote" in refused_in(home, monkeypatch, "report", folder, "--out", target)
        assert (home / target).read_bytes() == before  # untouched
    line = refused_in(home, monkeypatch, "report", str(relcell), "--out", f"{relcell}/participation.csv")
    assert "must end in .html" in line and not (cell / "participation.csv").exists()
    (home / "notes.txt").write_text("mine")
    assert "not a report felix-jax wrote" in refused_in(home, monkeypatch, "report", "cmp", "--out", "notes.txt")
    assert (home / "notes.txt").read_text() == "mine"
    assert "is a folder" in refused_in(home, monkeypatch, "report", "cmp", "--out", "cmp")
    proc = felix(home, "report", "cmp", "cmp_abs", "--out", "both.html")  # an overlay of relative folders
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (home / "both.html").read_text().startswith("<!DOCTYPE html>")
    proc = felix(home, "report", str(relcell), "--out", "both.html")  # a page felix-jax wrote is replaced
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "felix-jax run: " in (home / "both.html").read_text()
    figure = (rel / "accuracy.png").read_bytes()
    (rel / "accuracy.png").unlink()
    proc = felix(home, "plot", "cmp")  # redrawn from the saved files, as drawn before
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (rel / "accuracy.png").read_bytes() == figure
    proc = felix(home, "plot-trace", "traces/diurnal.npz", "--out", "figs/trace.png")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (home / "figs" / "trace.png").stat().st_size > 10_000


# ------------------------------------------------------------------------ signals to a real compare
@pytest.mark.parametrize("batch, sig", [  # the default tier: Ctrl-C in a plain compare; the rest in the slow tier
    ("1", signal.SIGINT),
    pytest.param("2", signal.SIGTERM, marks=pytest.mark.slow),
    pytest.param("1", signal.SIGTERM, marks=pytest.mark.slow),
    pytest.param("2", signal.SIGINT, marks=pytest.mark.slow),
], ids=["plain-SIGINT", "batch-SIGTERM", "plain-SIGTERM", "batch-SIGINT"])
def test_a_signal_stops_compares_running_cell_with_a_snapshot_and_the_same_command_resumes_it(home, batch, sig):
    out = f"sig-{batch}-{sig.name}"
    argv = ["compare", "--scenario", "tiny", "--strategies", "felix,fedbuff", "--availability", "diurnal.csv",
            "--set", "max_aggregations=120", "--set", "max_virtual_hours=inf", *FAST, "--batch", batch, "--out", out]
    cell = home / out / "runs" / "felix-file_diurnal.csv-seed0"
    err = signal_when(start(home, *argv), cell / "metrics.csv", 5, sig)
    assert f"interrupted by {sig.name}" in err and "Traceback" not in err, err[-3000:]
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted" and 0 < summary["aggregations"] < 120, summary["stop_reason"]
    assert (cell / "snapshot" / "LATEST").is_file() and (cell / "participation.png").is_file()
    before = (cell / "metrics.csv").read_text()
    assert (home / out / "summary.csv").is_file()  # the rows so far
    proc = felix(home, *argv)  # the same command, as the message says
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = json.loads((cell / "summary.json").read_text())
    assert done["stop_reason"] == "max_aggregations" and done["aggregations"] == 120
    assert (cell / "metrics.csv").read_text().startswith(before)  # continued, not started again
    assert len(table_rows((home / out / "table.txt").read_text())) == 2


def test_the_printed_resume_command_works_as_printed(home):
    argv = ["run", "--preset", "tiny", "--set", "max_aggregations=120", "--set", "max_virtual_hours=inf", *FAST,
            "--out", "results/r"]
    err = signal_when(start(home, *argv), home / "results" / "r" / "metrics.csv", 5, signal.SIGINT)
    printed = re.search(r"continue it with: (felix-jax run --resume \S+)", err)
    assert printed, err[-2000:]
    words = shlex.split(printed.group(1))
    proc = felix(home, *words[1:])  # exactly as printed, from the same folder
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((home / "results" / "r" / "summary.json").read_text())["aggregations"] == 120
    # and from another folder: the printed path is absolute
    assert Path(words[-1]).is_absolute()


def test_a_plugin_error_in_compare_with_relative_paths_continues_once_fixed(home):
    argv = ["compare", "--scenario", "tiny", "--set", "plugins=my_policies.py", "--strategies", "felix-greedy",
            "--availability", "traces/diurnal.npz", "--set", "max_aggregations=30", *FAST, "--out", "cmp_plugin"]
    (home / "FAIL").write_text("")
    try:
        line = one_line_error(felix(home, *argv), "compare")
    finally:
        (home / "FAIL").unlink()
    assert "a bug in my selector" in line and "the same command continues it" in line, line
    cell = home / "cmp_plugin" / "runs" / "felix-greedy-file_diurnal.npz-seed0"
    assert json.loads((cell / "summary.json").read_text())["stop_reason"] == "plugin_error"
    proc = felix(home, *argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((cell / "summary.json").read_text())["aggregations"] == 30


# ------------------------------------------------------------------------ a scenario file of relative names
@pytest.mark.slow  # a property that held before the user-path fixes: kept, outside the default tier's budget
def test_a_relative_scenario_file_records_absolute_files_and_reruns_from_another_folder(home):
    proc = felix(home, "run", "--config", "scenarios/mine.json", "--quiet", "--out", "mine")
    assert proc.returncode == 0, proc.stderr[-2000:]
    scenario = json.loads((home / "mine" / "config.json").read_text())["scenario"]
    for field, name in (("dataset", "my_data.npz"), ("availability", "diurnal.csv"), ("device_profile", "devices.csv"),
                        ("plugins", "my_policies.py")):
        assert scenario[field] == str(home / name), (field, scenario[field])
    elsewhere = home / "elsewhere"
    elsewhere.mkdir()
    proc = felix(elsewhere, "run", "--config", "../mine/config.json", "--quiet", "--out", "again")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (elsewhere / "again" / "metrics.csv").read_bytes() == (home / "mine" / "metrics.csv").read_bytes()


def test_empty_strategies_and_a_bad_batch_are_one_line_and_leave_no_folder(home, monkeypatch):
    line = refused_in(home, monkeypatch, "compare", "--scenario", "tiny", "--strategies", ",", "--out", "e1")
    assert "at least one entry" in line  # (an IndexError once --reference came)
    assert "--batch -1" in refused_in(home, monkeypatch, "compare", "--scenario", "tiny", "--batch", "-1", "--out", "e2")
    assert not (home / "e1").exists() and not (home / "e2").exists()


def test_one_trace_file_by_two_names_is_one_regime(home, monkeypatch):
    line = refused_in(home, monkeypatch, "compare", "--scenario", "tiny", "--availability",
                      f"diurnal.csv,./diurnal.csv,{home / 'diurnal.csv'}", "--out", "twice")
    assert "more than once" in line and not (home / "twice").exists()


# ------------------------------------------------------------------------ a signal while a cell writes its files
def test_a_signal_while_a_finished_cell_writes_its_files_lets_it_finish_them(tmp_path, monkeypatch):
    from felix_jax.experiment import get_preset
    from felix_jax.experiment import results as results_module
    from felix_jax.experiment.matrix import MatrixInterrupted, run_matrix

    drawn = results_module.plot_participation

    def signalled_while_drawing(*args, **kwargs):  # SIGTERM arrives mid-write, the first time
        if not list(tmp_path.glob("c/runs/*/participation.png")):
            os.kill(os.getpid(), signal.SIGTERM)
        return drawn(*args, **kwargs)

    monkeypatch.setattr(results_module, "plot_participation", signalled_while_drawing)
    base = get_preset("tiny").with_overrides({"max_aggregations": 3, "target_accuracy": None})
    with pytest.raises(MatrixInterrupted) as stopped:
        run_matrix(base, ["felix", "fedbuff"], ["avail100"], [0], tmp_path / "c", progress=False, stop_on_signals=True)
    assert stopped.value.signum == signal.SIGTERM and stopped.value.stopped == [] and stopped.value.not_started == 1
    cell = tmp_path / "c" / "runs" / "felix-avail100-seed0"
    assert (cell / "participation.png").is_file()  # it finished its files before the comparison stopped
    assert json.loads((cell / "summary.json").read_text())["stop_reason"] == "max_aggregations"
    assert signal.getsignal(signal.SIGTERM) is not None  # the handlers it replaced are back
    lines = []
    rows = run_matrix(base, ["felix", "fedbuff"], ["avail100"], [0], tmp_path / "c", progress=False, log=lines.append)
    assert "finished earlier, kept" in lines[0] and len(rows) == 2


def test_a_folder_without_summary_json_is_never_a_finished_run(tmp_path, monkeypatch):
    """summary.json is written last: a failure while the other files are written leaves none."""
    from felix_jax.experiment import get_preset
    from felix_jax.experiment import results as results_module
    from felix_jax.experiment.runner import run

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(results_module, "plot_participation", broken)
    with pytest.raises(OSError):
        run(get_preset("tiny").with_overrides({"max_aggregations": 2, "target_accuracy": None}), tmp_path / "r")
    assert (tmp_path / "r" / "metrics.csv").is_file() and not (tmp_path / "r" / "summary.json").exists()


def test_a_snapshot_in_a_relative_folder_restores(tmp_path, monkeypatch):
    """The Python API too: a snapshot written to and read from a relative folder (orbax, which writes
    the device arrays, takes absolute paths only)."""
    from felix_jax.experiment import get_preset
    from felix_jax.experiment.build import build_simulator
    from felix_jax.fleet.snapshot import load_snapshot, save_snapshot

    monkeypatch.chdir(tmp_path)
    sc = get_preset("tiny").with_overrides({"max_aggregations": 4, "target_accuracy": None})
    sim = build_simulator(sc)
    sim.request_stop("interrupted", at_events=30)
    sim.run()
    written = save_snapshot(sim, "snap")
    again = build_simulator(sc)
    load_snapshot(again, Path("snap") / written.name)
    assert again.now == sim.now and again.version == sim.version and sim.version > 0
