"""Hostile user inputs: each ends in one clear error naming the file, array or field at fault,
never a traceback from deep inside and never a silently wrong run."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest

from felix_jax.cli import main
from felix_jax.data.user import load_arrays_npz
from felix_jax.options import OptionError
from felix_jax.traces import DataFileError, load_device_profile, load_fedscale_trace

TINY = ["--preset", "tiny", "--quiet", "--set", "max_aggregations=2", "--set", "target_accuracy=none"]


def refused(argv: list[str], *expected: str) -> str:
    """Runs the CLI in this process; asserts one line naming the command and each ``expected`` text."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    message = info.value.code
    assert isinstance(message, str), f"exit {message!r} without a message"
    assert "\n" not in message and message.startswith(f"felix-jax {argv[0]}: "), message
    for text in expected:
        assert text in message, message
    return message


# ------------------------------------------------------------------ 1. a user's NPZ data set
def user_arrays(n: int = 40, classes: int = 4, **changes) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = dict(train_x=rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8), train_y=np.arange(n) % classes,
                  test_x=rng.integers(0, 256, (12, 8, 8, 3), dtype=np.uint8), test_y=np.arange(12) % classes)
    arrays.update(changes)
    return arrays


def flat_arrays(**changes) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 20)).astype(np.float32)
    return user_arrays(train_x=x, test_x=x[:12].copy(), **changes)


def npz_refused(tmp_path, arrays: dict, *expected: str) -> str:
    path = tmp_path / "mine.npz"
    np.savez(path, **arrays)
    with pytest.raises(DataFileError) as info:
        load_arrays_npz(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)), message
    for text in expected:
        assert text in message, message
    return message


def test_a_stray_training_label_does_not_build_phantom_classes(tmp_path):
    labels = np.r_[np.arange(39) % 4, 57]  # classes 0..3 and one 57: not a 58-class model
    npz_refused(tmp_path, user_arrays(train_y=labels), "train_y", "57", "4..56")


def test_a_test_label_outside_the_training_classes_is_refused(tmp_path):
    npz_refused(tmp_path, user_arrays(test_y=np.r_[np.arange(11) % 4, 4]), "test_y", "4", "0..3")


def test_fractional_float_labels_are_refused_whole_floats_accepted(tmp_path):
    labels = (np.arange(40) % 4).astype(np.float64)
    labels[7] = 0.7
    npz_refused(tmp_path, user_arrays(train_y=labels), "train_y", "0.7", "index 7")
    npz_refused(tmp_path, user_arrays(train_y=np.r_[np.arange(39) % 4, -1]), "train_y", "negative")
    np.savez(tmp_path / "whole.npz", **user_arrays(train_y=(np.arange(40) % 4).astype(np.float32)))
    ds = load_arrays_npz(tmp_path / "whole.npz")
    assert ds.num_classes == 4 and ds.train_y.dtype == np.int32


@pytest.mark.parametrize("split", ["train_x", "test_x"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_inputs_are_refused_naming_the_array(tmp_path, split, bad):
    arrays = flat_arrays()
    arrays[split][3, 5] = bad
    npz_refused(tmp_path, arrays, split, "NaN or inf", "sample 3")


@pytest.mark.parametrize("std", [[1.0, 0.0, 1.0], [1.0, np.nan, 1.0], [np.inf], [-1.0]])
def test_an_input_std_that_is_not_finite_and_positive_is_refused(tmp_path, std):
    arrays = user_arrays(input_mean=np.zeros(3), input_std=np.array(std))
    npz_refused(tmp_path, arrays, "input_std", "finite and > 0")


def test_training_inputs_without_spread_are_refused(tmp_path):
    npz_refused(tmp_path, user_arrays(train_x=np.full((40, 8, 8, 3), 7, np.uint8)), "train_x", "spread")
    # a valid set with its own normalisation still loads
    np.savez(tmp_path / "ok.npz", **flat_arrays(input_mean=np.zeros(20), input_std=np.ones(20)))
    ds = load_arrays_npz(tmp_path / "ok.npz")
    assert ds.num_classes == 4 and ds.input_shape == (20,) and ds.input_std == (1.0,) * 20


# ------------------------------------------------------------------ 2. device-profile CSV
def test_fractional_client_ids_in_a_device_profile_are_refused(tmp_path):
    (tmp_path / "p.csv").write_text("client,train_delay_s\n0.5,10\n1.5,20\n")
    with pytest.raises(DataFileError, match=r"p\.csv: client ids must be whole numbers, found 0\.5"):
        load_device_profile(tmp_path / "p.csv")


@pytest.mark.parametrize("text", ["", "\n\n", "train_delay_s,compute_speed\n", "client,train_delay_s\n"],
                         ids=["empty", "blank-lines", "header-only", "header-only-with-client"])
def test_an_empty_or_header_only_device_profile_is_one_clear_error(tmp_path, text):
    (tmp_path / "p.csv").write_text(text)
    with pytest.raises(DataFileError, match=r"p\.csv: .*(empty|no clients)"):
        load_device_profile(tmp_path / "p.csv")
    refused(["run", *TINY, "--set", f"device_profile={tmp_path / 'p.csv'}", "--out", str(tmp_path / "o")],
            "p.csv")


# ------------------------------------------------------------------ 3. FedScale trace
def test_a_fedscale_trace_with_nested_time_lists_names_the_client_and_field(tmp_path):
    path = tmp_path / "behave.json"
    path.write_text(json.dumps({"7": {"active": [0, 5], "inactive": [2, 9], "finish_time": 10},
                                "8": {"active": [[0, 1]], "inactive": [5], "finish_time": 10}}))
    with pytest.raises(DataFileError, match=r"behave\.json: client '8': active\[0\] is \[0, 1\], not a number"):
        load_fedscale_trace(path)
    path.write_text(json.dumps({"0": {"active": [[0, 1]], "inactive": [5], "finish_time": 10}}))
    with pytest.raises(DataFileError, match=r"client '0': active\[0\] is \[0, 1\]"):
        load_fedscale_trace(path)
    path.write_text(json.dumps({"3": {"active": [0], "inactive": [[4, 5]], "finish_time": 10}}))
    with pytest.raises(DataFileError, match=r"client '3': inactive\[0\]"):
        load_fedscale_trace(path)


# ------------------------------------------------------------------ 4. flat features, image model
def test_flat_features_with_an_image_model_are_refused_before_the_run(tmp_path):
    from felix_jax.experiment.registry import make_model

    with pytest.raises(OptionError, match=r"model=cifar_cnn needs image inputs \(H, W, C\).*\(20,\).*model=mlp"):
        make_model("cifar_cnn", (20,), 4)
    with pytest.raises(OptionError, match="at least 22x22"):  # an image too small for its three conv+pool stages
        make_model("cifar_cnn_tiny", (8, 8, 3), 4)
    assert make_model("mlp", (20,), 4).num_params > 0
    np.savez(tmp_path / "flat.npz", **flat_arrays())
    refused(["run", *TINY, "--set", f"dataset={tmp_path / 'flat.npz'}", "--set", "model=cifar_cnn",
             "--out", str(tmp_path / "o")], "model=cifar_cnn", "image inputs (H, W, C)", "(20,)", "model=mlp")


# ------------------------------------------------------------------ 5. a plugin selector's bad ids
def _simulator(selector):
    from felix_jax.cohort import CohortEngine, LocalTrainConfig
    from felix_jax.data.federated import held_out_to_device, to_device
    from felix_jax.data.partition import partition_from_counts
    from felix_jax.fleet import FleetConfig, StopRule
    from felix_jax.fleet.modes import AsyncMode
    from felix_jax.fleet.simulator import FleetSimulator
    from felix_jax.models import mlp
    from felix_jax.policies import make_aggregator
    from felix_jax.traces import AvailabilityTrace, DeviceProfile, Tier
    from tests.conftest import make_image_dataset

    n, model = 3, mlp((8, 8, 3), hidden=(4,))
    ds = make_image_dataset(num_train=20 * n, num_test=8)
    data = to_device(ds, partition_from_counts(20 * n, np.full(n, 20), seed=0))
    trace = AvailabilityTrace.from_client_lists([[0.0]] * n, [[int(Tier.AVL_TRAIN)]] * n)
    return FleetSimulator(
        model=model, engine=CohortEngine(model, data, LocalTrainConfig(batch_size=8, mode="steps", local_steps=1)),
        trace=trace, profile=DeviceProfile.uniform(n, train_delay_s=5.0), test=held_out_to_device(ds),
        init_params=model.init(jax.random.key(0)), config=FleetConfig(mode="async", concurrency=2),
        selector=selector, aggregator=make_aggregator("fedbuff"), mode=AsyncMode(),
        stop=StopRule(max_aggregations=2, max_virtual_s=1000.0))


_PICKED: list = [[]]  # what the hostile selector below returns (set by each test)


def _make_hostile_selector():
    from felix_jax.policies import Selector

    return Selector("test-hostile-ids", lambda: None, lambda state, ctx, k: (np.asarray(_PICKED[0]), state))


@pytest.mark.parametrize("picked, expected", [
    ([999], r"client ids \[999\] outside \[0, 3\)"),
    ([0, -1], r"client ids \[-1\] outside \[0, 3\)"),
    ([0.0, 1.5], r"float64.*integer client ids in \[0, 3\)"),
    ([0, 1, 2], r"3 clients when asked for at most 2"),
], ids=["999", "minus-1", "floats", "more-than-asked"])
def test_a_plugin_selector_returning_bad_ids_is_a_clear_error(picked, expected):
    from felix_jax import plugins
    from felix_jax.policies import make_selector

    plugins.selector("test-hostile-ids")(_make_hostile_selector)
    _PICKED[0] = picked
    sim = _simulator(make_selector("test-hostile-ids"))
    # the plugin's selector named with the file:line of its select(), where the ids come from
    with pytest.raises(RuntimeError, match=r"selector test-hostile-ids \(defined at .*test_hostile_inputs\.py:\d+\) "
                                           "returned .*" + expected):
        sim.run()


# ------------------------------------------------------------------ 6. felix-jax plot on a bad metrics.csv
@pytest.mark.parametrize("text, expected", [
    ("", "the file is empty"), ("time_s,hours,version,accuracy,loss,bytes_total,staleness_mean,interval_s\n",
                                "no checkpoint rows"),
    ("hello world\n", "no column time_s"), ("\x00\x01garbage", "no column time_s"),
    ("time_s,hours,version,accuracy,loss,bytes_total,staleness_mean,interval_s\n1,2\n", "line 2"),
    ("hello\nworld\nagain\n", "no column time_s")],
    ids=["empty", "header-only", "one-garbage-line", "binary", "short-row", "garbage-lines"])
def test_plot_refuses_an_empty_or_garbage_metrics_csv_naming_it(tmp_path, text, expected):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.csv").write_text(text)
    refused(["plot", str(run_dir)], str(run_dir / "metrics.csv"), expected)
    assert not (run_dir / "accuracy.png").exists()


@pytest.mark.parametrize("text, expected", [
    ("", "empty"),
    ("a,b\n1,2\n", "no column time_s"),
    ("time_s,hours,version,accuracy,loss,bytes_total,staleness_mean,interval_s\n1,2\n", "line 2: version is None"),
    ("time_s,hours,version,accuracy,loss,bytes_total,staleness_mean,interval_s\nx,0,0,0,0,0,0,0\n",
     "line 2: time_s is 'x'"),
    ("time_s,hours,version,accuracy,loss,bytes_total,staleness_mean,interval_s\n", "no checkpoint rows"),
], ids=["empty", "other-columns", "short-row", "not-a-number", "header-only"])
def test_read_metrics_csv_names_the_file_and_the_fault(tmp_path, text, expected):
    from felix_jax.experiment.results import read_metrics_csv

    (tmp_path / "metrics.csv").write_text(text)
    with pytest.raises(DataFileError, match="metrics.csv: .*" + expected):
        read_metrics_csv(tmp_path / "metrics.csv")


def test_a_plugin_selector_with_bad_ids_ends_the_cli_run_in_one_line(tmp_path):
    import subprocess
    import sys

    plugin = tmp_path / "bad_ids.py"
    plugin.write_text(
        "import numpy as np\n"
        "from felix_jax import plugins\n"
        "from felix_jax.policies import Selector\n"
        "@plugins.selector('cli-bad-ids')\n"
        "def make():\n"
        "    return Selector('cli-bad-ids', lambda: None, lambda state, ctx, k: (np.array([999]), state))\n"
        "plugins.strategy('bad-ids', mode='async', knowledge='none', selector='cli-bad-ids', aggregator='fedbuff')\n")
    proc = subprocess.run([sys.executable, "-m", "felix_jax.cli", "run", "--preset", "tiny", "--quiet",
                           "--set", f"plugins={plugin}", "--set", "strategy=bad-ids", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "selector cli-bad-ids (defined at " in proc.stderr and "bad_ids.py:" in proc.stderr
    assert ") returned client ids [999] outside [0, 12)" in proc.stderr


# ================================================================== issue 29, group 1: work lost
# ------------------------------------------------------------------ --overwrite keeps the old results until it finished
def _finished_run(folder) -> dict:
    assert main(["run", *TINY, "--out", str(folder)]) == 0
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")}


def _unchanged(folder, before: dict) -> None:
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")} == before
    assert not any(p.name.startswith(".felix-jax-") for p in folder.iterdir() if p.is_dir())


def test_work_lost_overwrite_with_a_broken_trace_keeps_the_previous_results(tmp_path):
    out = tmp_path / "r"
    before = _finished_run(out)
    (tmp_path / "broken.csv").write_text("client,time_s,state\n0,zero,AVL_TRAIN\n")
    refused(["run", *TINY, "--set", f"availability={tmp_path / 'broken.csv'}", "--out", str(out), "--overwrite"],
            "broken.csv", "earlier results", "are kept")
    _unchanged(out, before)


_LATE_BAD_SELECTOR = """
import numpy as np
from felix_jax import plugins
from felix_jax.policies import Selector

@plugins.selector("{name}")
def make():
    def select(state, ctx, k):
        state = state + 1
        ids = np.flatnonzero(ctx.eligible)[:k]
        return (np.array([999]) if state > 3 else ids), state
    return Selector("{name}", lambda: 0, select)

plugins.strategy("{name}-strategy", mode="async", knowledge="none", selector="{name}", aggregator="fedbuff")
"""


def test_work_lost_overwrite_failing_mid_run_keeps_the_previous_results(tmp_path):
    out = tmp_path / "r"
    before = _finished_run(out)
    plugin = tmp_path / "late_bad.py"
    plugin.write_text(_LATE_BAD_SELECTOR.format(name="late-bad-ids"))
    refused(["run", *TINY, "--set", f"plugins={plugin}", "--set", "strategy=late-bad-ids-strategy",
             "--set", "max_aggregations=20", "--out", str(out), "--overwrite"],
            "returned client ids [999]", "are kept")
    _unchanged(out, before)


def test_work_lost_overwrite_that_finishes_replaces_every_result(tmp_path):
    out = tmp_path / "r"
    _finished_run(out)
    assert main(["run", *TINY, "--set", "max_aggregations=3", "--out", str(out), "--overwrite"]) == 0
    again = tmp_path / "fresh"
    assert main(["run", *TINY, "--set", "max_aggregations=3", "--out", str(again)]) == 0
    for name in ("config.json", "metrics.csv", "events.csv"):  # the staged log swapped in
        assert (out / name).read_bytes() == (again / name).read_bytes()
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in again.iterdir())


def test_work_lost_a_replacement_killed_mid_swap_is_completed_on_the_next_open(tmp_path):
    from felix_jax.experiment.results import METRIC_COLUMNS, RETIRED_DIR, STAGING_DIR, prepare_out_dir

    def metrics(tag):
        return ",".join(METRIC_COLUMNS) + f"\n{tag}\n"

    out = tmp_path / "r"
    (out / STAGING_DIR).mkdir(parents=True)
    (out / RETIRED_DIR).mkdir()
    (out / RETIRED_DIR / "metrics.csv").write_text(metrics("old"))
    (out / RETIRED_DIR / ".all-retired").touch()  # killed after the old results were set aside
    (out / "config.json").write_text('{"scenario": {}}')  # and after the new config.json was moved in
    (out / STAGING_DIR / "metrics.csv").write_text(metrics("new"))
    prepare_out_dir(out, clear=True)
    assert (out / "metrics.csv").read_text() == metrics("new")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "metrics.csv"]
    (out / STAGING_DIR).mkdir()  # a replacement killed before it finished: dropped, the old results stay
    (out / STAGING_DIR / "metrics.csv").write_text(metrics("half"))
    prepare_out_dir(out, clear=True)
    assert (out / "metrics.csv").read_text() == metrics("new") and not (out / STAGING_DIR).exists()
    (out / STAGING_DIR).mkdir()  # killed while setting the old results aside: both steps redone
    (out / STAGING_DIR / "metrics.csv").write_text(metrics("newer"))
    (out / STAGING_DIR / "config.json").write_text('{"scenario": {"seed": 1}}')
    (out / RETIRED_DIR).mkdir()
    os.replace(out / "config.json", out / RETIRED_DIR / "config.json")
    prepare_out_dir(out, clear=True)
    assert (out / "metrics.csv").read_text() == metrics("newer") and "seed" in (out / "config.json").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "metrics.csv"]


# ------------------------------------------------------------------ a run's folder and a comparison's stay apart
COMPARE_TINY = ["compare", "--scenario", "tiny", "--strategies", "fedbuff", "--availability", "avail100", "--quiet",
                "--set", "max_aggregations=2", "--set", "target_accuracy=none"]


def test_work_lost_compare_into_a_run_folder_is_refused(tmp_path):
    out = tmp_path / "r"
    before = _finished_run(out)
    refused([*COMPARE_TINY, "--out", str(out)], str(out), "a run's results", "config.json", "metrics.csv")
    refused([*COMPARE_TINY, "--out", str(out), "--overwrite"], "a run's results")
    _unchanged(out, before)
    assert not (out / "runs").exists()


def test_work_lost_run_into_a_compare_folder_is_refused(tmp_path):
    out = tmp_path / "c"
    assert main([*COMPARE_TINY, "--out", str(out)]) == 0
    summary = (out / "summary.csv").read_bytes()
    for extra in ([], ["--overwrite"]):
        refused(["run", *TINY, "--out", str(out), *extra], str(out), "a comparison's results", "runs/", "summary.csv")
    assert (out / "summary.csv").read_bytes() == summary and not (out / "config.json").exists()


def test_work_lost_overwrite_never_replaces_files_felix_jax_did_not_write(tmp_path):
    out = tmp_path / "r"
    before = _finished_run(out)
    (out / "snapshot").mkdir()
    (out / "snapshot" / "holiday.jpg").write_bytes(b"mine")  # a folder of the user's under a name a run uses
    refused(["run", *TINY, "--out", str(out), "--overwrite"], "snapshot/", "felix-jax did not write")
    assert (out / "snapshot" / "holiday.jpg").read_bytes() == b"mine"
    (out / "snapshot" / "holiday.jpg").unlink()
    (out / "snapshot").rmdir()
    _unchanged(out, before)
    mine = tmp_path / "mine"  # a scenario file of the user's named config.json
    mine.mkdir()
    (mine / "config.json").write_text('{"strategy": "felix"}')
    (mine / "metrics.csv").write_text("day,steps\n1,5000\n")
    refused(["run", *TINY, "--out", str(mine), "--overwrite"], "config.json, metrics.csv", "felix-jax did not write")
    assert (mine / "config.json").read_text() == '{"strategy": "felix"}'


# ------------------------------------------------------------------ two trace files of one name in a comparison
def test_work_lost_two_trace_files_with_one_name_are_refused_in_a_comparison(tmp_path):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "trace.csv").write_text("client,time_s,state\n0,0,AVL_TRAIN\n")
    a, b = str(tmp_path / "a" / "trace.csv"), str(tmp_path / "b" / "trace.csv")
    refused(["compare", "--scenario", "tiny", "--strategies", "fedbuff", "--availability", f"{a},{b}", "--quiet",
             "--out", str(tmp_path / "c")], a, b, "file_trace.csv")
    assert not (tmp_path / "c").exists()


# ------------------------------------------------------------------ the Python API takes the CLI's folder lock
def test_work_lost_a_sweep_into_a_folder_another_thread_writes_is_refused(tmp_path):
    from felix_jax.experiment import get_preset
    from felix_jax.experiment.results import OutputDirError, folder_lock
    from felix_jax.experiment.sweep import SweepJob, run_sweep

    sc = get_preset("tiny").with_overrides({"max_aggregations": "2", "target_accuracy": "none"})
    out = tmp_path / "e"
    errors = []

    def second_sweep():
        try:
            run_sweep([SweepJob(sc, out)], batch=1, plot=False, log=lambda line: None)
        except OutputDirError as e:
            errors.append(str(e))

    import threading

    with folder_lock(out, "first sweep"):
        t = threading.Thread(target=second_sweep)
        t.start()
        t.join()
    assert errors and "being written by another run of this process (first sweep" in errors[0]
    assert not (out / "config.json").exists()
    with pytest.raises(ValueError, match="sweep jobs 0 and 1 both write the results folder"):
        run_sweep([SweepJob(sc, out), SweepJob(sc.with_overrides({"seed": 1}), out)], batch=2, plot=False)


# ================================================================== issue 29, group 2: silently wrong
def test_silently_wrong_config_and_preset_together_are_refused(tmp_path):
    (tmp_path / "sc.json").write_text('{"strategy": "felix"}')
    refused(["run", "--config", str(tmp_path / "sc.json"), "--preset", "tiny", "--out", str(tmp_path / "o")],
            "--config", "--preset tiny", "one of them")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, expected", [
    (["run", *TINY, "--out", ""], "--out ''"), (["run", "--resume", ""], "--resume ''"),
    (["run", *TINY, "--out", "  "], "--out '  '"), (["compare", "--scenario", "tiny", "--out", ""], "--out ''")],
    ids=["run-out", "resume", "run-out-blank", "compare-out"])
def test_silently_wrong_an_empty_out_or_resume_path_is_refused(tmp_path, monkeypatch, argv, expected):
    monkeypatch.chdir(tmp_path)
    refused(argv, expected, "an empty path")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("arrays, expected", [
    (dict(client=np.array([0.0, 1.5]), time_s=np.zeros(2), state=np.array([2, 2])), "array client holds float64"),
    (dict(client=np.array([0, 1]), time_s=np.zeros(2), state=np.array([True, False])), "array state holds bool"),
    (dict(client=np.array([0, 1]), time_s=np.zeros(2), state=np.array([2, 2]), clients=np.array([0.0, 1.0])),
     "array clients holds float64")], ids=["float-ids", "bool-states", "float-client-list"])
def test_silently_wrong_an_npz_trace_with_float_ids_or_boolean_states_is_refused(tmp_path, arrays, expected):
    from felix_jax.traces import load_interval_npz

    np.savez(tmp_path / "t.npz", **arrays)
    with pytest.raises(DataFileError) as info:
        load_interval_npz(tmp_path / "t.npz")
    assert str(info.value).startswith(str(tmp_path / "t.npz")) and expected in str(info.value)
    refused(["run", *TINY, "--set", f"availability={tmp_path / 't.npz'}", "--out", str(tmp_path / "o")],
            "t.npz", expected)


def test_silently_wrong_a_scenario_files_relative_plugin_resolves_against_the_file(tmp_path, monkeypatch):
    from felix_jax.experiment import Scenario

    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "my_policies.py").write_text(
        "from felix_jax import plugins\n"
        "plugins.strategy('study-fedbuff', mode='async', knowledge='none', selector='random', aggregator='fedbuff')\n")
    (folder / "sc.json").write_text('{"plugins": "my_policies.py", "strategy": "study-fedbuff"}')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert Scenario.from_file(folder / "sc.json").plugins == str((folder / "my_policies.py").resolve())


@pytest.mark.parametrize("sets, expected", [
    (["--set", "strategy=felix", "--set", "num_clients=1"], "aggregation_goal=2: strategy felix (TierTrack)"),
    (["--set", "strategy=felix", "--set", "aggregation_goal=20"], "num_clients=12: it would never aggregate"),
    (["--set", "strategy=oort-async-oracle", "--set", "oracle_departure=free_slot", "--set", "aggregation_goal=20"],
     "oracle_departure=free_slot")], ids=["felix-1-client", "felix-k20-12-clients", "oracle-free-slot"])
def test_silently_wrong_tiertrack_with_fewer_clients_than_k_is_refused(tmp_path, sets, expected):
    from felix_jax.experiment import get_preset

    refused(["run", *TINY, *sets, "--out", str(tmp_path / "o")], expected)
    assert not (tmp_path / "o").exists()
    with pytest.raises(OptionError, match="it would never aggregate"):  # the Python API alike
        get_preset("tiny").with_overrides(dict(s.split("=", 1) for s in sets[1::2]))
    get_preset("tiny").with_overrides({"strategy": "felix", "aggregation_goal": 12})  # K = N still runs


def test_silently_wrong_demo_json_never_writes_nan(tmp_path, monkeypatch):
    import felix_jax.demo

    monkeypatch.setattr(felix_jax.demo, "run_demo", lambda cfg: {"samples_per_s": float("nan"),
                                                                 "history": [{"loss": float("inf")}]})
    assert main(["demo", "--rounds", "1", "--json", str(tmp_path / "d.json")]) == 0

    def no_constants(name):
        raise AssertionError(f"{name} is not strict JSON")

    data = json.loads((tmp_path / "d.json").read_text(), parse_constant=no_constants)
    assert data == {"samples_per_s": None, "history": [{"loss": None}]}


_WRONG_LOGITS_MODEL = """
from felix_jax import plugins
from felix_jax.models import mlp

@plugins.model("three-logits")
def make(input_shape, num_classes):
    return mlp(input_shape, 3, hidden=(8,))
"""


def test_silently_wrong_a_model_with_the_wrong_number_of_logits_is_refused(tmp_path):
    from felix_jax.experiment.registry import make_model

    (tmp_path / "wrong_logits.py").write_text(_WRONG_LOGITS_MODEL)
    refused(["run", *TINY, "--set", f"plugins={tmp_path / 'wrong_logits.py'}", "--set", "model=three-logits",
             "--out", str(tmp_path / "o")], "model=three-logits gives logits of shape (2, 3)", "10 classes")
    with pytest.raises(OptionError, match=r"model=three-logits gives logits of shape \(2, 3\).* 12 classes"):
        make_model("three-logits", (8, 8, 3), 12)  # too few
    with pytest.raises(OptionError, match=r"model=three-logits gives logits of shape \(2, 3\).* 2 classes"):
        make_model("three-logits", (8, 8, 3), 2)  # too many


def test_silently_wrong_a_plugin_calling_sys_exit_is_a_one_line_error(tmp_path):
    (tmp_path / "quits.py").write_text("import sys\nsys.exit(0)\n")
    refused(["run", *TINY, "--set", f"plugins={tmp_path / 'quits.py'}", "--out", str(tmp_path / "o")],
            "quits.py", "sys.exit(0)")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("fields, expected", [
    (dict(num_clients=2.5), "num_clients=2.5: expected int, got float"),
    (dict(num_clients=True), "num_clients=True: expected int, got bool"),
    (dict(availability=50), "availability=50: expected str, got int"),
    (dict(learning_rate="0.1"), "learning_rate='0.1': expected float"),
    (dict(seed=1.0), "seed=1.0: expected int"),
    (dict(augment=1), "augment=1: expected bool"),
    (dict(selector=[]), "selector=[]: expected dict")], ids=lambda v: str(v) if isinstance(v, dict) else "")
def test_silently_wrong_the_python_scenario_checks_types_like_set(fields, expected):
    from felix_jax.experiment import Scenario

    with pytest.raises(OptionError, match=expected.replace("(", r"\(").replace("[", r"\[")):
        Scenario(**fields)


@pytest.mark.parametrize("fields, expected", [
    (dict(learning_rate=float("nan")), "learning_rate must be a finite number"),
    (dict(learning_rate=float("inf")), "learning_rate must be a finite number"),
    (dict(momentum=float("nan")), "momentum must be a finite number"),
    (dict(batch_size=16.0), "batch_size must be a whole number"),
    (dict(local_steps=True), "local_steps must be a whole number"),
    (dict(augment="yes"), "augment must be true or false")], ids=lambda v: str(v) if isinstance(v, dict) else "")
def test_silently_wrong_local_train_config_refuses_what_the_cli_refuses(fields, expected):
    from felix_jax.cohort import LocalTrainConfig

    with pytest.raises(ValueError, match=expected):
        LocalTrainConfig(**fields)


def test_silently_wrong_python_traces_refuse_no_clients_float_ids_and_boolean_states():
    from felix_jax.traces import AvailabilityTrace

    with pytest.raises(ValueError, match="no clients"):
        AvailabilityTrace.from_client_lists([], [])
    with pytest.raises(ValueError, match="no clients"):
        AvailabilityTrace.from_rows(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64))
    with pytest.raises(ValueError, match="client indices must be integers, got float64"):
        AvailabilityTrace.from_rows(np.array([0.0, 1.5]), np.zeros(2), np.array([2, 2]))
    with pytest.raises(ValueError, match="got booleans"):
        AvailabilityTrace.from_rows(np.array([0, 1]), np.zeros(2), np.array([True, True]))


def test_silently_wrong_the_plain_round_api_refuses_float_or_outside_client_ids():
    from felix_jax.cohort import LocalTrainConfig
    from felix_jax.data.federated import to_device
    from felix_jax.data.partition import iid_partition
    from felix_jax.models import mlp
    from felix_jax.rounds import FederatedRound
    from tests.conftest import make_image_dataset

    ds = make_image_dataset(num_train=40, num_test=8)
    model = mlp((8, 8, 3), hidden=(4,))
    rounds = FederatedRound(model, to_device(ds, iid_partition(40, 4, seed=0)), LocalTrainConfig(batch_size=8))
    state = rounds.init(model.init(jax.random.key(0)))
    with pytest.raises(ValueError, match="integer client ids, got float64"):
        rounds(state, np.array([0.0, 1.5]))
    with pytest.raises(ValueError, match="integer client ids, got bool"):
        rounds(state, np.array([True, False]))
    with pytest.raises(ValueError, match=r"client ids \[4\] outside \[0, 4\)"):
        rounds(state, [0, 4])


# ================================================================== issue 29, group 3: one line, not a traceback
def _tiny_npz(path, n_train: int, n_test: int = 4):
    rng = np.random.default_rng(0)
    np.savez(path, train_x=rng.normal(size=(n_train, 6)).astype(np.float32), train_y=np.arange(n_train) % 2,
             test_x=rng.normal(size=(n_test, 6)).astype(np.float32), test_y=np.arange(n_test) % 2)
    return path


@pytest.mark.parametrize("sets", [["--set", "num_clients=5000"], ["--set", "num_train=5"]],
                         ids=["5000-clients", "num_train-5"])
def test_traceback_more_clients_than_samples_is_one_line(tmp_path, sets):
    refused(["run", *TINY, *sets, "--out", str(tmp_path / "o")], "fewer than the clients",
            "partition=pool")
    assert not (tmp_path / "o").exists()


def test_traceback_a_tiny_data_set_is_one_line(tmp_path):
    data = _tiny_npz(tmp_path / "five.npz", 5)
    refused(["run", *TINY, "--set", f"dataset={data}", "--set", "model=mlp", "--out", str(tmp_path / "o")],
            "num_clients=12", "has 5 training samples")


def test_traceback_a_huge_client_count_is_refused_before_allocating(tmp_path):
    from tests.conftest import REFERENCE_FILE, require_data

    require_data(REFERENCE_FILE)
    refused(["run", *TINY, "--set", "partition=pool", "--set", f"num_clients={10 ** 11}", "--out",
             str(tmp_path / "o")], f"num_clients={10 ** 11}", "GB", "memory available on this machine")


def test_traceback_a_trace_table_past_memory_is_refused_by_its_form(tmp_path, monkeypatch):
    """The population's estimate counts the trace by the form it would take: a slot regime forced into a
    table of 10^6 clients x 30 s slots (~13 GB to build) is refused on a 4 GB machine, naming the form,
    while the same population as a function (~24 bytes a client) passes the check; a recorded trace
    copied for every client (trace_form=table) is refused when it is read, before the copy."""
    import felix_jax.memory
    from felix_jax.experiment import get_preset
    from felix_jax.experiment.build import _check_population
    from tests.conftest import REFERENCE_FILE, require_data

    require_data(REFERENCE_FILE)
    monkeypatch.setattr(felix_jax.memory, "available_bytes", lambda: 4 * 1024 ** 3)
    sets = ["--set", "partition=pool", "--set", "num_clients=1000000", "--set", "availability=avail50",
            "--set", "slot_s=30", "--set", "max_virtual_hours=24"]
    refused(["run", *TINY, *sets, "--set", "trace_form=table", "--out", str(tmp_path / "o")],
            "num_clients=1000000", "availability trace", "trace_form=table", "more than the 4.0 GB")
    assert not (tmp_path / "o").exists()
    sc = get_preset("tiny").with_overrides({"partition": "pool", "num_clients": "1000000", "availability": "avail50",
                                            "slot_s": "30", "max_virtual_hours": "24", "trace_form": "function"})
    _check_population(sc, 1437)  # fits: no exception
    monkeypatch.setattr(felix_jax.memory, "available_bytes", lambda: 256 * 1024 ** 2)
    refused(["run", *TINY, "--set", "partition=pool", "--set", "num_clients=200000", "--set",
             "availability=mobiperf", "--set", "trace_form=table", "--out", str(tmp_path / "m")],
            "num_clients=200000", "mobiperf trace", "copied for every client", "trace_form=function")


def test_traceback_a_stream_rate_past_memory_is_refused_before_allocating(tmp_path, monkeypatch):
    import felix_jax.memory

    refused(["run", *TINY, "--set", "stream.rate_per_hour=1e12", "--out", str(tmp_path / "o")],
            "stream.rate_per_hour=1e+12", "memory available on this machine")
    monkeypatch.setattr(felix_jax.memory, "available_bytes", lambda: 2 * 1024 ** 3)  # a 2 GB machine
    refused(["run", *TINY, "--set", "stream.rate_per_hour=1e7", "--out", str(tmp_path / "o")],
            "stream.rate_per_hour=1e+07", "would take about 32", "more than the 2.0 GB")


@pytest.mark.parametrize("argv, expected", [
    (["demo", "--rounds", "0"], "rounds=0: must be a whole number >= 1"),
    (["demo", "--rounds", "-3"], "rounds=-3"),
    (["demo", "--seed", "-1"], "seed=-1: must be an integer in [0, 2^32)")], ids=["0-rounds", "negative-rounds",
                                                                                  "negative-seed"])
def test_traceback_demo_arguments_are_one_line(argv, expected):
    refused(argv, expected)


def test_traceback_demo_json_into_a_missing_folder_is_refused_before_the_demo(tmp_path, monkeypatch):
    import felix_jax.demo

    monkeypatch.setattr(felix_jax.demo, "run_demo", lambda cfg: pytest.fail("the demo ran before the check"))
    refused(["demo", "--json", str(tmp_path / "nope" / "d.json")], str(tmp_path / "nope"), "does not exist")


def test_traceback_deeply_nested_or_binary_scenario_files_are_one_line(tmp_path):
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    refused(["run", "--config", str(tmp_path / "deep.json"), "--out", str(tmp_path / "o")], "deep.json",
            "nested too deeply")
    (tmp_path / "model.bin").write_bytes(bytes(range(256)) * 4)
    refused(["run", "--config", str(tmp_path / "model.bin"), "--out", str(tmp_path / "o")], "model.bin",
            "not a text JSON file")
    (tmp_path / "deep_trace.json").write_text('{"0": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(DataFileError, match="deep_trace.json: .*RecursionError"):
        load_fedscale_trace(tmp_path / "deep_trace.json")


@pytest.mark.parametrize("kind", ["csv", "fedscale", "npz-uint64"])
def test_traceback_client_ids_beyond_int64_are_one_line(tmp_path, kind):
    huge = 2 ** 64 - 1
    if kind == "csv":
        path = tmp_path / "t.csv"
        path.write_text(f"client,time_s,state\n0,0,AVL_TRAIN\n{huge},0,AVL_TRAIN\n")
    elif kind == "fedscale":
        path = tmp_path / "t.json"
        path.write_text(json.dumps({str(huge): {"active": [0], "inactive": [5], "finish_time": 10}}))
    else:
        path = tmp_path / "t.npz"
        np.savez(path, client=np.array([0, huge], np.uint64), time_s=np.zeros(2), state=np.array([2, 2]))
    refused(["run", *TINY, "--set", f"availability={path}", "--out", str(tmp_path / "o")], path.name,
            str(huge), "64-bit integer range")


def test_traceback_duplicate_fedscale_ids_are_one_line(tmp_path):
    path = tmp_path / "dup.json"
    rec = {"active": [0], "inactive": [5], "finish_time": 10}
    path.write_text(json.dumps({"1": rec, "01": rec}))
    refused(["run", *TINY, "--set", f"availability={path}", "--out", str(tmp_path / "o")], "dup.json",
            "client id 1 appears more than once")


def test_traceback_a_symlink_loop_as_a_path_is_one_line(tmp_path):
    (tmp_path / "a.csv").symlink_to(tmp_path / "b.csv")
    (tmp_path / "b.csv").symlink_to(tmp_path / "a.csv")
    refused(["run", *TINY, "--set", f"availability={tmp_path / 'a.csv'}", "--out", str(tmp_path / "o")],
            "availability=", "a.csv", "symbolic link loop")
    refused(["run", "--config", str(tmp_path / "a.csv"), "--out", str(tmp_path / "o")], "a.csv")
    (tmp_path / "loop").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop")
    refused(["run", *TINY, "--out", str(tmp_path / "loop")], "loop")
    refused(["run", "--resume", str(tmp_path / "loop")], "loop")


def test_traceback_an_npz_claiming_a_huge_shape_is_refused_before_allocating(tmp_path):
    import io
    import zipfile

    from numpy.lib import format as npy

    path = tmp_path / "huge.npz"
    with zipfile.ZipFile(path, "w") as z:
        for name in ("client", "time_s", "state"):
            buf = io.BytesIO()
            npy.write_array_header_1_0(buf, {"descr": "<i8", "fortran_order": False, "shape": (10 ** 12,)})
            buf.write(b"\0" * 64)
            z.writestr(name + ".npy", buf.getvalue())
    refused(["run", *TINY, "--set", f"availability={path}", "--out", str(tmp_path / "o")], "huge.npz",
            "array client claims shape (1000000000000,)", "holds 64 bytes")


def test_traceback_a_cache_folder_that_is_a_file_is_one_line(tmp_path, monkeypatch):
    from felix_jax.data.paths import resolve_cache_dir

    (tmp_path / "cache").write_text("not a folder")
    monkeypatch.setenv("FELIX_JAX_CACHE", str(tmp_path / "cache"))
    refused(["run", *TINY, "--out", str(tmp_path / "o")], "cache/xla", "FELIX_JAX_CACHE")
    assert not (tmp_path / "o").exists()
    with pytest.raises(OSError, match="FELIX_JAX_CACHE"):
        resolve_cache_dir()


def test_traceback_a_trace_faster_than_a_task_can_settle_is_one_line(tmp_path):
    path = tmp_path / "flicker.csv"
    path.write_text("# duration_s=0.00001\n# beyond_end=repeat\nclient,time_s,state\n"
                    "0,0,AVL_TRAIN\n0,0.000005,UN_AVL\n")
    refused(["run", *TINY, "--set", f"availability={path}", "--out", str(tmp_path / "o")],
            "changes state faster than a task can run", "did not settle within 100000 state changes")


_NON_TUPLE_SELECTOR = """
import numpy as np
from felix_jax import plugins
from felix_jax.policies import Selector

@plugins.selector("ids-only")
def make():
    return Selector("ids-only", lambda: None, lambda state, ctx, k: np.flatnonzero(ctx.eligible)[:k])

plugins.strategy("ids-only-strategy", mode="async", knowledge="none", selector="ids-only", aggregator="fedbuff")
"""


def test_traceback_a_plugin_selector_returning_a_non_tuple_is_one_line(tmp_path):
    (tmp_path / "ids_only.py").write_text(_NON_TUPLE_SELECTOR)
    refused(["run", *TINY, "--set", f"plugins={tmp_path / 'ids_only.py'}", "--set", "strategy=ids-only-strategy",
             "--out", str(tmp_path / "o")], "selector ids-only returned ndarray: expected a tuple (client ids, state)")


@pytest.mark.parametrize("snapshot", [None, "every 5", [1]], ids=["null", "text", "list"])
def test_traceback_a_run_config_with_a_null_or_odd_snapshot_section_is_one_line(tmp_path, snapshot):
    out = tmp_path / "r"
    _finished_run(out)
    config = json.loads((out / "config.json").read_text())
    config["snapshot"] = snapshot
    (out / "config.json").write_text(json.dumps(config))
    message = refused(["run", "--resume", str(out)], str(out))
    assert ("that run finished (stop reason: " in message and "nothing to resume" in message) if snapshot is None \
        else ("snapshot." in message)


def test_traceback_a_full_disk_while_writing_a_snapshot_keeps_the_previous_one(tmp_path, monkeypatch):
    import errno

    import felix_jax.fleet.snapshot as snapshot
    from felix_jax.experiment import get_preset
    from felix_jax.experiment.runner import build_simulator
    from felix_jax.fleet.snapshot import SnapshotError, SnapshotPolicy, verify_snapshot

    sim = build_simulator(get_preset("tiny").with_overrides({"max_aggregations": "8", "target_accuracy": "none"}))
    root = tmp_path / "snapshot"
    sim.snapshot = SnapshotPolicy(root, every_aggregations=2)
    write_json, calls = snapshot._write_json, []

    def full_after_the_first_snapshot(path, obj):
        calls.append(path.name)
        if len(calls) > 2:  # the first snapshot's host.json and CHECKSUMS.json went through
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        write_json(path, obj)

    monkeypatch.setattr(snapshot, "_write_json", full_after_the_first_snapshot)
    with pytest.raises(SnapshotError) as info:
        sim.run()
    message = str(info.value)
    assert "\n" not in message and "the disk is full" in message and "previous snapshot snap-000002" in message
    assert not list(root.glob(".tmp-snap-*")) and not (root / ".LATEST.tmp").exists()
    assert (root / "LATEST").read_text().startswith("snap-000002")
    verify_snapshot(root / (root / "LATEST").read_text().strip())
    assert [p.name for p in root.iterdir() if p.name.startswith("snap-")] == [(root / "LATEST").read_text().strip()]


def _compare_folder(tmp_path):
    out = tmp_path / "c"
    assert main([*COMPARE_TINY, "--out", str(out)]) == 0
    return out, (out / "summary.csv").read_text().splitlines()


def test_traceback_plot_names_the_missing_column_and_an_unexpected_field_type(tmp_path):
    out, lines = _compare_folder(tmp_path)
    header = lines[0].split(",")
    drop = header.index("strategy")
    (out / "summary.csv").write_text("\n".join(",".join(c for j, c in enumerate(line.split(",")) if j != drop)
                                               for line in lines) + "\n")
    refused(["plot", str(out)], str(out / "summary.csv"), "no column strategy")
    for column, value, expected in (("seed", "zero", "seed is 'zero', not a whole number"),
                                    ("seed", "inf", "seed is 'inf', not a whole number"),
                                    ("final_accuracy", "high", "final_accuracy is 'high', not a number")):
        row = lines[1].split(",")
        row[header.index(column)] = value
        (out / "summary.csv").write_text(lines[0] + "\n" + ",".join(row) + "\n")
        refused(["plot", str(out)], str(out / "summary.csv"), "line 2", expected)


def test_traceback_a_huge_eval_batch_is_refused_saying_the_bound():
    refused(["run", *TINY, "--set", "eval_batch=1000000000"], "eval_batch=1000000000", "max_aggregations=2",
            "use at most 2")
    from felix_jax.experiment import get_preset

    with pytest.raises(OptionError, match="eval_batch=9"):
        get_preset("tiny").with_overrides({"max_aggregations": "8", "eval_batch": "9"})


def test_traceback_csvs_with_a_byte_order_mark_are_read(tmp_path):
    trace, profile = tmp_path / "t.csv", tmp_path / "p.csv"
    trace.write_text("client,time_s,state\n0,0,AVL_TRAIN\n1,0,AVL_TRAIN\n1,30,UN_AVL\n", encoding="utf-8-sig")
    profile.write_text("client,train_delay_s\n0,10\n1,20\n", encoding="utf-8-sig")
    from felix_jax.traces import load_interval_csv

    assert load_interval_csv(trace).num_clients == 2
    assert load_device_profile(profile).train_delay_s.tolist() == [10.0, 20.0]


# ================================================================== issue 35: the last tracebacks
# ------------------------------------------------------------------ a failing plugin: its file:line, the run kept
_FAILING_PLUGINS = {
    "selector-raises": ("""
import numpy as np
from felix_jax import plugins
from felix_jax.policies import Selector

@plugins.selector("raises-late")
def make():
    def select(state, ctx, k):
        if state > 2:
            raise ValueError("no client left to pick")  # FAILS
        return np.flatnonzero(ctx.eligible)[:k], state + 1
    return Selector("raises-late", lambda: 0, select)

plugins.strategy("raises-late-strategy", mode="async", knowledge="none", selector="raises-late", aggregator="fedbuff")
""", "strategy=raises-late-strategy",
        ["selector 'raises-late'.select failed at ", "ValueError: no client left to pick"], True),
    "aggregator-raises": ("""
import numpy as np
from felix_jax import plugins
from felix_jax.policies import Aggregator

@plugins.aggregator("weights-raise", config=None)
def make(config):
    def weights(info):
        return info.staleness / (info.staleness * 0)[5]  # FAILS
    return Aggregator("weights-raise", weights)

plugins.strategy("weights-raise-strategy", mode="async", knowledge="none", selector="random",
                 aggregator="weights-raise")
""", "strategy=weights-raise-strategy", ["aggregator 'weights-raise'.weights failed at ",
                                         "IndexError: index 5 is out of bounds"], True),
    "selector-writes-the-view": ("""
import numpy as np
from felix_jax import plugins
from felix_jax.policies import Selector

@plugins.selector("marks-busy")
def make():
    def select(state, ctx, k):
        ids = np.flatnonzero(ctx.eligible)[:k]
        ctx.view.busy[ids] = True  # FAILS
        return ids, state
    return Selector("marks-busy", lambda: None, select)

plugins.strategy("marks-busy-strategy", mode="async", knowledge="none", selector="marks-busy", aggregator="fedbuff")
""", "strategy=marks-busy-strategy", ["selector 'marks-busy'.select failed at ",
                                      "it wrote to ctx.view.busy, which is read-only to policies",
                                      "assignment destination is read-only", "init() returns"], False),
    "selector-writes-eligible": ("""
import numpy as np
from felix_jax import plugins
from felix_jax.policies import Selector

@plugins.selector("drops-first")
def make():
    def select(state, ctx, k):
        pool = ctx.eligible
        if state >= 2:
            pool[np.argmax(pool)] = False  # FAILS
        return np.flatnonzero(pool)[:k], state + 1
    return Selector("drops-first", lambda: 0, select)

plugins.strategy("drops-first-strategy", mode="async", knowledge="none", selector="drops-first", aggregator="fedbuff")
""", "strategy=drops-first-strategy", ["selector 'drops-first'.select failed at ",
                                       "it wrote to ctx.eligible, which is read-only to policies", "init() returns"],
        True),
    "model-factory-raises": ("""
from felix_jax import plugins

@plugins.model("not-built")
def make_not_built(input_shape, num_classes):
    raise NotImplementedError("the output layer is still to write")  # FAILS
""", "model=not-built", ["model 'not-built' factory make_not_built() failed at ",
                         "NotImplementedError: the output layer is still to write"], False),
}


@pytest.fixture
def own_registries():
    """The registries of selectors, aggregators, strategies and models as they were before the test:
    the names its plugins register do not reach the tests that go over every registered entry."""
    from felix_jax.experiment.registry import MODELS
    from felix_jax.experiment.strategies import STRATEGIES
    from felix_jax.policies.aggregators import AGGREGATOR_OPTIONS, AGGREGATORS
    from felix_jax.policies.selectors import SELECTOR_OPTIONS, SELECTORS

    tables = (MODELS, STRATEGIES, AGGREGATORS, AGGREGATOR_OPTIONS, SELECTORS, SELECTOR_OPTIONS)
    saved = [dict(t) for t in tables]
    yield
    for table, before in zip(tables, saved):
        table.clear()
        table.update(before)


def _plugin_file(folder, source: str):
    """``source`` written to ``folder/plugin.py``; returns (path, 'path:line' of its line marked FAILS)."""
    path = folder / "plugin.py"
    path.write_text(source)
    line = next(i for i, text in enumerate(source.splitlines(), start=1) if "# FAILS" in text)
    return path, f"{path}:{line}"


@pytest.mark.parametrize("case", list(_FAILING_PLUGINS))
@pytest.mark.usefixtures("own_registries")
def test_traceback_a_failing_plugin_is_one_line_naming_its_file_and_line(tmp_path, case):
    source, choice, expected, mid_run = _FAILING_PLUGINS[case]
    plugin, where = _plugin_file(tmp_path, source)
    out = tmp_path / "r"
    message = refused(["run", *TINY, "--set", "max_aggregations=6", "--set", f"plugins={plugin}", "--set", choice,
                       "--out", str(out)], *expected, f"failed at {where}: ", "--traceback or FELIX_JAX_TRACEBACK=1")
    if mid_run:  # stopped as a signal stops a run: its results so far and a stop snapshot, resumable
        summary = json.loads((out / "summary.json").read_text())
        assert summary["stop_reason"] == "plugin_error" and summary["aggregations"] < 6
        assert (out / "snapshot" / "LATEST").is_file() and f"felix-jax run --resume {out}" in message
    else:  # failed before the run's first event: nothing to keep, no folder left behind
        assert not out.exists(), sorted(p.name for p in out.iterdir())


@pytest.mark.usefixtures("own_registries")
def test_traceback_a_failing_plugin_prints_one_line_and_its_stack_only_on_request(tmp_path, capsys):
    import subprocess
    import sys

    source, choice, expected, _ = _FAILING_PLUGINS["selector-raises"]
    plugin, where = _plugin_file(tmp_path, source.replace("raises-late", "raises-late-cli"))
    argv = [sys.executable, "-m", "felix_jax.cli", "run", *TINY, "--set", f"plugins={plugin}",
            "--set", choice.replace("raises-late", "raises-late-cli"), "--set", "max_aggregations=6"]
    env = {k: v for k, v in os.environ.items() if k != "FELIX_JAX_TRACEBACK"}
    proc = subprocess.run([*argv, "--out", str(tmp_path / "r")], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and f"failed at {where}: ValueError" in proc.stderr
    proc = subprocess.run([*argv, "--out", str(tmp_path / "r2")], capture_output=True, text=True, timeout=600,
                          env={**env, "FELIX_JAX_TRACEBACK": "1"})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback (most recent call last)" in proc.stderr
    assert f'File "{plugin}", line {where.rsplit(":", 1)[1]}, in select' in proc.stderr and "felix_jax" in proc.stderr
    assert lines[-1].startswith("felix-jax run: selector 'raises-late-cli'.select failed at") \
        and "--traceback or" not in lines[-1]
    # in this process, --traceback alike
    (tmp_path / "other").mkdir()
    other, _ = _plugin_file(tmp_path / "other", _FAILING_PLUGINS["model-factory-raises"][0].replace("not-built", "nb2"))
    capsys.readouterr()
    refused(["run", *TINY, "--set", f"plugins={other}", "--set", "model=nb2", "--out", str(tmp_path / "r3"),
             "--traceback"], "model 'nb2' factory")
    assert 'raise NotImplementedError("the output layer is still to write")' in capsys.readouterr().err


def test_traceback_a_plugin_error_keeps_what_it_says_through_pickle():
    import pickle

    from felix_jax.fleet.snapshot import SnapshotWriteError
    from felix_jax.plugin_calls import PluginError, guarded

    def weights(info):
        raise ZeroDivisionError("no fresh update")

    with pytest.raises(PluginError) as info:
        guarded("aggregator 'mine'.weights", weights)(None)
    info.value.stopped_after = 3
    back = pickle.loads(pickle.dumps(info.value))  # as a sweep's Ray task returns it
    assert str(back) == str(info.value) and back.what == "aggregator 'mine'.weights" and back.stopped_after == 3
    assert f"test_hostile_inputs.py:{weights.__code__.co_firstlineno + 1}" in str(back)
    again = pickle.loads(pickle.dumps(SnapshotWriteError("cannot write snapshot x", "snap-1")))
    assert str(again) == "cannot write snapshot x" and again.kept == "snap-1"


_FLAKY_SELECTOR = """
import numpy as np
from felix_jax import plugins
from felix_jax.policies import Selector

BROKEN = {broken}

@plugins.selector("{name}")
def make():
    def select(state, ctx, k):
        state = state + 1
        if BROKEN and state == 9:
            raise KeyError("bucket 9")
        ids = np.flatnonzero(ctx.eligible)
        return ctx.rng.permutation(ids)[:k], state
    return Selector("{name}", lambda: 0, select)

plugins.strategy("{name}-strategy", mode="async", knowledge="none", selector="{name}", aggregator="fedbuff")
"""


# with periodic snapshots in the slow tier; without them (a stop snapshot only) in the default tier
@pytest.mark.parametrize("snapshots", [[], pytest.param(["--snapshot-every", "2"], marks=pytest.mark.slow)],
                         ids=["no-snapshot-flags", "snapshot-every-2"])
@pytest.mark.usefixtures("own_registries")
def test_work_lost_a_run_a_plugin_stopped_resumes_to_the_fixed_plugins_results(tmp_path, snapshots):
    """A plugin that raises mid-run stops it with its results so far and a stop snapshot (the state
    after its last whole event); once the plugin is fixed, --resume finishes the run with the files of
    an uninterrupted run with the fixed plugin."""
    import subprocess
    import sys

    name = f"flaky-{len(snapshots)}"  # a name per case: this process keeps every plugin it loaded
    plugin = tmp_path / "flaky.py"
    plugin.write_text(_FLAKY_SELECTOR.format(broken=True, name=name))
    sets = [*TINY, "--set", f"plugins={plugin}", "--set", f"strategy={name}-strategy", "--set", "max_aggregations=8",
            "--set", "availability=avail50", "--set", "slot_s=60"]
    cut = tmp_path / "cut"
    refused(["run", *sets, *snapshots, "--out", str(cut)], f"selector '{name}'.select failed at",
            "KeyError: 'bucket 9'")
    stopped = json.loads((cut / "summary.json").read_text())
    assert stopped["stop_reason"] == "plugin_error" and 0 < stopped["aggregations"] < 8
    plugin.write_text(_FLAKY_SELECTOR.format(broken=False, name=name))  # the fix; a fresh process loads it
    cli = [sys.executable, "-m", "felix_jax.cli", "run"]
    for argv in ([*sets, "--out", str(tmp_path / "ref")], ["--resume", str(cut), "--quiet"]):
        proc = subprocess.run([*cli, *argv], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
    for name in ("metrics.csv", "events.csv"):
        assert (cut / name).read_bytes() == (tmp_path / "ref" / name).read_bytes(), name
    done, ref = (json.loads((d / "summary.json").read_text()) for d in (cut, tmp_path / "ref"))
    for key in ("stop_reason", "aggregations", "bytes_total", "final_accuracy", "events", "end_time_s"):
        assert done[key] == ref[key], key


@pytest.mark.usefixtures("own_registries")
def test_work_lost_a_compare_cell_a_plugin_stopped_is_resumed_not_taken_as_finished(tmp_path):
    from felix_jax.experiment import get_preset
    from felix_jax.experiment.compare import cell_dir, finished_summary

    plugin = tmp_path / "flaky.py"
    plugin.write_text(_FLAKY_SELECTOR.format(broken=True, name="flaky-cell"))
    out = tmp_path / "c"
    refused(["compare", "--scenario", "tiny", "--strategies", "flaky-cell-strategy", "--availability", "avail100",
             "--quiet", "--set", "max_aggregations=8", "--set", "target_accuracy=none", "--set", f"plugins={plugin}",
             "--out", str(out)], "selector 'flaky-cell'.select failed at", "KeyError: 'bucket 9'")
    sc = get_preset("tiny").with_overrides({"max_aggregations": "8", "target_accuracy": "none",
                                            "plugins": str(plugin), "strategy": "flaky-cell-strategy"})
    cell = cell_dir(out, sc.strategy, sc.availability, sc.seed)
    assert json.loads((cell / "summary.json").read_text())["stop_reason"] == "plugin_error"
    assert (cell / "snapshot" / "LATEST").is_file() and finished_summary(sc, cell) is None


# ------------------------------------------------------------------ a folder of files felix-jax did not write
def test_traceback_run_into_a_folder_of_foreign_results_files_is_one_line(tmp_path):
    mine = tmp_path / "mine"
    (mine / "snapshot").mkdir(parents=True)
    (mine / "metrics.csv").write_text("day,steps\n1,5000\n")
    (mine / "snapshot" / "notes.txt").write_text("mine")
    refused(["run", *TINY, "--out", str(mine)], str(mine), "metrics.csv, snapshot/", "felix-jax did not write",
            "move them or choose another --out")
    assert sorted(p.name for p in mine.iterdir() if not p.name.startswith(".")) == ["metrics.csv", "snapshot"]
    assert (mine / "metrics.csv").read_text() == "day,steps\n1,5000\n"
    (mine / "config.json").write_text('{"strategy": "felix"}')  # a scenario file of the user's: not a run's
    refused(["run", *TINY, "--out", str(mine)], "config.json, metrics.csv, snapshot/", "felix-jax did not write")


# ------------------------------------------------------------------ a snapshot that cannot be written mid-run
_DISK_FILLS_UP = """
import collections
import shutil
import sys

import felix_jax.fleet.simulator as simulator
from felix_jax.cli import main

save, disk_usage = simulator.save_snapshot, shutil.disk_usage

def save_then_fill_the_disk(sim, path, keep=2):
    out = save(sim, path, keep=keep)
    full = collections.namedtuple("usage", "total used free")
    shutil.disk_usage = lambda p: full(disk_usage(p).total, disk_usage(p).total, 0)  # from now on, no room
    return out

simulator.save_snapshot = save_then_fill_the_disk
sys.exit(main(sys.argv[1:]))
"""


def test_traceback_a_disk_that_fills_up_during_snapshot_every_1_is_one_line_and_resumes(tmp_path):
    """--snapshot-every 1 on a disk that fills up after the first snapshot: the run ends in one line
    naming the disk, the file and the snapshot kept; nothing is left of the failed write, no thread
    prints at exit, and --resume then finishes it as an uninterrupted run."""
    import subprocess
    import sys

    driver = tmp_path / "driver.py"
    driver.write_text(_DISK_FILLS_UP)
    sets = [*TINY, "--set", "max_aggregations=6"]
    out = tmp_path / "r"
    proc = subprocess.run([sys.executable, str(driver), "run", *sets, "--snapshot-every", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    assert lines[0].startswith("felix-jax run: cannot write snapshot snap-000002-") and "the disk is full" in lines[0]
    assert "the previous snapshot snap-000001-" in lines[0] and f"felix-jax run --resume {out}" in lines[0]
    root = out / "snapshot"
    assert (root / "LATEST").read_text().startswith("snap-000001-") and not list(root.glob(".tmp-snap-*"))
    assert sorted(p.name for p in root.iterdir()) == ["LATEST", (root / "LATEST").read_text().strip()]
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    assert main(["run", *sets, "--out", str(tmp_path / "ref")]) == 0
    assert (out / "metrics.csv").read_bytes() == (tmp_path / "ref" / "metrics.csv").read_bytes()


def test_traceback_a_snapshot_that_cannot_fit_is_refused_before_orbax_writes(tmp_path, monkeypatch):
    import collections
    import errno
    import resource

    import felix_jax.fleet.snapshot as snapshot

    monkeypatch.setattr(snapshot, "_device_checkpointer", lambda: pytest.fail("orbax started a write"))
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(snapshot.shutil, "disk_usage", lambda p: usage(10 ** 9, 10 ** 9 - 5000, 5000))
    with pytest.raises(OSError) as info:
        snapshot._save_device(tmp_path / "device", {"d0": jax.numpy.zeros(1000)})
    assert info.value.errno == errno.ENOSPC and "the arrays take 4,000 bytes, 5,000 are free" in info.value.filename
    monkeypatch.setattr(snapshot.shutil, "disk_usage", lambda p: usage(10 ** 12, 0, 10 ** 12))
    monkeypatch.setattr(resource, "getrlimit", lambda which: (2000, resource.RLIM_INFINITY))  # ulimit -f
    with pytest.raises(OSError) as info:
        snapshot._save_device(tmp_path / "device", {"d0": jax.numpy.zeros(1000)})
    assert info.value.errno == errno.EFBIG and "over this process's limit of 2,000 bytes" in info.value.filename


def test_traceback_orbax_s_disk_full_error_names_the_disk_and_the_file(tmp_path):
    import errno

    from felix_jax.fleet.snapshot import _as_os_error, _write_failed

    orbax_error = ValueError('RESOURCE_EXHAUSTED: Error writing "d5/0.0.0" in OCDBT database at local file '
                             '"/x/snapshot/.tmp-snap-000002-000000004-1/device/": Failed writing: "/x/snapshot/'
                             '.tmp-snap-000002-000000004-1/device/d/eeb6": Failed to write 1430867 bytes to file 9: '
                             "No space left on device [os_error_code='28']")
    e = _as_os_error(orbax_error, tmp_path)
    assert e.errno == errno.ENOSPC and e.filename == "/x/snapshot/.tmp-snap-000002-000000004-1/device/d/eeb6"
    (tmp_path / "LATEST").write_text("snap-000001-000000002\n")
    message = str(_write_failed(tmp_path, tmp_path / ".tmp-snap-000002-000000004-1", "snap-000002-000000004", e))
    assert "the disk is full (the file system at /" in message and "device/d/eeb6" in message
    assert message.endswith("the previous snapshot snap-000001-000000002 is kept")


# ------------------------------------------------------------------ tfds data sets: the extra, or one line naming it
def test_traceback_a_tfds_data_set_without_the_tfds_extra_is_one_line_naming_it(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "importlib_resources", None)  # as on a default install (no tfds extra)
    out = tmp_path / "o"
    refused(["run", *TINY, "--set", "dataset=tfds:mnist", "--out", str(out)], "dataset=tfds:mnist needs the tfds "
            "extra", "missing here: ", "importlib_resources", 'pip install "felix-jax[tfds]"')
    refused(["run", *TINY, "--set", "dataset=cifar10_tfds", "--out", str(out)], "dataset=cifar10_tfds",
            "needs the tfds extra", 'pip install "felix-jax[tfds]"')
    assert not out.exists()


def test_traceback_a_tfds_data_set_that_tfds_cannot_load_is_one_line(tmp_path, monkeypatch):
    import types

    import felix_jax.data.user as user

    def load(name, **kwargs):  # what tfds does offline for a set it has not prepared yet
        raise ConnectionError(f"Failed to download {name}: no network\nretry later")

    monkeypatch.setattr(user, "import_tfds", lambda what: types.SimpleNamespace(load=load))
    refused(["run", *TINY, "--set", "dataset=tfds:mnist", "--out", str(tmp_path / "o")],
            "dataset=tfds:mnist: tensorflow-datasets could not load it (ConnectionError: Failed to download mnist: "
            "no network)")
