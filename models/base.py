"""The model interface every zoo entry implements.

A :class:`Model` is a small NamedTuple of pure functions (optax style): the cohort
engine only ever calls ``init``, ``apply`` and ``loss``; the fleet only reads
``num_params`` and ``bytes_on_wire`` (task durations and byte accounting).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

Params = Any  # a pytree of jax.Array


class Model(NamedTuple):
    """A model behind one small interface.

    Attributes:
      name: registry name.
      init: ``init(key) -> params``.
      apply: ``apply(params, x) -> logits``; ``x`` is a batch (B, *input_shape) of
        float32 model inputs, logits are (B, num_classes).
      loss: ``loss(params, x, y) -> (per_sample_loss (B,), logits (B, C))``,
        softmax cross-entropy with integer labels.
      input_shape: shape of one input, without the batch axis.
      num_classes: number of output classes.
      num_params: number of scalar parameters.
      bytes_on_wire: bytes of one full model transfer (float32 parameters).
    """

    name: str
    init: Callable[[jax.Array], Params]
    apply: Callable[[Params, jax.Array], jax.Array]
    loss: Callable[[Params, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
    input_shape: tuple[int, ...]
    num_classes: int
    num_params: int
    bytes_on_wire: int


def count_params(params: Params) -> int:
    return int(sum(np.prod(np.shape(p)) for p in jax.tree_util.tree_leaves(params)))


def params_bytes(params: Params) -> int:
    return int(sum(np.prod(np.shape(p)) * np.dtype(p.dtype).itemsize for p in jax.tree_util.tree_leaves(params)))


def make_model(name: str, module: Any, input_shape: tuple[int, ...], num_classes: int) -> Model:
    """Wraps a flax linen module (``__call__(x) -> logits``) into a :class:`Model`."""
    input_shape = tuple(int(d) for d in input_shape)

    def init(key: jax.Array) -> Params:
        return module.init(key, jnp.zeros((1,) + input_shape, jnp.float32))["params"]

    def apply(params: Params, x: jax.Array) -> jax.Array:
        return module.apply({"params": params}, x)

    def loss(params: Params, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = apply(params, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y), logits

    shapes = jax.eval_shape(init, jax.random.key(0))
    return Model(
        name=name,
        init=init,
        apply=apply,
        loss=loss,
        input_shape=input_shape,
        num_classes=int(num_classes),
        num_params=count_params(shapes),
        bytes_on_wire=params_bytes(shapes),
    )
