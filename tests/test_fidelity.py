"""Trustworthy comparisons: every policy option reachable, the known deviations fixed.

Each test of a deviation failed on the code before the fix (the finding it pins
is named in its docstring).
"""

import json
import math
import subprocess
import sys

import jax
import numpy as np
import pytest

from felix_jax.cohort import LocalTrainConfig
from felix_jax.cohort.local import local_train
from felix_jax.data.federated import to_device
from felix_jax.data.partition import dirichlet_sized_partition, partition_from_counts, scale_counts
from felix_jax.experiment import STRATEGIES, Scenario, get_preset
from felix_jax.experiment.registry import make_trace
from felix_jax.experiment.runner import build_simulator, run
from felix_jax.fleet import Interruption, task_timeline
from felix_jax.models import cifar_cnn, mlp
from felix_jax.options import OptionError, to_json
from felix_jax.policies import (AGGREGATOR_OPTIONS, SELECTOR_OPTIONS, make_aggregator, make_selector,
                                selector_config)
from felix_jax.policies.aggregators import BufferInfo
from felix_jax.policies.aggregators.fedbuff import FedBuffConfig, match_total_weight
from felix_jax.traces import AvailabilityTrace, Tier
from tests.conftest import make_image_dataset

T, U = int(Tier.AVL_TRAIN), int(Tier.UN_AVL)
TINY = get_preset("tiny").with_overrides({"target_accuracy": "none", "num_clients": "16", "concurrency": "4",
                                          "aggregation_goal": "2", "slot_s": "60"})


# ------------------------------------------------------------ options reachable
def _every_option():
    """(strategy, key, value-as-string) for every field of every policy config a strategy uses."""
    seen = set()
    for st in STRATEGIES.values():
        for kind, name, specs in (("selector", st.selector, SELECTOR_OPTIONS),
                                  ("aggregator", st.aggregator, AGGREGATOR_OPTIONS),
                                  ("eval_selector", st.eval_selector, SELECTOR_OPTIONS)):
            if name is None or (kind, name) in seen:
                continue
            seen.add((kind, name))
            spec = specs[name]
            default = spec.config() if spec.config else None
            for field in spec.fields():
                value = to_json(getattr(default, field))
                yield st.name, f"{kind}.{field}", "none" if value is None else str(value).lower() \
                    if isinstance(value, bool) else str(value)
            for variant in spec.variants:
                yield st.name, f"{kind}.variant", variant


@pytest.mark.parametrize("strategy,key,value", list(_every_option()))
def test_every_policy_option_is_reachable_from_set_and_from_a_scenario_file(strategy, key, value, tmp_path):
    # Krum's and Bulyan's f needs 2f + 3 and 4f + 3 updates per aggregation (the tiny preset has 2)
    room = {"aggregation_goal": "7", "concurrency": "7"} if strategy in ("krum", "multi-krum", "bulyan") else {}
    sc = TINY.with_overrides({"strategy": strategy, **room, key: value})
    kind, field = key.split(".")
    assert getattr(sc, kind)[field] == value
    resolved = sc.resolve_strategy().to_json()[kind]
    if field != "variant":
        assert str(resolved[field]).lower() == value.lower() or (value == "none" and resolved[field] is None)
    path = tmp_path / "sc.json"
    path.write_text(json.dumps({"strategy": strategy, **room, kind: {field: value}}))
    assert Scenario.from_file(path).resolve_strategy().to_json() == Scenario().with_overrides(
        {"strategy": strategy, **room, key: value}).resolve_strategy().to_json()


def test_non_default_options_reach_the_built_policies():
    sc = TINY.with_overrides({"strategy": "felix", "aggregator.normalize": "true", "aggregator.server_lr": "0.5",
                              "selector.variant": "fedscale", "selector.clip_bound": "0.8",
                              "eval_selector.min_age": "7", "eval_selector.budget_factor": "2"})
    sim = build_simulator(sc)
    assert sim.aggregator.normalize and sim.aggregator.server_lr == 0.5
    assert sim.eval_budget == 2 * 2
    r = sc.resolve_strategy()
    assert (r.selector.normalize_utility, r.selector.clip_bound, r.selector.exploration_min) == (True, 0.8, 0.3)
    assert r.eval_selector.min_age == 7


def test_make_aggregator_and_make_selector_take_config_options():
    """Finding 1: ``make_aggregator("tierfuse", normalize=True)`` raised TypeError."""
    assert make_aggregator("tierfuse", normalize=True).normalize
    assert make_aggregator("fedbuff", variant="fedscale").weights(BufferInfo(
        np.array([5, 6]), np.ones(2), np.ones(2), np.ones(2), np.ones(2))).tolist() == [1 / math.sqrt(6), 0.0]
    assert selector_config("oort", variant="fedscale").normalize_utility
    assert make_selector("tierselect-eval", min_age=3).name == "tierselect-eval"
    with pytest.raises(OptionError, match="aggregator.nope: unknown option"):
        make_aggregator("tierfuse", nope=1)


@pytest.mark.parametrize("key,value,says", [
    ("aggregator.nope", "1", "aggregator.nope: unknown option"),
    ("aggregator.normalize", "maybe", "aggregator.normalize='maybe': expected true or false"),
    ("selector.variant", "oort2", "selector.variant='oort2': known variants are"),
    ("aggregator.utility_signal", "x", "aggregator.utility_signal='x': allowed values are utility, mean_loss"),
    ("eval_selector.min_age", "-1", "eval_selector.min_age=-1: must be in [0, 9223372036854775807]"),
    ("interruption", "pause",
     "interruption='pause': must be resume, restart, abandon, run_to_end, run_to_end_hold or partial"),
])
def test_a_bad_option_is_one_line_naming_the_key(key, value, says):
    with pytest.raises(OptionError) as e:
        TINY.with_overrides({"strategy": "felix", key: value})
    assert says in str(e.value) and "\n" not in str(e.value)


def test_cli_bad_option_exits_with_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "felix_jax.cli", "run", "--preset", "tiny", "--set",
                          "aggregator.normalise=true", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [out.stderr.strip()] and "aggregator.normalise" in out.stderr
    assert not (tmp_path / "o").exists()


def test_config_json_reproduces_the_run_exactly(tmp_path):
    sc = TINY.with_overrides({"strategy": "felix", "availability": "avail50", "max_aggregations": "8",
                              "aggregator.normalize": "true", "selector.variant": "fedscale",
                              "eval_selector.min_age": "2"})
    first = run(sc, tmp_path / "a")
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert config["policies"]["aggregator"]["normalize"] is True
    assert config["policies"]["selector"]["normalize_utility"] is True
    assert config["policies"]["eval_selector"]["min_age"] == 2
    again = run(Scenario.from_file(tmp_path / "a" / "config.json"), tmp_path / "b")
    assert again.scenario == first.scenario
    assert (tmp_path / "a" / "metrics.csv").read_bytes() == (tmp_path / "b" / "metrics.csv").read_bytes()


# ------------------------------------------------------------ decomposition presets
def test_ablation_presets_name_their_options():
    assert STRATEGIES["felix-normalized"].aggregator_options["normalize"] is True
    assert Scenario(strategy="oort-async-step-matched").resolve_strategy().aggregator.match_step == "tierfuse"
    for name in ("oort-oracle-fedscale", "oort-async-oracle-fedscale"):
        assert Scenario(strategy=name).resolve_strategy().selector.normalize_utility
    for name in ("oort", "oort-oracle", "oort-async", "oort-async-oracle", "felix"):
        assert not Scenario(strategy=name).resolve_strategy().selector.normalize_utility


def test_step_matched_fedbuff_keeps_relative_weights_and_takes_tierfuses_total():
    # staleness 0 and 3, utility 120 for both: TierFuse (paper defaults) gives
    # 0.4 (1+T)^-0.25 + 0.6 min(1.5 - 121^-0.1, 1), and 1.5 - 121^-0.1 = 0.881 (the cap does not bind)
    tf0 = 0.4 * 1.0 + 0.6 * (1.5 - 121 ** -0.1)
    tf3 = 0.4 * 4 ** -0.25 + 0.6 * (1.5 - 121 ** -0.1)
    fb = np.array([1.0, 0.5])  # 1/sqrt(1+0), 1/sqrt(1+3)
    info = BufferInfo(np.array([0, 3]), np.ones(2), np.array([120.0, 120.0]), np.ones(2), np.ones(2))
    w = make_aggregator("fedbuff", match_step="tierfuse").weights(info)
    np.testing.assert_allclose(w, fb * (tf0 + tf3) / 1.5, rtol=1e-12)
    assert w[0] / w[1] == pytest.approx(2.0)
    np.testing.assert_allclose(match_total_weight([0.0, 0.0], 3.0), [0.0, 0.0])
    with pytest.raises(ValueError, match="match_step"):
        FedBuffConfig(match_step="fedavg")


# ------------------------------------------------------------ deviations fixed
def test_eval_picks_do_not_count_toward_the_once_per_round_rule():
    """Finding 5: every dispatch set the round a client was last picked in, so a client evaluated this round
    could not be picked for training in the same round."""
    sim = build_simulator(TINY.with_overrides({"strategy": "felix"}))
    sim._dispatch(3, "eval")
    assert sim.view.last_selected_round[3] != sim.round
    sim.view.set_busy(3, False)  # its eval reply frees it
    assert sim.view.trainable(sim.round, once_per_round=True)[3]
    sim._dispatch(5, "train")
    assert not sim.view.trainable(sim.round, once_per_round=True)[5]


# an MLP in the default tier, the paper's CNN in the slow tier: the augmentation acts on the images,
# before either model
@pytest.mark.parametrize("model_name", ["mlp", pytest.param("cifar_cnn", marks=pytest.mark.slow)])
def test_training_reply_measures_utility_on_the_unaugmented_batch(model_name):
    """Finding 4: the training reply's first batch was augmented, the eval batch was not."""
    model = cifar_cnn(num_classes=10) if model_name == "cifar_cnn" else mlp((32, 32, 3), hidden=(16,))
    ds = make_image_dataset(num_train=64, num_test=8, shape=(32, 32, 3))
    data = to_device(ds, partition_from_counts(64, np.array([64]), seed=0))
    params = model.init(jax.random.key(0))
    stats = {}
    for aug in (False, True):
        cfg = LocalTrainConfig(batch_size=32, mode="steps", local_steps=2, augment=aug, learning_rate=0.04)
        res = local_train(model, cfg, 2, params, data, np.int32(0), jax.random.key(7), np.int32(2))
        stats[aug] = (float(res.first_batch.count), float(res.first_batch.sumsq))
    assert stats[True][0] == stats[False][0] == 32
    assert stats[True][1] == pytest.approx(stats[False][1], rel=1e-5)


def _abandon_trace():
    # client 0 leaves at 5 s for good; client 1 always there
    return AvailabilityTrace.from_client_lists([[0, 5], [0]], [[T, U], [T]])


def test_blind_server_does_not_mark_an_abandoned_clients_forever_unavailable():
    """Finding 5: under ``abandon`` with no availability knowledge, a timed-out client
    was marked UN_AVL and no reply ever cleared it."""
    sim = build_simulator(TINY.with_overrides({"strategy": "fedbuff", "interruption": "abandon",
                                               "num_clients": "2", "concurrency": "1", "aggregation_goal": "1"}))
    sim.trace = _abandon_trace()
    sim.queue = type(sim.queue)()
    sim.tasks.clear()
    sim._dispatch(0, "train")
    tid = max(sim.tasks)
    assert sim.tasks[tid].timeline.abandoned
    sim.now = 90.0
    sim._on_timeout(tid)
    assert sim.view.tier[0] == T and not sim.view.busy[0]


def test_blind_server_still_marks_a_silent_client_until_it_replies():
    sim = build_simulator(TINY.with_overrides({"strategy": "fedbuff", "num_clients": "2", "concurrency": "1",
                                               "aggregation_goal": "1"}))
    sim.trace = AvailabilityTrace.from_client_lists([[0, 5, 500], [0]], [[T, U, T], [T]])
    sim.queue = type(sim.queue)()
    sim.tasks.clear()
    sim._dispatch(0, "train")
    sim.now = 90.0
    sim._on_timeout(max(sim.tasks))
    assert sim.view.tier[0] == U


def test_synthetic_slots_do_not_force_every_day_to_start_available():
    """Finding 5: avail50 repeated its 24 h trace, so every client was available again
    at the start of each day."""
    trace = make_trace("avail50", 2000, seed=1, slot_s=600.0, horizon_s=3 * 86400.0)
    assert (trace.state_at(0.0) == T).all()
    for day in (1, 2):
        share = (trace.state_at(day * 86400.0 + 1.0) == T).mean()
        assert 0.45 < share < 0.55, (day, share)


def test_reference_codes_lifecycle_waits_for_train_tier_and_is_never_preempted():
    """Finding 5: the FeLiX code's lifecycle was not offered."""
    tr = AvailabilityTrace.from_client_lists([[0, 100, 200]], [[T, U, T]])
    tl = task_timeline(tr, 0, 50.0, 100.0, frozenset({T}), Interruption.RUN_TO_END)
    assert (tl.start_s, tl.finish_s, tl.first_stop_s, tl.interruptions) == (50.0, 150.0, 100.0, 0)
    tl = task_timeline(tr, 0, 120.0, 100.0, frozenset({T}), Interruption.RUN_TO_END)
    assert (tl.start_s, tl.finish_s, tl.first_stop_s) == (200.0, 300.0, math.inf)
    assert task_timeline(tr, 0, 50.0, 100.0, frozenset({T}), Interruption.RESUME).finish_s == 250.0
    assert build_simulator(TINY.with_overrides({"interruption": "run_to_end"})).cfg.interruption \
        is Interruption.RUN_TO_END


def test_scale_counts_keeps_proportions_and_a_sample_each():
    # 3 clients, sizes 1/3/6 scaled to 13: one each set aside, 10 shared 1:3:6 -> 1, 3, 6 -> 2, 4, 7
    np.testing.assert_array_equal(scale_counts([1, 3, 6], 13), [2, 4, 7])
    # remainders: 10 * (1, 1, 1) / 3 = 3.33 each -> floors 3,3,3, one left to the first -> 4, 3, 3 (+1 each)
    np.testing.assert_array_equal(scale_counts([5, 5, 5], 13), [5, 4, 4])
    with pytest.raises(ValueError):
        scale_counts([1, 2], 1)


def test_sized_dirichlet_partition_has_the_sizes_and_label_skew():
    labels = np.repeat(np.arange(10), 400)
    sizes = np.array([1, 5, 50, 200, 400, 30] * 5)
    part = dirichlet_sized_partition(labels, sizes, alpha=0.1, seed=0)
    np.testing.assert_array_equal(part.counts, sizes)
    taken = np.concatenate([part.index_table[i, :c] for i, c in enumerate(part.counts)])
    assert len(np.unique(taken)) == sizes.sum()  # no sample twice
    big = [np.bincount(labels[part.index_table[i, :c]], minlength=10).max() / c
           for i, c in enumerate(part.counts) if c >= 50]
    assert np.median(big) > 0.5  # Dirichlet(0.1): most of a client's data is one class
    again = dirichlet_sized_partition(labels, sizes, alpha=0.1, seed=0)
    np.testing.assert_array_equal(again.index_table, part.index_table)
