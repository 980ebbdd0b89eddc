"""The benchmark scripts run end to end on tiny settings (their numbers live in BENCHMARKS.md)."""

import importlib.util
import json
from pathlib import Path

import pytest

from tests.conftest import REFERENCE_FILE, needs_data

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # a whole matrix of runs
def test_drift_matrix_tabulates_every_variant(tmp_path):
    result = load("drift_matrix").main([
        "--seeds", "0", "--strategies", "fedbuff,felix", "--set", "max_aggregations=6",
        "--set", "stream.start_hours=0.001", "--out", str(tmp_path), "--json", str(tmp_path / "m.json")])
    rows = result["table"].splitlines()[2:]
    assert len(rows) == 6 * 2  # (none, rotation, surge) x (no delay, delay) x 2 strategies
    surge = [r for r in rows if r.startswith("| surge")]
    assert surge and all(r.split("|")[6].strip() != "-" for r in surge)  # a lag (or "never") per surge row
    assert (tmp_path / "table.md").exists() and (tmp_path / "m.json").exists()


def test_eval_batching_checks_the_batched_runs_against_the_eager_one(tmp_path):
    result = load("eval_batching").main(["--preset", "tiny", "--batches", "4", "--set", "max_aggregations=8",
                                         "--set", "target_accuracy=none", "--json", str(tmp_path / "e.json")])
    eager, batched = result["rows"][-1], result["rows"][0]
    assert batched["same_results"] and batched["test_eval_calls"] == 3 and eager["test_eval_calls"] == 9


@needs_data(REFERENCE_FILE)  # partition=pool: the paper's per-client sizes, in its child processes too
def test_fleet_scale_reports_a_population_and_a_fedscale_load(tmp_path):
    import json

    out = tmp_path / "scale.json"
    assert load("fleet_scale").main(["--populations", "500", "--aggregations", "2", "4", "--task", "one-step",
                                     "local-epochs", "--fedscale-clients", "300", "--exploit-sizes", "3000",
                                     "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = {(r["task"], r["max_aggregations"]): r for r in report["rows"]}
    assert set(rows) == {(t, a) for t in ("one-step", "local-epochs") for a in (2, 4)}  # a cell per task and length
    for (task, aggs), row in rows.items():
        assert row["num_clients"] == 500 and row["aggregations"] == aggs and row["host_ms_per_event"] > 0
        assert len(row["dispatch_sha1"]) == 40 and row["compilations"] > 0
        assert row["events_csv_mb"] > 0  # the log streamed to a file, as a run with a results folder does
        (v, mb, rows_, held), = row["rss_curve"]  # every 10th aggregation: the first only, in a short run
        assert v == 0 and mb > 0 and rows_ >= held >= 0
    # the digest is read back from the streamed log: the same as the run's dispatch log held in memory
    from felix_jax.experiment.runner import build_simulator

    fs = load("fleet_scale")
    sc = fs.fleet_scenario(500, 50, 2, "felix", 0, fs.digits8_npz(str(tmp_path / "d.npz")))
    sim = build_simulator(sc)
    sim.run()
    import hashlib

    assert hashlib.sha1(repr(sim.acct.dispatch_log).encode()).hexdigest() == rows["one-step", 2]["dispatch_sha1"]
    (trace,) = report["fedscale_loads"]
    assert trace["clients"] == 300 and trace["rows"] >= 300 and trace["load_s"] > 0
    (exploit,) = report["exploit_calls"]
    assert exploit["explored_eligible"] == 3000 and exploit["exploit_call_ms"] > 0 and exploit["same_picks"]


@needs_data(REFERENCE_FILE)  # partition=pool: the paper's per-client sizes
def test_fleet_scale_runs_a_plugins_strategy(tmp_path):
    """--plugins: a user's strategy in the benchmark's fleet, refused before the first cell when the plugin
    lacks it. (Names of this test's own: a plugin registers its names for the whole process.)"""
    plugin = tmp_path / "scale_streak.py"
    plugin.write_text(
        "import numpy as np\n"
        "from felix_jax import plugins\n"
        "from felix_jax.policies import Selector\n\n"
        "@plugins.selector('test-scale-streak')\n"
        "def make():\n"
        "    def select(state, ctx, k):\n"
        "        ids = np.flatnonzero(ctx.eligible)\n"
        "        order = np.argsort(-ctx.view.current_spell_s(ctx.now, ids), kind='stable')\n"
        "        return ids[order[: min(int(k), ids.size)]], state\n"
        "    return Selector('test-scale-streak', lambda: None, select)\n\n"
        "plugins.strategy('test-scale-streak-strategy', mode='async', knowledge='tiertrack',\n"
        "                 selector='test-scale-streak', aggregator='fedbuff')\n")
    fs = load("fleet_scale")
    data = fs.digits8_npz(str(tmp_path / "d.npz"))
    row = fs.measure(300, 30, 2, "test-scale-streak-strategy", 0, data, plugins=str(plugin))
    assert row["aggregations"] == 2 and row["plugins"] == str(plugin)
    from felix_jax.options import OptionError

    with pytest.raises(OptionError, match="unknown strategy 'not-in-it'"):
        fs.main(["--populations", "300", "--strategy", "not-in-it", "--plugins", str(plugin), "--fedscale-clients"])


@needs_data(REFERENCE_FILE)  # partition=pool: the paper's per-client sizes
def test_fleet_scale_builds_a_shipped_presets_fleet_with_only_the_scale_overridden(tmp_path):
    """--preset NAME: the preset as shipped (its model, data set, local work, eval tier), with only the
    population, c, K, partition, run length and the benchmark's axes set."""
    from felix_jax.experiment import get_preset

    fs = load("fleet_scale")
    sc = fs.fleet_scenario(2000, 100, 7, "felix", 0, None, "avail50", 30.0, "auto", None, "preset:tiny")
    tiny = get_preset("tiny")
    for field in ("model", "dataset", "batch_size", "learning_rate", "local_mode", "local_epochs", "local_steps",
                  "eval_selector", "timeout_s", "eval_every"):
        assert getattr(sc, field) == getattr(tiny, field), field
    assert (sc.num_clients, sc.concurrency, sc.aggregation_goal, sc.partition, sc.max_aggregations) == \
        (2000, 100, 10, "pool", 7)
    assert sc.target_accuracy is None and sc.slot_s == 30.0
    row = fs.measure(500, 50, 2, "felix", 0, None, task="preset:tiny")  # a cell, in this process
    assert row["task"] == "preset:tiny" and row["model"] == "mlp" and row["dataset"] == "digits"
    assert row["aggregations"] == 2 and row["num_clients"] == 500
    assert fs.task_name("preset:tiny") == "preset:tiny" and fs.preset_name("tiny") == "tiny"  # --preset's parser
    with pytest.raises(Exception, match="unknown preset 'nope'"):
        fs.preset_name("nope")


def test_fleet_scale_keeps_a_bounded_record_of_event_stamps():
    stamps_of = load("fleet_scale").EventStamps

    def run(n, keep):
        st = stamps_of(keep=keep)
        for i in range(n):
            if st.due():
                st.add((i,))  # the stamp names its own event
        return st

    for n in (2, 3, 7, 15):  # fewer than 2 * keep events: every one kept, the exact middle
        st = run(n, keep=8)
        assert st.stride == 1 and st.second_half() == (n - n // 2, (n // 2,))
    st = run(100_000, keep=8)
    assert len(st._stamps) == 13 and st.stride == 2 ** 13  # bounded: 13 x 8,192 covers 100,000
    n_half, (first,) = st.second_half()
    assert (first, n_half) == (6 * 8192, 100_000 - 6 * 8192)  # the kept stamp at or below the middle
    assert all(i % st.stride == 0 and (i,) == s for i, s in zip(st._at, st._stamps))


def test_fleet_scale_times_the_sorted_index_both_ways(tmp_path):
    out = tmp_path / "index.json"
    assert load("fleet_scale").main(["--populations", "--fedscale-clients", "--index-sizes", "3000",
                                     "--out", str(out)]) == 0
    import json

    (row,) = json.loads(out.read_text())["index_ops"]
    assert row["values"] == 3000 and row["ops"] == 4000 and row["same_values"]
    assert row["chunked_us"] > 0 and row["one_buffer_us"] > 0


def test_centralized_reference_trains_and_reports_a_curve(tmp_path):
    result = load("centralized_reference").main(["--preset", "quickstart", "--model", "cifar_cnn_narrow",
                                                 "--num-test", "64", "--steps", "6", "--eval-every", "3",
                                                 "--json", str(tmp_path / "c.json")])
    assert [r["steps"] for r in result["rows"]] == [0, 3, 6]
    assert result["num_params"] == 44_842 and (tmp_path / "c.json").exists()
    assert all(0 <= r["accuracy"] <= 1 for r in result["rows"])


def test_centralized_reference_curve_does_not_depend_on_how_often_it_evaluates():
    cref = load("centralized_reference")
    # crop+flip on: each step's augmentation key is the one thing a chunk of steps could change
    args = ["--preset", "quickstart", "--model", "cifar_cnn_narrow", "--augment", "--num-train", "640",
            "--num-test", "300", "--steps", "20"]
    every_5, once = cref.main(args + ["--eval-every", "5"]), cref.main(args + ["--eval-every", "20"])
    assert [r["steps"] for r in every_5["rows"]] == [0, 5, 10, 15, 20] and [r["steps"] for r in once["rows"]] == [0, 20]
    assert every_5["augment"] and once["augment"]
    # the same 20 steps: the four 5-step mean losses average to the one 20-step mean loss
    four = [r["train_loss"] for r in every_5["rows"][1:]]
    assert sum(four) / 4 == pytest.approx(once["rows"][-1]["train_loss"], rel=1e-5, abs=0)
    assert every_5["rows"][-1]["accuracy"] == once["rows"][-1]["accuracy"]


def test_centralized_reference_gives_one_curve_whatever_cpus_and_host_devices_it_starts_with(tmp_path):
    """XLA's CPU code depends on the CPUs a process may use and on its host device count; the script
    fixes both before jax starts, so two processes started differently give the same curve bit for bit."""
    import os
    import subprocess
    import sys

    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")

    def run(name: str, env: dict, on_last_cpu_only: bool) -> dict:
        out = tmp_path / f"{name}.json"
        cmd = [sys.executable, str(BENCHMARKS / "centralized_reference.py"), "--preset", "quickstart", "--model",
               "cifar_cnn_narrow", "--num-train", "320", "--num-test", "200", "--steps", "10", "--eval-every", "5",
               "--json", str(out)]
        pin = (lambda: os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[-1:])) if on_last_cpu_only else None
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, preexec_fn=pin)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(out.read_text())

    root = str(BENCHMARKS.parent)
    base = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    plain = run("plain", {k: v for k, v in base.items() if k != "XLA_FLAGS"}, on_last_cpu_only=False)
    other = run("other", {**base, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}, on_last_cpu_only=True)
    curve = [(r["steps"], r["train_loss"], r["accuracy"]) for r in plain["rows"]]
    assert curve == [(r["steps"], r["train_loss"], r["accuracy"]) for r in other["rows"]]
    for result in (plain, other):
        assert result["cpu_configuration"]["cpus"] == 1 and result["cpu_configuration"]["host_devices"] == 1


@pytest.mark.slow  # a whole matrix of runs, twice
def test_paper_matrix_runs_variant_cells_and_tabulates_them_again(tmp_path):
    args = ["--scenario", "tiny", "--strategies", "felix", "--regimes", "avail100", "--ablations", "",
            "--extra-cell", "oort-async-oracle@oracle_departure=free_slot", "avail50",
            "--extra-cell", "felix@timeout_s=30", "avail100", "--seeds", "0",
            "--set", "max_aggregations=4", "--set", "target_accuracy=none", "--out", str(tmp_path)]
    pm = load("paper_matrix")
    result = pm.main(args)
    labels = sorted(r["strategy"] for r in result["rows"])
    assert labels == ["felix", "felix@timeout_s=30", "oort-async-oracle@oracle_departure=free_slot"]
    variant = tmp_path / "runs" / "oort-async-oracle+oracle_departure-free_slot-avail50-seed0"
    assert json.loads((variant / "config.json").read_text())["fleet"]["oracle_departure"] == "free_slot"
    again = pm.main(args + ["--table-only"])
    assert sorted(r["strategy"] for r in again["rows"]) == labels
    # a table of the plain cells reads neither variant's folder as a plain cell, nor another horizon's
    plain = pm.main(args[:8] + args[14:] + ["--table-only"])
    assert [(r["strategy"], Path(r["run_dir"]).name) for r in plain["rows"]] == [("felix", "felix-avail100-seed0")]
    assert pm.main(args[:8] + args[14:] + ["--set", "max_aggregations=5", "--table-only"])["rows"] == []
    assert "oort-async-oracle@oracle_departure=free_slot" in again["diagnostics"]
    # the figures: the main matrix's curves and the paper's diagnostics, redrawn by --table-only
    names = sorted(p.name for p in (tmp_path / "figures").glob("*.png"))
    assert names == ["accuracy.png", "bytes.png", "cdfs.png", "late_weights.png", "selection.png"]


def test_as_run_calibration_tabulates_both_readings_and_shows_bounds_without_ratios():
    mod = load("as_run_calibration")
    results = {(s, c): {"s_per_aggregation": 5.0 if s == "paper_code" else 2.5, "share_weight_ge_0.8": 0.6}
               for s in ("paper", "paper_code") for c in mod.CELLS}
    lines = mod.table(results).splitlines()
    fitted = next(ln for ln in lines if "[fitted]" in ln)
    assert fitted.split("|")[2:7] == [" 5 ", " 2.5 ", " x0.50 ", " 5 ", " x1.00 "]
    share = next(ln for ln in lines if ln.startswith("| TierFuse share"))
    assert share.split("|")[4].strip() == "-" and share.split("|")[6].strip() == "-"
    assert next(ln for ln in lines if "eval tasks" in ln).split("|")[3].strip() == "-"  # not measured: blank


def test_as_run_calibration_sets_switches_on_the_as_run_cells_only(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    mod = load("as_run_calibration")
    calls = []
    monkeypatch.setattr(mod, "ProcessPoolExecutor", ThreadPoolExecutor)
    monkeypatch.setattr(mod, "measure", lambda cell, semantics, aggregations, warmup, extra=None:
                        calls.append((cell, semantics, extra)) or {"s_per_aggregation": 1.0})
    out = mod.main(["--cells", "felix/syn_0", "--set", "reading.small_clients=zero_step_reference"])
    assert sorted(calls, key=str) == [("felix/syn_0", "paper", None),
                                      ("felix/syn_0", "paper_code", {"reading.small_clients": "zero_step_reference"})]
    assert out["as_run_set"] == {"reading.small_clients": "zero_step_reference"}
    calls.clear()
    mod.main(["--cells", "felix/syn_0", "--readings", "paper_code"])
    assert calls == [("felix/syn_0", "paper_code", {})]
    for bad in (["--readings", "text"], ["--readings", ""], ["--set", "novalue"], ["--fit", "--set", "a=b"]):
        with pytest.raises(SystemExit, match="as_run_calibration"):
            mod.main(bad)


def test_as_run_ablation_flips_one_group_at_a_time_and_tabulates_speed_ups():
    mod = load("as_run_ablation")
    cells = mod.cells()
    assert len(cells) == 2 * (5 * 3 - 1)  # two regimes; the oracle group skips FeLiX
    assert ("felix@" + mod.FLIPS["server"], "ref:syn_50") in cells
    rows = [{"strategy": st, "availability": "ref:mobiperf_3st_50", "time_to_target_h": h}
            for st, h in (("felix", 1.0), ("oort-async-oracle", 1.5), ("oort-oracle", None),
                          ("felix@" + mod.FLIPS["server"], 0.5), ("oort-async-oracle@" + mod.FLIPS["server"], 0.6))]
    table = mod.ablation_table(rows).splitlines()
    base = next(ln for ln in table if "none (as run)" in ln and ln.startswith("| MobiPerf"))
    assert "x1.50" in base and "not reached (0/1)" in base
    server = next(ln for ln in table if "| server |" in ln and ln.startswith("| MobiPerf"))
    assert "0.50 (1/1)" in server and "x1.20" in server


def test_as_run_ablation_gives_each_seeds_ratio_and_the_seeds_felix_wins():
    mod = load("as_run_ablation")
    # seeds 0-2: OORT+Async* 1.5/1.0, 0.8/1.0, 2.0/None (FeLiX missed); OORT* None/1.0 (only FeLiX reached)
    rows = [{"strategy": st, "availability": "ref:syn_50", "seed": seed, "time_to_target_h": h}
            for st, hours in (("felix", (1.0, 1.0, None)), ("oort-async-oracle", (1.5, 0.8, 2.0)),
                              ("oort-oracle", (None, 3.0, 2.0)))
            for seed, h in enumerate(hours)]
    base = next(ln for ln in mod.ablation_table(rows).splitlines() if "none (as run)" in ln and "| 50% |" in ln)
    cols = [c.strip() for c in base.split("|")[1:-1]]
    assert cols[2] == "1.00 (2/3)" and cols[5] == "x1.43"  # (1.5 + 0.8 + 2.0) / 3 over 1.0
    assert cols[7] == "1.50, 0.80, - (1/3)"
    assert cols[8] == "-, 3.00, - (2/3)"  # seed 0: only FeLiX reached it, a win


def test_learner_ladder_targets_follow_the_one_epoch_rule_and_refuse_a_missing_reference(tmp_path):
    ladder = load("learner_ladder")
    assert ladder.reference_target([0.320, 0.292, 0.248]) == 0.29  # the preset's own numbers
    assert ladder.reference_target([0.320, 0.312, 0.290]) == 0.31
    with pytest.raises(ValueError, match="one accuracy per seed"):
        ladder.reference_target([0.3, 0.3])
    for model in ladder.LEARNERS:
        for seed, acc in zip(ladder.REFERENCE_SEEDS, (0.30, 0.33, 0.36)):
            rows = [{"steps": 0, "accuracy": 0.1}, {"steps": ladder.REFERENCE_STEPS, "accuracy": acc}]
            (tmp_path / f"reference_{model}_seed{seed}.json").write_text(json.dumps(
                {"model": model, "seed": seed, "preset": ladder.REFERENCE_PRESET, "num_params": 7, "rows": rows}))
    targets = ladder.compute_targets(tmp_path)
    assert {m: t["target_accuracy"] for m, t in targets.items()} == {m: 0.33 for m in ladder.LEARNERS}
    (tmp_path / "reference_cifar_cnn_seed2.json").unlink()
    with pytest.raises(SystemExit, match="reference_cifar_cnn_seed2.json is missing"):
        ladder.compute_targets(tmp_path)
    with pytest.raises(SystemExit, match="targets.json is missing"):
        ladder.load_targets(tmp_path)


def test_learner_ladder_table_gives_paired_verdicts_per_learner(tmp_path):
    ladder = load("learner_ladder")
    (tmp_path / "distributions.json").write_text(json.dumps({"staleness": [0, 1, 2, 3]}))

    def row(st, seed, hours, rg="ref:syn_50"):
        return {"strategy": st, "availability": rg, "seed": seed, "time_to_target_h": hours, "run_dir": str(tmp_path),
                "_summary": {"aggregations": 100, "picked_utility_p50": 80.0}}
    rows = [row("felix", 0, 1.0), row("felix", 1, 2.0), row("oort-async-oracle", 0, 1.2),
            row("oort-async-oracle", 1, 3.0), row("oort-oracle", 0, None), row("oort-oracle", 1, 4.0)]
    targets = {m: {"target_accuracy": 0.3} for m in ladder.LEARNERS}
    table = ladder.ladder_table({("cifar_cnn_narrow", "as-run"): rows}, targets)
    line = [ln for ln in table.splitlines() if ln.startswith("| narrow")]
    assert len(line) == 1  # one regime ran, one learner and reading
    cells = [c.strip() for c in line[0].strip("|").split("|")]
    assert cells[:7] == ["narrow (44,842)", "0.30", "as-run", "50%", "1.50 (2/2)", "2.10 (2/2)", "4.00 (1/2)"]
    # OORT+Async*: ratio of means 2.1 / 1.5 = x1.40; per seed 1.2 and 1.5; geometric mean sqrt(1.8) = 1.342
    assert cells[7].startswith("x1.40; x1.34 [") and cells[7].endswith("(n=2); 1.20, 1.50 (2/2)")
    assert cells[8] == "x1.52"  # the paper's 9.4 / 6.2
    assert cells[9] == "-; x2.00 (n=1); -, 2.00 (2/2)"  # OORT* missed seed 0: no ratio of means, FeLiX wins it
    assert cells[11:] == ["100 / 100 / 100", "1.50 / 3", "80.0"]


def test_attribution_tabulates_each_step_from_its_compact_cells(tmp_path):
    """The attribution's table from compact cells by hand: step (a) reads the 250-image counts, (b) the
    10,000-image counts of the same runs; the paired ratio at the target and the curve follow them."""
    import numpy as np

    attribution = load("attribution")
    t = np.arange(0, 4000.0, 100.0)

    def cell(st, sd, slow):  # accuracy rising 0.1 -> 0.5 over `slow` * 2000 s; the 250 set reads 0.02 higher
        full = np.clip(0.1 + 0.4 * t / (2000.0 * slow), 0, 0.5)
        np.savez_compressed(attribution.compact_path(tmp_path, "longhorizon", st, "ref:mobiperf_3st_50", sd),
                            time_s=t, correct_full=np.round(full * 10_000).astype(np.uint16),
                            correct_250=np.round((full + 0.02) * 250).astype(np.uint16), num_test=10_000, window=1,
                            summary="{}")

    for sd, s in ((0, 1.5), (1, 1.2)):
        cell("felix", sd, 1.0)
        cell("oort-async-oracle", sd, s)
    curves = attribution.load_curves(tmp_path, [0, 1], ["ref:mobiperf_3st_50"], ["longhorizon"])
    assert set(k[0] for k in curves) == {"a", "b"} and len(curves) == 8
    np.testing.assert_allclose(curves["b", "felix", "ref:mobiperf_3st_50", 0][1][:3], [0.1, 0.12, 0.14])
    table, data = attribution.attribution_table(curves, [0, 1], ["ref:mobiperf_3st_50"])
    target = data["b/MobiPerf/oort-async-oracle"]["target"]
    # window 1: each run crosses the target where its own line does, so the ratio is the slow-down
    np.testing.assert_allclose(data["b/MobiPerf/oort-async-oracle"]["ratios"], [1.5, 1.2], rtol=0.02)
    assert data["a/MobiPerf/oort-async-oracle"]["target"] == target  # (a) and (b): one preset's target
    assert "(a) today's long-horizon cell" in table and "(b) + the full" in table and "OORT+Async*" in table
    assert "oort-oracle" not in data and "x1.66" in table  # no OORT* cell; the paper's ratio shown


def test_attribution_names_the_cells_the_wall_budget_cut(tmp_path):
    """A compact cell whose run the wall budget cut (``--cell-budget-s``) is named in the table with the
    virtual hours it reached; a finished one is not; runs cut before any full window give no curve
    levels and no error."""
    import json

    import numpy as np

    attribution = load("attribution")
    t = np.arange(0, 30.0, 10.0)  # three checkpoints: no 20-accuracy window filled
    for st, stop, end in (("felix", "wall_budget", 1800.0), ("oort-async-oracle", "max_virtual_hours", 10800.0)):
        np.savez_compressed(attribution.compact_path(tmp_path, "longhorizon", st, "ref:mobiperf_3st_50", 0),
                            time_s=t, correct_full=np.full(3, 1000, np.uint16), correct_250=np.full(3, 25, np.uint16),
                            num_test=10_000, window=20, full_window=True,
                            summary=json.dumps({"stop_reason": stop, "end_time_s": end}))
    cut = attribution.cut_cells(tmp_path, [0], ["ref:mobiperf_3st_50"], ["longhorizon"])
    assert cut == {("longhorizon", "felix", "ref:mobiperf_3st_50", 0): 0.5}
    curves = attribution.load_curves(tmp_path, [0], ["ref:mobiperf_3st_50"], ["longhorizon"])
    table, data = attribution.attribution_table(curves, [0], ["ref:mobiperf_3st_50"], cut)
    assert "longhorizon FeLiX MobiPerf seed 0 at 0.50 h" in table and "OORT+Async* MobiPerf seed 0 at" not in table
    assert "| - (0/1) | - (0/1) |" in table  # neither reached the target: no mean of nothing
    assert data["b/MobiPerf/oort-async-oracle"]["curve"] == []
    # the next run takes the cut cell again, and the cell with no compact file; not the finished one
    todo, cut_before = attribution.cells_to_run(tmp_path, "longhorizon", [0], ["ref:mobiperf_3st_50"],
                                                attribution.STRATEGIES)
    assert todo == [("felix", "ref:mobiperf_3st_50", 0), ("oort-oracle", "ref:mobiperf_3st_50", 0)]
    assert cut_before == cut


def test_attribution_runs_the_strategies_named_and_refuses_an_unknown_one():
    """``--strategies``: the cells of the named strategies alone, in the matrix's order; a name the
    attribution does not know ends the script in one line naming the known ones (before any run)."""
    attribution = load("attribution")
    order = attribution.cell_order([0, 1], ["ref:mobiperf_3st_50"], ["longhorizon"], ["felix", "oort-async-oracle"])
    assert order == [("longhorizon", st, "ref:mobiperf_3st_50", sd) for sd in (0, 1)
                     for st in ("felix", "oort-async-oracle")]
    assert len(attribution.cell_order([0], ["ref:mobiperf_3st_50"], ["longhorizon"])) == 3  # all three by default
    with pytest.raises(SystemExit, match=r"unknown strategy 'fedbuff'; known: felix, oort-async-oracle, oort-oracle"):
        attribution.main(["--strategies", "felix,fedbuff", "--out", "unused"])


def test_byzantine_study_tabulates_each_rule_attacked_against_honest_paired_by_seed():
    study = load("byzantine_study")
    rg = "ref:syn_50"

    def row(st, seed, hours, acc, share=None):
        return {"strategy": st, "availability": rg, "seed": seed, "time_to_target_h": hours, "final_accuracy": acc,
                "_summary": {"adversarial_weight_share": share, "adversarial_tasks": None if share is None else 35,
                             "dispatched_train": 100}}
    mk = study.RULES[4]  # Multi-Krum
    honest = [row("felix", 0, 1.0, 0.30), row("felix", 1, 2.0, 0.30), row(mk, 0, 1.0, 0.30), row(mk, 1, 1.0, 0.30)]
    attacked = [row("felix", 0, None, 0.10, 0.3) | {"stop_reason": "diverged: no client update accepted"},
                row("felix", 1, None, 0.12, 0.5) | {"stop_reason": "max_virtual_s"},
                row(mk, 0, 2.0, 0.30, 0.1), row(mk, 1, 4.0, 0.29, 0.2)]
    table = study.study_table({"honest": honest, "sign_flip-30": attacked}, 1.5)
    lines = {ln.split("|")[2].strip(): [c.strip() for c in ln.strip("|").split("|")]
             for ln in table.splitlines() if ln.startswith("| 50%")}
    # TierFuse: reached both seeds honest (mean 1.5 h), neither attacked: no paired ratio, the final accuracy shown
    assert lines["TierFuse"][2:] == ["2/2 1.50 h", "0.300", "0/2, 1 diverged", "0.110", "-", "-", "35% / 40%"]
    # Multi-Krum: attacked / honest per seed 2 and 4 -> geometric mean sqrt(8) = 2.83; TierFuse never got there
    cells = lines["Multi-Krum (f = 3)"]
    assert cells[2:6] == ["2/2 1.00 h", "0.300", "2/2 3.00 h", "0.295"]
    assert cells[6].startswith("x2.83 [") and cells[6].endswith("(n=2)")
    assert cells[7:] == ["-", "35% / 15%"]


def test_byzantine_study_reads_an_earlier_studys_rows_and_a_cell_finished_here_replaces_its_row(tmp_path):
    study = load("byzantine_study")
    rg = "ref:syn_50"
    mk = study.RULES[4]

    def row(st, seed, hours, **counts):
        return {"strategy": st, "availability": rg, "seed": seed, "time_to_target_h": hours, "final_accuracy": 0.3,
                "run_dir": f"elsewhere/{st}-{seed}", **counts}
    doc = {"scenario": study.SCENARIO, "hours": 1.5, "settings": study.SETTINGS,
           "rows": {"honest": [row(mk, 0, 1.0), row(mk, 1, 1.0)],
                    # seed 0 recorded before the tasks' count was kept: its mean says over how many seeds
                    "sign_flip-30": [row(mk, 0, 2.0, adversarial_weight_share=0.1),
                                     row(mk, 1, 9.0, adversarial_weight_share=0.3, adversarial_tasks=40,
                                         dispatched_train=100)]}}
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps(doc))
    recorded = study.recorded_rows(path, 1.5)
    assert recorded["sign_flip-30"][1]["_summary"]["adversarial_tasks"] == 40
    # seed 1's attacked cell finished here (4.0 h): it replaces the recorded 9.0 h
    here = {"sign_flip-30": [row(mk, 1, 4.0) | {"_summary": {"adversarial_weight_share": 0.2,
                                                             "adversarial_tasks": 30, "dispatched_train": 100}}]}
    rows = study.merged(here, recorded)
    assert sorted((r["seed"], r["time_to_target_h"]) for r in rows["sign_flip-30"]) == [(0, 2.0), (1, 4.0)]
    line = [ln for ln in study.study_table(rows, 1.5).splitlines() if "Multi-Krum" in ln][0]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[4] == "2/2 3.00 h" and cells[6].startswith("x2.83 [")  # sqrt(2 * 4)
    assert cells[8] == "30% (1 of 2 seeds) / 15%"
    # another horizon, scenario or setting, or a cell that is not the study's, is refused in one line
    for change, expected in (({"hours": 3.0}, "ran 3.0 virtual hours, --hours is 1.5"),
                             ({"scenario": "tiny"}, "its scenario is 'tiny'"),
                             ({"settings": {**study.SETTINGS, "honest": ["seed=4"]}}, "setting 'honest' ran with"),
                             ({"rows": {"honest": [row("fedavg", 0, 1.0)]}}, "is not one of this study's cells")):
        path.write_text(json.dumps(doc | change))
        with pytest.raises(ValueError, match=expected):
            study.recorded_rows(path, 1.5)
    with pytest.raises(FileNotFoundError, match="no such file"):
        study.recorded_rows(tmp_path / "none.json", 1.5)


def test_byzantine_study_takes_from_a_shorter_horizon_only_the_runs_that_ended_before_it(tmp_path):
    study = load("byzantine_study")

    def row(st, seed, reason):
        return {"strategy": st, "availability": "ref:syn_50", "seed": seed, "time_to_target_h": None,
                "final_accuracy": 0.2, "stop_reason": reason}
    reasons = ["target", "diverged: no client update accepted in 5 buffers in a row", "max_aggregations",
               "max_virtual_s", "stalled: no pending events (every task waits on a client that does not return "
               "within the run's horizon)"]
    rows = [row(st, 0, reason) for st, reason in zip(study.RULES, reasons)]
    path = tmp_path / "short.json"
    path.write_text(json.dumps({"scenario": study.SCENARIO, "hours": 1.5, "settings": study.SETTINGS,
                                "rows": {"sign_flip-30": rows}}))
    longer = study.recorded_rows(path, 3.0)["sign_flip-30"]
    assert [r["stop_reason"] for r in longer] == reasons[:3] and {r["ran_hours"] for r in longer} == {1.5}
    assert len(study.recorded_rows(path, 1.5)["sign_flip-30"]) == 5  # its own horizon: every row
    # the cells stopped at 1.5 h or stalled run again; the others are not started
    skip = study.phase_recorded("sign_flip-30", "0", study.recorded_rows(path, 3.0))
    assert skip == [(st, "ref:syn_50", 0) for st in study.RULES[:3]]
    # written back at 3 h, a row keeps the horizon it ran, and reads as a 3 h row again
    again = tmp_path / "long.json"
    study.main(["--table-only", "--hours", "3", "--out", str(tmp_path / "none"), "--rows-from", str(path),
                "--json", str(again)])
    written = json.loads(again.read_text())
    assert written["hours"] == 3 and [r["ran_hours"] for r in written["rows"]["sign_flip-30"]] == [1.5] * 3
    assert len(study.recorded_rows(again, 3.0)["sign_flip-30"]) == 3


def test_a_signal_as_paper_matrix_draws_its_figures_lets_them_finish_then_ends_with_its_status(tmp_path, monkeypatch,
                                                                                               capsys):
    import os
    import signal

    pm = load("paper_matrix")
    drawn = pm.draw_figures

    def signalled(*a, **kw):
        os.kill(os.getpid(), signal.SIGTERM)
        return drawn(*a, **kw)

    monkeypatch.setattr(pm, "draw_figures", signalled)
    with pytest.raises(SystemExit) as stop:
        pm.main(["--scenario", "tiny", "--strategies", "felix", "--regimes", "avail100", "--ablations", "",
                 "--seeds", "0", "--set", "max_aggregations=2", "--set", "target_accuracy=none", "--out",
                 str(tmp_path), "--json", str(tmp_path / "matrix.json")])
    assert stop.value.code == 128 + signal.SIGTERM
    assert "paper_matrix.py: SIGTERM came after the last cell, as the matrix wrote its tables and figures; they " \
           f"are complete in {tmp_path}" in capsys.readouterr().err
    assert (tmp_path / "table.md").is_file() and json.loads((tmp_path / "matrix.json").read_text())["rows"]


def test_paper_matrix_skip_cell_leaves_only_that_cell_out(tmp_path, monkeypatch):
    pm = load("paper_matrix")
    ran = []
    monkeypatch.setattr(pm, "run_matrix", lambda *a, cells, **kw: ran.extend(cells) or [])
    monkeypatch.setattr(pm, "draw_figures", lambda *a, **kw: [])
    pm.main(["--scenario", "tiny", "--strategies", "felix,fedbuff", "--regimes", "avail100,avail50", "--ablations", "",
             "--seeds", "0,1", "--skip-cell", "fedbuff", "avail50", "1", "--skip-cell", "felix", "avail100", "0",
             "--out", str(tmp_path)])
    assert len(ran) == 6 and ("fedbuff", "avail50", 1) not in ran and ("felix", "avail100", 0) not in ran
    assert ("fedbuff", "avail50", 0) in ran and ("felix", "avail100", 1) in ran


def test_byzantine_study_does_not_rerun_the_cells_rows_from_holds(tmp_path, monkeypatch):
    study = load("byzantine_study")
    calls = []
    monkeypatch.setattr(study.paper_matrix, "main", calls.append)

    def row(st, rg, seed):
        return {"strategy": st, "availability": rg, "seed": seed, "time_to_target_h": 1.0, "final_accuracy": 0.3}
    honest = [row(st, rg, 0) for rg in study.REGIMES for st in study.RULES]  # phase 0, whole
    scaled = [row(st, rg, 2) for rg in study.REGIMES for st in study.RULES][:9]  # phase 13 less three cells
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps({"scenario": study.SCENARIO, "hours": 1.5, "settings": study.SETTINGS,
                                "rows": {"honest": honest, "scale-30": scaled}}))
    assert study.PHASES[0] == ("honest", "0") and study.PHASES[13] == ("scale-30", "2")
    study.main(["--phases", "0,13", "--rows-from", str(path), "--out", str(tmp_path / "study")])
    assert len(calls) == 1  # phase 0 not started at all
    argv = calls[0]
    skipped = [tuple(argv[i + 1:i + 4]) for i, a in enumerate(argv) if a == "--skip-cell"]
    assert skipped == [(r["strategy"], r["availability"], "2") for r in scaled]
    assert argv[argv.index("--out") + 1].endswith("scale-30")


def test_byzantine_study_tabulates_a_recorded_study_alone_and_writes_its_counts_back(tmp_path):
    study = load("byzantine_study")
    counts = {"aggregations": 600, "partial_updates": 12, "interrupted_tasks": 12}
    rows = [{"strategy": st, "availability": rg, "seed": sd, "time_to_target_h": 0.5, "final_accuracy": 0.3,
             "run_dir": "elsewhere", **counts} for sd in (0, 1) for rg in study.REGIMES for st in study.FEDPROX_FELIX]
    rows = rows[:-3]  # seed 1 holds one cell of four: out of the table, said so
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"scenario": study.SCENARIO, "hours": 1.5, "settings": study.SETTINGS,
                                   "rows": {"fedprox-felix": rows}}))
    again = tmp_path / "again.json"
    result = study.main(["--table-only", "--out", str(tmp_path / "none"), "--rows-from", str(earlier),
                         "--json", str(again)])
    assert "and TierFuse | 50% (ref:syn_50) | 1/1 0.50 h | 0.300 | 600 | 12 | 1/1 0.50 h |" in result["table"]
    assert "Not in the table (a seed counts only with every cell of its setting): fedprox-felix seed 1, 1 of 4 " \
           "cells." in result["table"]
    written = json.loads(again.read_text())["rows"]["fedprox-felix"]
    assert all(r[k] == v for r in written for k, v in counts.items()) and "recorded_in" not in written[0]
    assert not (tmp_path / "none" / "fedprox-felix").exists()  # no figures from rows without events


def test_byzantine_study_tabulates_fedprox_partial_against_resume_on_each_fleet():
    study = load("byzantine_study")
    partial, resume = study.FEDPROX_FELIX

    def row(st, seed, hours, aggs, partials, interrupted):
        return {"strategy": st, "availability": "ref:syn_50", "seed": seed, "time_to_target_h": hours,
                "final_accuracy": 0.3, "_summary": {"aggregations": aggs, "partial_updates": partials,
                                                    "interrupted_tasks": interrupted}}
    rows = [row(partial, 0, 0.5, 600, 12, 12), row(partial, 1, 0.4, 500, 8, 8),
            row(resume, 0, 1.0, 900, 0, 20), row(resume, 1, 0.4, 520, 0, 10)]
    table = study.study_table({"fedprox-felix": rows}, 1.5)
    line = [ln for ln in table.splitlines() if ln.startswith("| FeLiX's selectors")]
    assert len(line) == 1
    cells = [c.strip() for c in line[0].strip("|").split("|")]
    assert cells[1:10] == ["50% (ref:syn_50)", "2/2 0.45 h", "0.300", "550", "10", "2/2 0.70 h", "0.300", "710", "15"]
    assert cells[10].startswith("x0.71 [") and cells[10].endswith("(n=2)")  # sqrt(0.5 * 1.0)
