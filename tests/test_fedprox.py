"""FedProx (Li et al., MLSys 2020): the proximal term in local training and partial updates
(``interruption=partial``), by hand on one-parameter models and hand-made traces."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from felix_jax.cohort import CohortEngine, LocalTrainConfig, VersionStore, local_train
from felix_jax.cohort import engine as engine_mod
from felix_jax.cohort.local import batch_positions, client_data
from felix_jax.data.federated import normalize
from felix_jax.experiment import get_preset
from felix_jax.experiment.runner import build_simulator
from felix_jax.fleet import FleetConfig, Interruption, StopRule, task_timeline
from felix_jax.fleet.lifecycle import partial_work
from felix_jax.fleet.modes import SyncMode
from felix_jax.fleet.simulator import FleetSimulator
from felix_jax.models.base import Model
from felix_jax.policies import make_aggregator, make_selector
from felix_jax.traces import AvailabilityTrace, DeviceProfile, Tier
from tests.conftest import LINEAR, linear_data

T, U = int(Tier.AVL_TRAIN), int(Tier.UN_AVL)


# ---------------------------------------------------------------- the proximal term
def _half_square_loss(params, x, y):
    """One parameter w, per-sample loss (w - x)^2 / 2: its gradient is w - x."""
    del y
    return 0.5 * (params["w"] - x[:, 0]) ** 2, jnp.zeros((x.shape[0], 2))


ONE_PARAM = Model("one_param", lambda key: {"w": jnp.zeros(())}, lambda p, x: jnp.zeros((x.shape[0], 2)),
                  _half_square_loss, (1,), 2, 1, 4)


@pytest.mark.parametrize("mu, want", [(0.5, 0.37), (0.0, 0.38)])
def test_proximal_gradient_on_a_one_parameter_model_by_hand(mu, want):
    """Client 1 holds the one sample x = 2; from w0 = 0, SGD 0.1, two steps on F + mu/2 (w - w0)^2:
    w1 = 0 - 0.1 (0 - 2) = 0.2 (the proximal term is 0 at the start);
    w2 = 0.2 - 0.1 ((0.2 - 2) + mu (0.2 - 0)) = 0.37 at mu = 0.5, 0.38 at mu = 0."""
    data, _ = linear_data()
    cfg = LocalTrainConfig(batch_size=1, learning_rate=0.1, mode="steps", local_steps=2)
    out = jax.jit(lambda m: local_train(ONE_PARAM, cfg, 2, {"w": jnp.zeros(())}, data, jnp.int32(1),
                                        jax.random.key(0), jnp.int32(2), None, m))(jnp.float32(mu))
    np.testing.assert_allclose(float(out.delta["w"]), want, rtol=1e-6)
    # the losses reported are F's alone: (0 - 2)^2 / 2 + (0.2 - 2)^2 / 2 over the two steps
    np.testing.assert_allclose(float(out.all_steps.sum), 2.0 + 1.62, rtol=1e-6)


def _plain_sgd(model, cfg, num_steps, params, data, client, key):
    """Today's local training written out without any proximal term: SGD on each step's masked mean loss."""
    row, count, _ = client_data(data, client, None)
    k_order, _ = jax.random.split(key)
    per_epoch = cfg.steps_per_epoch(count)
    opt = cfg.optimizer()
    state = opt.init(params)
    start = params
    for s in range(num_steps):
        positions, valid = batch_positions(k_order, jnp.int32(s), count, per_epoch, cfg.batch_size,
                                           data.index_table.shape[1])
        idx = row[positions]
        x = normalize(data.x[idx], data.input_scale, data.input_mean, data.input_std)

        def loss(p):
            losses, _ = model.loss(p, x, data.y[idx])
            m = valid.astype(losses.dtype)
            return (losses * m).sum() / jnp.maximum(m.sum(), 1.0)

        updates, state = opt.update(jax.grad(loss)(params), state, params)
        params = optax.apply_updates(params, updates)
    return jax.tree_util.tree_map(lambda a, b: a - b, params, start)


@pytest.mark.parametrize("cfg", [LocalTrainConfig(batch_size=1, learning_rate=0.5, mode="steps", local_steps=3),
                                 LocalTrainConfig(batch_size=2, learning_rate=0.5, mode="steps", local_steps=3,
                                                  momentum=0.9, weight_decay=1e-2)])
def test_mu_zero_is_plain_local_training(cfg):
    """Softmax regression (conftest's LINEAR) from non-zero parameters, three steps on client 0's two
    samples: FedProx's step at mu = 0 is today's, written out without any proximal term."""
    data, _ = linear_data()
    params = {"w": jnp.array([[0.3, -0.2]]), "b": jnp.array([0.1, 0.0])}
    key = jax.random.key(5)
    fedprox = jax.jit(lambda p, m: local_train(LINEAR, cfg, 3, p, data, jnp.int32(0), key, jnp.int32(3), None, m))
    plain = jax.jit(lambda p: _plain_sgd(LINEAR, cfg, 3, p, data, jnp.int32(0), key))
    chex.assert_trees_all_close(fedprox(params, jnp.float32(0.0)).delta, plain(params), atol=1e-7, rtol=1e-6)
    # and mu > 0 moves it less far from the start
    norm = lambda t: float(sum(jnp.sum(x * x) for x in jax.tree_util.tree_leaves(t)))  # noqa: E731
    assert norm(fedprox(params, jnp.float32(1.0)).delta) < norm(plain(params))


def test_a_new_mu_compiles_nothing(monkeypatch):
    """mu is an argument of the cohort call, not of its config: engines with other mu share one program
    (chex counts run_cohort's traces), and each trains with its own."""
    data, _ = linear_data()
    cfg = LocalTrainConfig(batch_size=1, learning_rate=0.5, mode="steps", local_steps=3)
    params = {"w": jnp.array([[0.3, -0.2]]), "b": jnp.array([0.1, 0.0])}
    store = VersionStore(params, capacity=2)
    store.put(0, params)
    clients, slots, ids = np.array([0, 1, 0]), np.full(3, store.slots([0])[0]), np.arange(3)
    chex.clear_trace_counter()
    monkeypatch.setattr(engine_mod, "run_cohort", chex.assert_max_traces(engine_mod.run_cohort, n=1))
    engine_mod._cohort_jit.cache_clear()  # a fresh program, so its one trace is counted here
    outs = {mu: CohortEngine(LINEAR, data, cfg, prox_mu=mu).train(store.stacked, slots, clients, ids)
            for mu in (0.0, 0.1, 0.7)}
    engine_mod._cohort_jit.cache_clear()  # the counted function leaves no program behind for later tests
    gap = lambda a, b: max(float(jnp.abs(x - y).max()) for x, y in  # noqa: E731
                           zip(jax.tree_util.tree_leaves(a.delta), jax.tree_util.tree_leaves(b.delta)))
    assert gap(outs[0.0], outs[0.1]) > 0 and gap(outs[0.1], outs[0.7]) > 0


def test_the_cohort_call_runs_each_tasks_steps_with_the_proximal_term():
    """The vmapped call by hand (the one-parameter model, client 1's sample x = 2, SGD 0.1 from w = 0):
    at mu = 0, k steps give 2 - 2 * 0.9^k; a task limited to 2 steps (a partial update) stops there;
    at mu = 0.5 two steps give 0.37 (the test above)."""
    data, _ = linear_data()
    cfg = LocalTrainConfig(batch_size=1, learning_rate=0.1, mode="steps", local_steps=4)
    params = {"w": jnp.zeros(())}
    store = VersionStore(params, capacity=2)
    store.put(0, params)
    slot = store.slots([0])[0]
    eng = CohortEngine(ONE_PARAM, data, cfg)
    eng.set_step_limit(11, 2)
    out = eng.train(store.stacked, [slot, slot], [1, 1], [10, 11])
    np.testing.assert_array_equal(out.num_steps, [4, 2])
    np.testing.assert_allclose(np.asarray(out.delta["w"]), [2 - 2 * 0.9 ** 4, 2 - 2 * 0.9 ** 2], rtol=1e-5)
    eng.set_step_limit(11, None)
    np.testing.assert_array_equal(eng.train_lengths([1], [11]), [4])
    prox = CohortEngine(ONE_PARAM, data, cfg, prox_mu=0.5)
    prox.set_step_limit(11, 2)
    out = prox.train(store.stacked, [slot], [1], [11])
    np.testing.assert_allclose(np.asarray(out.delta["w"]), [0.37], rtol=1e-5)


# ---------------------------------------------------------------- partial updates: the clock's rule
def trace_of(*clients):
    return AvailabilityTrace.from_client_lists([[t for t, _ in c] for c in clients],
                                               [[s for _, s in c] for c in clients])


def test_partial_timeline_and_the_steps_done_by_hand():
    # dispatched at 80, the client leaves at 100: 20 s of running time
    tl = task_timeline(trace_of([(0, T), (100, U), (300, T)]), 0, 80.0, 40.0, frozenset({T}), Interruption.PARTIAL)
    assert (tl.start_s, tl.finish_s, tl.first_stop_s, tl.interruptions, tl.worked_s) == (80.0, 100.0, 100.0, 1, 20.0)
    # download 4 s, 4 steps over 32 s of computation (8 s a step), upload 4 s: floor((20 - 4) / 8) = 2 steps,
    # uploaded from the departure at 100
    cut, steps = partial_work(tl, 4, 4.0, 32.0, 4.0)
    assert (steps, cut.finish_s, cut.abandoned) == (2, 104.0, False)
    # a departure during the download: no step to send, abandoned
    cut, steps = partial_work(tl, 4, 24.0, 12.0, 4.0)
    assert (steps, cut.finish_s, cut.abandoned) == (0, math.inf, True)
    # a departure exactly at a step's end counts that step; during the upload: all of them
    assert partial_work(tl, 4, 4.0, 16.0, 4.0)[1] == 4 and partial_work(tl, 4, 0.0, 40.0, 0.0)[1] == 2
    # a computation that takes no time: all steps once downloaded
    assert partial_work(tl, 3, 0.0, 0.0, 0.0)[1] == 3
    # not cut short: the timeline as it is, every step
    whole = task_timeline(trace_of([(0, T)]), 0, 0.0, 40.0, frozenset({T}), Interruption.PARTIAL)
    assert partial_work(whole, 4, 4.0, 32.0, 4.0) == (whole, 4) and whole.finish_s == 40.0


def _sync_sim(trace, delays, interruption, *, steps=4, aggregator="fedprox", prox_mu=0.0, max_aggregations=1,
              knowledge="none"):
    data, test = linear_data()
    n = trace.num_clients
    engine = CohortEngine(ONE_PARAM, data, LocalTrainConfig(batch_size=1, learning_rate=0.1, mode="steps",
                                                            local_steps=steps), prox_mu=prox_mu)
    cfg = FleetConfig(mode="sync", knowledge=knowledge, aggregation_goal=1, overcommit=1.0,
                      interruption=interruption, prox_mu=prox_mu)
    return FleetSimulator(model=ONE_PARAM, engine=engine, trace=trace,
                          profile=DeviceProfile(np.asarray(delays, float), np.ones(n), np.full(n, np.inf),
                                                np.full(n, np.inf)),
                          test=test, init_params={"w": jnp.zeros(())}, config=cfg, selector=make_selector("random"),
                          aggregator=make_aggregator(aggregator), mode=SyncMode(),
                          stop=StopRule(max_aggregations=max_aggregations), seed=0)


def test_a_client_that_leaves_sends_the_steps_it_finished():
    """Client 1 (the sample x = 2) trains 4 steps over 40 s and leaves at 30: it has done
    floor(30 / 10) = 3 steps; their update reaches the server at 30 (no upload time). The server's
    model is then the 3-step model: w3 = 2 - 2 * 0.9^3 = 0.542 (steps of SGD 0.1 on (w - 2)^2 / 2)."""
    trace = trace_of([(0, U)], [(0, T), (30, U), (1000, T)])  # client 0 is never there: the oracle picks 1
    sim = _sync_sim(trace, [40.0, 40.0], Interruption.PARTIAL, knowledge="oracle")
    rec = sim.run()
    assert rec.aggregation_times == [0.0, 30.0]
    np.testing.assert_allclose(float(rec.params["w"]), 2 - 2 * 0.9 ** 3, rtol=1e-5)
    partial = [r for r in rec.accounting.events if r[1] == "partial"]
    assert partial == [(30.0, "partial", 1, "train", 0, 3, None, U)]  # steps in the staleness column
    assert rec.accounting.partial_updates == 1 and rec.accounting.interrupted_tasks == 1
    np.testing.assert_array_equal(sim.engine.train_lengths([1], [0]), [4])  # its limit forgotten once taken
    # the same client under resume: the whole task, back at 1000 with 10 s to go
    rec = _sync_sim(trace, [40.0, 40.0], Interruption.RESUME, knowledge="oracle").run()
    assert rec.aggregation_times == [0.0, 1010.0]
    np.testing.assert_allclose(float(rec.params["w"]), 2 - 2 * 0.9 ** 4, rtol=1e-5)


def test_partial_weights_samples_or_the_share_processed():
    from felix_jax.policies.aggregators import BufferInfo

    info = BufferInfo(np.zeros(2, np.int64), np.array([40.0, 60.0]), np.zeros(2), np.zeros(2), np.ones(2),
                      work_fraction=np.array([1.0, 0.25]))
    np.testing.assert_allclose(make_aggregator("fedprox").weights(info), [40.0, 60.0])  # FedProx's code: n_k
    np.testing.assert_allclose(make_aggregator("fedprox", partial_weight="processed").weights(info), [40.0, 15.0])


def test_under_tiertrack_a_partial_update_keeps_its_slot_until_it_arrives():
    trace = trace_of([(0, U)], [(0, T), (30, U), (1000, T)])
    sim = _sync_sim(trace, [40.0, 40.0], Interruption.PARTIAL, knowledge="tiertrack")
    rec = sim.run()
    assert rec.aggregation_times == [0.0, 30.0] and rec.accounting.detached_tasks == 0


# ---------------------------------------------------------------- FedProx against FedAvg
TINY = get_preset("tiny").with_overrides({"target_accuracy": "none", "max_aggregations": "3",
                                          "availability": "avail100"})


def test_fedprox_with_partial_updates_and_mu_zero_is_fedavg_where_no_client_leaves():
    """Acceptance (issue 62): on avail100 no task is cut short, so FedProx at mu = 0 dispatches what
    FedAvg does and its model equals FedAvg's (bit for bit on a CPU: the proximal term is an exact zero;
    stated tolerance 1e-6)."""
    prox = build_simulator(TINY.with_overrides({"strategy": "fedprox", "prox_mu": "0"}))
    assert prox.cfg.interruption is Interruption.PARTIAL and prox.engine.prox_mu == 0.0
    avg = build_simulator(TINY.with_overrides({"strategy": "fedavg"}))
    a, b = prox.run(), avg.run()
    assert a.accounting.partial_updates == 0
    assert [r for r in a.accounting.events if r[1] == "dispatch"] == [r for r in b.accounting.events
                                                                      if r[1] == "dispatch"]
    assert a.aggregation_times == b.aggregation_times
    chex.assert_trees_all_close(a.params, b.params, atol=1e-6, rtol=0)
