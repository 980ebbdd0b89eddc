"""Client ids in availability traces and device profiles: whole numbers >= 0, any of them (a negative
id is refused naming the file, the row and the id), and a file with more clients than the scenario
gives its first ``num_clients`` and names the ones dropped in one line on stderr, once."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from felix_jax.experiment import registry
from felix_jax.experiment.registry import id_list, make_profile, make_trace
from felix_jax.traces import (DataFileError, load_device_profile, load_fedscale_trace, load_interval_csv,
                              load_interval_npz, load_reference_trace)
from tests.conftest import DATA_DIR, REFERENCE_FILE, needs_data

REC = {"active": [0.0], "inactive": [5.0], "finish_time": 10.0}
NEGATIVE = "is negative (client ids are whole numbers >= 0)"


@pytest.fixture(autouse=True)
def fresh_notices(monkeypatch):
    """Each test starts with no notice said yet (they are said once per process)."""
    monkeypatch.setattr(registry, "_NOTED", set())


def csv_trace(ids) -> str:
    return "client,time_s,state\n" + "".join(f"{c},0.0,AVL_TRAIN\n" for c in ids)


# ------------------------------------------------------------------ negative ids refused
def _csv(path: Path):
    path.write_text("# my phones\nclient,time_s,state\n0,0.0,AVL_TRAIN\n1,0.0,AVL_TRAIN\n-5,0.0,AVL_TRAIN\n")


def _npz_rows(path: Path):
    np.savez(path, client=np.array([0, 1, -5]), time_s=np.zeros(3), state=np.full(3, 2))


def _npz_clients(path: Path):
    np.savez(path, client=np.array([0, 1]), time_s=np.zeros(2), state=np.full(2, 2), clients=np.array([0, 1, -5]))


def _json(path: Path):
    path.write_text(json.dumps({"0": REC, "1": REC, "-5": REC}))


def _pickle(path: Path):
    path.write_bytes(pickle.dumps({0: REC, 1: REC, -5: REC}, protocol=4))


def _profile_csv(path: Path):
    path.write_text("client,train_delay_s\n0,1.0\n# a comment line counts\n-5,2.0\n")


def _profile_npz(path: Path):
    np.savez(path, client=np.array([0, -5, 1]), train_delay_s=np.ones(3))


@pytest.mark.parametrize("name, write, load, where", [
    ("t.csv", _csv, load_interval_csv, "line 5: client id -5 "),
    ("t.npz", _npz_rows, load_interval_npz, "array client[2]: client id -5 "),
    ("t.npz", _npz_clients, load_interval_npz, "array clients[2]: client id -5 "),
    ("t.json", _json, load_fedscale_trace, "client key '-5': client id -5 "),
    ("t.pkl", _pickle, load_fedscale_trace, "client key -5: client id -5 "),
    ("p.csv", _profile_csv, load_device_profile, "line 4: client id -5 "),
    ("p.npz", _profile_npz, load_device_profile, "array client[1]: client id -5 "),
], ids=["csv", "npz-client", "npz-clients", "fedscale-json", "fedscale-pickle", "profile-csv", "profile-npz"])
def test_a_negative_client_id_is_refused_naming_file_row_and_id(tmp_path, name, write, load, where):
    path = tmp_path / name
    write(path)
    with pytest.raises(DataFileError) as info:
        load(path)
    message = str(info.value)
    assert message == f"{path}: {where}{NEGATIVE}", message
    assert isinstance(info.value, ValueError) and "\n" not in message


def test_a_negative_id_in_a_scenario_file_is_refused_before_any_notice(tmp_path, capsys):
    (tmp_path / "t.csv").write_text(csv_trace([*range(4), -5]))
    with pytest.raises(DataFileError, match=r"t\.csv: line 6: client id -5 is negative"):
        make_trace(str(tmp_path / "t.csv"), 4, 0)
    assert capsys.readouterr().err == ""  # refused: no "drops 1 client" notice about a file not used


def test_any_non_negative_ids_stay_valid(tmp_path):
    (tmp_path / "t.csv").write_text(csv_trace([3600, 17, 0]))
    assert load_interval_csv(tmp_path / "t.csv").external_ids.tolist() == [0, 17, 3600]
    np.savez(tmp_path / "t.npz", client=np.array([17, 3600]), time_s=np.zeros(2), state=np.full(2, 2),
             clients=np.array([3600, 17, 5]))
    assert load_interval_npz(tmp_path / "t.npz").external_ids.tolist() == [3600, 17, 5]  # the array's order
    (tmp_path / "t.json").write_text(json.dumps({"3600": REC, "17": REC}))
    assert load_fedscale_trace(tmp_path / "t.json").external_ids.tolist() == [17, 3600]
    (tmp_path / "p.csv").write_text("client,train_delay_s\n2,3.0\n1,2.0\n3,4.0\n")
    profile = load_device_profile(tmp_path / "p.csv")
    assert profile.train_delay_s.tolist() == [2.0, 3.0, 4.0] and profile.external_ids.tolist() == [1, 2, 3]


@needs_data(REFERENCE_FILE)
def test_the_reference_trace_keeps_its_ids_1_to_300_and_its_first_clients_need_no_notice(capsys):
    for name in ("syn_20", "mobiperf_3st_50"):
        assert load_reference_trace(name, DATA_DIR).external_ids.tolist() == list(range(1, 301))
    make_trace("ref:syn_20", 100, 0)  # a smaller scenario's documented choice, not a user's stray ids
    assert "drops" not in capsys.readouterr().err


# ------------------------------------------------------------------ more clients than the scenario
def notices(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("felix-jax: ")]


@pytest.mark.parametrize("suffix", [".csv", ".npz"])
def test_a_stray_extra_client_is_named_once(tmp_path, capsys, suffix):
    ids = [*range(1000), 100000]
    path = tmp_path / f"big{suffix}"
    if suffix == ".csv":
        path.write_text(csv_trace(ids))
    else:
        np.savez(path, client=np.array(ids), time_s=np.zeros(len(ids)), state=np.full(len(ids), 2))
    trace = make_trace(str(path), 1000, 0)
    make_trace(str(path), 1000, 1)  # the same file and population again (another seed, cell): said once
    make_trace(str(path), 1000, 0, form="function")
    assert trace.num_clients == 1000 and trace.external_ids.tolist() == list(range(1000))
    lines = notices(capsys)
    assert lines == [f"felix-jax: availability file big{suffix} holds 1001 clients, the scenario 1000: it uses the "
                     "file's first 1000 and drops 1 client (id 100000)"], lines


def test_a_trace_with_exactly_the_scenarios_clients_says_nothing(tmp_path, capsys):
    (tmp_path / "t.csv").write_text(csv_trace(range(1000)))
    assert make_trace(str(tmp_path / "t.csv"), 1000, 0).num_clients == 1000
    assert capsys.readouterr().err == ""


def test_a_fedscale_trace_with_more_clients_names_the_dropped_ids(tmp_path, capsys):
    (tmp_path / "t.json").write_text(json.dumps({str(c): REC for c in [*range(8), 1000, 1001, 1002, 1003, 1004]}))
    make_trace(str(tmp_path / "t.json"), 7, 0)
    assert notices(capsys) == ["felix-jax: availability file t.json holds 13 clients, the scenario 7: it uses the "
                               "file's first 7 and drops 6 clients (ids 7, 1000-1004)"]


@pytest.mark.parametrize("text, dropped", [
    ("train_delay_s\n1\n2\n3\n4\n5\n", "ids 3-4"),  # no client column: ids are the rows' positions from 0
    ("client,train_delay_s\n5,1\n4,2\n3,3\n2,4\n1,5\n", "ids 4-5"),  # the file's own ids 1..N
], ids=["row-order", "ids-1-to-n"])
def test_a_device_profile_with_more_clients_names_the_dropped_ones_once(tmp_path, capsys, text, dropped):
    (tmp_path / "p.csv").write_text(text)
    profile = make_profile(str(tmp_path / "p.csv"), 3, 0)
    make_profile(str(tmp_path / "p.csv"), 3, 1)
    assert profile.num_clients == 3
    assert notices(capsys) == [f"felix-jax: device profile p.csv holds 5 clients, the scenario 3: it uses the "
                               f"file's first 3 and drops 2 clients ({dropped})"]
    make_profile(str(tmp_path / "p.csv"), 5, 0)
    assert capsys.readouterr().err == ""


def test_a_profile_reused_cyclically_forgets_its_ids(tmp_path):
    (tmp_path / "p.csv").write_text("client,train_delay_s\n1,1\n2,2\n")
    assert make_profile(str(tmp_path / "p.csv"), 1, 0).external_ids.tolist() == [1]
    assert make_profile(str(tmp_path / "p.csv"), 4, 0).client_ids is None  # 1, 2, 1, 2: no longer distinct


def test_the_dropped_ids_stay_one_line():
    assert id_list(np.array([100000])) == "id 100000"
    assert id_list(np.array([100000, 1004, 1000, 1001, 1002, 1003])) == "ids 1000-1004, 100000"
    assert id_list(np.arange(0, 16, 2)) == "ids 0, 2, 4, 6, 8, 10, 12, 14"  # 8 items: all listed
    assert id_list(np.arange(0, 2_000_000, 2)) == "ids 0, 2, 4, 6, 8, 10, 12 and 999993 more up to 1999998"


# ------------------------------------------------------------------ the command line
def run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m felix_jax.cli`` in ``cwd`` (relative file names resolve there), as a user types it."""
    return subprocess.run([sys.executable, "-m", "felix_jax.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=240, env={**os.environ})


RUN = ["run", "--preset", "tiny", "--quiet", "--set", "max_aggregations=1", "--set", "target_accuracy=none",
       "--set", "num_clients=30", "--set", "availability=trace.csv", "--out", "r"]


def test_the_command_line_refuses_a_negative_id_and_names_a_stray_client(tmp_path):
    (tmp_path / "trace.csv").write_text(csv_trace([*range(30), -5]))
    proc = run_cli(tmp_path, *RUN)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("felix-jax run: "), proc.stderr
    assert "trace.csv: line 32: client id -5 is negative" in lines[0], lines[0]

    (tmp_path / "trace.csv").write_text(csv_trace([*range(30), 100000]))
    proc = run_cli(tmp_path, *RUN)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count("drops") == 1, proc.stderr
    assert ("felix-jax: availability file trace.csv holds 31 clients, the scenario 30: it uses the file's first 30 "
            "and drops 1 client (id 100000)") in proc.stderr.splitlines(), proc.stderr
    assert (tmp_path / "r" / "summary.json").is_file()
