"""The aggregator interface: per-update weights, then one jitted weighted reduction.

An aggregator sees the buffer of updates as host-side numpy metadata
(:class:`BufferInfo`) and returns one weight per update (0 drops it); the server
then applies ``w <- w + eta * sum_i(weight_i * delta_i) / K`` (the FeLiX/FedBuff
server step, the paper's reference settings "Async runs") or, with ``normalize=True``,
``w <- w + eta * sum_i(weight_i * delta_i) / sum_i(weight_i)`` (the paper's
TierFuse formula) in :func:`apply_weighted_deltas`, one jitted call.
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


class Aggregator(NamedTuple):
    """``weights(info) -> (K,) float`` plus how the server step uses them.

    Optional hooks: ``transform_deltas(deltas) -> deltas`` runs on the stacked
    deltas before weighting (TierFuse's per-update clipping / normalisation);
    ``augment_info(info, deltas) -> info`` adds what the weights need from the
    deltas themselves (REFL SAA's relative change Lambda).
    """

    name: str
    weights: Callable[[BufferInfo], np.ndarray]
    normalize: bool = False  # divide by sum(weights) instead of K
    server_lr: float = 1.0  # eta
    accepts_stale: bool = True  # sync mode: keep late updates (REFL SAA) or drop them (FedAvg)
    transform_deltas: Callable | None = None
    augment_info: Callable | None = None


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
