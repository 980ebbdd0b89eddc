"""A new user's probes of ``felix-jax``: every mistake gets one clear line and a non-zero
exit (no traceback), every valid input runs.

Most probes go through ``felix_jax.cli.main`` in this process (a ``SystemExit`` with a
one-line message is what the shell sees as that line and exit status 1); the few that
need a process of their own (signals, ``JAX_ENABLE_X64``, the absence of a traceback on
stderr) start ``python -m felix_jax.cli``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from felix_jax.cli import main
from felix_jax.policies import AGGREGATOR_OPTIONS
from felix_jax.traces import DataFileError, load_fedscale_trace

REPO = Path(__file__).resolve().parents[1]
# a tiny run that stops after two aggregations, without a progress bar
TINY = ["--preset", "tiny", "--quiet", "--set", "max_aggregations=2", "--set", "target_accuracy=none"]
TRACE_FILE = "traces/felix_reference_300clients.npz"
CIFAR_FILE = "cifar10/cifar10_jpeg_bytes.npz"


def refused(argv: list[str], *expected: str) -> str:
    """Runs the CLI in this process; asserts one line naming the command and each ``expected`` text."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    message = info.value.code
    assert isinstance(message, str), f"exit {message!r} without a message"  # str: printed, exit status 1
    assert "\n" not in message and message.startswith(f"felix-jax {argv[0]}: "), message
    for text in expected:
        assert text in message, message
    return message


def reference_arrays(num_clients: int = 3) -> dict[str, np.ndarray]:
    """A small archive shaped like the shared reference trace file (every trace always available)."""
    ids = np.arange(1, num_clients + 1, dtype=np.int32)
    arrays = {"client": ids, "training_delay_s": np.zeros(num_clients, np.float32),
              "num_samples": np.full(num_clients, 10, np.int32)}
    for name in ("syn_0", "syn_20", "syn_50", "mobiperf_2st", "mobiperf_3st_50", "mobiperf_3st_75"):
        arrays[f"{name}_client"] = ids
        arrays[f"{name}_time_s"] = np.zeros(num_clients, np.int64)
        arrays[f"{name}_state"] = np.full(num_clients, 2, np.uint8)
    return arrays


def data_folder(root: Path, trace: dict | bytes | None = None, cifar: bytes | None = None) -> Path:
    """A folder laid out like the shared data (traces/..., cifar10/...) with the given file contents."""
    for relative, content in ((TRACE_FILE, trace), (CIFAR_FILE, cifar)):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, dict):
            np.savez(path, **content)
        elif content is not None:
            path.write_bytes(content)
    return root


def truncated_npz(tmp_path: Path) -> bytes:
    np.savez(tmp_path / "whole.npz", **reference_arrays())
    whole = (tmp_path / "whole.npz").read_bytes()
    return whole[: len(whole) // 2]


@pytest.fixture
def data_env(tmp_path, monkeypatch):
    """Points FELIX_JAX_DATA (and the data cache) at folders of this test."""
    monkeypatch.setenv("FELIX_JAX_CACHE", str(tmp_path / "cache"))

    def use(folder: Path) -> Path:
        monkeypatch.setenv("FELIX_JAX_DATA", str(folder))
        return folder

    return use


# ------------------------------------------------------------- validation (in process)
@pytest.mark.parametrize("argv, expected", [
    (["run", "--preset", "nope"], ["unknown preset 'nope'"]),
    (["run", *TINY, "--set", "learning_rate=-0.1"], ["learning_rate=-0.1", "> 0"]),
    (["run", *TINY, "--set", "learning_rate=nan"], ["learning_rate", "NaN"]),
    (["run", *TINY, "--set", "concurrency=0"], ["concurrency=0", ">= 1"]),
    (["run", *TINY, "--set", "batch_size=0"], ["batch_size=0", ">= 1"]),
    (["run", *TINY, "--set", "eval_every=0"], ["eval_every=0", ">= 1"]),
    (["run", *TINY, "--set", "seed=-1"], ["seed=-1"]),
    (["run", *TINY, "--set", "max_aggregations=0"], ["max_aggregations=0", ">= 1"]),
    (["run", *TINY, "--set", "aggregator.server_lr=-1"], ["aggregator.server_lr=-1.0: must be a finite number > 0"]),
    (["run", *TINY, "--set", "aggregator.server_lr=inf"], ["aggregator.server_lr=inf: must be a finite number > 0"]),
    (["run", *TINY, "--set", "aggregator.server_lr=nan"], ["aggregator.server_lr", "NaN"]),
    (["run", *TINY, "--set", "strategy=fedavg", "--set", "aggregator.server_lr=0"], ["server_lr=0.0"]),
    (["compare", "--scenario", "tiny", "--seeds", "a"], ["--seeds expects comma-separated integers"]),
], ids=["unknown-preset", "negative-lr", "nan-lr", "concurrency-0", "batch-0", "eval_every-0", "seed-neg",
        "max_aggregations-0", "server_lr-neg", "server_lr-inf", "server_lr-nan", "fedavg-server_lr-0",
        "compare-seeds-a"])
def test_bad_fields_and_options_are_refused_in_one_line(argv, expected):
    refused(argv, *expected)


@pytest.mark.parametrize("server_lr", [-1.0, 0.0, float("nan"), float("inf")])
@pytest.mark.parametrize("policy", sorted(AGGREGATOR_OPTIONS))  # every built-in aggregator
def test_every_aggregator_refuses_a_server_lr_that_is_not_a_positive_number(policy, server_lr):
    from felix_jax.options import OptionError

    with pytest.raises(OptionError, match="server_lr") as caught:
        AGGREGATOR_OPTIONS[policy].build("aggregator", {"server_lr": server_lr})
    if not math.isnan(server_lr):  # NaN is refused by the parser already; inf is > 0, so the rule says finite
        assert str(caught.value) == f"aggregator.server_lr={server_lr!r}: must be a finite number > 0"
    assert AGGREGATOR_OPTIONS[policy].build("aggregator", {"server_lr": 0.5}).server_lr == 0.5


def test_scenario_files_that_are_not_scenarios_are_refused(tmp_path):
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "badtype.json").write_text('{"num_clients": "many"}')
    refused(["run", "--config", str(tmp_path / "empty.json")], "empty.json", "not valid JSON")
    refused(["run", "--config", str(tmp_path / "list.json")], "list.json", "expected a JSON object", "got list")
    refused(["run", "--config", str(tmp_path / "badtype.json")], "num_clients='many'", "expected int")
    refused(["run", "--config", str(tmp_path / "nope.json")], "nope.json", "No such file")


def test_scenarios_impossible_for_their_data_or_population_are_refused_before_training(tmp_path):
    refused(["run", *TINY, "--set", "num_train=100000", "--out", str(tmp_path / "a")],
            "num_train=100000", "only", "training samples")
    refused(["run", *TINY, "--set", "num_test=100000", "--out", str(tmp_path / "b")], "num_test=100000")
    refused(["run", *TINY, "--set", "strategy=fedavg", "--set", "aggregation_goal=50", "--out", str(tmp_path / "c")],
            "aggregation_goal=50", "num_clients=12")
    refused(["run", *TINY, "--set", "availability=ref:nope", "--out", str(tmp_path / "d")],
            "ref:nope", "unknown reference trace", "ref:syn_50")
    refused(["compare", "--scenario", "tiny", "--availability", "ref:nope", "--out", str(tmp_path / "e")],
            "ref:nope", "unknown reference trace")
    # refused before anything was written: no folder left behind
    assert not any((tmp_path / name).exists() for name in "abcd")


# ------------------------------------------------------------------------ data files
def test_damaged_reference_traces_are_data_file_errors_naming_the_file(tmp_path, data_env):
    ref = ["run", *TINY, "--set", "availability=ref:syn_50", "--out", str(tmp_path / "out")]
    folder = data_env(data_folder(tmp_path / "truncated", trace=truncated_npz(tmp_path)))
    refused(ref, str(folder / TRACE_FILE), "cannot read it as the reference trace archive")
    arrays = {k: v for k, v in reference_arrays().items() if not k.startswith("syn_50")}
    folder = data_env(data_folder(tmp_path / "malformed", trace=arrays))
    message = refused(ref, str(folder / TRACE_FILE), "syn_50_client")
    assert "unknown availability regime" not in message
    refused(["compare", "--scenario", "tiny", "--availability", "ref:syn_50", "--strategies", "fedbuff",
             "--out", str(tmp_path / "cmp")], "availability 'ref:syn_50'", str(folder / TRACE_FILE))
    empty = {k: v[:0] for k, v in reference_arrays().items()}
    folder = data_env(data_folder(tmp_path / "empty", trace=empty))
    refused(ref, str(folder / TRACE_FILE), "no clients")


def test_a_truncated_data_set_is_a_data_file_error_naming_the_file(tmp_path, data_env):
    folder = data_env(data_folder(tmp_path / "data", cifar=truncated_npz(tmp_path)))
    refused(["run", *TINY, "--set", "dataset=cifar10", "--out", str(tmp_path / "out")], str(folder / CIFAR_FILE))


def test_fedscale_trace_with_a_nan_time_is_refused(tmp_path):
    path = tmp_path / "behave.json"
    path.write_text(json.dumps({"1": {"active": [0.0, float("nan")], "inactive": [10.0, 20.0],
                                      "finish_time": 100.0}}))
    with pytest.raises(DataFileError, match="behave.json.*NaN"):
        load_fedscale_trace(path)
    path.write_text(json.dumps({}))
    with pytest.raises(DataFileError, match="no clients"):
        load_fedscale_trace(path)


# -------------------------------------------------------------------- results folder
def test_an_output_folder_that_cannot_be_written_is_refused_before_training(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    refused(["run", *TINY, "--out", str(a_file)], str(a_file), "is a file")
    refused(["run", *TINY, "--out", str(a_file / "sub")], str(a_file / "sub"), "Not a directory")
    refused(["run", *TINY, "--out", "/proc/felix-jax-nope"], "cannot write results to /proc/felix-jax-nope")
    refused(["compare", "--scenario", "tiny", "--out", str(a_file)], "is a file")


def test_a_folder_with_another_runs_results_needs_overwrite(tmp_path, capsys):
    out = str(tmp_path / "r")
    assert main(["run", *TINY, "--out", out]) == 0
    first = (tmp_path / "r" / "metrics.csv").read_bytes()
    (tmp_path / "r" / "notes.txt").write_text("mine")
    refused(["run", *TINY, "--out", out], "already holds a run's results", "--overwrite",
            "see felix-jax run --help")
    assert main(["run", *TINY, "--set", "seed=1", "--out", out, "--overwrite"]) == 0
    assert json.loads((tmp_path / "r" / "config.json").read_text())["scenario"]["seed"] == 1
    assert (tmp_path / "r" / "metrics.csv").read_bytes() != first
    assert (tmp_path / "r" / "notes.txt").read_text() == "mine"  # only result files are cleared


def test_compare_resumes_by_default_and_reruns_every_cell_with_overwrite(tmp_path, capsys):
    argv = ["compare", "--scenario", "tiny", "--strategies", "fedbuff", "--availability", "avail100",
            "--set", "max_aggregations=2", "--set", "target_accuracy=none", "--quiet", "--out", str(tmp_path)]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 0
    assert "finished earlier, kept" in capsys.readouterr().out
    assert main(argv + ["--overwrite"]) == 0
    assert "finished earlier, kept" not in capsys.readouterr().out


def test_no_virtual_time_limit_runs_with_the_progress_bar(tmp_path, capsys):
    argv = ["run", "--preset", "tiny", "--set", "max_aggregations=2", "--set", "target_accuracy=none",
            "--set", "max_virtual_hours=inf", "--out", str(tmp_path / "r")]
    assert main(argv) == 0
    assert " virtual h |" in capsys.readouterr().err  # the progress shows virtual hours with no limit to fill toward
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["stop_reason"] == "max_aggregations"


# ----------------------------------------------------------------- own processes
def cli(*args: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "felix_jax.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_a_user_error_prints_one_line_and_no_traceback(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for args in (["run", *TINY, "--out", str(a_file / "sub")], ["run", *TINY, "--set", "concurrency=0"]):
        proc = cli(*args)
        assert proc.returncode != 0
        assert "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("felix-jax run: "), proc.stderr


def test_runs_in_float64(tmp_path):
    proc = cli("run", *TINY, "--out", str(tmp_path / "r"), env={"JAX_ENABLE_X64": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["aggregations"] == 2


# SIGTERM in the slow tier: the same stop as SIGINT's (the default tier's) by another signal
@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), pytest.param(signal.SIGTERM, 143, marks=pytest.mark.slow)])
def test_a_signal_stops_the_run_with_complete_results(tmp_path, sig, status):
    out = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "felix_jax.cli", "run", "--preset", "tiny", "--quiet",
                             "--set", "max_aggregations=1000000", "--set", "target_accuracy=none",
                             "--set", "max_virtual_hours=inf", "--out", str(out)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # a suite started in the background (``cmd &``) hands its children SIGINT
                            # ignored, which the CLI then leaves ignored: start this one as a terminal would
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 180
        while time.time() < deadline and proc.poll() is None:  # metrics stream in: wait for a few rows
            if (out / "metrics.csv").exists() and len((out / "metrics.csv").read_text().splitlines()) >= 4:
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read()
        assert (out / "config.json").exists() and not (out / "summary.json").exists()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == status, err[-2000:]
    assert "Traceback" not in err and f"interrupted by {sig.name}" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted"
    rows = (out / "metrics.csv").read_text().splitlines()
    assert len(rows) - 1 == summary["aggregations"] + 1  # a checkpoint per version, from version 0
    assert (out / "distributions.json").exists()
