"""The real-data presets build and run (slow: decode CIFAR-10 / compute log-mels once, cached after)."""

import os

import pytest

from felix_jax.experiment import get_preset
from felix_jax.experiment.runner import run
from tests.conftest import CIFAR10_FILE, REFERENCE_FILE, SPEECH_FILE, needs_data

pytestmark = pytest.mark.slow


# the data each run reads: the data set, and the reference file for the mobiperf / ref: traces,
# partition=reference and device_profile=reference
CIFAR_AND_TRACES = needs_data(CIFAR10_FILE, REFERENCE_FILE)


@pytest.mark.parametrize("preset,strategy,regime", [
    pytest.param("cifar10-small", "felix", "mobiperf", marks=CIFAR_AND_TRACES),
    pytest.param("cifar10-small", "refl", "avail50", marks=needs_data(CIFAR10_FILE)),
    pytest.param("speech-small", "oort-async-oracle", "avail90", marks=needs_data(SPEECH_FILE)),
    pytest.param("speech-longhorizon", "felix", "ref:mobiperf_3st_50", marks=needs_data(SPEECH_FILE, REFERENCE_FILE)),
    pytest.param("speech-longhorizon", "oort-oracle", "ref:mobiperf_3st_50",
                 marks=needs_data(SPEECH_FILE, REFERENCE_FILE)),
])
def test_real_data_preset_runs(preset, strategy, regime):
    sc = get_preset(preset).with_overrides({"strategy": strategy, "availability": regime, "max_aggregations": "3",
                                            "target_accuracy": "none"})
    s = run(sc, None).summary
    assert s["aggregations"] == 3 and s["bytes_total"] > 0
    assert os.environ["FELIX_JAX_DATA"]


# The budget of benchmarks/paper_matrix.py's CPU run (BENCHMARKS.md, "The paper's table on its
# own traces"): 0.3 virtual hours is long enough here, since both reach 25% within 0.12 h.
FIDELITY_CPU = {"target_accuracy": "0.25", "num_test": "250", "max_virtual_hours": "0.12", "seed": "0"}


@CIFAR_AND_TRACES
def test_fidelity_preset_at_50_percent_brings_felix_and_oort_async_to_the_target():
    """cifar10-fidelity on the paper's own 50% trace (ref:syn_50, true time scale), one seed and a reduced
    budget: both strategies reach the target within it, and each run's time to target is one of its
    test checkpoints. Which one gets there first at one seed is not asserted: it has moved with the
    numerics of the jax build (FeLiX first, 0.089 h against 0.109 h, on the build of 2026-11-29; OORT+Async
    first, 0.075 h against 0.097 h, on jax 0.10.2, the same code before and after 2026-12-04's change):
    the ordering is a multi-seed, paired result (BENCHMARKS.md), not a property of one run."""
    base = get_preset("cifar10-fidelity").with_overrides({**FIDELITY_CPU, "availability": "ref:syn_50"})
    for strategy in ("felix", "oort-async"):
        result = run(base.with_overrides({"strategy": strategy}), None)
        hours = result.summary["time_to_target_h"]
        assert hours is not None and 0 < hours <= 0.12, (strategy, hours)
        assert any(abs(c.time_s / 3600 - hours) < 1e-9 for c in result.record.checkpoints), strategy


@CIFAR_AND_TRACES
def test_long_horizon_preset_is_deterministic_and_reports_the_eval_tier(tmp_path):
    """cifar10-longhorizon at one seed and a reduced budget (a regression check of determinism and
    of the summary fields, not of who wins): two runs give the same metrics byte for byte, and the
    eval tier's counts add up. As the code ran (paper_code): the paper's text dispatches no eval task in
    the first 200 aggregations of this cell (measured; the ladder's described runs evaluate only later),
    so its eval-tier fields would be vacuous here; as run, a train pick first uses an eval's utility
    after ~100 aggregations."""
    sc = get_preset("cifar10-longhorizon").with_overrides({"strategy": "felix", "availability": "ref:mobiperf_3st_50",
                                                           "max_aggregations": "200", "target_accuracy": "none",
                                                           "eval_selector.min_age": "5", "semantics": "paper_code"})
    a = run(sc, tmp_path / "a", plot=False).summary
    b = run(sc, tmp_path / "b", plot=False).summary
    assert (tmp_path / "a" / "metrics.csv").read_bytes() == (tmp_path / "b" / "metrics.csv").read_bytes()
    assert a["aggregations"] == 200 and a["dispatched_eval"] > 0
    assert a["evals_on_avl_eval"] + a["evals_on_avl_train"] == a["dispatched_eval"]
    assert a["evals_per_aggregation"] == a["dispatched_eval"] / 200
    assert 0 < a["train_picks_eval_utility_share"] <= 1
    assert a["picked_utility_mean"] > 0 and a["picked_duration_mean_s"] > 0
    for key in ("utility_age_p50", "utility_age_p95", "agg_weight_fresh_mean", "late_update_share"):
        assert a[key] == b[key] and a[key] is not None
