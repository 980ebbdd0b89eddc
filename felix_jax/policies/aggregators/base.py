"""The aggregator interface: per-update weights, then one jitted weighted reduction.

An aggregator sees the buffer of updates as host-side numpy metadata
(:class:`BufferInfo`) and returns one weight per update (0 drops it); the server
then applies ``w <- w + eta * sum_i(weight_i * delta_i) / K`` (the FeLiX/FedBuff
server step, the paper's reference settings "Async runs") or, with ``normalize=True``,
``w <- w + eta * sum_i(weight_i * delta_i) / sum_i(weight_i)`` (the paper's
TierFuse formula) in :func:`apply_weighted_deltas`, one jitted call.

A rule that is not a weighted mean (a coordinate-wise median, a trimmed mean,
Krum) sets ``combine``: a jittable ``combine(deltas, keep, weights) -> update``
over the whole stacked buffer, which the server then uses in place of the
weighted reduction (:class:`Aggregator`); the weights still count and log each
update, and the server optimizer still applies ``eta`` to what it returns.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class BufferInfo(NamedTuple):
    """Host metadata of K buffered updates (one row each)."""

    staleness: np.ndarray  # (K,) int: server version at arrival - version trained from
    num_samples: np.ndarray  # (K,) float: samples the client trained on (n_i)
    utility: np.ndarray  # (K,) float: the client's statistical utility U from this task
    loss_mean: np.ndarray  # (K,) float: mean training loss of this task
    delta_norms: np.ndarray  # (K,) float: L2 norm of each delta (for clipping / REFL)
    # client streams (data/streams.py): when the newest ground-truth label in the task's data arrived
    # (s; 0 for static data), and the share of its samples that carried proxy labels: "late but with
    # ground truth" against "stale". None where a caller does not provide them.
    label_time_s: np.ndarray | None = None
    proxy_fraction: np.ndarray | None = None
    # the task's mean loss at its start model, F_k(w^t), over its first batch (the loss before any step,
    # as Oort's utility probe measures it): q-FedAvg's F_k. None where a caller does not provide it.
    start_loss: np.ndarray | None = None
    # the share of its local steps each update holds: 1 for a complete one, k/K for a partial update
    # (interruption=partial, fleet/lifecycle.py). None where a caller does not provide it (all complete).
    work_fraction: np.ndarray | None = None


class Aggregator(NamedTuple):
    """``weights(info) -> (K,) float`` plus how the server step uses them.

    Optional hooks: ``transform_deltas(deltas) -> deltas`` runs on the stacked
    deltas before weighting (TierFuse's per-update clipping / normalisation);
    ``augment_info(info, deltas) -> info`` adds what the weights need from the
    deltas themselves (REFL SAA's relative change Lambda).

    ``combine(deltas, keep, weights) -> update`` replaces the weighted reduction
    (``weighted_mean_delta``) for rules that are not a weighted mean
    (:mod:`.robust`'s trimmed mean and median). It gets all K rows, so its shapes
    never change with how many updates a buffer accepts: ``deltas`` a pytree of
    (K, ...) leaves (after ``transform_deltas``), ``keep`` a (K,) bool array of
    the rows that count (accepted by the update guard and weighted > 0; the
    others are zeros, not updates, and must be ignored, not averaged in),
    ``weights`` the (K,) float32 weights (0 outside ``keep``, never rescaled by
    K/K'). It returns the server's update, a pytree of the leaves' shapes
    without K, to which the server optimizer applies ``server_lr`` (``normalize``
    is then unused). It must be jittable: felix-jax jits a plugin's; a built-in
    one is jitted where it is defined.

    ``per_update=True`` declares that each update's weight is its own row's alone
    (``weights(info)[i] == weights(info[i:i+1])[0]``: staleness, utility, sample
    count, norm; nothing over the buffer, such as a total it is rescaled to) and
    that ``transform_deltas`` works row by row. Without ``combine`` or
    ``augment_info``, the server then folds each update into a running weighted
    sum as it arrives and holds no buffer of K updates (``fleet/running_sum.py``).
    """

    name: str
    weights: Callable[[BufferInfo], np.ndarray]
    normalize: bool = False  # divide by sum(weights) instead of K
    server_lr: float = 1.0  # eta
    accepts_stale: bool = True  # sync mode: keep late updates (REFL SAA) or drop them (FedAvg)
    transform_deltas: Callable | None = None
    augment_info: Callable | None = None
    combine: Callable | None = None  # (deltas, keep, weights) -> update: replaces the weighted mean
    per_update: bool = False  # each weight is its update's alone: folded in as it arrives (fleet/running_sum.py)


def update_mismatch(deltas, update) -> str | None:
    """Why ``update`` cannot be the server's update for the (K, ...) ``deltas`` (another tree, or a
    leaf whose shape is not the delta's without K), or None when it can. Shapes only: no device work."""
    want, got = jax.tree_util.tree_structure(deltas), jax.tree_util.tree_structure(update)
    if want != got:
        return f"a tree {got}, not the deltas' {want}"
    for d, u in zip(jax.tree_util.tree_leaves(deltas), jax.tree_util.tree_leaves(update)):
        shape = getattr(u, "shape", None)
        if shape is None or tuple(shape) != tuple(d.shape[1:]):
            return f"a leaf of shape {shape} where the update needs {tuple(d.shape[1:])} (the delta's without K)"
    return None


@partial(jax.jit, static_argnames=("normalize",))
def weighted_mean_delta(deltas, weights: jax.Array, *, normalize: bool):
    """``sum_i w_i delta_i / (sum_i w_i if normalize else K)``; deltas leaves are (K, ...)."""
    denom = jnp.maximum(weights.sum(), 1e-12) if normalize else jnp.float32(weights.shape[0])
    scale = weights / denom
    return jax.tree_util.tree_map(lambda d: jnp.tensordot(scale, d, axes=1), deltas)


@partial(jax.jit, static_argnames=("normalize",))
def apply_weighted_deltas(params, deltas, weights: jax.Array, eta: jax.Array, *, normalize: bool):
    """The plain server step ``params + eta * weighted_mean_delta(...)`` (optax ``sgd(eta)`` does the same)."""
    mean = weighted_mean_delta(deltas, weights, normalize=normalize)
    return jax.tree_util.tree_map(lambda p, m: p + (eta * m).astype(p.dtype), params, mean)
