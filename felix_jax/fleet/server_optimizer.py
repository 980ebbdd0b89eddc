"""Server optimizers as optax transformations (Reddi et al., "Adaptive Federated Optimization").

The aggregate of the buffer, ``m = sum_i w_i delta_i / (K or sum_i w_i)``, is
treated as a negative pseudo-gradient ``g = -m``: ``sgd(eta)`` gives the plain
server step ``w <- w + eta * m`` of FedAvg / FedBuff / FeLiX (the paper's reference settings
"Async runs"); ``adam`` and ``yogi`` give FedAdam and FedYogi with the paper's
adaptivity ``tau = 1e-3`` as epsilon.
"""

from __future__ import annotations

import functools
from functools import partial

import jax
import optax

from ..policies.aggregators.base import weighted_mean_delta  # noqa: F401 (re-exported)

SERVER_OPTIMIZERS = ("sgd", "adam", "yogi")


@functools.lru_cache(maxsize=None)
def make_server_optimizer(name: str, learning_rate: float) -> optax.GradientTransformation:
    """One (stateless) transformation per setting: ``server_step`` takes it as a static argument,
    so experiments of a process with equal settings share one compiled step."""
    if name == "sgd":
        return optax.sgd(learning_rate)
    if name == "adam":
        return optax.adam(learning_rate, b1=0.9, b2=0.99, eps=1e-3)
    if name == "yogi":
        return optax.yogi(learning_rate, b1=0.9, b2=0.99, eps=1e-3)
    raise KeyError(f"unknown server optimizer {name!r}; known: {', '.join(SERVER_OPTIMIZERS)}")


@partial(jax.jit, static_argnums=0)
def server_step(opt: optax.GradientTransformation, params, opt_state, mean_delta):
    """One server update from the aggregated delta (pseudo-gradient ``-mean_delta``)."""
    grads = jax.tree_util.tree_map(lambda m: -m, mean_delta)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state
