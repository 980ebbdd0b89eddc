"""Batched test evaluation (StopRule.eval_batch): fewer device calls, the very same results.

Checkpoints wait in a batch while the run goes on; the stop rule is applied to them in
order afterwards, and a target found at a checkpoint the run has gone past rolls the
record back to it. Every test compares against the eager path (eval_batch=1).
"""

import dataclasses
import json

import jax
import numpy as np
import pytest

from felix_jax.cohort import evaluate, evaluate_many
from felix_jax.experiment import get_preset
from felix_jax.experiment.runner import build_simulator, run_config
from felix_jax.fleet.accounting import Accounting
from felix_jax.fleet.config import StopRule
from felix_jax.fleet.snapshot import SnapshotPolicy

from .test_snapshot import Killed, assert_same_run, host_accounting

BASE = {"availability": "avail50", "slot_s": "60", "max_aggregations": "12", "target_accuracy": "none"}
BATCH = 4


def scenario(strategy: str, **overrides):
    return get_preset("tiny").with_overrides({**BASE, "strategy": strategy, **overrides})


def run(strategy: str, **overrides):
    sim = build_simulator(scenario(strategy, **overrides))
    return sim, sim.run()


def assert_same_results(eager, batched):
    """Everything a run reports but the work it did: batched runs process events past a late target."""
    assert repr(eager.checkpoints) == repr(batched.checkpoints)
    assert eager.aggregation_times == batched.aggregation_times
    assert host_accounting(eager.accounting) == host_accounting(batched.accounting)
    assert (eager.stop_reason, eager.time_to_target_s, eager.end_time_s) == \
        (batched.stop_reason, batched.time_to_target_s, batched.end_time_s)
    for x, y in zip(jax.tree_util.tree_leaves(eager.params), jax.tree_util.tree_leaves(batched.params)):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


def mid_batch_target(strategy: str) -> tuple[float, int]:
    """A target the eager run reaches at a checkpoint that does not close a batch of BATCH (so the
    batched run goes past it before it knows), and that checkpoint's index."""
    _, free = run(strategy)
    acc = [c.accuracy for c in free.checkpoints]
    for target in sorted(set(acc[2:-2])):
        rule = StopRule(target_accuracy=target)
        k = next(i for i in range(len(acc)) if rule.reached(acc[:i + 1]))
        if 2 <= k < len(acc) - 2 and (k + 1) % BATCH:
            return float(target), k
    pytest.skip(f"no mid-batch target in {acc}")


def test_evaluate_many_is_evaluate_bit_for_bit():
    sim = build_simulator(scenario("fedbuff"))
    keys = jax.random.split(jax.random.key(3), 3)
    versions = [sim.model.init(k) for k in keys]
    one = [evaluate(sim.model, p, sim.test) for p in versions]
    assert evaluate_many(sim.model, versions, sim.test, pad_to=8) == one  # padding dropped
    assert evaluate_many(sim.model, versions[:1], sim.test) == one[:1]
    assert evaluate_many(sim.model, [], sim.test) == []


def test_accounting_rolls_back_to_a_mark():
    acct = Accounting(bytes_up_train=10, replies_train=1, staleness=[0, 1])
    mark = acct.mark()
    acct.bytes_up_train += 5
    acct.replies_train += 1
    acct.staleness.extend([2, 3])
    acct.agg_weights.append(0.5)
    acct.rollback(mark)
    assert acct == Accounting(bytes_up_train=10, replies_train=1, staleness=[0, 1])


def test_accounting_keeps_its_per_update_records_in_typed_columns():
    """Per-update and per-pick records are 8-byte columns (a list given, as a snapshot decodes them,
    becomes one), their summary and distributions read as the lists' did, and they go through a
    snapshot's encoder as numeric arrays."""
    from array import array

    from felix_jax.fleet.snapshot import _Encoder

    acct = Accounting(staleness=[0, 2, 1, 0], agg_weights=[0.5, 0.0, 0.25, 1.0], utility_age=[-1, 3, 1])
    assert (acct.staleness.typecode, acct.agg_weights.typecode, acct.utility_age.typecode) == ("q", "d", "q")
    assert isinstance(acct.selection_seconds, array) and acct.selection_seconds.itemsize == 8
    s = acct.summary()
    assert s["updates_accepted"] == 3 and (s["utility_age_p50"], s["utility_age_p95"]) == (2.0, 2.9)
    assert s["late_update_share"] == 0.5 and s["agg_weight_fresh_mean"] == 0.75 and s["agg_weight_late_mean"] == 0.125
    assert json.loads(json.dumps(acct.distributions())) == {"staleness": [0, 2, 1, 0],
                                                             "agg_weights": [0.5, 0.0, 0.25, 1.0],
                                                             "utility_age": [-1, 3, 1]}
    enc = _Encoder()
    assert enc.encode(acct.staleness) == {"$ints": "a0"} and enc.encode(acct.agg_weights) == {"$floats": "a1"}
    np.testing.assert_array_equal(enc.arrays["a1"], [0.5, 0.0, 0.25, 1.0])


@pytest.mark.parametrize("strategy", ["fedbuff", "oort", "felix"])  # async; sync Oort; TierTrack + eval tier
def test_no_target_same_run_in_fewer_calls(strategy):
    _, eager = run(strategy)
    _, batched = run(strategy, eval_batch=str(BATCH))
    assert_same_run(eager, batched)  # no late target: the same events too
    assert eager.test_eval_calls == 13 and batched.test_eval_calls == 4  # 13 checkpoints: 4 + 4 + 4 + 1


@pytest.mark.parametrize("strategy", ["fedbuff", "oort", "felix"])
def test_target_found_late_rolls_the_record_back(strategy):
    target, k = mid_batch_target(strategy)
    _, eager = run(strategy, target_accuracy=str(target))
    sim, batched = run(strategy, target_accuracy=str(target), eval_batch=str(BATCH))
    assert eager.stop_reason == "target" and len(eager.checkpoints) == k + 1
    assert sim.version == k and len(batched.aggregation_times) == k + 1
    assert batched.events_processed > eager.events_processed  # it did go past the target
    assert_same_results(eager, batched)


def test_target_in_the_last_batch_beats_a_later_stop():
    """A batch as long as the run (eval_batch = max_aggregations, the most allowed) waits past the target
    until the run's end is near: resolving it finds the target."""
    target, k = mid_batch_target("felix")
    _, eager = run("felix", target_accuracy=str(target))
    _, batched = run("felix", target_accuracy=str(target), eval_batch=str(k + 2), max_aggregations=str(k + 2))
    assert batched.test_eval_calls == 1
    assert_same_results(eager, batched)


def test_interrupt_with_waiting_checkpoints_finds_the_target():
    target, k = mid_batch_target("fedbuff")
    _, eager = run("fedbuff", target_accuracy=str(target))
    sim = build_simulator(scenario("fedbuff", target_accuracy=str(target), eval_batch=BASE["max_aggregations"]))
    aggregate = sim.aggregate

    def aggregate_then_signal(updates):
        aggregate(updates)
        if sim.version == k + 1:
            sim.request_stop("interrupted")

    sim.aggregate = aggregate_then_signal
    assert_same_results(eager, sim.run())


def test_snapshot_resolves_waiting_checkpoints_and_resumes_exactly(tmp_path):
    reference = build_simulator(scenario("felix")).run()
    root = tmp_path / "snapshot"

    def on_saved(path):
        if path.name.startswith("snap-000008-"):
            raise Killed

    sim = build_simulator(scenario("felix", eval_batch="3"))
    sim.snapshot = SnapshotPolicy(root, every_aggregations=4, on_saved=on_saved)
    with pytest.raises(Killed):
        sim.run()
    assert len(sim.checkpoints) == 9 and not sim._pending  # versions 0-8 evaluated before the save
    resumed = build_simulator(scenario("felix", eval_batch="3"))
    resumed.restore(root)
    assert_same_run(reference, resumed.run())


def test_eval_batch_is_a_validated_scenario_option_recorded_in_config():
    sim = build_simulator(scenario("fedbuff", eval_batch="8"))
    assert sim.stop.eval_batch == 8 and run_config(sim_scenario := scenario("fedbuff", eval_batch="8"),
                                                   sim)["stop"]["eval_batch"] == 8
    assert sim_scenario.eval_batch == 8
    default = build_simulator(scenario("fedbuff"))
    assert default.stop.eval_batch == 1
    with pytest.raises(Exception, match="eval_batch"):
        scenario("fedbuff", eval_batch="0")
    with pytest.raises(ValueError, match="eval_batch"):
        dataclasses.replace(StopRule(), eval_batch=0)
