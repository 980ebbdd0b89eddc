"""The virtual-time fleet on hand-made traces: every number here is hand-computed."""

import math

import jax
import numpy as np

from felix_jax.cohort import CohortEngine, LocalTrainConfig
from felix_jax.data.federated import held_out_to_device, to_device
from felix_jax.data.partition import partition_from_counts
from felix_jax.fleet import FleetConfig, Interruption, StopRule, task_timeline
from felix_jax.fleet.modes import AsyncMode, SyncMode
from felix_jax.fleet.reading import Reading
from felix_jax.fleet.simulator import FleetSimulator
from felix_jax.models import mlp
from felix_jax.policies import make_aggregator, make_selector
from felix_jax.traces import AvailabilityTrace, DeviceProfile, Tier
from tests.conftest import make_image_dataset

T, E, U = int(Tier.AVL_TRAIN), int(Tier.AVL_EVAL), int(Tier.UN_AVL)
MODEL = mlp((8, 8, 3), hidden=(8,))


def trace_of(*clients):
    """clients: [(t, state), ...] per client."""
    return AvailabilityTrace.from_client_lists([[t for t, _ in c] for c in clients],
                                               [[s for _, s in c] for c in clients])


# ---------------------------------------------------------------- task lifecycle
ONE = trace_of([(0, T), (100, U), (300, T)])


def test_interrupted_task_resumes_where_it_stopped():
    tl = task_timeline(ONE, 0, 0.0, 150.0, frozenset({T}), Interruption.RESUME)
    assert (tl.start_s, tl.finish_s, tl.first_stop_s, tl.interruptions) == (0.0, 350.0, 100.0, 1)


def test_restart_and_abandon_policies():
    assert task_timeline(ONE, 0, 0.0, 150.0, frozenset({T}), Interruption.RESTART).finish_s == 450.0
    tl = task_timeline(ONE, 0, 0.0, 150.0, frozenset({T}), Interruption.ABANDON)
    assert tl.abandoned and math.isinf(tl.finish_s) and tl.first_stop_s == 100.0


def test_task_sent_to_unavailable_client_waits_for_it():
    tl = task_timeline(ONE, 0, 150.0, 30.0, frozenset({T}))
    assert (tl.start_s, tl.finish_s, tl.interruptions) == (300.0, 330.0, 0)


def test_task_finishing_exactly_at_a_change_is_not_interrupted():
    tl = task_timeline(ONE, 0, 40.0, 60.0, frozenset({T}))
    assert (tl.finish_s, tl.interruptions) == (100.0, 0)


def test_eval_task_may_run_in_avl_eval_but_training_may_not():
    tr = trace_of([(0, E), (50, T)])
    assert task_timeline(tr, 0, 0.0, 2.0, frozenset({T, E})).finish_s == 2.0
    assert task_timeline(tr, 0, 0.0, 2.0, frozenset({T})).finish_s == 52.0


def test_client_that_never_returns_never_finishes():
    tr = trace_of([(0, T), (10, U)])
    assert math.isinf(task_timeline(tr, 0, 0.0, 20.0, frozenset({T})).finish_s)


# ---------------------------------------------------------------- simulator
def make_sim(trace, delays, *, mode="async", knowledge="none", concurrency=2, goal=1, overcommit=1.0,
             aggregator="fedbuff", max_aggregations=5, max_s=10_000.0, timeout_s=90.0, seed=0,
             oracle_departure="keep_slot", eval_selector=None, eval_budget=0, sees_eval_tier=False,
             reading=Reading()):
    n = trace.num_clients
    ds = make_image_dataset(num_train=40 * n, num_test=16)
    data = to_device(ds, partition_from_counts(40 * n, np.full(n, 40), seed=0))
    engine = CohortEngine(MODEL, data, LocalTrainConfig(batch_size=16, mode="steps", local_steps=1))
    cfg = FleetConfig(mode=mode, knowledge=knowledge, concurrency=concurrency, aggregation_goal=goal,
                      overcommit=overcommit, timeout_s=timeout_s, oracle_departure=oracle_departure,
                      sees_eval_tier=sees_eval_tier, reading=reading)
    return FleetSimulator(
        model=MODEL, engine=engine, trace=trace,
        profile=DeviceProfile(np.asarray(delays, float), np.ones(n), np.full(n, np.inf), np.full(n, np.inf)),
        test=held_out_to_device(ds), init_params=MODEL.init(jax.random.key(0)), config=cfg,
        selector=make_selector("random"), aggregator=make_aggregator(aggregator),
        mode=SyncMode() if mode == "sync" else AsyncMode(),
        stop=StopRule(max_aggregations=max_aggregations, max_virtual_s=max_s), seed=seed,
        eval_selector=eval_selector, eval_budget=eval_budget)


ALWAYS2 = trace_of([(0, T)], [(0, T)])


def test_async_staleness_values_match_hand_computation():
    # c=2, K=1, delays 10 s and 25 s, always available: replies at 10 (v0), 20 (v1),
    # 25 (client 1 from v0 while the server is at v2), 30 (from v2 at v3), 40 (v4),
    # 50 (client 1 from v3 at v5; queued before client 0's reply at the same time),
    # 50 (client 0 from v5 at v6).
    sim = make_sim(ALWAYS2, [10.0, 25.0], max_aggregations=7)
    rec = sim.run()
    assert list(rec.accounting.staleness) == [0, 0, 2, 1, 0, 2, 1]
    assert rec.aggregation_times == [0.0, 10.0, 20.0, 25.0, 30.0, 40.0, 50.0, 50.0]


def test_timeout_fires_after_90s_and_marks_client_unavailable_until_it_replies():
    tr = trace_of([(0, T)], [(0, U), (1000, T)])
    sim = make_sim(tr, [10.0, 10.0], max_aggregations=1000, max_s=500.0)
    rec = sim.run()
    assert rec.accounting.timeouts == 1
    assert sim.view.tier[1] == U and sim.view.busy[1]
    sim2 = make_sim(tr, [10.0, 10.0], max_aggregations=1000, max_s=1011.0)
    rec2 = sim2.run()
    assert sim2.view.tier[1] == T  # the reply at 1010 proved it is back
    assert 1010.0 in rec2.aggregation_times


def test_sync_round_with_unavailable_client_stalls_exactly_until_it_returns():
    # K=2 of 2 clients, no availability knowledge: client 1 is away until t=500, so the
    # first round can only close when its task finishes at 500 + 10.
    tr = trace_of([(0, T)], [(0, U), (500, T)])
    rec = make_sim(tr, [10.0, 10.0], mode="sync", goal=2, max_aggregations=1, aggregator="fedavg").run()
    assert rec.aggregation_times == [0.0, 510.0]


def test_oracle_sync_skips_unavailable_clients_and_does_not_stall():
    tr = trace_of([(0, T)], [(0, U), (500, T)], [(0, T)])
    rec = make_sim(tr, [10.0, 10.0, 10.0], mode="sync", knowledge="oracle", goal=2, max_aggregations=1,
                   aggregator="fedavg").run()
    assert rec.aggregation_times == [0.0, 10.0]


def test_sync_fedavg_drops_late_updates():
    # overcommit 1.5 with K=2: 3 selected, the slowest reply arrives after the round closed.
    tr = trace_of([(0, T)], [(0, T)], [(0, T)])
    rec = make_sim(tr, [10.0, 20.0, 30.0], mode="sync", goal=2, overcommit=1.5, max_aggregations=2,
                   aggregator="fedavg").run()
    assert rec.aggregation_times[:2] == [0.0, 20.0]
    assert rec.accounting.discarded_updates == 1


def test_message_and_byte_counts_with_tiertrack():
    # client 1 leaves at 5 (interrupting its task) and returns at 50. c=2, K=1, delays 10:
    # dispatches at 0 (both), 10, 20 (client 0); replies at 10, 20, 30; stop at 3 aggregations.
    tr = trace_of([(0, T)], [(0, T), (5, U), (50, T)])
    sim = make_sim(tr, [10.0, 10.0], knowledge="tiertrack", max_aggregations=3)
    rec = sim.run()
    mb = MODEL.bytes_on_wire
    a = rec.accounting
    assert (a.dispatched_train, a.replies_train, a.interrupted_tasks, a.detached_tasks) == (4, 3, 1, 1)
    assert a.control_messages == 1  # the change at t=5 (the one at 50 is after the end, t=30)
    assert a.bytes_total == 4 * mb + 3 * mb + 64
    # the interrupted task resumes at 50 with 5 s left
    assert [t.timeline.finish_s for t in sim.tasks.values() if t.client == 1] == [55.0]


def test_tiertrack_frees_the_slot_of_a_client_that_left():
    # c=1: client 0 leaves at 5 mid-task. Under TierTrack the slot is refilled at once
    # with client 1; without knowledge it stays occupied until client 0 returns at 400.
    tr = trace_of([(0, T), (5, U), (400, T)], [(0, T)])
    # seed 2: the random selector picks client 0 first
    aware = make_sim(tr, [10.0, 10.0], knowledge="tiertrack", concurrency=1, max_aggregations=1, seed=2).run()
    blind = make_sim(tr, [10.0, 10.0], knowledge="none", concurrency=1, max_aggregations=1, seed=2).run()
    assert aware.aggregation_times == [0.0, 15.0]  # client 1 dispatched at 5, done at 15
    assert blind.aggregation_times == [0.0, 405.0]  # client 0 resumes at 400 with 5 s left
    assert aware.accounting.detached_tasks == 1 and blind.accounting.timeouts == 1


def test_server_optimizers_sgd_and_fedadam_first_step_by_hand():
    import jax.numpy as jnp

    from felix_jax.fleet.server_optimizer import make_server_optimizer, server_step, weighted_mean_delta

    params = {"w": jnp.array([1.0, 2.0])}
    deltas = {"w": jnp.array([[0.2, -0.4], [0.6, 0.0]])}
    mean = weighted_mean_delta(deltas, jnp.array([1.0, 0.5]), normalize=False)  # (w1 d1 + w2 d2) / K
    np.testing.assert_allclose(np.asarray(mean["w"]), [(0.2 + 0.3) / 2, (-0.4 + 0.0) / 2], rtol=1e-6)
    sgd = make_server_optimizer("sgd", 0.3)
    new, _ = server_step(sgd, params, sgd.init(params), mean)
    np.testing.assert_allclose(np.asarray(new["w"]), [1.0 + 0.3 * 0.25, 2.0 - 0.3 * 0.2], rtol=1e-6)
    adam = make_server_optimizer("adam", 0.1)
    new, _ = server_step(adam, params, adam.init(params), mean)
    # first Adam step: bias-corrected m = g, v = g^2 -> update -lr * g / (|g| + eps), g = -mean
    want = [1.0 + 0.1 * 0.25 / (0.25 + 1e-3), 2.0 - 0.1 * 0.2 / (0.2 + 1e-3)]
    np.testing.assert_allclose(np.asarray(new["w"]), want, rtol=1e-5)
