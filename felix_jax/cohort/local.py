"""One client's local work as pure functions (the unit the cohort engine vmaps).

``local_train`` runs ``max_steps`` iterations of a ``lax.scan`` (the bucket's
length); iterations at or past the task's own ``num_steps`` are masked and change
nothing, so one compiled scan serves every task of its bucket. Every random
choice (batch order, augmentation) derives from the task's PRNG key, so a
task's result depends only on (start params, client data, key): the property
lazy batched execution relies on (DESIGN.md).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..data.augment import random_crop_flip
from ..data.federated import FederatedData, normalize
from ..models.base import Model, Params
from .config import LocalEvalConfig, LocalTrainConfig
from .stats import LossStats


class TrainResult(NamedTuple):
    """What one training task reports (leaves gain a leading task axis when vmapped)."""

    delta: Params  # w_local - w_start, same tree as params
    first_batch: LossStats  # loss over the first batch, before any step
    all_steps: LossStats  # loss over every sample of every step (pre-update losses)
    num_steps: jax.Array  # () int32, steps actually taken


class EvalResult(NamedTuple):
    stats: LossStats
    correct: jax.Array  # () float32, correctly classified samples


def _epoch_permutation(key: jax.Array, count: jax.Array, width: int) -> jax.Array:
    """A uniformly random order of positions [0, count), then the padding positions."""
    noise = jax.random.uniform(key, (width,))
    noise = jnp.where(jnp.arange(width) < count, noise, 2.0)
    return jnp.argsort(noise)


def batch_positions(key: jax.Array, step: jax.Array, count: jax.Array, steps_per_epoch: jax.Array,
                    batch_size: int, width: int) -> tuple[jax.Array, jax.Array]:
    """Positions in the client's index row for local step ``step``, and their mask.

    Step s belongs to epoch s // steps_per_epoch; each epoch is a fresh permutation
    keyed by (task key, epoch), cut into consecutive batches.
    """
    epoch = step // steps_per_epoch
    perm = _epoch_permutation(jax.random.fold_in(key, epoch), count, width)
    pos = (step % steps_per_epoch) * batch_size + jnp.arange(batch_size)
    valid = pos < count
    return perm[jnp.minimum(pos, width - 1)], valid


def _masked_mean(values: jax.Array, mask: jax.Array) -> jax.Array:
    m = mask.astype(values.dtype)
    return (values * m).sum() / jnp.maximum(m.sum(), 1.0)


def _client_batch(data: FederatedData, row: jax.Array, positions: jax.Array, key: jax.Array | None,
                  augment: bool) -> tuple[jax.Array, jax.Array]:
    idx = row[positions]
    raw = data.x[idx]
    if augment:
        raw = random_crop_flip(key, raw)
    return normalize(raw, data.input_scale, data.input_mean, data.input_std), data.y[idx]


def local_train(model: Model, cfg: LocalTrainConfig, max_steps: int, params: Params, data: FederatedData,
                client: jax.Array, key: jax.Array, num_steps: jax.Array) -> TrainResult:
    """Trains one client from ``params`` for ``num_steps`` (<= ``max_steps``) SGD steps."""
    opt = cfg.optimizer()
    row = data.index_table[client]
    count = data.counts[client]
    spe = cfg.steps_per_epoch(count)
    width = data.index_table.shape[1]

    def loss_fn(p, x, y, mask):
        losses, _ = model.loss(p, x, y)
        return _masked_mean(losses, mask), losses

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    k_order, k_augment = jax.random.split(key)

    def step(carry, s):
        p, opt_state, stats, first = carry
        positions, valid = batch_positions(k_order, s, count, spe, cfg.batch_size, width)
        x, y = _client_batch(data, row, positions, jax.random.fold_in(k_augment, s), cfg.augment)
        (_, losses), grads = grad_fn(p, x, y, valid)
        updates, new_opt_state = opt.update(grads, opt_state, p)
        new_p = jax.tree_util.tree_map(lambda a, u: a + u, p, updates)
        active = s < num_steps
        keep = lambda new, old: jnp.where(active, new, old)  # noqa: E731
        p = jax.tree_util.tree_map(keep, new_p, p)
        opt_state = jax.tree_util.tree_map(keep, new_opt_state, opt_state)
        batch_stats = LossStats.of(losses, valid & active)
        first = jax.tree_util.tree_map(lambda f, b: jnp.where(s == 0, b, f), first, batch_stats)
        return (p, opt_state, stats + batch_stats, first), None

    init = (params, opt.init(params), LossStats.zeros(), LossStats.zeros())
    (final, _, stats, first), _ = jax.lax.scan(step, init, jnp.arange(max_steps))
    delta = jax.tree_util.tree_map(lambda a, b: a - b, final, params)
    return TrainResult(delta, first, stats, jnp.minimum(num_steps, max_steps).astype(jnp.int32))


def local_eval(model: Model, cfg: LocalEvalConfig, max_batches: int, params: Params, data: FederatedData,
               client: jax.Array, key: jax.Array, num_batches: jax.Array) -> EvalResult:
    """Forward-pass loss statistics over ``num_batches`` shuffled batches of the client's data."""
    row = data.index_table[client]
    count = data.counts[client]
    width = data.index_table.shape[1]
    perm = _epoch_permutation(key, count, width)

    def body(carry, b):
        stats, correct = carry
        pos = b * cfg.batch_size + jnp.arange(cfg.batch_size)
        valid = (pos < count) & (b < num_batches)
        x, y = _client_batch(data, row, perm[jnp.minimum(pos, width - 1)], None, False)
        losses, logits = model.loss(params, x, y)
        hit = ((logits.argmax(-1) == y) & valid).astype(jnp.float32).sum()
        return (stats + LossStats.of(losses, valid), correct + hit), None

    (stats, correct), _ = jax.lax.scan(body, (LossStats.zeros(), jnp.zeros((), jnp.float32)), jnp.arange(max_batches))
    return EvalResult(stats, correct)
