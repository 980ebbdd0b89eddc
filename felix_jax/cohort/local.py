"""One client's local work as pure functions (the unit the cohort engine vmaps).

``local_train`` runs ``max_steps`` iterations of a ``lax.scan`` (the bucket's
length); iterations at or past the task's own ``num_steps`` are masked and change
nothing, so one compiled scan serves every task of its bucket. Every random
choice (batch order, augmentation) derives from the task's PRNG key, so a
task's result depends only on (start params, client data, key): the property
lazy batched execution relies on (docs/architecture.md).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from ..data.augment import random_crop_flip
from ..data.federated import FederatedData, normalize
from ..data.streams import stream_view
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
                  augment: bool, labels: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    idx = row[positions]
    raw = data.x[idx]
    if augment:
        raw = random_crop_flip(key, raw)
    y = data.y[idx] if labels is None else labels[positions]  # streams: proxy labels until the true ones arrive
    return normalize(raw, data.input_scale, data.input_mean, data.input_std), y


def client_data(data: FederatedData, client: jax.Array, t_s: jax.Array) -> tuple[jax.Array, jax.Array,
                                                                                 jax.Array | None]:
    """A client's index row, sample count and (streams only) per-position labels at time ``t_s``."""
    if data.streams is None:  # static data: time plays no part
        return data.index_table[client], data.counts[client], None
    row = data.index_table[client]
    return stream_view(data.streams, client, t_s, row, data.y[row])


class TrainContext(NamedTuple):
    """Per-task constants of a training task (a pytree; vmapped with the task)."""

    start: Params  # parameters the task starts from
    row: jax.Array  # (max_count,) the client's index-table row
    count: jax.Array  # () samples the client holds
    steps_per_epoch: jax.Array  # ()
    k_order: jax.Array  # batch-order key
    k_augment: jax.Array  # augmentation key
    labels: jax.Array | None  # streams: the label at each row position (else None: the data set's)
    mu: jax.Array  # () float32: FedProx's proximal weight (0: plain local SGD), traced: no recompile per mu


class TrainCarry(NamedTuple):
    params: Params
    opt_state: Any
    all_steps: LossStats
    first_batch: LossStats


def train_init(model: Model, cfg: LocalTrainConfig, params: Params, data: FederatedData, client: jax.Array,
               key: jax.Array, t_s: jax.Array | None = None, mu: jax.Array | float = 0.0,
               relabel: Callable[[jax.Array], jax.Array] | None = None) -> tuple[TrainContext, TrainCarry]:
    """Task setup: the client's row, its keys, and the optimizer state.

    With augmentation on, the first-batch utility statistics come from a forward
    pass over the *un-augmented* first batch, so a training reply measures U
    exactly as an eval task does (an augmented batch has a higher loss, which
    would rank clients refreshed by eval tasks below those that just trained).
    Without augmentation (or with ``utility_on_augmented``, the FeLiX code's way) the first step's
    own losses are those statistics.
    With client streams the task trains on what its client holds at ``t_s`` (its start). ``mu``: the
    proximal weight of FedProx's local objective (:func:`train_step`).
    """
    row, count, labels = client_data(data, client, t_s)
    if relabel is not None:  # the labels an adversarial client trains on (cohort/adversary.py), per row position
        labels = relabel(data.y[row] if labels is None else labels)
    k_order, k_augment = jax.random.split(key)
    ctx = TrainContext(params, row, count, cfg.steps_per_epoch(count), k_order, k_augment, labels,
                       jnp.asarray(mu, jnp.float32))
    first = LossStats.zeros()
    if cfg.augment and not cfg.utility_on_augmented:
        width = data.index_table.shape[1]
        positions, valid = batch_positions(k_order, jnp.int32(0), count, ctx.steps_per_epoch, cfg.batch_size, width)
        x, y = _client_batch(data, ctx.row, positions, None, False, ctx.labels)
        losses, _ = model.loss(params, x, y)
        first = LossStats.of(losses, valid)
    return ctx, TrainCarry(params, cfg.optimizer().init(params), LossStats.zeros(), first)


def train_step(model: Model, cfg: LocalTrainConfig, data: FederatedData, ctx: TrainContext, carry: TrainCarry,
               s: jax.Array, num_steps: jax.Array) -> TrainCarry:
    """Local step ``s``; a no-op (bit for bit) when ``s >= num_steps``.

    The step descends FedProx's local objective ``h_k(w) = F_k(w) + mu/2 ||w - w_start||^2`` (Li et al.,
    MLSys 2020, Eq. 2): the gradient of the data loss plus ``mu (w - w_start)``, through the client's
    optimizer. The losses reported (utility, ``all_steps``) are ``F_k``'s alone. With ``mu = 0`` the added
    term is an exact zero, so the step is plain local SGD's.
    """
    opt = cfg.optimizer()
    width = data.index_table.shape[1]
    positions, valid = batch_positions(ctx.k_order, s, ctx.count, ctx.steps_per_epoch, cfg.batch_size, width)
    step_key = jax.random.fold_in(ctx.k_augment, s)  # augmentation; fold_in(step_key, 1): the model's dropout
    x, y = _client_batch(data, ctx.row, positions, step_key, cfg.augment, ctx.labels)

    def loss_fn(p):
        if model.train_loss is None:
            losses, _ = model.loss(p, x, y)
        else:  # training mode (dropout...), keyed per task and step
            losses, _ = model.train_loss(p, x, y, jax.random.fold_in(step_key, 1))
        return _masked_mean(losses, valid), losses

    (_, losses), grads = jax.value_and_grad(loss_fn, has_aux=True)(carry.params)
    grads = jax.tree_util.tree_map(lambda g, p, w0: g + (ctx.mu * (p - w0)).astype(g.dtype), grads, carry.params,
                                   ctx.start)
    updates, new_opt_state = opt.update(grads, carry.opt_state, carry.params)
    new_params = jax.tree_util.tree_map(lambda a, u: a + u, carry.params, updates)
    active = s < num_steps
    keep = lambda new, old: jnp.where(active, new, old)  # noqa: E731
    batch_stats = LossStats.of(losses, valid & active)
    first = carry.first_batch if cfg.augment and not cfg.utility_on_augmented else jax.tree_util.tree_map(
        lambda f, b: jnp.where(s == 0, b, f), carry.first_batch, batch_stats)  # see train_init
    return TrainCarry(jax.tree_util.tree_map(keep, new_params, carry.params),
                      jax.tree_util.tree_map(keep, new_opt_state, carry.opt_state),
                      carry.all_steps + batch_stats, first)


def train_final(ctx: TrainContext, carry: TrainCarry, num_steps: jax.Array, max_steps: int) -> TrainResult:
    delta = jax.tree_util.tree_map(lambda a, b: a - b, carry.params, ctx.start)
    # a task that takes no step had no batch (the FeLiX code's loader): it measured nothing, even where the
    # first-batch statistics come from a separate un-augmented forward pass (train_init)
    first = jax.tree_util.tree_map(lambda f: jnp.where(num_steps > 0, f, jnp.zeros_like(f)), carry.first_batch)
    return TrainResult(delta, first, carry.all_steps, jnp.minimum(num_steps, max_steps).astype(jnp.int32))


def local_train(model: Model, cfg: LocalTrainConfig, max_steps: int, params: Params, data: FederatedData,
                client: jax.Array, key: jax.Array, num_steps: jax.Array, t_s: jax.Array | None = None,
                mu: jax.Array | float = 0.0) -> TrainResult:
    """Trains one client from ``params`` for ``num_steps`` (<= ``max_steps``) SGD steps (with FedProx's
    proximal weight ``mu``, :func:`train_step`).

    The reference composition of ``train_init`` / ``train_step`` / ``train_final``;
    the cohort engine runs the same three pieces with the step scan outside vmap.
    """
    ctx, carry = train_init(model, cfg, params, data, client, key, t_s, mu)
    carry, _ = jax.lax.scan(lambda c, s: (train_step(model, cfg, data, ctx, c, s, num_steps), None), carry,
                            jnp.arange(max_steps))
    return train_final(ctx, carry, num_steps, max_steps)


class EvalContext(NamedTuple):
    params: Params
    row: jax.Array
    count: jax.Array
    perm: jax.Array  # (max_count,) shuffled positions
    labels: jax.Array | None  # streams: per-position labels (see TrainContext)


class EvalCarry(NamedTuple):
    stats: LossStats
    correct: jax.Array


def eval_init(model: Model, cfg: LocalEvalConfig, params: Params, data: FederatedData, client: jax.Array,
              key: jax.Array, t_s: jax.Array | None = None, mu: jax.Array | float | None = None
              ) -> tuple[EvalContext, EvalCarry]:
    del model, cfg, mu  # mu: the cohort call's proximal weight, which a forward pass does not use
    row, count, labels = client_data(data, client, t_s)
    perm = _epoch_permutation(key, count, data.index_table.shape[1])
    return EvalContext(params, row, count, perm, labels), EvalCarry(LossStats.zeros(), jnp.zeros((), jnp.float32))


def eval_step(model: Model, cfg: LocalEvalConfig, data: FederatedData, ctx: EvalContext, carry: EvalCarry,
              b: jax.Array, num_batches: jax.Array) -> EvalCarry:
    width = data.index_table.shape[1]
    pos = b * cfg.batch_size + jnp.arange(cfg.batch_size)
    valid = (pos < ctx.count) & (b < num_batches)
    x, y = _client_batch(data, ctx.row, ctx.perm[jnp.minimum(pos, width - 1)], None, False, ctx.labels)
    losses, logits = model.loss(ctx.params, x, y)
    hit = ((logits.argmax(-1) == y) & valid).astype(jnp.float32).sum()
    return EvalCarry(carry.stats + LossStats.of(losses, valid), carry.correct + hit)


def eval_final(ctx: EvalContext, carry: EvalCarry, num_batches: jax.Array, max_batches: int) -> EvalResult:
    del ctx, num_batches, max_batches
    return EvalResult(carry.stats, carry.correct)


def local_eval(model: Model, cfg: LocalEvalConfig, max_batches: int, params: Params, data: FederatedData,
               client: jax.Array, key: jax.Array, num_batches: jax.Array, t_s: jax.Array | None = None) -> EvalResult:
    """Forward-pass loss statistics over ``num_batches`` shuffled batches of the client's data."""
    ctx, carry = eval_init(model, cfg, params, data, client, key, t_s)
    carry, _ = jax.lax.scan(lambda c, b: (eval_step(model, cfg, data, ctx, c, b, num_batches), None), carry,
                            jnp.arange(max_batches))
    return eval_final(ctx, carry, num_batches, max_batches)
