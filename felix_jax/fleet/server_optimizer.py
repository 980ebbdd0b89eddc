"""Server optimizers as optax transformations (Reddi et al., "Adaptive Federated Optimization", ICLR 2021).

The aggregate of the buffer, ``Delta = sum_i w_i delta_i / (K or sum_i w_i)``, is treated as a
negative pseudo-gradient ``g = -Delta`` (Reddi et al., Alg. 1-2), and the server step is an optax
transformation of ``g`` with the aggregator's ``server_lr`` as ``eta``:

- ``sgd``: ``w <- w + eta * Delta``, the plain step of FedAvg / FedBuff / FeLiX (the paper's
  reference settings "Async runs");
- ``momentum``: FedAvgM (Hsu, Qi, Brown, 2019, "Measuring the Effects of Non-Identical Data
  Distribution for Federated Visual Classification": server momentum on the averaged update):
  ``v <- beta v + Delta``; ``w <- w + eta v`` (``optax.sgd`` with momentum ``beta``, no Nesterov),
  ``beta = server_momentum``;
- ``adagrad``: FedAdagrad (Reddi et al., Alg. 2): ``m <- beta_1 m + (1 - beta_1) Delta``;
  ``v <- v + Delta^2``; ``w <- w + eta m / (sqrt(v) + tau)``, from ``m = 0``, ``v = tau^2`` (Alg. 2's
  ``v_{-1} >= tau^2`` at its bound) (:func:`scale_by_fedadagrad`);
- ``adam`` and ``yogi``: FedAdam and FedYogi through ``optax.adam`` / ``optax.yogi`` with ``b1 =
  beta_1``, ``b2 = 0.99`` and ``eps = tau`` (optax corrects the moments' bias, which Alg. 2 does not).

``beta_1 = server_momentum`` (default 0.9, Reddi et al.'s experiments) and ``tau = server_tau``
(default 1e-3, the adaptivity of the paper's FedAdam/FedYogi here) are :class:`FleetConfig` fields.
"""

from __future__ import annotations

import functools
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from ..policies.aggregators.base import weighted_mean_delta  # noqa: F401 (re-exported)

SERVER_OPTIMIZERS = ("sgd", "momentum", "adagrad", "adam", "yogi")


class FedAdagradState(NamedTuple):
    """FedAdagrad's server state (Reddi et al., Alg. 2): two trees shaped and typed as the parameters."""

    m: optax.Updates  # first moment of the pseudo-gradient (momentum, decay beta_1)
    v: optax.Updates  # tau^2 plus the sum of every squared pseudo-gradient so far


def scale_by_fedadagrad(b1: float = 0.9, tau: float = 1e-3) -> optax.GradientTransformation:
    """``g -> m / (sqrt(v) + tau)`` with ``m <- b1 m + (1 - b1) g`` and ``v <- v + g^2`` (Reddi et al.,
    ICLR 2021, Alg. 2, the FedAdagrad line), from ``m = 0`` and ``v = tau^2``.

    Chained with ``optax.scale(-eta)`` and fed ``g = -Delta`` it is FedAdagrad's server step
    ``w <- w + eta m_Delta / (sqrt(v) + tau)``. ``optax.adagrad`` is not it: it has no momentum and
    divides by ``sqrt(v + eps)``.

    >>> import jax.numpy as jnp
    >>> t = scale_by_fedadagrad(b1=0.5, tau=0.1)
    >>> out, state = t.update({"w": jnp.array([2.0])}, t.init({"w": jnp.array([0.0])}))
    >>> round(float(out["w"][0]), 4)  # m = 0.5 * 2 = 1, v = 0.01 + 4: 1 / (sqrt(4.01) + 0.1)
    0.4756
    """

    def init(params):
        return FedAdagradState(jax.tree_util.tree_map(jnp.zeros_like, params),
                               jax.tree_util.tree_map(lambda p: jnp.full_like(p, tau * tau), params))

    def update(updates, state, params=None):
        del params
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1.0 - b1) * g, state.m, updates)
        v = jax.tree_util.tree_map(lambda v, g: v + g * g, state.v, updates)
        scaled = jax.tree_util.tree_map(lambda m, v: m / (jnp.sqrt(v) + tau), m, v)
        return scaled, FedAdagradState(m, v)

    return optax.GradientTransformation(init, update)


@functools.lru_cache(maxsize=None)
def make_server_optimizer(name: str, learning_rate: float, momentum: float = 0.9,
                          tau: float = 1e-3) -> optax.GradientTransformation:
    """One (stateless) transformation per setting: ``server_step`` takes it as a static argument,
    so experiments of a process with equal settings share one compiled step. ``momentum``: FedAvgM's
    ``beta`` and the adaptive optimizers' ``beta_1``; ``tau``: their adaptivity (module docstring)."""
    if name == "sgd":
        return optax.sgd(learning_rate)
    if name == "momentum":
        return optax.sgd(learning_rate, momentum=momentum)
    if name == "adagrad":
        return optax.chain(scale_by_fedadagrad(momentum, tau), optax.scale(-learning_rate))
    if name == "adam":
        return optax.adam(learning_rate, b1=momentum, b2=0.99, eps=tau)
    if name == "yogi":
        return optax.yogi(learning_rate, b1=momentum, b2=0.99, eps=tau)
    raise KeyError(f"unknown server optimizer {name!r}; known: {', '.join(SERVER_OPTIMIZERS)}")


@partial(jax.jit, static_argnums=0)
def server_step(opt: optax.GradientTransformation, params, opt_state, mean_delta):
    """One server update from the aggregated delta (pseudo-gradient ``-mean_delta``)."""
    grads = jax.tree_util.tree_map(lambda m: -m, mean_delta)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state
