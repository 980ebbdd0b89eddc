"""End to end: scenarios, the runner's results folder, determinism, the CLI."""

import json
import os
import signal

import pytest

from felix_jax.cli import main
from felix_jax.experiment import Scenario, get_preset
from felix_jax.experiment.runner import run
from felix_jax.options import OptionError

TINY = get_preset("tiny")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    return run(TINY, out), out


def test_end_to_end_tiny_model_reaches_a_low_target(tiny_run):
    result, out = tiny_run
    s = result.summary
    assert s["stop_reason"] == "target" and s["time_to_target_s"] is not None
    assert s["final_accuracy"] >= 0.5
    for name in ("config.json", "metrics.csv", "summary.json", "accuracy.png"):
        assert (out / name).exists()
    summary = json.loads((out / "summary.json").read_text())
    for key in ("time_to_target_s", "bytes_total", "aggregations", "final_accuracy", "seed", "agg_interval_p50_s",
                "agg_interval_p95_s"):
        assert key in summary
    # bytes: every dispatched train task downloads the model, every reply uploads it
    mb = json.loads((out / "config.json").read_text())["model"]["bytes_on_wire"]
    assert s["bytes_total"] == mb * (s["dispatched_train"] + s["replies_train"])


def test_same_seed_identical_metrics_different_seed_different(tiny_run, tmp_path):
    _, out = tiny_run
    run(TINY, tmp_path / "again")
    assert (tmp_path / "again" / "metrics.csv").read_text() == (out / "metrics.csv").read_text()
    run(TINY.with_overrides({"seed": "1"}), tmp_path / "other")
    assert (tmp_path / "other" / "metrics.csv").read_text() != (out / "metrics.csv").read_text()


def test_sync_fedavg_runs_and_drops_nothing_it_should_keep(tmp_path):
    sc = TINY.with_overrides({"strategy": "fedavg", "aggregation_goal": "3", "max_aggregations": "5",
                              "target_accuracy": "none"})
    s = run(sc, None).summary
    assert s["aggregations"] == 5 and s["stop_reason"] == "max_aggregations"
    assert s["staleness_p90"] == 0  # sync FedAvg aggregates fresh updates only


def test_unavailable_fleet_stalls_without_knowledge(tmp_path):
    # avail50 with knowledge 'none': after the first 600 s slot (everyone starts
    # available) tasks wait on absent clients, timeouts fire, tasks are interrupted.
    # half an hour (three slots) holds 22 timeouts and 29 interrupted tasks; 2 hours held 90 and 77
    sc = TINY.with_overrides({"availability": "avail50", "target_accuracy": "none", "max_aggregations": "400",
                              "max_virtual_hours": "0.5"})
    s = run(sc, None).summary
    assert s["timeouts"] > 0 and s["interrupted_tasks"] > 0


def test_scenario_overrides_parse_by_type_and_reject_unknown_fields():
    sc = Scenario().with_overrides({"num_clients": "7", "alpha": "0.1", "augment": "true",
                                    "target_accuracy": "none", "strategy": "fedavg"})
    assert (sc.num_clients, sc.alpha, sc.augment, sc.target_accuracy, sc.strategy) == (7, 0.1, True, None, "fedavg")
    with pytest.raises(OptionError, match="num_client: unknown scenario field"):
        Scenario().with_overrides({"num_client": "7"})
    with pytest.raises(ValueError):
        Scenario().with_overrides({"alpha": "-1"})


def test_unknown_names_give_clear_errors():
    from felix_jax.experiment.registry import make_trace
    from felix_jax.experiment.strategies import get_strategy

    with pytest.raises(KeyError, match=r"unknown strategy 'fedsgd'; did you mean 'fedavg'\? nearest known: .*fedbuff"):
        get_strategy("fedsgd")
    with pytest.raises(KeyError, match="avail100"):
        make_trace("avail42", 3, 0)


def test_cli_list_and_bad_set(capsys):
    assert main(["run", "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("quickstart", "fedavg", "fedbuff", "avail100", "avail90", "avail50", "mobiperf", "digits-drift",
                 "stream options", "label_delay_hours", "update_guard options"):
        assert name in out
    with pytest.raises(SystemExit, match="key=value"):
        main(["run", "--set", "alpha"])
    with pytest.raises(SystemExit, match="unknown scenario field"):
        main(["run", "--set", "nope=1"])


def test_cli_run_writes_results(tmp_path, capsys):
    assert main(["run", "--preset", "tiny", "--set", "max_aggregations=3", "--set", "target_accuracy=none",
                 "--out", str(tmp_path / "r"), "--quiet"]) == 0
    assert "stop reason" in capsys.readouterr().out
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["aggregations"] == 3


def test_cli_missing_data_is_a_clean_error(monkeypatch, tmp_path):
    monkeypatch.delenv("FELIX_JAX_DATA", raising=False)
    monkeypatch.setenv("FELIX_JAX_CACHE", str(tmp_path / "cache"))  # a data home without CIFAR-10
    with pytest.raises(SystemExit, match="needs cifar10 .*get it with `felix-jax data fetch cifar10`"):
        main(["run", "--preset", "cifar10-small", "--quiet", "--out", str(tmp_path / "never-written")])
    assert not (tmp_path / "never-written").exists()


def test_results_stream_to_disk_as_the_run_goes(tmp_path, monkeypatch):
    import csv

    from felix_jax.experiment import runner
    from felix_jax.experiment.results import METRIC_COLUMNS, write_metrics_csv

    seen = []  # at each checkpoint: (config.json written?, metrics rows on disk, summary.json written?)

    def watch(self, cp):
        rows = list(csv.reader(open(tmp_path / "r" / "metrics.csv", newline="")))
        assert rows[0] == METRIC_COLUMNS
        seen.append(((tmp_path / "r" / "config.json").exists(), len(rows) - 1,
                     (tmp_path / "r" / "summary.json").exists()))

    monkeypatch.setattr(runner.RunProgress, "__call__", watch)
    result = run(TINY.with_overrides({"max_aggregations": "4", "target_accuracy": "none"}), tmp_path / "r")
    assert seen == [(True, n, False) for n in range(1, len(result.record.checkpoints) + 1)]
    # the streamed file is byte for byte the one the end-of-run writer makes
    write_metrics_csv(tmp_path / "whole.csv", result.record.checkpoints)
    assert (tmp_path / "r" / "metrics.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()


def test_a_signal_stops_the_run_after_the_current_event_and_handlers_come_back(tmp_path, monkeypatch):
    from felix_jax.experiment import runner

    def interrupt_at_version_2(self, cp):
        if cp.version == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(runner.RunProgress, "__call__", interrupt_at_version_2)
    sc = TINY.with_overrides({"max_aggregations": "50", "target_accuracy": "none"})
    result = run(sc, tmp_path / "r", stop_on_signals=True)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert result.interrupted_by == signal.SIGTERM
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted" and summary["aggregations"] == 2
    assert len((tmp_path / "r" / "metrics.csv").read_text().splitlines()) == 1 + 3  # versions 0, 1, 2


def test_request_stop_keeps_a_stop_reason_already_given():
    from felix_jax.experiment.runner import build_simulator

    sim = build_simulator(TINY)
    sim.request_stop("asked")
    sim.request_stop("asked again")
    record = sim.run()
    assert record.stop_reason == "asked" and len(record.checkpoints) == 1 and record.aggregation_times == [0.0]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_as_compare_draws_its_figures_lets_them_finish_then_ends_with_its_status(tmp_path, monkeypatch,
                                                                                          capsys, sig):
    """After the last cell the comparison writes its tables, figures and report; a signal then (before,
    Python's own handler raised KeyboardInterrupt there, and inside jax's garbage-collection callback it was
    dropped: the command went on and exited 0) lets them finish and ends the command with 128 + signal."""
    from felix_jax.experiment.figures import comparison

    drawn = comparison.plot_comparison

    def signalled(*a, **kw):
        os.kill(os.getpid(), sig)
        return drawn(*a, **kw)

    monkeypatch.setattr(comparison, "plot_comparison", signalled)
    # Python's own SIGINT handling, as in a terminal (a suite started in the background by a shell without job
    # control inherits SIGINT ignored, and an ignored SIGINT stays ignored)
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
        with pytest.raises(SystemExit) as stop:
            main(["compare", "--scenario", "tiny", "--strategies", "felix", "--availability", "avail100", "--seeds",
                  "0", "--set", "max_aggregations=2", "--set", "target_accuracy=none", "--quiet", "--out",
                  str(tmp_path)])
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert stop.value.code == 128 + sig
    err = capsys.readouterr().err
    assert (f"felix-jax compare: {signal.Signals(sig).name} came after the last cell, as the comparison wrote its "
            f"tables and figures; they are complete in {tmp_path}") in err
    assert (tmp_path / "table.txt").is_file() and (tmp_path / "report.html").is_file()
    assert list((tmp_path / "figures").glob("*.png")) or list(tmp_path.glob("*.png"))


def test_compare_writes_the_pooled_statistics_and_warns_below_three_seeds(tmp_path, capsys):
    import csv

    from felix_jax.experiment.compare import FEW_SEEDS_WARNING, POOLED_COLUMNS

    rc = main(["compare", "--scenario", "tiny", "--strategies", "felix,fedbuff", "--availability", "avail100",
               "--seeds", "0", "--set", "max_aggregations=2", "--set", "target_accuracy=none", "--quiet",
               "--out", str(tmp_path)])
    assert rc == 0
    printed = capsys.readouterr().out
    table = (tmp_path / "table.txt").read_text()
    assert FEW_SEEDS_WARNING in table and FEW_SEEDS_WARNING in printed  # one seed: no std, no interval
    assert "Student t" in table and "per-seed x ref" in table
    with open(tmp_path / "summary_pooled.csv", newline="") as f:
        pooled = list(csv.DictReader(f))
    assert list(pooled[0]) == POOLED_COLUMNS and [p["strategy"] for p in pooled] == ["felix", "fedbuff"]
    felix, fedbuff = pooled
    assert (felix["n_seeds"], felix["n_reached"], felix["hours_std"], felix["hours_ci95_low"]) == ("1", "0", "", "")
    assert (felix["ref_wins"], fedbuff["ref_wins"], fedbuff["per_seed_ratio"]) == ("", "0/1", "")  # neither reached it
