"""The plain federated round against a hand-written per-client loop."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from felix_jax.cohort import LocalTrainConfig
from felix_jax.cohort.local import local_train
from felix_jax.data.federated import to_device
from felix_jax.data.partition import partition_from_counts
from felix_jax.models import mlp
from felix_jax.rounds import FederatedRound
from tests.conftest import make_image_dataset

MODEL = mlp((8, 8, 3), hidden=(16,))
COUNTS = np.array([5, 17, 40, 9, 23, 31, 12])  # uneven: 1..3 steps of batch 16 per epoch


def _setup():
    ds = make_image_dataset(num_train=int(COUNTS.sum()), num_test=8)
    data = to_device(ds, partition_from_counts(int(COUNTS.sum()), COUNTS, seed=0))
    return data, LocalTrainConfig(batch_size=16, learning_rate=0.1, mode="epochs", local_epochs=1)


@pytest.mark.parametrize("clients", [[0, 2, 4, 6, 1], [3, 5]])  # 5 clients pad to a bucket of 8
@pytest.mark.parametrize("weighting", ["samples", "uniform"])
def test_round_equals_a_per_client_loop(clients, weighting):
    data, cfg = _setup()
    rounds = FederatedRound(MODEL, data, cfg, weighting=weighting, seed=3)
    params = MODEL.init(jax.random.key(0))
    state, metrics = rounds(rounds.init(params), clients)
    # by hand: each client from the same params, its key = fold_in(key(seed), task id), task id = position
    deltas, ns = [], []
    for i, c in enumerate(clients):
        steps = int(cfg.num_steps(np.array([COUNTS[c]]))[0])
        res = local_train(MODEL, cfg, steps, params, data, jnp.int32(c), jax.random.fold_in(jax.random.key(3), i),
                          jnp.int32(steps))
        deltas.append(res.delta)
        ns.append(float(res.all_steps.count))
    w = np.array(ns) if weighting == "samples" else np.ones(len(clients))
    w = w / w.sum()
    expected = jax.tree_util.tree_map(lambda p, *d: p + sum(wi * di for wi, di in zip(w, d)), params, *deltas)
    chex.assert_trees_all_close(state.params, expected, atol=1e-6, rtol=1e-5)
    np.testing.assert_allclose(metrics.weights, w, rtol=1e-12)
    np.testing.assert_array_equal(metrics.samples, ns)
    assert state.round == 1


def test_round_server_optimizer_and_bad_cohorts():
    data, cfg = _setup()
    rounds = FederatedRound(MODEL, data, cfg, server_optimizer=optax.sgd(0.5))
    params = MODEL.init(jax.random.key(0))
    half, _ = rounds(rounds.init(params), [1, 2])
    full, _ = FederatedRound(MODEL, data, cfg)(FederatedRound(MODEL, data, cfg).init(params), [1, 2])
    chex.assert_trees_all_close(jax.tree_util.tree_map(lambda h, p: 2 * (h - p), half.params, params),
                                jax.tree_util.tree_map(lambda f, p: f - p, full.params, params), atol=1e-6)
    with pytest.raises(ValueError, match="twice"):
        rounds(rounds.init(params), [1, 1])
    with pytest.raises(ValueError, match="weighting"):
        FederatedRound(MODEL, data, cfg, weighting="median")
