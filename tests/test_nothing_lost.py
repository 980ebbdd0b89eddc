"""Nothing silently wrong, nothing lost: verified snapshots with a fallback, a snapshot at every
stop, and run arguments refused before anything is written."""

import warnings

import pytest

from felix_jax.cli import main
from felix_jax.experiment.runner import build_simulator, run
from felix_jax.fleet.snapshot import SnapshotError, verify_snapshot
from tests.test_snapshot import assert_same_run, reference, run_until_killed, scenario


def _flip_bytes(path, n=8):
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid:mid + n] = bytes(b ^ 0xFF for b in data[mid:mid + n])
    path.write_bytes(bytes(data))


def _largest_file(folder):
    return max((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def test_a_corrupted_snapshot_is_refused_and_the_previous_good_one_resumes_exactly(tmp_path):
    root = tmp_path / "snapshot"
    run_until_killed("felix", root, kill_at_version=8)
    newest = root / (root / "LATEST").read_text().strip()
    _flip_bytes(_largest_file(newest / "device"))
    with pytest.raises(SnapshotError, match="is corrupted") as e:
        verify_snapshot(newest)
    assert "\n" not in str(e.value) and "device/" in str(e.value)
    with pytest.raises(SnapshotError, match="is corrupted"):  # named alone, it is that one or nothing
        build_simulator(scenario("felix")).restore(newest)
    sim = build_simulator(scenario("felix"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sim.restore(root)
    assert sim.version == 4 and any("older snapshot snap-000004" in str(w.message) for w in caught)
    assert_same_run(reference("felix"), sim.run())


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_host_file_is_refused_in_one_line_naming_it(tmp_path, damage):
    root = tmp_path / "snapshot"
    run_until_killed("fedbuff", root, kill_at_version=4)
    snap = root / (root / "LATEST").read_text().strip()
    npz = snap / "host.npz"
    if damage == "truncate":
        npz.write_bytes(npz.read_bytes()[: npz.stat().st_size // 2])
    else:
        _flip_bytes(npz)
    with pytest.raises(SnapshotError, match="host.npz is corrupted") as e:
        build_simulator(scenario("fedbuff")).restore(root)
    assert "\n" not in str(e.value)


def test_a_snapshot_without_checksums_is_not_trusted(tmp_path):
    root = tmp_path / "snapshot"
    run_until_killed("fedbuff", root, kill_at_version=4)
    snap = root / (root / "LATEST").read_text().strip()
    (snap / "CHECKSUMS.json").unlink()
    with pytest.raises(SnapshotError, match="cannot be verified"):
        build_simulator(scenario("fedbuff")).restore(snap)
    (snap / "stray.bin").write_bytes(b"x")
    with pytest.raises(SnapshotError, match="cannot be verified"):
        build_simulator(scenario("fedbuff")).restore(root)


def test_a_stopped_run_without_snapshot_flags_still_resumes_exactly(tmp_path, monkeypatch):
    """The wall budget (as Ctrl-C and SIGTERM) writes one snapshot at the stop even with no
    --snapshot-every: --resume continues it to the uninterrupted run's metrics."""
    import time

    from felix_jax.fleet.simulator import FleetSimulator

    sc = scenario("felix", max_aggregations="10")
    run(sc, tmp_path / "ref", plot=False)
    original = FleetSimulator._checkpoint

    def slow_after_version_5(self):
        original(self)
        if self.version >= 5:
            time.sleep(0.2)

    monkeypatch.setattr(FleetSimulator, "_checkpoint", slow_after_version_5)
    cut = run(sc, tmp_path / "cut", plot=False, wall_budget_s=0.1)  # no snapshot_every
    assert cut.summary["stop_reason"] == "wall_budget" and cut.summary["aggregations"] < 10
    assert (tmp_path / "cut" / "snapshot" / "LATEST").is_file()
    monkeypatch.setattr(FleetSimulator, "_checkpoint", original)
    assert main(["run", "--resume", str(tmp_path / "cut"), "--quiet"]) == 0
    assert (tmp_path / "cut" / "metrics.csv").read_bytes() == (tmp_path / "ref" / "metrics.csv").read_bytes()


@pytest.mark.parametrize("argv,expected", [
    (["--set", "devices=8"], "devices=8: jax sees"),
    (["--set", "plan=nosuch"], "plan='nosuch'"),
    (["--set", "dataset=nosuch"], "dataset='nosuch': unknown data set"),
    (["--snapshot-every", "0"], "--snapshot-every 0"),
    (["--snapshot-every", "-3"], "--snapshot-every -3"),
    (["--snapshot-minutes", "nan"], "--snapshot-minutes nan"),
    (["--wall-budget-s", "0"], "--wall-budget-s 0.0"),
    (["--wall-budget-s", "-1"], "--wall-budget-s -1.0"),
])
def test_run_arguments_are_refused_before_anything_is_written(tmp_path, argv, expected):
    out = tmp_path / "r"
    with pytest.raises(SystemExit) as e:
        main(["run", "--preset", "tiny", "--quiet", "--out", str(out), *argv])
    assert expected in str(e.value) and "\n" not in str(e.value)
    assert not out.exists()  # nothing left behind, so the retry needs no --overwrite


def test_resume_refuses_a_preset_it_would_ignore(tmp_path):
    with pytest.raises(SystemExit, match="no --preset"):
        main(["run", "--resume", str(tmp_path), "--preset", "quickstart"])


# ------------------------------------------------------------------ one writer per results folder
def _hold_lock(folder):
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c",
                             "import sys, time\n"
                             "from felix_jax.experiment.results import folder_lock\n"
                             f"with folder_lock({str(folder)!r}, 'holder'):\n"
                             "    print('held', flush=True)\n"
                             "    time.sleep(600)\n"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    time.sleep(0.1)
    return proc


def test_a_second_writer_is_refused_and_a_killed_holder_blocks_nothing(tmp_path):
    import signal

    out = tmp_path / "r"
    holder = _hold_lock(out)
    try:
        for argv in (["run", "--preset", "tiny", "--quiet", "--out", str(out)],
                     ["compare", "--scenario", "tiny", "--strategies", "fedbuff", "--availability", "avail100",
                      "--quiet", "--out", str(out)]):
            with pytest.raises(SystemExit, match=r"being written by another process \(holder, pid \d+\)") as e:
                main(argv)
            assert "\n" not in str(e.value)
        assert not (out / "config.json").exists()
    finally:
        holder.send_signal(signal.SIGKILL)  # kill -9: the kernel drops the lock
        holder.wait()
    assert main(["run", "--preset", "tiny", "--quiet", "--set", "max_aggregations=2", "--out", str(out)]) == 0


# ------------------------------------------------------------------ compare keeps what it finished
COMPARE = ["compare", "--scenario", "tiny", "--strategies", "fedbuff", "--availability", "avail100", "--quiet"]


def test_compare_refuses_to_replace_a_finished_cell_run_with_other_settings(tmp_path):
    out = str(tmp_path / "c")
    assert main([*COMPARE, "--set", "max_aggregations=4", "--out", out]) == 0
    cell = tmp_path / "c" / "runs" / "fedbuff-avail100-seed0" / "metrics.csv"
    before = cell.read_bytes()
    with pytest.raises(SystemExit, match=r"finished with another scenario \(max_aggregations 4 -> 2\).*--overwrite"):
        main([*COMPARE, "--set", "max_aggregations=2", "--out", out])
    assert cell.read_bytes() == before
    assert main([*COMPARE, "--set", "max_aggregations=2", "--out", out, "--overwrite"]) == 0
    assert cell.read_bytes() != before


@pytest.mark.parametrize("argv,expected", [
    (["--seeds", "0,0"], "--seeds lists 0 more than once"),
    (["--strategies", "fedbuff,fedbuff"], "--strategies lists fedbuff more than once"),
    (["--set", "availability=my_trace.csv"], "availability is an axis of the comparison; give it with --availability"),
    (["--set", "seed=3"], "seed is an axis"),
])
def test_compare_refuses_repeated_cells_and_axes_given_by_set(tmp_path, argv, expected):
    with pytest.raises(SystemExit, match=expected):
        main([*COMPARE, "--out", str(tmp_path / "c"), *argv])
    assert not (tmp_path / "c").exists()


def test_compare_redraws_every_figure_from_the_cells_it_has(tmp_path):
    out = tmp_path / "c"
    out.mkdir()
    (out / "cdfs.png").write_bytes(b"a stale figure of another strategy list")
    assert main([*COMPARE, "--set", "max_aggregations=2", "--out", str(out)]) == 0
    stale = (out / "cdfs.png")
    assert not stale.exists() or stale.read_bytes() != b"a stale figure of another strategy list"


def test_a_trace_file_names_its_cells_by_file_name(tmp_path):
    from felix_jax.experiment.compare import cell_dir

    assert cell_dir(tmp_path, "felix", "/data/x/my_trace.csv", 0).name == "felix-file_my_trace.csv-seed0"
    assert cell_dir(tmp_path, "felix", "ref:syn_50", 1).name == "felix-ref_syn_50-seed1"


# ------------------------------------------------------------------ config.json reruns exactly, from anywhere
def _tiny_run(tmp_path, *sets):
    out = tmp_path / "a"
    assert main(["run", "--preset", "tiny", "--quiet", "--set", "max_aggregations=3", *sets, "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("section,key,value", [
    ("policies", ("aggregator", "server_lr"), 5.0), ("stop", ("max_aggregations",), 999),
    ("fleet", ("concurrency",), 7), ("update_guard", ("max_norm_ratio",), 1.5)])
def test_an_edited_resolved_section_is_refused_not_ignored(tmp_path, section, key, value):
    import json

    out = _tiny_run(tmp_path)
    config = json.loads((out / "config.json").read_text())
    node = config[section]
    for k in key[:-1]:
        node = node[k]
    node[key[-1]] = value
    (tmp_path / "edited.json").write_text(json.dumps(config))
    with pytest.raises(SystemExit, match=rf"{section}\.{'.'.join(key)} is {value!r} in the file but the scenario"):
        main(["run", "--config", str(tmp_path / "edited.json"), "--quiet", "--out", str(tmp_path / "b")])
    config["surprise"] = 1
    (tmp_path / "unknown.json").write_text(json.dumps(config))
    with pytest.raises(SystemExit, match="unknown section 'surprise'"):
        main(["run", "--config", str(tmp_path / "unknown.json"), "--quiet", "--out", str(tmp_path / "b")])


def test_a_config_json_reruns_exactly_from_another_folder(tmp_path, monkeypatch):
    trace = tmp_path / "data" / "my_trace.csv"
    trace.parent.mkdir()
    trace.write_text("client,time_s,state\n0,0,AVL_TRAIN\n1,0,AVL_TRAIN\n1,30,UN_AVL\n1,90,AVL_TRAIN\n")
    monkeypatch.chdir(trace.parent)
    out = _tiny_run(tmp_path, "--set", "availability=my_trace.csv")  # a path relative to the working folder
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["run", "--config", str(out / "config.json"), "--quiet", "--out", str(tmp_path / "b")]) == 0
    assert (out / "metrics.csv").read_bytes() == (tmp_path / "b" / "metrics.csv").read_bytes()
    # a hand-written scenario file names files relative to itself
    (tmp_path / "data" / "sc.json").write_text('{"availability": "my_trace.csv", "max_aggregations": 3, '
                                               '"name": "tiny", "model": "mlp", "num_clients": 12, "concurrency": 4, '
                                               '"aggregation_goal": 2, "learning_rate": 0.1, "target_accuracy": 0.5, '
                                               '"max_virtual_hours": 6.0}')
    from felix_jax.experiment import Scenario

    assert Scenario.from_file(tmp_path / "data" / "sc.json").availability == str(trace.resolve())


def test_a_resumed_run_counts_its_test_evaluations_from_the_start(tmp_path):
    root = tmp_path / "snapshot"
    run_until_killed("fedbuff", root, kill_at_version=8)
    sim = build_simulator(scenario("fedbuff"))
    sim.restore(root)
    assert sim.run().test_eval_calls == reference("fedbuff").test_eval_calls == 13  # versions 0-12


def test_a_matrix_cell_stopped_by_a_signal_is_resumed_not_taken_as_finished(tmp_path, monkeypatch):
    from felix_jax.experiment import get_preset
    from felix_jax.experiment.compare import run_matrix
    from felix_jax.fleet.simulator import FleetSimulator

    base = get_preset("tiny").with_overrides({"max_aggregations": "8", "target_accuracy": "none"})
    ref = run_matrix(base, ["fedbuff"], ["avail50"], [0], tmp_path / "ref", progress=False, plot=False)
    original = FleetSimulator._checkpoint

    def stop_at_version_4(self):
        original(self)
        if self.version == 4:
            self.request_stop("interrupted")  # what the signal handler does on SIGINT / SIGTERM

    monkeypatch.setattr(FleetSimulator, "_checkpoint", stop_at_version_4)
    cut = run_matrix(base, ["fedbuff"], ["avail50"], [0], tmp_path / "m", progress=False, plot=False)
    assert cut[0]["stop_reason"] == "interrupted"
    monkeypatch.setattr(FleetSimulator, "_checkpoint", original)
    done = run_matrix(base, ["fedbuff"], ["avail50"], [0], tmp_path / "m", progress=False, plot=False)
    assert done[0]["stop_reason"] == "max_aggregations" and done[0]["aggregations"] == 8
    cell = "runs/fedbuff-avail50-seed0/metrics.csv"
    assert ref and (tmp_path / "m" / cell).read_bytes() == (tmp_path / "ref" / cell).read_bytes()



@pytest.mark.slow  # the default tier resumes a matrix cell stopped by a signal (the test above)
def test_a_matrix_cell_killed_outright_resumes_from_its_periodic_snapshot(tmp_path, monkeypatch):
    """``snapshot_minutes``: a cell killed outright (no summary, no stop snapshot) continues from its last
    periodic snapshot, to the uninterrupted cell's results; without one it starts again."""
    import felix_jax.experiment.compare as compare
    import felix_jax.experiment.matrix as matrix
    from felix_jax.experiment import get_preset
    from felix_jax.experiment.compare import run_matrix
    from felix_jax.fleet.simulator import FleetSimulator

    base = get_preset("tiny").with_overrides({"max_aggregations": "8", "target_accuracy": "none"})
    ref = run_matrix(base, ["fedbuff"], ["avail50"], [0], tmp_path / "ref", progress=False, plot=False)
    original = FleetSimulator._checkpoint

    class Killed(BaseException):  # what kill -9 leaves: nothing written after the last periodic snapshot
        pass

    def killed_at_version_5(self):
        original(self)
        if self.version == 5:
            raise Killed

    monkeypatch.setattr(FleetSimulator, "_checkpoint", killed_at_version_5)
    with pytest.raises(Killed):  # every wall-clock check is due: a snapshot after each aggregation
        run_matrix(base, ["fedbuff"], ["avail50"], [0], tmp_path / "m", progress=False, plot=False,
                   snapshot_minutes=1e-9)
    cell_dir = tmp_path / "m" / "runs" / "fedbuff-avail50-seed0"
    assert not (cell_dir / "summary.json").exists() and (cell_dir / "snapshot" / "LATEST").is_file()
    monkeypatch.setattr(FleetSimulator, "_checkpoint", original)
    resumed = []
    real_run = matrix.run
    monkeypatch.setattr(matrix, "run", lambda *a, **k: resumed.append(k["resume"]) or real_run(*a, **k))
    done = run_matrix(base, ["fedbuff"], ["avail50"], [0], tmp_path / "m", progress=False, plot=False,
                      snapshot_minutes=1e-9)
    assert resumed == [True] and done[0]["stop_reason"] == "max_aggregations" and done[0]["aggregations"] == 8
    cell = "runs/fedbuff-avail50-seed0/metrics.csv"
    assert ref and (tmp_path / "m" / cell).read_bytes() == (tmp_path / "ref" / cell).read_bytes()
    # a snapshot this felix-jax cannot restore (written by a changed simulator): the cell starts again
    import felix_jax.fleet.simulator as simulator_module
    from felix_jax.fleet.snapshot import SnapshotError

    monkeypatch.setattr(matrix, "run", real_run)
    monkeypatch.setattr(FleetSimulator, "_checkpoint", killed_at_version_5)
    with pytest.raises(Killed):
        run_matrix(base, ["fedbuff"], ["avail50"], [0], tmp_path / "m2", progress=False, plot=False,
                   snapshot_minutes=1e-9)
    monkeypatch.setattr(FleetSimulator, "_checkpoint", original)

    def refuse(sim, path):
        raise SnapshotError("written by another scenario")
    monkeypatch.setattr(simulator_module, "load_snapshot", refuse)
    again = run_matrix(base, ["fedbuff"], ["avail50"], [0], tmp_path / "m2", progress=False, plot=False,
                       snapshot_minutes=1e-9)
    assert again[0]["aggregations"] == 8
    assert (tmp_path / "m2" / cell).read_bytes() == (tmp_path / "ref" / cell).read_bytes()
    # another scenario's snapshot is not resumed: that cell is refused as changed, as before
    with pytest.raises(compare.CellChanged):
        run_matrix(base.with_overrides({"max_aggregations": "9"}), ["fedbuff"], ["avail50"], [0], tmp_path / "m",
                   progress=False, plot=False)
    with pytest.raises(ValueError, match="snapshot_minutes"):
        run_matrix(base, ["fedbuff"], ["avail50"], [0], tmp_path / "b", batch=2, snapshot_minutes=1.0)


def test_pooled_cells_and_the_table_against_hand_computed_values(tmp_path):
    from felix_jax.experiment.compare import comparison_table, pool_cells, sig

    def row(st, seed, hours, gb):
        return {"strategy": st, "availability": "avail50", "seed": seed, "time_to_target_h": hours,
                "bytes_train": gb * 0.9e9, "bytes_eval": gb * 0.1e9, "bytes_total": gb * 1e9, "aggregations": 10,
                "final_accuracy": 0.5, "run_dir": str(tmp_path)}

    rows = [row("felix", 0, 1.0, 2.0), row("felix", 1, 2.0, 4.0), row("fedbuff", 0, 3.0, 1.0), row("fedbuff", 1, None, 1.0)]
    felix, fedbuff = pool_cells(rows, ["felix", "fedbuff"], ["avail50"])
    # sample std (ddof=1): hours [1, 2] -> 0.7071; one seed: no std
    assert (felix["reached"], felix["seeds"], felix["hours_mean"]) == (2, 2, 1.5)
    assert felix["hours_std"] == pytest.approx(0.7071, abs=1e-4)
    assert felix["gb_total"] == pytest.approx(3.0) and felix["gb_eval"] == pytest.approx(0.3)
    assert (fedbuff["reached"], fedbuff["hours_mean"], fedbuff["hours_std"]) == (1, 3.0, None)
    table = comparison_table(rows, ["felix", "fedbuff"], ["avail50"], target=0.5).splitlines()
    assert "accuracy 0.5" in table[0] and "seeds 0,1" in table[0]
    # 95% t interval on the log scale: logs 0, 0.6931 (mean 0.3466, std 0.4901):
    # exp(0.3466 -+ 12.706 * 0.4901 / sqrt(2)) = [0.0173, 116]
    assert table[2].split() == ["avail50", "felix", "2/2", "1.50", "0.707", "[0.0173,", "116]", "x1.00", "-", "-",
                                "3.00", "-"]
    # a seed missed it: no ratio of means; the paired verdict over the one seed both reached (3 / 1);
    # FeLiX reached it alone on seed 1: its win
    assert table[3].split() == ["avail50", "fedbuff", "1/2", "3.00", "-", "-", "-", "x3.00", "n=1", "2/2", "1.00",
                                "3.00,", "-"]
    assert [sig(x) for x in (0.021666, 1.4551, 123.4, 0.0)] == ["0.0217", "1.46", "123", "0"]
