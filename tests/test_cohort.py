"""Cohort engine: parity with the per-client reference, padding, buckets, masks."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from felix_jax.cohort import (CohortEngine, LocalEvalConfig, LocalTrainConfig, VersionStore, ladder_ceil,
                              local_train, padding_waste, plan_buckets, statistical_utility)
from felix_jax.cohort import engine as engine_mod
from felix_jax.cohort import group as group_mod
from felix_jax.cohort.group import Request, SharedCohort
from felix_jax.cohort.evaluate import evaluate
from felix_jax.models import mlp
from tests.conftest import CompileCount

MODEL = mlp((8, 8, 3), hidden=(16,))


def _store(num_versions=2):
    store = VersionStore(MODEL.init(jax.random.key(0)), capacity=2)
    for v in range(num_versions):
        store.put(v, MODEL.init(jax.random.key(10 + v)))
    return store


def _max_abs_diff(a, b):
    return max(float(jnp.abs(x - y).max()) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


CLIENTS = np.array([0, 1, 2, 3, 4, 5, 1])
SLOTS = np.array([0, 1, 0, 1, 0, 1, 0])
TASKS = np.arange(7) + 100


@pytest.mark.parametrize("cfg", [
    LocalTrainConfig(batch_size=16, learning_rate=0.1, mode="epochs", local_epochs=1),
    LocalTrainConfig(batch_size=16, learning_rate=0.1, mode="steps", local_steps=3, momentum=0.9),
    LocalTrainConfig(batch_size=16, learning_rate=0.1, mode="epochs", local_epochs=2, drop_last=False, augment=True),
])
def test_vmapped_cohort_equals_debug_per_client_loop(tiny, cfg):
    _, _, data, _ = tiny
    store = _store()
    fast = CohortEngine(MODEL, data, cfg, seed=3).train(store.stacked, SLOTS, CLIENTS, TASKS)
    ref = CohortEngine(MODEL, data, cfg, seed=3, backend="debug").train(store.stacked, SLOTS, CLIENTS, TASKS)
    chex.assert_trees_all_close(fast.delta, ref.delta, atol=2e-5, rtol=1e-4)
    for a, b in [(fast.first_batch, ref.first_batch), (fast.all_steps, ref.all_steps)]:
        chex.assert_trees_all_close(tuple(a), tuple(b), atol=1e-4, rtol=1e-4)
    np.testing.assert_array_equal(fast.num_steps, ref.num_steps)


@pytest.mark.parametrize("plan", ["vmap", "map", "chunked:2"])
def test_every_execution_plan_gives_the_same_results(tiny, plan):
    _, _, data, _ = tiny
    cfg = LocalTrainConfig(batch_size=16, mode="steps", local_steps=2)
    store = _store()
    ref = CohortEngine(MODEL, data, cfg, plan="vmap").train(store.stacked, SLOTS, CLIENTS, TASKS)
    out = CohortEngine(MODEL, data, cfg, plan=plan).train(store.stacked, SLOTS, CLIENTS, TASKS)
    chex.assert_trees_all_close(out.delta, ref.delta, atol=1e-6)


class LocalTrainJitTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_local_train_with_and_without_jit_equals_engine(self):
        from felix_jax.data.federated import to_device
        from felix_jax.data.partition import partition_from_counts
        from tests.conftest import make_image_dataset
        ds = make_image_dataset(num_train=200)
        data = to_device(ds, partition_from_counts(200, np.array([40, 7]), seed=1))
        cfg = LocalTrainConfig(batch_size=16, mode="epochs")
        params = MODEL.init(jax.random.key(0))
        fn = self.variant(lambda p, c, k, n: local_train(MODEL, cfg, 2, p, data, c, k, n))
        # the engine derives task keys as fold_in(key(seed), task_id)
        out = fn(params, jnp.int32(0), jax.random.fold_in(jax.random.key(4), 11), jnp.int32(2))
        ref = CohortEngine(MODEL, data, cfg, seed=4).train(jax.tree_util.tree_map(lambda p: p[None], params),
                                                           [0], [0], [11])
        chex.assert_trees_all_close(out.delta, jax.tree_util.tree_map(lambda d: d[0], ref.delta), atol=1e-6)
        assert int(out.num_steps) == 2 and float(out.all_steps.count) == 32.0


def test_padding_does_not_change_results(tiny):
    _, _, data, _ = tiny
    cfg = LocalTrainConfig(batch_size=16, mode="steps", local_steps=2)
    store = _store()
    eng = CohortEngine(MODEL, data, cfg)
    alone = eng.train(store.stacked, [1], [3], [42])  # bucket of 1
    crowd = eng.train(store.stacked, [0, 1, 0, 1, 0], [0, 3, 1, 2, 5], [7, 42, 8, 9, 10])  # padded to 8
    chex.assert_trees_all_close(jax.tree_util.tree_map(lambda d: d[0], alone.delta),
                                jax.tree_util.tree_map(lambda d: d[1], crowd.delta), atol=1e-6)
    assert alone.all_steps.sum[0] == pytest.approx(crowd.all_steps.sum[1], rel=1e-5)


# ---- the retrace guard: after a warm-up, a churny run compiles nothing new -----------------------------------
# A new flush size at every event, up to 8 or 16 tasks; clients drawn at random, so task lengths (1 to 6
# epoch steps) differ and a flush may be cut into several buckets. The bucketing pads every call to a
# power of two: once each of those sizes has run, nothing compiles again, neither the cohort call
# (chex.assert_max_traces) nor anything else in the process (jax's compile events).
CHURN = [3, 7, 1, 12, 5, 16, 2, 9, 6, 14, 4, 11, 13, 10, 15, 8]
CHURN_CFG = LocalTrainConfig(batch_size=16, mode="epochs", local_epochs=1)


def _churn_tasks(rng, n: int, first_id: int):
    return rng.integers(0, 2, n), rng.integers(0, 6, n), np.arange(first_id, first_id + n)  # slots, clients, ids


def _guard_traces(monkeypatch, module, n: int) -> None:
    """The cohort call of ``module`` traced at most ``n`` times from now on (train and eval together)."""
    chex.clear_trace_counter()
    monkeypatch.setattr(module, "run_cohort", chex.assert_max_traces(engine_mod.run_cohort, n=n))


# the default tier: flushes of 1 to 4 tasks under vmap; the slow tier: 1 to 8 under vmap, 1 to 16 under lax.map
@pytest.mark.parametrize("plan,sizes", [("vmap", [1, 2, 4]),  # the padded call sizes of flushes of 1 to 4 tasks
                                        pytest.param("vmap", [1, 2, 4, 8], marks=pytest.mark.slow),  # 1 to 8 tasks
                                        # lax.map (at least 8 tasks a call), 1 to 16 tasks
                                        pytest.param("map", [8, 16], marks=pytest.mark.slow)])
def test_a_churny_run_compiles_nothing_after_warm_up(tiny, monkeypatch, plan, sizes):
    _, _, data, _ = tiny
    store = _store()
    _guard_traces(monkeypatch, engine_mod, 2 * len(sizes))  # an engine's jits trace run_cohort when they first run
    eng = CohortEngine(MODEL, data, CHURN_CFG, plan=plan)
    assert eng.min_tasks_per_call == sizes[0]
    for p in sizes:  # warm-up: one call of each size (p tasks of one client: one bucket)
        eng.train(store.stacked, [0] * p, [1] * p, np.arange(p))
        eng.evaluate(store.stacked, [0] * p, [1] * p, np.arange(p))
    warm = len(eng.records)
    rng = np.random.default_rng(0)
    with CompileCount() as compiles:
        for event, n in enumerate(n for n in CHURN if n <= sizes[-1]):
            eng.train(store.stacked, *_churn_tasks(rng, n, 100 * event))
            eng.evaluate(store.stacked, *_churn_tasks(rng, n, 100 * event + 50))
    assert compiles.count == 0
    assert not any(r.compiled for r in eng.records[warm:])
    assert {r.padded_tasks for r in eng.records[warm:]} <= set(sizes)


@pytest.mark.slow  # the default tier guards one engine's calls (the test above, flushes of 1 to 4 tasks)
def test_a_churny_sweep_batch_compiles_nothing_after_warm_up(tiny, monkeypatch):
    # two experiments in one sweep batch (cohort/group.py) under the CPU plan: each flush takes both
    # experiments' tasks, of sizes that change at every event, or one experiment's alone (its store
    # stood in for by zeros). Training only: evaluation goes through the same bucketing and call.
    _, _, data, _ = tiny
    sizes = [8, 16, 32]  # lax.map, 1 to 32 tasks a flush
    _guard_traces(monkeypatch, group_mod, len(sizes))
    engines = [CohortEngine(MODEL, data, CHURN_CFG, seed=seed, plan="map") for seed in (0, 1)]
    shared = SharedCohort(engines)
    assert shared.min_tasks_per_call == sizes[0]
    stores = [_store(), _store(1)]

    def flush(tasks):  # per experiment: (slots, clients, task ids), or None for no tasks this time
        shared.train([Request(e, st.stacked, *(np.asarray(a, np.int32) for a in t), np.zeros(len(t[1]), np.float32))
                      for e, st, t in zip(engines, stores, tasks) if t is not None])

    for p in sizes:  # warm-up: both experiments, p tasks of one client in all; then the first alone
        half = ([0] * (p // 2), [1] * (p // 2), np.arange(p // 2))
        flush([half, half])
    flush([half, None])
    warm = len(shared.calls)
    rng = np.random.default_rng(1)
    with CompileCount() as compiles:
        for event, (a, b) in enumerate(zip(CHURN, CHURN[::-1])):
            both = [_churn_tasks(rng, a, 100 * event), _churn_tasks(rng, b, 100 * event + 50)]
            flush(both if event % 4 else [both[0], None])
    assert compiles.count == 0
    assert not any(c.compiled for c in shared.calls[warm:])
    assert {c.padded_tasks for c in shared.calls[warm:]} <= set(sizes)


def test_epoch_mode_masks_short_clients_and_matches_hand_computed_sgd(tiny):
    ds, part, data, _ = tiny
    cfg = LocalTrainConfig(batch_size=16, learning_rate=0.5, mode="epochs", local_epochs=1)
    params = MODEL.init(jax.random.key(0))
    store = VersionStore(params, capacity=1)
    store.put(0, params)
    # client 0 has 5 samples (< batch 16): one masked step over exactly its 5 samples.
    # client 4 has 1 sample. client 1 has 70: 4 full batches, last 6 samples dropped.
    out = CohortEngine(MODEL, data, cfg).train(store.stacked, [0, 0, 0], [0, 4, 1], [1, 2, 3])
    np.testing.assert_array_equal(out.num_steps, [1, 1, 4])
    np.testing.assert_array_equal(out.all_steps.count, [5, 1, 64])
    np.testing.assert_array_equal(out.first_batch.count, [5, 1, 16])
    idx = part.client_indices(0)
    x = (ds.train_x[idx].astype(np.float32) / 255 - 0.5) / 0.25
    y = ds.train_y[idx]
    losses, _ = MODEL.loss(params, jnp.asarray(x), jnp.asarray(y))
    grads = jax.grad(lambda p: MODEL.loss(p, jnp.asarray(x), jnp.asarray(y))[0].mean())(params)
    want = jax.tree_util.tree_map(lambda g: -0.5 * g, grads)
    chex.assert_trees_all_close(jax.tree_util.tree_map(lambda d: d[0], out.delta), want, atol=1e-6)
    assert out.first_batch.sum[0] == pytest.approx(float(losses.sum()), rel=1e-5)
    assert out.first_batch.sumsq[0] == pytest.approx(float((losses ** 2).sum()), rel=1e-5)


def test_drop_last_false_uses_every_sample(tiny):
    _, _, data, _ = tiny
    cfg = LocalTrainConfig(batch_size=16, mode="epochs", drop_last=False, local_epochs=2)
    out = CohortEngine(MODEL, data, cfg).train(_store().stacked, [0], [1], [0])
    assert out.num_steps[0] == 2 * 5 and out.all_steps.count[0] == 2 * 70


def test_tasks_start_from_their_own_model_version(tiny):
    _, _, data, _ = tiny
    cfg = LocalTrainConfig(batch_size=16, mode="steps", local_steps=1)
    store = _store()
    eng = CohortEngine(MODEL, data, cfg)
    mixed = eng.train(store.stacked, [0, 1], [2, 2], [9, 9])
    single = VersionStore(store.params(1), capacity=1)
    single.put(0, store.params(1))
    only_v1 = eng.train(single.stacked, [0], [2], [9])
    chex.assert_trees_all_close(jax.tree_util.tree_map(lambda d: d[1], mixed.delta),
                                jax.tree_util.tree_map(lambda d: d[0], only_v1.delta), atol=1e-6)
    assert _max_abs_diff(jax.tree_util.tree_map(lambda d: d[0], mixed.delta),
                         jax.tree_util.tree_map(lambda d: d[1], mixed.delta)) > 1e-4


def test_same_task_id_same_result_different_id_different_batches(tiny):
    _, _, data, _ = tiny
    cfg = LocalTrainConfig(batch_size=16, mode="steps", local_steps=2)
    eng = CohortEngine(MODEL, data, cfg)
    store = _store()
    a = eng.train(store.stacked, [0, 0, 0], [3, 3, 3], [1, 1, 2])
    chex.assert_trees_all_close(jax.tree_util.tree_map(lambda d: d[0], a.delta),
                                jax.tree_util.tree_map(lambda d: d[1], a.delta))
    assert a.all_steps.sum[0] != a.all_steps.sum[2]


def test_local_eval_covers_all_samples_and_matches_debug(tiny):
    ds, part, data, _ = tiny
    cfg = LocalTrainConfig(batch_size=16)
    store = _store()
    eng = CohortEngine(MODEL, data, cfg, LocalEvalConfig(batch_size=16))
    out = eng.evaluate(store.stacked, [0, 1, 0], [1, 3, 4], [5, 6, 7])
    np.testing.assert_array_equal(out.stats.count, [70, 100, 1])
    ref = CohortEngine(MODEL, data, cfg, LocalEvalConfig(batch_size=16), backend="debug").evaluate(
        store.stacked, [0, 1, 0], [1, 3, 4], [5, 6, 7])
    chex.assert_trees_all_close(tuple(out.stats), tuple(ref.stats), rtol=1e-5)
    idx = part.client_indices(1)
    x = (ds.train_x[idx].astype(np.float32) / 255 - 0.5) / 0.25
    losses, logits = MODEL.loss(store.params(0), jnp.asarray(x), jnp.asarray(ds.train_y[idx]))
    assert out.stats.sum[0] == pytest.approx(float(losses.sum()), rel=1e-5)
    assert out.correct[0] == int((np.asarray(logits).argmax(-1) == ds.train_y[idx]).sum())
    probe = CohortEngine(MODEL, data, cfg, LocalEvalConfig(batch_size=16, max_batches=1))
    np.testing.assert_array_equal(probe.evaluate(store.stacked, [0], [3], [0]).stats.count, [16])


def test_statistical_utility_hand_values():
    # |B| = 4 samples with losses 1, 1, 2, 1 -> sumsq 7 -> U = 4 * sqrt(7/4) = sqrt(28)
    assert statistical_utility(np.float32(4), np.float32(7)) == pytest.approx(np.sqrt(28))
    assert statistical_utility(np.float32(0), np.float32(0)) == 0.0


def test_bucket_ladder_and_plan():
    assert [ladder_ceil(n) for n in [0, 1, 2, 3, 4, 5, 6, 7, 9, 13, 25, 37]] == [1, 1, 2, 3, 4, 6, 6, 8, 12, 16, 32, 48]
    lengths = np.array([1, 1, 2, 37, 3, 5, 36, 1, 9])
    buckets = plan_buckets(lengths)
    covered = np.sort(np.concatenate([b.indices for b in buckets]))
    np.testing.assert_array_equal(covered, np.arange(len(lengths)))
    for b in buckets:
        assert b.num_tasks >= len(b.indices) and b.num_tasks & (b.num_tasks - 1) == 0
        assert b.length >= lengths[b.indices].max()
    assert 0.0 <= padding_waste(lengths, buckets) < 0.7
    assert len(plan_buckets(np.full(600, 4), max_tasks=256)) == 3


def test_version_store_put_release_grow():
    store = VersionStore(MODEL.init(jax.random.key(0)), capacity=1)
    store.put(5, MODEL.init(jax.random.key(1)))
    store.put(6, MODEL.init(jax.random.key(2)))  # grows to 2
    assert store.capacity == 2 and store.versions == [5, 6]
    chex.assert_trees_all_close(store.params(6), MODEL.init(jax.random.key(2)))
    store.release(5)
    assert store.put(7, MODEL.init(jax.random.key(3))) == 0  # reuses the freed slot
    with pytest.raises(KeyError, match="version 5"):
        store.slot(5)


def test_bad_inputs_raise_clear_errors(tiny):
    _, _, data, _ = tiny
    eng = CohortEngine(MODEL, data, LocalTrainConfig())
    with pytest.raises(ValueError, match="client ids"):
        eng.train(_store().stacked, [0], [99], [0])
    with pytest.raises(ValueError, match="lengths differ"):
        eng.train(_store().stacked, [0, 0], [1], [0])
    with pytest.raises(ValueError, match="batch_size"):
        LocalTrainConfig(batch_size=0)


def test_server_evaluate_matches_numpy(tiny):
    ds, _, _, test = tiny
    params = MODEL.init(jax.random.key(4))
    m = evaluate(MODEL, params, test, chunk=24)  # 64 rows: 3 chunks with padding
    x = (ds.test_x.astype(np.float32) / 255 - 0.5) / 0.25
    losses, logits = MODEL.loss(params, jnp.asarray(x), jnp.asarray(ds.test_y))
    assert m.accuracy == pytest.approx(float((np.asarray(logits).argmax(-1) == ds.test_y).mean()))
    assert m.loss == pytest.approx(float(losses.mean()), rel=1e-5)


def test_delta_store_scatter_gather_and_grow():
    from felix_jax.cohort import DeltaStore

    template = {"w": jnp.zeros((3,))}
    store = DeltaStore(template, capacity=2, page_rows=2)
    rows = {"w": jnp.arange(12.0).reshape(4, 3)}  # a padded output of 4 rows, 3 real
    slots = store.write(rows, np.array([0, 2, 3]))  # needs 3 rows: a second page of 2
    assert store.capacity == 4 and store.num_used == 3
    got = store.gather(slots)
    np.testing.assert_array_equal(np.asarray(got["w"]), np.asarray(rows["w"])[[0, 2, 3]])
    store.free(slots[:1])
    assert store.num_used == 2


def test_engines_of_one_model_and_config_share_their_programs(tiny):
    """Two engines of the same model and local config hold the very same jitted programs (traced and
    compiled once in the process); another config gets its own; a built-in model is made once per
    (name, shape, classes)."""
    from felix_jax.experiment import registry

    _, _, data, _ = tiny
    cfg = LocalTrainConfig(batch_size=16, learning_rate=0.1, mode="steps", local_steps=1)
    a, b = (CohortEngine(MODEL, data, cfg) for _ in range(2))
    assert a._train_jit is b._train_jit and a._eval_jit is b._eval_jit
    other = CohortEngine(MODEL, data, LocalTrainConfig(batch_size=16, learning_rate=0.2, mode="steps", local_steps=1))
    assert other._train_jit is not a._train_jit
    assert registry.make_model("mlp", (8, 8, 3), 10) is registry.make_model("mlp", [8, 8, 3], 10)
    assert registry.make_model("mlp", (8, 8, 3), 10) is not registry.make_model("mlp", (8, 8, 3), 5)
