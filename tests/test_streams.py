"""Client data streams (felix_jax/data/streams.py): hand-computed cases for the data a client
can train on at a time, drift schedules, the live test weighting and the live metrics; the
static special case; determinism; and a task training on its dispatch-time data."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from felix_jax.cohort import evaluate, evaluate_weighted
from felix_jax.data.federated import HeldOutSet
from felix_jax.data.partition import Partition
from felix_jax.data.streams import (ClientStreams, DriftSchedule, StreamConfig, StreamError, build_streams,
                                    class_histograms, stream_view, streams_to_device)
from felix_jax.experiment import get_preset
from felix_jax.experiment.results import live_metrics
from felix_jax.experiment.runner import build_simulator
from felix_jax.fleet.simulator import Checkpoint
from felix_jax.options import OptionError

H = 3600.0
INF = np.inf


def hand_streams(cfg: StreamConfig) -> ClientStreams:
    """Two clients, six slots each. Client 0: two initial samples (t=0) then arrivals at 1, 2, 3
    and 5 hours with labels 0.5 h later (the one at 3 h: 4 h later); client 1: one initial sample
    and one arrival at 1 h. Proxy labels: client 0's arrivals at 2 h and 3 h only."""
    arrival = np.array([[0, 0, 1, 2, 3, 5], [0, 1, INF, INF, INF, INF]], np.float64) * H
    label = np.array([[0, 0, 1.5, 2.5, 7, 5.5], [0, 1.5, INF, INF, INF, INF]], np.float64) * H
    proxy = np.array([[-1, -1, -1, 4, 4, -1], [-1, -1, -1, -1, -1, -1]], np.int32)
    table = np.array([[10, 11, 12, 13, 14, 15], [20, 21, 0, 0, 0, 0]], np.int32)
    sched = DriftSchedule(cfg, np.full((2, 5), 0.2), np.full(2, INF), np.full((2, 5), 0.2))
    return ClientStreams(table, arrival.astype(np.float32), label.astype(np.float32), proxy, sched, cfg)


USABLE_CASES = [
    # (config, time in hours, expected usable slots of client 0, of client 1)
    (StreamConfig(proxy_accuracy=None), 0.0, [0, 1], [0]),
    (StreamConfig(proxy_accuracy=None), 1.2, [0, 1], [0]),  # arrived at 1 h, label at 1.5 h: not yet
    (StreamConfig(proxy_accuracy=None), 1.5, [0, 1, 2], [0, 1]),
    (StreamConfig(proxy_accuracy=None), 2.2, [0, 1, 2, 3], [0, 1]),  # proxy-labelled (proxy >= 0)
    (StreamConfig(proxy_accuracy=None), 3.0, [0, 1, 2, 3, 4], [0, 1]),  # proxy at 3 h, true label at 7 h
    (StreamConfig(proxy_accuracy=None), 5.2, [0, 1, 2, 3, 4], [0, 1]),  # arrived at 5 h, label at 5.5 h
    (StreamConfig(window_hours=2.5), 3.0, [2, 3, 4], [1]),  # arrived in (0.5 h, 3 h]
    (StreamConfig(window_samples=2), 3.0, [3, 4], [0, 1]),  # client 0's last two arrivals
    (StreamConfig(window_samples=2), 1.2, [1], [0]),  # last two arrived: 1 and 2, and 2 is unlabelled
    (StreamConfig(window_hours=2.5, window_samples=2), 5.6, [5], []),  # last two: 4, 5; in (3.1 h, 5.6 h]: 5
]


@pytest.mark.parametrize("cfg, hours, want0, want1", USABLE_CASES)
def test_usable_samples_at_a_time_hand_computed(cfg, hours, want0, want1):
    st = hand_streams(cfg)
    mask = st.usable([0, 1], hours * H)
    assert list(np.flatnonzero(mask[0])) == want0 and list(np.flatnonzero(mask[1])) == want1
    assert list(st.counts([0, 1], hours * H)) == [len(want0), len(want1)]
    # the device view: the same positions first, in arrival order, with their labels
    dev = streams_to_device(st)
    y = jnp.arange(100, dtype=jnp.int32) % 7  # the data set's labels: sample i has label i % 7
    for c, want in ((0, want0), (1, want1)):
        row = jnp.asarray(st.index_table[c])
        rows, count, labels = stream_view(dev, jnp.int32(c), jnp.float32(hours * H), row, y[row])
        assert int(count) == len(want)
        assert list(np.asarray(rows)[:len(want)]) == [int(st.index_table[c, j]) for j in want]
        true = [int(st.index_table[c, j]) % 7 for j in want]
        before_label = [st.label_s[c, j] > np.float32(hours * H) for j in want]
        expect = [4 if late else t for t, late in zip(true, before_label)]  # proxy 4 until the label
        assert list(np.asarray(labels)[:len(want)]) == expect


def test_drift_schedules_hand_computed():
    base = np.array([[1.0, 0.0, 0.0], [0.2, 0.3, 0.5]])
    rot = DriftSchedule(StreamConfig(drift="rotation", period_hours=1.0), base, np.full(2, INF), base)
    np.testing.assert_allclose(rot.mix(0.0), base)
    np.testing.assert_allclose(rot.mix(0.5 * H)[0], [0.5, 0.5, 0.0])
    np.testing.assert_allclose(rot.mix(1.0 * H), [[0, 1, 0], [0.5, 0.2, 0.3]])
    np.testing.assert_allclose(rot.mix(3.0 * H), base)  # three classes: a full turn
    np.testing.assert_allclose(rot.mix_at([1, 0], [1.25 * H, 2 * H]), [[0.45, 0.275, 0.275], [0, 0, 1]])
    base4 = np.array([[0.5, 0.5, 0.0, 0.0]])
    surge = DriftSchedule(StreamConfig(drift="surge", surge_classes=(2,), strength=0.8, start_hours=1.0,
                                       duration_hours=1.0), base4, np.full(1, INF), base4)
    np.testing.assert_allclose(surge.mix(0.5 * H), base4)
    np.testing.assert_allclose(surge.mix(1.0 * H), [[0.1, 0.1, 0.8, 0.0]])
    np.testing.assert_allclose(surge.mix(1.99 * H), [[0.1, 0.1, 0.8, 0.0]])
    np.testing.assert_allclose(surge.mix(2.0 * H), base4)  # the end is exclusive
    assert surge.cfg.shift_times_s() == [1 * H, 2 * H]
    new = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    per = DriftSchedule(StreamConfig(drift="per_client"), base, np.array([H, 3 * H]), new)
    np.testing.assert_allclose(per.mix(2 * H), [[0, 0, 1], [0.2, 0.3, 0.5]])
    np.testing.assert_allclose(per.population_mix(2 * H), [0.1, 0.15, 0.75])
    np.testing.assert_allclose(per.population_mix(4 * H, weights=np.array([1.0, 3.0])), [0.75, 0, 0.25])


def test_class_histograms_and_arrival_classes_follow_the_mix():
    labels = np.array([0, 0, 1, 2, 2, 2] * 50)
    part = Partition(np.array([[0, 1, 2, 3], [3, 4, 5, 0]], np.int32), np.array([4, 3], np.int32), len(labels))
    np.testing.assert_allclose(class_histograms(part, labels, 3), [[0.5, 0.25, 0.25], [0, 0, 1]])
    cfg = StreamConfig(rate_per_hour=400, drift="surge", surge_classes=(1,), strength=0.8, start_hours=1,
                       duration_hours=1)
    st = build_streams(part, labels, 3, cfg, 3 * H, seed=0)
    arr, cls = st.arrival_s[0], labels[st.index_table[0]]
    real = np.isfinite(arr) & (np.arange(st.width) >= 4)
    inside = real & (arr >= H) & (arr < 2 * H)
    outside = real & ~inside
    # inside the surge class 1's share is 0.8 + 0.2 * 0.25 = 0.85, outside 0.25 (~400 and ~800 draws)
    assert abs((cls[inside] == 1).mean() - 0.85) < 0.06 and abs((cls[outside] == 1).mean() - 0.25) < 0.06
    assert abs(real.sum() / 3 - 400) < 4 * math.sqrt(400)  # Poisson count over 3 h
    assert (np.diff(arr[real]) >= 0).all()  # arrival order


def test_streams_are_deterministic_per_seed_and_delays_are_exponential():
    labels = np.arange(600) % 10
    part = Partition(np.arange(600, dtype=np.int32).reshape(3, 200), np.full(3, 200, np.int32), 600)
    cfg = StreamConfig(rate_per_hour=50, drift="rotation", label_delay_hours=2.0, proxy_accuracy=0.7)
    a, b, c = (build_streams(part, labels, 10, cfg, 10 * H, seed=s) for s in (1, 1, 2))
    for field in ("index_table", "arrival_s", "label_s", "proxy_y"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.arrival_s, c.arrival_s)
    new = np.isfinite(a.arrival_s) & (np.arange(a.width)[None, :] >= 200)
    delays = (a.label_s[new] - a.arrival_s[new]) / H
    assert abs(delays.mean() - 2.0) < 0.25 and (delays >= 0).all()
    assert (a.label_s[:, :200] == 0).all()  # the partition's own samples come labelled
    right = a.proxy_y[new] == labels[a.index_table][new]
    assert abs(right.mean() - 0.7) < 0.06


def test_stream_options_are_validated_in_one_line():
    for key, value in (("drift", "bogus"), ("window_hours", "0"), ("proxy_accuracy", "1.5"),
                       ("surge_classes", "a,b"), ("rate_per_hour", "-1")):
        with pytest.raises(OptionError, match=f"stream.{key}"):
            get_preset("tiny").with_overrides({f"stream.{key}": value})
    with pytest.raises(OptionError, match="stream.nope"):
        get_preset("tiny").with_overrides({"stream.nope": "1"})
    with pytest.raises(StreamError, match="surge_classes"):
        StreamConfig(drift="surge", surge_classes=(12,)).check_classes(10)


def test_live_weighting_against_per_class_accuracy():
    sim = build_simulator(get_preset("tiny"))
    params, test = sim.params, sim.test
    y = np.asarray(test.y)
    freq = np.bincount(y, minlength=10) / len(y)
    plain = evaluate(sim.model, params, test)
    np.testing.assert_allclose(evaluate_weighted(sim.model, params, test, freq).accuracy, plain.accuracy, atol=1e-6)
    np.testing.assert_allclose(evaluate_weighted(sim.model, params, test, freq).loss, plain.loss, rtol=1e-5)
    for k in (0, 3):
        only = HeldOutSet(x=test.x[y == k], y=test.y[y == k], input_scale=test.input_scale,
                          input_mean=test.input_mean, input_std=test.input_std)
        one_hot = np.eye(10)[k]
        np.testing.assert_allclose(evaluate_weighted(sim.model, params, test, one_hot).accuracy,
                                   evaluate(sim.model, params, only).accuracy, atol=1e-6)
    half = 0.5 * np.eye(10)[0] + 0.5 * np.eye(10)[3]
    a0, a3 = (evaluate_weighted(sim.model, params, test, np.eye(10)[k]).accuracy for k in (0, 3))
    np.testing.assert_allclose(evaluate_weighted(sim.model, params, test, half).accuracy, (a0 + a3) / 2, atol=1e-6)


def test_live_metrics_hand_computed():
    cps = [Checkpoint(t, i, a, 0.0, 0, 0.0, 0.0) for i, (t, a) in
           enumerate([(0, 0.1), (100, 0.6), (200, 0.8), (300, 0.5), (400, 0.9), (600, 0.7)])]
    m = live_metrics(cps, [250.0, 500.0, 900.0], target=0.75)
    # step-hold mean: (0.1*100 + 0.6*100 + 0.8*100 + 0.5*100 + 0.9*200) / 600
    assert m["accuracy_time_mean"] == pytest.approx(380 / 600)
    # after 250 s: 300 s (0.5) then 400 s (0.9 >= 0.75): lag 150 s; after 500 s: 600 s has 0.7: never
    assert m["adaptation_lags"] == [{"shift_s": 250.0, "lag_s": 150.0}, {"shift_s": 500.0, "lag_s": None}]


STATIC_LIKE = {"stream.drift": "surge", "stream.start_hours": "1000", "stream.live_eval": "false"}


@pytest.mark.parametrize("strategy", ["fedbuff", "felix"])
def test_a_stream_with_nothing_arriving_is_the_static_run(strategy):
    """The stream code path (tables, masks, time-dependent counts) on a stream where nothing
    arrives and nothing drifts within the run gives the static run's results bit for bit."""
    base = {"strategy": strategy, "availability": "avail50", "slot_s": "60", "max_aggregations": "10",
            "target_accuracy": "none"}
    static = build_simulator(get_preset("tiny").with_overrides(base))
    streamed = build_simulator(get_preset("tiny").with_overrides({**base, **STATIC_LIKE}))
    assert static.engine.streams is None and streamed.engine.streams is not None
    a, b = static.run(), streamed.run()
    assert repr(a.checkpoints) == repr(b.checkpoints)
    assert a.aggregation_times == b.aggregation_times
    for x, y in zip(jax.tree_util.tree_leaves(a.params), jax.tree_util.tree_leaves(b.params)):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


def test_tasks_train_on_the_data_of_their_dispatch_time():
    """A client whose only arrivals come after t has more data (a longer task) at a later time, and
    a task's result depends on the time it was given."""
    sc = get_preset("tiny").with_overrides({"stream.rate_per_hour": "200", "max_virtual_hours": "2",
                                            "local_mode": "epochs"})
    sim = build_simulator(sc)
    eng = sim.engine
    clients = np.arange(4)
    early, late = eng.sample_counts(clients, np.zeros(4)), eng.sample_counts(clients, np.full(4, 1.5 * H))
    assert (late > early).all()
    np.testing.assert_array_equal(early, np.asarray(eng.data.counts)[:4])
    assert (eng.num_train_steps(clients, np.full(4, 1.5 * H)) >= eng.num_train_steps(clients, np.zeros(4))).all()
    store = sim.executor.store
    slots = np.zeros(2, np.int32)
    out0 = eng.train(store.stacked, slots, [0, 0], [7, 8], [0.0, 0.0])
    out1 = eng.train(store.stacked, slots, [0, 0], [7, 8], [0.0, 1.5 * H])
    assert out0.num_steps[1] < out1.num_steps[1] and out0.num_steps[0] == out1.num_steps[0]
    with pytest.raises(ValueError, match="times"):
        eng.train(store.stacked, slots, [0, 0], [7, 8])


def test_a_new_class_surge_hides_the_class_until_its_start():
    labels = np.array([0, 1, 2, 0, 1, 2])
    part = Partition(np.array([[0, 1, 2], [3, 4, 5]], np.int32), np.full(2, 3, np.int32), 6)
    cfg = StreamConfig(rate_per_hour=30, drift="surge", surge_classes=(2,), surge_new=True, start_hours=1.0,
                       duration_hours=1.0, strength=0.5)
    st = build_streams(part, labels, 3, cfg, 3 * H, seed=0)
    cls = labels[st.index_table]
    for c in range(2):
        before, during = st.usable([c], 0.99 * H)[0], st.usable([c], 1.0 * H)[0]
        assert (cls[c][before] != 2).all() and before.sum() >= 2  # its class-0 and class-1 samples
        assert (cls[c][during] == 2).any()  # its own class-2 sample appears at the start
        arr = st.arrival_s[c][np.isfinite(st.arrival_s[c])]
        assert (np.diff(arr) >= 0).all()
    np.testing.assert_allclose(st.schedule.mix(0.5 * H), [[0.5, 0.5, 0], [0.5, 0.5, 0]])
    np.testing.assert_allclose(st.schedule.mix(1.5 * H), [[1 / 6, 1 / 6, 2 / 3]] * 2)
    np.testing.assert_allclose(st.schedule.mix(2.5 * H), [[1 / 3] * 3] * 2)


def test_a_task_reports_when_its_labels_arrived():
    st = hand_streams(StreamConfig())
    # client 0 at 3 h: slots 0-4 usable; true labels by then at 0, 0, 1.5, 2.5 h; slot 4's (7 h) is a proxy
    assert st.label_report(0, 3 * H) == pytest.approx((2.5 * H, 1 / 5))
    assert st.label_report(0, 2.6 * H) == (2.5 * H, 0.0)  # slot 3's label came at 2.5 h
    assert st.label_report(1, 0.5 * H) == (0.0, 0.0)  # only the initial sample, labelled at 0
    sc = get_preset("tiny").with_overrides({"strategy": "fedbuff", "stream.rate_per_hour": "300",
                                            "stream.label_delay_hours": "0.01", "stream.proxy_accuracy": "0.5",
                                            "max_aggregations": "8", "target_accuracy": "none"})
    sim = build_simulator(sc)
    seen = []
    weights = sim.aggregator.weights
    sim.aggregator = sim.aggregator._replace(weights=lambda info: seen.append(info) or weights(info))
    sim.run()
    labels = np.concatenate([i.label_time_s for i in seen])
    proxies = np.concatenate([i.proxy_fraction for i in seen])
    assert (labels > 0).any() and ((proxies > 0) & (proxies < 1)).any()


def test_a_stream_run_killed_and_resumed_equals_the_uninterrupted_run(tmp_path):
    """Snapshots hold the tasks' dispatch times and label reports; the stream tables are rebuilt
    from the scenario's seed."""
    from tests.test_snapshot import assert_same_run, killed_and_resumed

    sc = get_preset("tiny").with_overrides({
        "strategy": "felix", "availability": "avail50", "slot_s": "60", "max_aggregations": "12",
        "target_accuracy": "none", "stream.rate_per_hour": "400", "stream.drift": "surge",
        "stream.start_hours": "0.01", "stream.label_delay_hours": "0.005", "stream.proxy_accuracy": "0.6"})
    reference = build_simulator(sc).run()
    assert_same_run(reference, killed_and_resumed(sc, tmp_path))
