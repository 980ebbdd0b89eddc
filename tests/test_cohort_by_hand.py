"""The cohort's jitted functions with and without jit (chex variants) against hand-computed values.

The model is conftest's LINEAR: a softmax classifier on one input feature, two classes,
logits = x W + b with W (1, 2) and b (2,), from zero parameters (so every first-step softmax is
(1/2, 1/2)). Two clients (conftest's linear_data), with full batches, so no result depends on a
batch order:

  client 0: (x=1, y=1) and (x=-1, y=0)      client 1: (x=2, y=0)

Training with SGD, learning rate 2, batch 2 (hand arithmetic; p is the softmax, e_y the one-hot):
  grad W = mean_i x_i (p_i - e_y_i), grad b = mean_i (p_i - e_y_i)
  client 0, step 1: p = (1/2, 1/2) for both; grad W = ((1/2, -1/2) + (1/2, -1/2)) / 2 = (1/2, -1/2),
      grad b = ((1/2, -1/2) + (-1/2, 1/2)) / 2 = 0 -> W1 = (-1, 1), b1 = 0; losses ln 2 = 0.69314718 each
  client 0, step 2: logits (-1, 1) for x=1 and (1, -1) for x=-1: each loss log(1 + e^-2) = 0.12692801,
      wrong-class probability s = 1 / (1 + e^2) = 0.11920292; grad W = (s, -s), grad b = 0
      -> W2 = (-1 - 2s, 1 + 2s) = (-1.23840584, 1.23840584), b2 = 0
  client 1, one step over its one sample (the batch's second position masked): p - e_y = (-1/2, 1/2),
      grad W = 2 (-1/2, 1/2) = (-1, 1), grad b = (-1/2, 1/2) -> W1 = (2, -2), b1 = (1, -1)
Loss statistics (count, sum, sum of squares):
  client 0 first batch: (2, 2 ln 2 = 1.38629436, 2 (ln 2)^2 = 0.96090603)
  client 0 both steps:  (4, 1.38629436 + 2 * 0.12692801 = 1.64015038, 0.96090603 + 2 * 0.12692801^2 = 0.99312747)
  client 1 one step:    (1, 0.69314718, 0.48045301)
Evaluation of W = (-1, 1), b = (0, 3):
  x=1, y=1: logits (-1, 4), loss log(1 + e^-5) = 0.00671535, right
  x=-1, y=0: logits (1, 2), loss log(1 + e^1) = 1.31326169, wrong (argmax 1)
  x=2, y=0: logits (-2, 5), loss log(1 + e^7) = 7.00091147, wrong
"""

from functools import partial

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from felix_jax.cohort import CohortEngine, DeltaStore, ExecutionPlan, LocalEvalConfig, LocalTrainConfig, VersionStore
from felix_jax.cohort import store as store_mod
from felix_jax.cohort.engine import run_cohort
from felix_jax.cohort.evaluate import _eval_chunks, evaluate, evaluate_many
from felix_jax.cohort.local import local_eval, local_train, train_final, train_init, train_step
from tests.conftest import LINEAR, JitVariants, linear_data

DATA, TEST = linear_data()
ZERO = LINEAR.init(None)
EVAL_PARAMS = {"w": jnp.array([[-1.0, 1.0]]), "b": jnp.array([0.0, 3.0])}
TRAIN = LocalTrainConfig(batch_size=2, learning_rate=2.0, mode="steps", local_steps=2)
EVAL = LocalEvalConfig(batch_size=2)
KEY = jax.random.key(7)

# the hand values of the module docstring
S = 0.11920292
CLIENT0_DELTA = {"w": np.array([[-1 - 2 * S, 1 + 2 * S]]), "b": np.zeros(2)}  # two steps
CLIENT1_DELTA = {"w": np.array([[2.0, -2.0]]), "b": np.array([1.0, -1.0])}  # one step
NO_DELTA = {"w": np.zeros((1, 2)), "b": np.zeros(2)}
CLIENT0_FIRST = (2.0, 1.38629436, 0.96090603)
CLIENT0_ALL = (4.0, 1.64015038, 0.99312747)
CLIENT1_ONE = (1.0, 0.69314718, 0.48045301)
CLIENT0_EVAL = (2.0, 0.00671535 + 1.31326169, 0.00671535 ** 2 + 1.31326169 ** 2)  # 1 right
CLIENT1_EVAL = (1.0, 7.00091147, 7.00091147 ** 2)  # 0 right


def _close(got, want, atol=1e-5):
    chex.assert_trees_all_close(jax.tree_util.tree_map(np.asarray, got), want, atol=atol, rtol=1e-5)


def _row(tree, i):
    return jax.tree_util.tree_map(lambda a: a[i], tree)


class LocalWorkTest(JitVariants):
    @chex.variants(with_jit=True, without_jit=True)
    def test_local_train_two_steps_and_a_masked_third(self):
        out = self.run_variant(lambda p, c, n: local_train(LINEAR, TRAIN, 3, p, DATA, c, KEY, n), ZERO,
                               jnp.int32(0), jnp.int32(2))
        _close(out.delta, CLIENT0_DELTA)
        _close(tuple(out.first_batch), CLIENT0_FIRST)
        _close(tuple(out.all_steps), CLIENT0_ALL)
        assert int(out.num_steps) == 2

    @chex.variants(with_jit=True, without_jit=True)
    def test_local_train_masks_the_batch_past_a_clients_samples(self):
        out = self.run_variant(lambda p, c, n: local_train(LINEAR, TRAIN, 3, p, DATA, c, KEY, n), ZERO,
                               jnp.int32(1), jnp.int32(1))
        _close(out.delta, CLIENT1_DELTA)  # the mean over the one valid position, not over the batch of 2
        _close(tuple(out.all_steps), CLIENT1_ONE)

    @chex.variants(with_jit=True, without_jit=True)
    def test_local_eval(self):
        fn = lambda p, c: local_eval(LINEAR, EVAL, 2, p, DATA, c, KEY, jnp.int32(1))  # noqa: E731
        out0, out1 = (self.run_variant(fn, EVAL_PARAMS, jnp.int32(c)) for c in (0, 1))
        _close(tuple(out0.stats), CLIENT0_EVAL)
        _close(tuple(out1.stats), CLIENT1_EVAL, atol=1e-4)
        assert (float(out0.correct), float(out1.correct)) == (1.0, 0.0)


class CohortCallTest(JitVariants):
    """The engine's one compiled call (``run_cohort``: per task, gather the start slot, init, the step
    scan outside the vmap, final) under the vmap and lax.map plans."""

    def _train(self, plan: str):
        # slot 0 holds other parameters (5s): a task reading the wrong slot would not give the hand values
        stacked = jax.tree_util.tree_map(lambda z: jnp.stack([z + 5.0, z]), ZERO)
        # tasks from slot 1: client 0 for 2 steps, client 1 for 1 step, padding (length 0)
        args = (stacked, DATA, jnp.array([1, 1, 1]), jnp.array([0, 1, 0]), jnp.arange(3), jnp.zeros(3),
                jnp.array([2, 1, 0]), jnp.zeros(3, jnp.int32), jax.random.key_data(KEY)[None])
        train = partial(run_cohort, train_init, train_step, train_final, LINEAR, TRAIN)
        out = self.run_variant(train, *args, scan_len=2, plan=ExecutionPlan(plan), static_argnames=("scan_len", "plan"))
        for i, want in enumerate([CLIENT0_DELTA, CLIENT1_DELTA, NO_DELTA]):
            _close(_row(out.delta, i), want)
        _close(tuple(out.all_steps), tuple(np.array([a, b, 0]) for a, b in zip(CLIENT0_ALL, CLIENT1_ONE)))
        np.testing.assert_array_equal(out.num_steps, [2, 1, 0])

    @chex.variants(with_jit=True)
    def test_cohort_call_vmap(self):
        self._train("vmap")

    @chex.variants(with_jit=True)
    def test_cohort_call_map(self):
        self._train("map")

    # un-jitted, op by op: some 200 small eager compilations per plan, over 10 s on 2 busy cores
    @chex.variants(without_jit=True)
    @pytest.mark.slow
    def test_cohort_call_un_jitted(self):
        self._train("vmap")
        self._train("map")


@pytest.mark.parametrize("backend", ["jit", "debug"])
def test_engine_train_and_evaluate_by_hand(backend):
    # epochs mode, two epochs of batch 2: client 0 takes 2 steps; client 1 (1 sample < batch, the FeLiX
    # code's loader: min_one_step off) takes none, so its update is zero and it measured nothing
    cfg = LocalTrainConfig(batch_size=2, learning_rate=2.0, mode="epochs", local_epochs=2, min_one_step=False)
    engine = CohortEngine(LINEAR, DATA, cfg, EVAL, backend=backend)  # the CPU plan, lax.map
    store = VersionStore(ZERO, capacity=2)
    store.put(0, jax.tree_util.tree_map(lambda z: z + 5.0, ZERO))
    store.put(1, ZERO)
    out = engine.train(store.stacked, [1, 1], [0, 1], [3, 4])
    _close(_row(out.delta, 0), CLIENT0_DELTA)
    _close(_row(out.delta, 1), NO_DELTA)
    _close(tuple(out.first_batch), tuple(np.array([a, 0.0]) for a in CLIENT0_FIRST))
    _close(tuple(out.all_steps), tuple(np.array([a, 0.0]) for a in CLIENT0_ALL))
    np.testing.assert_array_equal(out.num_steps, [2, 0])
    store.put(0, EVAL_PARAMS)
    ev = engine.evaluate(store.stacked, [0, 0], [1, 0], [5, 6])  # in the other order: results come back in task order
    _close(tuple(ev.stats), tuple(np.array([b, a]) for a, b in zip(CLIENT0_EVAL, CLIENT1_EVAL)), atol=1e-4)
    np.testing.assert_array_equal(ev.correct, [0.0, 1.0])


class StoreTest(JitVariants):
    @chex.variants(with_jit=True, without_jit=True)
    def test_store_kernels(self):
        stacked = {"a": jnp.zeros((3, 2))}
        # one slot written (ints cast to the store's float32): row 1 = (3, 4)
        out = self.run_variant(store_mod._write_slot, stacked, jnp.int32(1), {"a": jnp.array([3, 4])})
        np.testing.assert_array_equal(out["a"], [[0, 0], [3, 4], [0, 0]])
        chex.assert_type(out["a"], jnp.float32)
        # rows scattered to slots (2, 0): row 0 -> slot 2, row 1 -> slot 0
        out = self.run_variant(store_mod._scatter_rows, stacked, jnp.array([2, 0]), {"a": jnp.array([[1.0, 2.0],
                                                                                                    [5.0, 6.0]])})
        np.testing.assert_array_equal(out["a"], [[5, 6], [0, 0], [1, 2]])
        got = self.run_variant(store_mod._gather_rows, out, jnp.array([2, 2, 0]))
        np.testing.assert_array_equal(got["a"], [[1, 2], [1, 2], [5, 6]])

    @chex.variants(with_jit=True, without_jit=True)
    def test_version_and_delta_stores(self):
        with self.jit_mode():
            versions = VersionStore({"a": jnp.zeros(2)}, capacity=1)
            versions.put(7, {"a": jnp.array([1.0, 2.0])})
            versions.put(9, {"a": jnp.array([3.0, 4.0])})  # full: doubles to 2 slots
            np.testing.assert_array_equal(versions.stacked["a"], [[1, 2], [3, 4]])
            deltas = DeltaStore({"a": jnp.zeros(2)}, capacity=2, page_rows=2)
            # a padded output of 3 rows, rows 0 and 2 real: they take the lowest free slots 0 and 1;
            # the padding row 1 goes to the page's trash row (index 2)
            slots = deltas.write({"a": jnp.array([[1.0, 1.0], [9.0, 9.0], [2.0, 2.0]])}, np.array([0, 2]))
            assert slots.tolist() == [0, 1] and deltas.trash == 2
            np.testing.assert_array_equal(deltas.stacked["a"], [[1, 1], [2, 2], [9, 9]])
            np.testing.assert_array_equal(deltas.gather(slots)["a"], [[1, 1], [2, 2]])
            deltas.free(slots[:1])
            assert deltas.num_used == 1
        got = self.run_variant(lambda st, rows: store_mod._gather_rows(st, rows)["a"] + versions.params(9)["a"],
                               deltas.stacked, jnp.asarray(slots))
        np.testing.assert_array_equal(got, [[4, 5], [5, 6]])  # (3, 4) + (1, 1), (3, 4) + (2, 2)


class HeldOutEvaluationTest(JitVariants):
    @chex.variants(with_jit=True, without_jit=True)
    def test_held_out_evaluation(self):
        # 3 test rows in chunks of 2 (the second padded): 1 right; loss sum 0.00671535 + 1.31326169 + 7.00091147
        correct, loss_sum = self.run_variant(lambda p: _eval_chunks(LINEAR, p, TEST, 2), EVAL_PARAMS)
        assert int(correct) == 1
        assert float(loss_sum) == pytest.approx(8.32088851, abs=1e-4)
        with self.jit_mode():
            m = evaluate(LINEAR, EVAL_PARAMS, TEST, chunk=2)
            # zero parameters: logits (0, 0), argmax 0, right for the two y=0 rows; every loss ln 2
            many = evaluate_many(LINEAR, [EVAL_PARAMS, ZERO], TEST, chunk=2, pad_to=4)
        assert m.accuracy == pytest.approx(1 / 3) and m.loss == pytest.approx(8.32088851 / 3, abs=1e-4)
        assert [x.accuracy for x in many] == pytest.approx([1 / 3, 2 / 3])
        assert [x.loss for x in many] == pytest.approx([8.32088851 / 3, 0.69314718], abs=1e-4)
