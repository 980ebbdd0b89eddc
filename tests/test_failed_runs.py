"""A run that fails or diverges leaves a way forward: an honest summary, and a next step in one line."""

from __future__ import annotations

import json
import math

import jax
import pytest

from felix_jax.cli import main
from felix_jax.cohort.evaluate import evaluate, held_out_metrics
from felix_jax.experiment import get_preset
from felix_jax.experiment.build import build_simulator
from felix_jax.experiment.runner import run

TINY = ["--preset", "tiny", "--quiet", "--set", "max_aggregations=2", "--set", "target_accuracy=none"]


def test_non_finite_logits_report_no_accuracy():
    assert held_out_metrics(0.25, 1.5) == (0.25, 1.5)
    acc, loss = held_out_metrics(0.2, math.nan)
    assert math.isnan(acc) and math.isnan(loss)
    assert math.isnan(held_out_metrics(0.2, math.inf).accuracy)
    sim = build_simulator(get_preset("tiny"))
    nan_params = jax.tree_util.tree_map(lambda p: p * math.nan, sim.params)
    assert math.isnan(evaluate(sim.model, nan_params, sim.test).accuracy)
    assert math.isfinite(evaluate(sim.model, sim.params, sim.test).accuracy)


@pytest.mark.usefixtures("without_debug_checks")  # every client update is non-finite
def test_a_diverged_run_counts_only_the_steps_it_took():
    # a step size no update survives: every update is non-finite, the guard rejects them all, and the run
    # stops as diverged after max_empty_buffers (5) empty buffers; the model is the initial one throughout
    sc = get_preset("tiny").with_overrides({"learning_rate": "1e38", "max_aggregations": "20",
                                            "target_accuracy": "none"})
    result = run(sc)
    s = result.summary
    assert s["stop_reason"].startswith("diverged: no client update accepted in the last 5 buffers")
    assert (s["aggregations"], s["model_steps"], s["updates_accepted"]) == (0, 0, 0)
    assert s["rejected_updates_nonfinite"] == 2 * 5  # K = 2 per buffer, 5 buffers
    # the accuracy reported is the initial model's (every checkpoint is of that model), a real one
    first = result.record.checkpoints[0].accuracy
    assert math.isfinite(first) and s["final_accuracy"] == first == s["best_accuracy"]


def test_a_normal_run_takes_a_step_per_aggregation():
    s = run(get_preset("tiny").with_overrides({"max_aggregations": "3", "target_accuracy": "none"})).summary
    assert s["aggregations"] == s["model_steps"] == 3 and s["updates_accepted"] >= 3


def test_a_folder_left_without_summary_or_snapshot_says_what_to_do(tmp_path):
    out = tmp_path / "r"
    assert main(["run", *TINY, "--out", str(out)]) == 0
    (out / "summary.json").unlink()  # as a run killed outright before its end, without a snapshot
    with pytest.raises(SystemExit) as again:
        main(["run", *TINY, "--out", str(out)])
    assert str(again.value) == (
        f"felix-jax run: {out} holds a run that stopped before its end with nothing to resume (config.json, no "
        f"summary.json, no snapshot): pass --overwrite to run it again there (felix-jax run --config "
        f"{out / 'config.json'} --out {out} --overwrite), or choose another --out")
    with pytest.raises(SystemExit) as resumed:
        main(["run", "--resume", str(out), "--quiet"])
    assert str(resumed.value).startswith(f"felix-jax run: {out} holds no snapshot to resume")
    assert str(resumed.value).endswith(f"run it again there with felix-jax run --config {out / 'config.json'} "
                                       f"--out {out} --overwrite, or choose another --out")
    assert main(["run", "--config", str(out / "config.json"), "--out", str(out), "--overwrite", "--quiet"]) == 0
    assert json.loads((out / "summary.json").read_text())["aggregations"] == 2


BAD_SELECTOR = '''
import numpy as np
from felix_jax import plugins
from felix_jax.policies import Selector

@plugins.selector("test-unknown-from-round-2")
def make():
    def select(state, ctx, k):
        ids = np.flatnonzero(ctx.eligible)[: int(k)]
        if ctx.round >= 2:  # breaks the contract: a client that does not exist
            ids = np.array([ctx.view.num_clients + 5])
        return ids, state
    return Selector("test-unknown-from-round-2", lambda: None, select)

plugins.strategy("test-repeats", mode="async", knowledge="none", selector="test-unknown-from-round-2",
                 aggregator="fedbuff")
'''


def test_a_policy_error_mid_run_leaves_a_summary_a_snapshot_and_the_next_step(tmp_path):
    (tmp_path / "bad.py").write_text(BAD_SELECTOR)
    out = tmp_path / "r"
    argv = ["run", *TINY, "--set", f"plugins={tmp_path / 'bad.py'}", "--set", "strategy=test-repeats", "--set",
            "max_aggregations=6", "--out", str(out)]
    with pytest.raises(SystemExit) as stop:
        main(argv)
    message = str(stop.value)
    assert "\n" not in message and message.startswith("felix-jax run: selector test-unknown-from-round-2 ")
    assert message.endswith(f"a stop snapshot are in {out}; continue with: felix-jax run --resume {out} (it meets "
                            "the same failure again unless its cause is gone), or run it again with --overwrite")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "policy_error" and summary["stopped_by"].startswith("PolicyError: selector")
    # the event that reached version 2 picked a client for it and failed: the results end at the whole event
    # before it, with one aggregation
    assert summary["aggregations"] == 1 and summary["events"] > 0
    assert (out / "snapshot" / "LATEST").is_file()
    with pytest.raises(SystemExit, match="policy_error|the same failure again"):  # resumable: meets it again
        main(["run", "--resume", str(out), "--quiet"])


def test_a_device_error_mid_run_is_resumable_to_the_uninterrupted_result(tmp_path, monkeypatch):
    from felix_jax.fleet.simulator import FleetSimulator

    original, failed = FleetSimulator.aggregate, []

    def once(self, updates):  # the device fails once, at the third aggregation of the first run only
        if self.version == 2 and not failed:
            failed.append(True)
            raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: out of memory")
        return original(self, updates)

    monkeypatch.setattr(FleetSimulator, "aggregate", once)
    out, whole = tmp_path / "r", tmp_path / "whole"
    argv = [*TINY, "--set", "max_aggregations=4"]
    with pytest.raises(SystemExit) as stop:
        main(["run", *argv, "--out", str(out)])
    assert str(stop.value).startswith("felix-jax run: device error: RESOURCE_EXHAUSTED: out of memory; the run "
                                      "stopped after 2 aggregations")
    assert json.loads((out / "summary.json").read_text())["stop_reason"] == "device_error"
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    assert main(["run", *argv, "--out", str(whole)]) == 0
    resumed, straight = (json.loads((d / "summary.json").read_text()) for d in (out, whole))
    assert resumed["stop_reason"] == straight["stop_reason"] == "max_aggregations"
    assert (out / "metrics.csv").read_text() == (whole / "metrics.csv").read_text()
