"""events.csv streamed as the run goes (fleet/event_stream.py): the bytes that writing the whole log
at the end gives, bounded memory, a snapshot that holds the file's length and not its rows, and a
resumed file equal to an uninterrupted run's after SIGINT, SIGTERM and kill -9."""

import json
import os
import signal
import subprocess
import sys

import pytest

from felix_jax.experiment.event_log import read_event_log, write_event_log
from felix_jax.experiment.runner import build_simulator
from felix_jax.fleet.event_stream import EVENT_COLUMNS, EventLogFileError, EventStream
from felix_jax.fleet.simulator import FleetSimulator
from felix_jax.fleet.snapshot import SnapshotPolicy
from tests.test_fleet import T, U, make_sim, trace_of
from tests.test_snapshot import Killed, reference, scenario

HEADER = ",".join(EVENT_COLUMNS) + "\r\n"
D0 = (0.0, "dispatch", 0, "train", 0, -1, None, 2)
LEAVE0 = (5.0, "leave", 0, "train", 0, -1, None, 0)  # logged at 0 s, ahead of its time
D1 = (0.0, "dispatch", 1, "train", 0, -1, None, 2)
REPLY1 = (5.0, "reply", 1, "train", 0, 0, None, 2)
AGG = (7.0, "aggregation", -1, "", 1, -1, None, -1)
LINES = ["0.0,dispatch,0,train,0,-1,,2\r\n", "0.0,dispatch,1,train,0,-1,,2\r\n", "5.0,leave,0,train,0,-1,,0\r\n",
         "5.0,reply,1,train,0,0,,2\r\n", "7.0,aggregation,-1,,1,-1,,-1\r\n"]


def _feed(stream, steps):
    for row, now in steps:
        stream.append(row, now)


STEPS = [(D0, 0.0), (LEAVE0, 0.0), (D1, 0.0), (REPLY1, 5.0), (AGG, 7.0)]


def test_rows_are_released_in_time_order_and_written_a_chunk_at_a_time(tmp_path):
    path = tmp_path / "events.csv"
    stream = EventStream(path, chunk_rows=2)
    _feed(stream, STEPS[:3])  # the leave waits; two dispatches fill a chunk
    assert path.read_bytes().decode() == HEADER + "".join(LINES[:2]) and stream.waiting == 1
    _feed(stream, STEPS[3:])  # at 5 s the leave (logged first) goes before the reply; a chunk again
    assert path.read_bytes().decode() == HEADER + "".join(LINES[:4])  # a kill now keeps these
    assert (stream.rows, stream.bytes) == (4, len(HEADER + "".join(LINES[:4])))
    stream.close()
    text = path.read_bytes().decode()
    assert text == HEADER + "".join(LINES)
    write_event_log(tmp_path / "whole.csv", [r for r, _ in STEPS], end_time_s=7.0)  # sorted at the end
    assert (tmp_path / "whole.csv").read_bytes().decode() == text


def test_a_row_logged_ahead_past_the_end_is_not_written(tmp_path):
    stream = EventStream(tmp_path / "events.csv")
    _feed(stream, [(D0, 0.0), ((9.0, "return", 0, "train", 0, -1, None, 2), 0.0), (AGG, 7.0)])
    stream.flush(7.0)  # the run ends at 7 s
    assert stream.waiting == 1
    stream.close()
    assert (tmp_path / "events.csv").read_bytes().decode() == HEADER + LINES[0] + LINES[4]


def test_rollback_cuts_the_file_and_the_rows_held_since_the_mark(tmp_path):
    path = tmp_path / "events.csv"
    stream = EventStream(path, chunk_rows=1)
    _feed(stream, [(D0, 0.0), ((20.0, "return", 0, "train", 0, -1, None, 2), 0.0)])
    mark = stream.mark(0.0)
    at_mark = path.read_bytes()
    _feed(stream, [((30.0, "start", 1, "train", 0, -1, None, 2), 0.0), (D1, 0.0), (REPLY1, 5.0)])
    assert len(path.read_bytes()) > len(at_mark) and stream.waiting == 2
    stream.rollback(mark)
    assert path.read_bytes() == at_mark and stream.waiting == 1  # the 20 s return was logged before the mark
    assert (stream.rows, stream.bytes) == (1, len(at_mark))
    stream.close()
    assert path.read_bytes() == at_mark


def test_a_stream_resumes_from_its_state_with_the_file_cut_back(tmp_path):
    whole, cut = tmp_path / "whole.csv", tmp_path / "cut.csv"
    uninterrupted = EventStream(whole, chunk_rows=2)
    _feed(uninterrupted, STEPS)
    uninterrupted.close()
    first = EventStream(cut, chunk_rows=2)
    _feed(first, STEPS[:2])
    state = json.loads(json.dumps(first.state_dict(0.0)))  # what a snapshot holds: no written row
    assert state["rows"] == 1 and state["waiting"] == [list(LEAVE0)]
    _feed(first, STEPS[2:4])  # rows past the snapshot reach the file, then the process dies
    first.close()
    assert len(cut.read_bytes()) > state["bytes"]
    resumed = EventStream(cut, chunk_rows=2, state=state)
    assert len(cut.read_bytes()) == state["bytes"]
    _feed(resumed, STEPS[2:])
    resumed.close()
    assert cut.read_bytes() == whole.read_bytes()


def test_a_log_that_does_not_hold_the_snapshots_rows_is_refused_in_one_line(tmp_path):
    path = tmp_path / "events.csv"
    stream = EventStream(path)
    _feed(stream, STEPS)
    state = stream.state_dict(7.0)
    stream.close()
    path.write_text(HEADER + LINES[0])  # another run's, or cut short
    with pytest.raises(EventLogFileError, match="does not hold the snapshot's rows") as e:
        EventStream(path, state=state)
    assert "\n" not in str(e.value) and str(path) in str(e.value)
    path.unlink()
    with pytest.raises(EventLogFileError, match="is missing"):
        EventStream(path, state=state)
    with pytest.raises(ValueError, match="chunk_rows"):
        EventStream(path, chunk_rows=0)


# ------------------------------------------------------------------ the simulator's log
def test_the_streamed_log_equals_the_log_written_at_the_end(tmp_path):
    tr = trace_of([(0, T), (5, U), (50, T)], [(0, T), (30, U), (40, T)])  # leaves and returns logged ahead
    held = make_sim(tr, [10.0, 100.0], max_aggregations=4, max_s=1000.0).run()
    assert {"leave", "return"} <= {r[1] for r in held.accounting.events}
    write_event_log(tmp_path / "whole.csv", held.accounting.events, held.end_time_s)
    sim = make_sim(tr, [10.0, 100.0], max_aggregations=4, max_s=1000.0)
    sim.stream_events(tmp_path / "events.csv", chunk_rows=3)
    streamed = sim.run()
    sim.event_stream.close()
    assert streamed.events_path == tmp_path / "events.csv" and streamed.accounting.events == []
    assert (tmp_path / "events.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()


def test_a_target_found_late_cuts_the_streamed_log_back_to_it(tmp_path):
    from tests.test_eval_batch import BATCH, mid_batch_target
    from tests.test_eval_batch import scenario as batch_scenario

    target, k = mid_batch_target("felix")
    eager = build_simulator(batch_scenario("felix", target_accuracy=str(target))).run()
    write_event_log(tmp_path / "whole.csv", eager.accounting.events, eager.end_time_s)
    sim = build_simulator(batch_scenario("felix", target_accuracy=str(target), eval_batch=str(BATCH)))
    stream = sim.stream_events(tmp_path / "events.csv", chunk_rows=4)
    written = []
    rollback = stream.rollback
    stream.rollback = lambda mark: written.append(stream.bytes) or rollback(mark)
    batched = sim.run()
    stream.close()
    assert batched.stop_reason == "target" and written and written[0] > stream.bytes  # rows past it were on disk
    assert (tmp_path / "events.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()


def _killed_after_snapshot(sc, tmp_path, *, stream: bool):
    """``sc`` with snapshots every 4 aggregations, 'killed' at version 10 (two aggregations past
    the snapshot at 8): the simulator as it died."""
    original = FleetSimulator._checkpoint

    def checkpoint(self):
        original(self)
        if self.version == 10:
            raise Killed

    sim = build_simulator(sc)
    sim.snapshot = SnapshotPolicy(tmp_path / "snapshot", every_aggregations=4)
    if stream:
        sim.stream_events(tmp_path / "events.csv", chunk_rows=16)
    sim._checkpoint = checkpoint.__get__(sim)
    with pytest.raises(Killed):
        sim.run()
    return sim


def test_a_snapshot_holds_the_files_length_not_its_rows_and_resumes_it_exactly(tmp_path):
    sc = scenario("felix")
    ref = reference("felix")
    write_event_log(tmp_path / "whole.csv", ref.accounting.events, ref.end_time_s)
    dead = _killed_after_snapshot(sc, tmp_path, stream=True)
    dead.event_stream._file.close()  # no final write: the file as a killed process leaves it
    snap = tmp_path / "snapshot" / (tmp_path / "snapshot" / "LATEST").read_text().strip()
    state = json.loads((snap / "host.json").read_text())["state"]
    size = (tmp_path / "events.csv").stat().st_size
    assert state["event_log"]["bytes"] < size  # rows past the snapshot were on disk
    assert state["accounting"]["fields"]["events"] == []  # and none of the rows is in the snapshot
    assert (tmp_path / "whole.csv").read_bytes().startswith((tmp_path / "events.csv").read_bytes())
    resumed = build_simulator(sc)
    resumed.restore(tmp_path / "snapshot")
    with pytest.raises(RuntimeError, match="stream_events"):  # its log is in the file, not in the snapshot
        resumed.run()
    resumed.stream_events(tmp_path / "events.csv")
    resumed.run()
    resumed.event_stream.close()
    assert (tmp_path / "events.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()


def test_a_snapshot_that_held_its_rows_resumes_into_a_streamed_log(tmp_path):
    """A run whose snapshot holds its rows (a simulator without a file, or a format-2 snapshot) resumes
    into events.csv: the rows up to the snapshot are written first, as the run would have."""
    sc = scenario("felix")
    ref = reference("felix")
    write_event_log(tmp_path / "whole.csv", ref.accounting.events, ref.end_time_s)
    _killed_after_snapshot(sc, tmp_path, stream=False)
    resumed = build_simulator(sc)
    resumed.restore(tmp_path / "snapshot")
    assert resumed.acct.events  # the rows up to the snapshot
    resumed.stream_events(tmp_path / "events.csv", chunk_rows=5)
    resumed.run()
    resumed.event_stream.close()
    assert (tmp_path / "events.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()


# ------------------------------------------------------------------ the command line, killed
SETS = ["--set", "strategy=felix", "--set", "availability=avail50", "--set", "slot_s=60",
        "--set", "target_accuracy=none", "--set", "max_aggregations=10", "--set", "eval_selector.min_age=2"]
_KILL_9 = """
import os, signal, sys
from felix_jax.cli import main
from felix_jax.fleet.simulator import FleetSimulator

original = FleetSimulator._checkpoint

def checkpoint(self):
    original(self)
    if self.version == 7:  # a snapshot at 4; the checkpoint at 7 wrote its rows
        os.kill(os.getpid(), signal.SIGKILL)

FleetSimulator._checkpoint = checkpoint
sys.exit(main(sys.argv[1:]))
"""


def test_a_run_killed_with_sigkill_holds_its_rows_and_resumes_to_the_same_file(tmp_path):
    from felix_jax.cli import main

    assert main(["run", "--preset", "tiny", *SETS, "--quiet", "--out", str(tmp_path / "ref")]) == 0
    ref = (tmp_path / "ref" / "events.csv").read_bytes()
    cut = tmp_path / "cut"
    proc = subprocess.run([sys.executable, "-c", _KILL_9, "run", "--preset", "tiny", *SETS, "--snapshot-every", "4",
                           "--quiet", "--out", str(cut)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert not (cut / "summary.json").exists()
    killed = (cut / "events.csv").read_bytes()
    rows = read_event_log(cut / "events.csv")
    assert ref.startswith(killed) and sum(r[1] == "aggregation" for r in rows) == 7  # every row to its last chunk
    assert main(["run", "--resume", str(cut), "--quiet"]) == 0
    assert (cut / "events.csv").read_bytes() == ref
    assert (cut / "metrics.csv").read_bytes() == (tmp_path / "ref" / "metrics.csv").read_bytes()
