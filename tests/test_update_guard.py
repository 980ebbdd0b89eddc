"""The update guard: poisoned client updates never reach an aggregator, and never pass silently."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from felix_jax.cohort import CohortEngine, LocalTrainConfig
from felix_jax.data.federated import held_out_to_device, to_device
from felix_jax.data.partition import partition_from_counts
from felix_jax.fleet import FleetConfig, StopRule
from felix_jax.fleet.modes import AsyncMode, SyncMode
from felix_jax.fleet.simulator import FleetSimulator
from felix_jax.fleet.update_guard import (UpdateGuardConfig, judge_updates, remember_norms, tree_all_finite,
                                          update_health, zero_rejected)
from felix_jax.models import mlp
from felix_jax.policies import make_aggregator, make_selector
from felix_jax.traces import AvailabilityTrace, DeviceProfile, Tier
from tests.conftest import make_image_dataset

MODEL = mlp((8, 8, 3), hidden=(8,))
NUM_CLIENTS = 6
# (mode, aggregator) as the strategies use them; refl_saa's late updates need overcommit
SETUPS = {"fedavg": ("sync", 1.0), "refl_saa": ("sync", 1.5), "fedbuff": ("async", 1.0),
          "fedasync": ("async", 1.0), "tierfuse": ("async", 1.0)}


def make_sim(aggregator="fedbuff", *, guard=UpdateGuardConfig(), max_aggregations=5, lr=0.04, server_lr=None,
             goal=3):
    mode, overcommit = SETUPS[aggregator]
    ds = make_image_dataset(num_train=40 * NUM_CLIENTS, num_test=16)
    data = to_device(ds, partition_from_counts(40 * NUM_CLIENTS, np.full(NUM_CLIENTS, 40), seed=0))
    engine = CohortEngine(MODEL, data, LocalTrainConfig(batch_size=16, mode="steps", local_steps=2,
                                                        learning_rate=lr))
    trace = AvailabilityTrace.from_client_lists([[0.0]] * NUM_CLIENTS, [[int(Tier.AVL_TRAIN)]] * NUM_CLIENTS)
    delays = 10.0 + 3.0 * np.arange(NUM_CLIENTS)
    profile = DeviceProfile(delays, np.ones(NUM_CLIENTS), np.full(NUM_CLIENTS, np.inf), np.full(NUM_CLIENTS, np.inf))
    agg = make_aggregator(aggregator) if server_lr is None else make_aggregator(aggregator, server_lr=server_lr)
    return FleetSimulator(
        model=MODEL, engine=engine, trace=trace, profile=profile, test=held_out_to_device(ds),
        init_params=MODEL.init(jax.random.key(0)),
        config=FleetConfig(mode=mode, concurrency=4, aggregation_goal=goal, overcommit=overcommit),
        selector=make_selector("random"), aggregator=agg, mode=SyncMode() if mode == "sync" else AsyncMode(),
        stop=StopRule(max_aggregations=max_aggregations), seed=0, update_guard=guard)


class Poison:
    """Wraps ``executor.take_deltas``: row 0 of buffer number ``at`` (1-based) is poisoned."""

    def __init__(self, sim, kind, at=3):
        self.sim, self.kind, self.at, self.calls = sim, kind, at, 0
        self.clean = self.params_before = None
        self._take = sim.executor.take_deltas
        sim.executor.take_deltas = self

    def __call__(self, outcomes):
        deltas = self._take(outcomes)
        self.calls += 1
        if self.calls != self.at:
            return deltas
        self.clean, self.params_before = deltas, self.sim.params
        if self.kind == "scale":
            return jax.tree_util.tree_map(lambda d: d.at[0].multiply(1e6), deltas)
        bad = {"nan": jnp.nan, "inf": jnp.inf}[self.kind]
        leaves, tree = jax.tree_util.tree_flatten(deltas)
        leaves[-1] = leaves[-1].at[0].set(bad)
        return jax.tree_util.tree_unflatten(tree, leaves)


def leaves_finite(params) -> bool:
    return bool(tree_all_finite(params))


# ------------------------------------------------------------------ the host rule, by hand
def test_nonfinite_updates_are_rejected_first():
    v = judge_updates([True, False, False], [1.0, math.nan, math.inf], [], UpdateGuardConfig())
    assert v.accepted.tolist() == [True, False, False]
    assert v.nonfinite.tolist() == [False, True, True] and not v.over_norm.any()
    assert v.reference_norm is None  # 1 finite norm < min_history 5


def test_ratio_rule_uses_the_median_of_recent_and_current_finite_norms():
    # pool = recent [2, 4, 6, 8] + this buffer [3, 100, 50] -> sorted 2 3 4 6 8 50 100: median 6, bound 60
    v = judge_updates([True, True, True], [3.0, 100.0, 50.0], [2.0, 4.0, 6.0, 8.0],
                      UpdateGuardConfig(max_norm_ratio=10.0, min_history=4))
    assert v.reference_norm == 6.0
    assert v.accepted.tolist() == [True, False, True] and v.over_norm.tolist() == [False, True, False]


def test_ratio_rule_waits_for_min_history_and_ignores_a_zero_median():
    cfg = UpdateGuardConfig(max_norm_ratio=2.0, min_history=4)
    assert judge_updates([True] * 3, [1.0, 1.0, 1e9], [], cfg).accepted.all()  # 3 norms < 4
    assert not judge_updates([True] * 3, [1.0, 1.0, 1e9], [1.0], cfg).accepted[2]  # 4 norms, median 1
    zero = judge_updates([True] * 2, [0.0, 5.0], [0.0, 0.0, 0.0], cfg)
    assert zero.accepted.all() and zero.reference_norm is None


def test_absolute_bound_and_overflowed_norms():
    cfg = UpdateGuardConfig(max_norm=10.0, max_norm_ratio=None)
    v = judge_updates([True, True, True], [10.0, 10.5, math.inf], [], cfg)
    assert v.accepted.tolist() == [True, False, False]
    assert v.over_norm.tolist() == [False, True, True] and not v.nonfinite.any()


def test_disabled_guard_accepts_everything():
    v = judge_updates([False, True], [math.nan, 1e30], [1.0] * 10, UpdateGuardConfig(enabled=False))
    assert v.accepted.all() and not v.nonfinite.any() and not v.over_norm.any()


def test_history_keeps_the_last_accepted_norms_only():
    cfg = UpdateGuardConfig(history=3)
    v = judge_updates([True, False, True], [7.0, math.nan, 9.0], [1.0, 2.0], cfg)
    assert remember_norms([1.0, 2.0], [7.0, math.nan, 9.0], v, cfg).tolist() == [2.0, 7.0, 9.0]


@pytest.mark.parametrize("field, value", [
    ("max_norm_ratio", 1.0), ("max_norm_ratio", math.nan), ("max_norm", 0.0), ("max_norm", "big"),
    ("history", 0), ("min_history", 2.5), ("max_empty_buffers", 0), ("enabled", 1)])
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"update guard: {field} must be"):
        UpdateGuardConfig(**{field: value})


# ------------------------------------------------------------------ the device check
def test_update_health_by_hand():
    deltas = {"a": jnp.array([[3.0, 0.0], [jnp.nan, 1.0], [0.0, 0.0], [1e30, 0.0]]),
              "b": jnp.array([[[4.0]], [[0.0]], [[jnp.inf]], [[0.0]]])}
    finite, norms = update_health(deltas)
    assert finite.tolist() == [True, False, False, True]  # 1e30 is finite; its square overflows
    assert norms[0] == 5.0 and math.isnan(norms[1]) and math.isinf(norms[2]) and math.isinf(norms[3])
    v = judge_updates(finite, norms, [], UpdateGuardConfig(max_norm_ratio=None))
    assert v.accepted.tolist() == [True, False, False, False] and v.over_norm.tolist() == [False, False, False, True]


def test_rejected_rows_become_zeros_and_shapes_do_not_retrace():
    deltas = {"a": jnp.array([[1.0, 2.0], [jnp.nan, jnp.inf], [5.0, 6.0]])}
    out = zero_rejected(deltas, jnp.array([True, False, True]))
    np.testing.assert_array_equal(out["a"], [[1.0, 2.0], [0.0, 0.0], [5.0, 6.0]])
    before = zero_rejected._cache_size()
    zero_rejected(deltas, jnp.array([False, True, True]))
    assert zero_rejected._cache_size() == before


# ------------------------------------------------------------------ through the simulator
@pytest.mark.parametrize("aggregator", sorted(SETUPS))
@pytest.mark.parametrize("kind", ["nan", "inf", "scale"])
def test_poisoned_update_is_dropped_by_every_aggregator(aggregator, kind):
    sim = make_sim(aggregator)
    poison = Poison(sim, kind)
    rec = sim.run()
    assert poison.calls >= 3 and rec.stop_reason == "max_aggregations"
    assert leaves_finite(rec.params)
    assert all(math.isfinite(c.loss) for c in rec.checkpoints)
    a = rec.accounting
    expected = (1, 0) if kind in ("nan", "inf") else (0, 1)
    assert (a.rejected_updates_nonfinite, a.rejected_updates_norm) == expected


def test_clean_run_is_identical_with_the_guard_on_and_off():
    for aggregator in ("fedbuff", "refl_saa"):
        on, off = make_sim(aggregator).run(), make_sim(aggregator, guard=UpdateGuardConfig(enabled=False)).run()
        assert on.accounting.rejected_updates_nonfinite == on.accounting.rejected_updates_norm == 0
        for x, y in zip(jax.tree_util.tree_leaves(on.params), jax.tree_util.tree_leaves(off.params)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        assert on.accounting.agg_weights == off.accounting.agg_weights


@pytest.mark.parametrize("aggregator", ["fedbuff", "fedavg"])
def test_step_over_accepted_updates_divides_as_the_aggregator_documents(aggregator):
    # FedBuff: eta * sum_i w_i d_i / K' over the K' = 2 accepted; FedAvg: / sum_i w_i
    sim = make_sim(aggregator, max_aggregations=3)
    poison = Poison(sim, "nan", at=3)
    rec = sim.run()
    agg = sim.aggregator
    w = np.asarray(rec.accounting.agg_weights[-2:])  # the aggregator saw 2 rows
    denom = w.sum() if agg.normalize else 2.0
    for before, clean, after in zip(jax.tree_util.tree_leaves(poison.params_before),
                                    jax.tree_util.tree_leaves(poison.clean), jax.tree_util.tree_leaves(rec.params)):
        step = np.tensordot(w / denom, np.asarray(clean)[1:], axes=1)
        np.testing.assert_allclose(np.asarray(after), np.asarray(before) + agg.server_lr * step, rtol=1e-5,
                                   atol=1e-6)


def test_all_rejected_buffer_closes_the_round_without_a_step():
    sim = make_sim("fedbuff", max_aggregations=1, goal=1)
    Poison(sim, "nan", at=1)
    rec = sim.run()
    assert rec.stop_reason == "max_aggregations" and len(rec.aggregation_times) == 2
    for x, y in zip(jax.tree_util.tree_leaves(rec.params), jax.tree_util.tree_leaves(MODEL.init(jax.random.key(0)))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert len(rec.accounting.agg_weights) == 0 and rec.accounting.rejected_updates_nonfinite == 1


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
def test_huge_server_learning_rate_stops_as_diverged_with_the_last_finite_model():
    sim = make_sim("fedbuff", server_lr=1e39)
    rec = sim.run()
    assert rec.stop_reason == "diverged: global model is non-finite after aggregation 1"
    assert len(rec.aggregation_times) == 1 and leaves_finite(rec.params)


def test_poisoned_update_without_the_guard_stops_as_diverged():
    sim = make_sim("fedbuff", guard=UpdateGuardConfig(enabled=False))
    Poison(sim, "nan", at=2)
    rec = sim.run()
    assert rec.stop_reason == "diverged: global model is non-finite after aggregation 2"


@pytest.mark.usefixtures("without_debug_checks")  # every client update is non-finite
def test_every_update_rejected_stops_after_max_empty_buffers():
    sim = make_sim("fedbuff", lr=1e30, max_aggregations=50, guard=UpdateGuardConfig(max_empty_buffers=2))
    rec = sim.run()
    assert rec.stop_reason.startswith("diverged: no client update accepted in the last 2 buffers")
    assert rec.accounting.rejected_updates_nonfinite + rec.accounting.rejected_updates_norm >= 6


def test_summary_reports_rejections_by_reason():
    from felix_jax.experiment.results import summarize

    sim = make_sim("tierfuse")
    Poison(sim, "inf")
    summary = summarize(sim.run(), seed=0, batches={})
    assert summary["rejected_updates_nonfinite"] == 1 and summary["rejected_updates_norm"] == 0
