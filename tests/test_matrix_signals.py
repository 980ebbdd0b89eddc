"""``benchmarks/paper_matrix.py --workers N`` stopped the way a terminal stops it: Ctrl-C goes to the
whole foreground process group (the script and its worker processes), SIGTERM to the group or to the
script alone. Each running cell stops after its current event with its results and a snapshot, no
queued cell starts, the script says so in one line and exits, and the same command finishes the
matrix (experiment/cell_pool.py). Each test here failed before: a traceback, workers dropping their
cells with no snapshot, and a pool that kept starting queued cells until SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from felix_jax.experiment.stops import StopOnSignals

PAPER_MATRIX = Path(__file__).resolve().parents[1] / "benchmarks" / "paper_matrix.py"
AGGREGATIONS = 200  # far more than the checkpoints a test waits for: no cell ends before its signal
# two strategies x two seeds, two workers: two cells run, two wait in the queue
ARGV = ["--scenario", "tiny", "--strategies", "felix,fedbuff", "--regimes", "avail100", "--ablations", "",
        "--seeds", "0,1", "--set", f"max_aggregations={AGGREGATIONS}", "--set", "target_accuracy=none",
        "--set", "max_virtual_hours=inf", "--workers", "2"]
RUNNING = ["felix-avail100-seed0", "fedbuff-avail100-seed0"]  # the first two cells, the workers' first


class Target:
    def __init__(self):
        self.reasons = []

    def request_stop(self, reason):
        self.reasons.append(reason)


def test_a_forwarded_stop_leaves_the_processs_own_signal_its_first():
    """A SIGTERM to the whole process group reaches a worker twice, in either order: its own, and the
    stop the comparison's process forwards. Neither is a second signal (which stops at once)."""
    target = Target()
    with StopOnSignals(True) as guard:
        guard.attach(target)
        guard.forward(signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # the process's own signal, after the forwarded stop
        assert guard.signum == signal.SIGTERM and target.reasons == ["interrupted"]
        with pytest.raises(SystemExit) as stopped:  # a second one of its own stops at once
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    assert stopped.value.code == 128 + signal.SIGTERM


# A process inside the guard after its first Ctrl-C, in a garbage-collection callback (jax registers one, and a
# busy process spends moments in it) when the second comes: the second must still stop it at once, once the
# interpreter is out of the callback (raised inside, it was printed as "Exception ignored" and dropped)
SECOND_IN_GC = """
import gc, signal, sys, time
from felix_jax.experiment.stops import StopOnSignals
def slow(phase, info):
    time.sleep(0.02)
try:
    with StopOnSignals(True) as guard:
        print("ready", flush=True)
        while guard.signum is None:
            time.sleep(0.01)
        gc.callbacks.append(slow)
        print("first", flush=True)
        end = time.time() + 1.5
        while time.time() < end:  # in the callback nearly all the time: a signal is handled there
            gc.collect()
        gc.callbacks.remove(slow)
        end = time.time() + 4
        while time.time() < end:  # then out of it
            time.sleep(0.01)
        print("went on to the end", flush=True)
except KeyboardInterrupt:
    print("stopped at once", flush=True)
    sys.exit(130)
"""


def test_a_second_ctrl_c_inside_a_gc_callback_still_stops_at_once():
    proc = subprocess.Popen([sys.executable, "-c", SECOND_IN_GC], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    assert proc.stdout.readline().strip() == "first"
    time.sleep(0.3)  # in the callback most of the time from now on
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and out.strip() == "stopped at once", (out, err)
    assert "Exception ignored" not in err, err


def start(out: Path) -> subprocess.Popen:
    """The script as a shell with job control starts it: a process group of its own (a terminal's Ctrl-C
    goes to all of it), SIGINT at its default (a suite run in the background hands its children SIGINT
    ignored)."""
    return subprocess.Popen([sys.executable, str(PAPER_MATRIX), *ARGV, "--out", str(out)], cwd=out.parent,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def checkpoints(cell: Path) -> int:
    try:
        return len((cell / "metrics.csv").read_text().splitlines()) - 1
    except OSError:
        return -1


def ignored_signals(pid: int) -> int | None:
    """The signals a process ignores (Linux's /proc; None elsewhere)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigIgn:")), 16)


def delivered(pid: int, sig: int, timeout: float = 10.0) -> None:
    """Waits until ``sig`` is no longer pending for ``pid`` (Linux's /proc: its handler has been entered),
    then 0.2 s for Python to run its handler: a signal sent while the same one is still pending is merged
    with it, so a second Ctrl-C sent too soon on a loaded machine was no second signal."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            break
        pending = [int(ln.split()[1], 16) for ln in status.splitlines() if ln.startswith(("SigPnd:", "ShdPnd:"))]
        if not any(mask & (1 << (sig - 1)) for mask in pending):
            break
        time.sleep(0.01)
    time.sleep(0.2)


def interrupt(out: Path, signals: list[tuple[str, int]], rows: int = 3) -> tuple[subprocess.Popen, str]:
    """Starts the matrix, waits until both running cells hold ``rows`` checkpoints, sends each of
    ``signals`` (("group" or "script", signal), each once the one before was handled: :func:`delivered`),
    and returns the process and its stderr once it has ended (within a minute, or the test fails)."""
    proc = start(out)
    cells = [out / "runs" / name for name in RUNNING]
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None and min(map(checkpoints, cells)) < rows:
            time.sleep(0.05)
        assert proc.poll() is None, f"it ended before the signal: {proc.stderr.read()[-2000:]}"
        ignored = ignored_signals(proc.pid)
        assert ignored is None or not ignored & (1 << (signal.SIGINT - 1)), "the script ignores SIGINT"
        for k, (to, sig) in enumerate(signals):
            if k:  # the one before handled first: two signals pending at once are one (a loaded machine)
                delivered(proc.pid, signals[k - 1][1])
            os.killpg(proc.pid, sig) if to == "group" else os.kill(proc.pid, sig)
        sent = time.time()
        _, err = proc.communicate(timeout=60)
        assert time.time() - sent < 60
    finally:
        if proc.poll() is None:  # the old pool: hung, starting queued cells
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return proc, err


def stopped_cells(out: Path, err: str) -> dict[str, str]:
    """The running cells stopped after an event, with a snapshot; no other cell started."""
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(RUNNING), "a queued cell started"
    before = {}
    for name in RUNNING:
        cell = out / "runs" / name
        summary = json.loads((cell / "summary.json").read_text())
        assert summary["stop_reason"] == "interrupted" and 0 < summary["aggregations"] < AGGREGATIONS, err[-2000:]
        assert (cell / "snapshot" / "LATEST").is_file()
        before[name] = (cell / "metrics.csv").read_text()
    return before


def one_line(err: str, start: str) -> str:
    assert "Traceback" not in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith(start), err[-3000:]
    return last


def test_ctrl_c_stops_the_running_cells_of_paper_matrix_workers_with_snapshots_in_one_line(tmp_path):
    out = tmp_path / "matrix"
    proc, err = interrupt(out, [("group", signal.SIGINT)])
    assert proc.returncode == 128 + signal.SIGINT
    line = one_line(err, "paper_matrix.py: interrupted by SIGINT: 2 running cells stopped after their current event")
    assert "2 not started" in line and "run the same command again to continue" in line
    stopped_cells(out, err)
    # each running cell said so from its start, and how far it got, before any cell ended
    for k, name in enumerate(["felix on avail100, seed 0", "fedbuff on avail100, seed 0"], 1):
        assert f"[{k}/4] {name}: started" in err and f"[{k}/4] {name}:   0% of the budget" in err, err[-3000:]


@pytest.mark.slow  # the matrix finished afterwards: four cells of 200 aggregations, two at a time
@pytest.mark.parametrize("to, sig", [("group", signal.SIGINT), ("group", signal.SIGTERM), ("script", signal.SIGTERM)])
def test_a_signal_stops_paper_matrix_workers_and_the_same_command_finishes_the_matrix(tmp_path, to, sig):
    out = tmp_path / "matrix"
    proc, err = interrupt(out, [(to, sig)])
    assert proc.returncode == 128 + sig
    one_line(err, f"paper_matrix.py: interrupted by {sig.name}: 2 running cells stopped")
    before = stopped_cells(out, err)
    done = subprocess.run([sys.executable, str(PAPER_MATRIX), *ARGV, "--out", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resumed from its snapshot" in done.stderr
    for cell in (out / "runs").iterdir():
        summary = json.loads((cell / "summary.json").read_text())
        assert summary["stop_reason"] == "max_aggregations" and summary["aggregations"] == AGGREGATIONS
    assert len(list((out / "runs").iterdir())) == 4
    for name, metrics in before.items():  # continued from the snapshot, not started again
        assert (out / "runs" / name / "metrics.csv").read_text().startswith(metrics)


@pytest.mark.slow
def test_a_second_ctrl_c_stops_paper_matrix_workers_at_once(tmp_path):
    out = tmp_path / "matrix"
    proc, err = interrupt(out, [("group", signal.SIGINT), ("group", signal.SIGINT)])
    assert proc.returncode == 128 + signal.SIGINT
    one_line(err, "paper_matrix.py: interrupted, stopped at once; finished cells are kept")
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(RUNNING)
