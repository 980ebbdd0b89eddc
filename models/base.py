"""The model interface every zoo entry implements.

A :class:`Model` is a small NamedTuple of pure functions (optax style): the cohort
engine only ever calls ``init``, ``apply`` and ``loss``; the fleet only reads
``num_params`` and ``bytes_on_wire`` (task durations and byte accounting).
"""

from __future__ import annotations

import functools
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
      train_loss: optional ``train_loss(params, x, y, key) -> (per_sample_loss, logits)``
        in training mode (dropout and the like, seeded by ``key``, a per-task,
        per-step PRNG key); ``None``: local training uses ``loss``. ``loss`` and
        ``apply`` are always the evaluation mode.
    """

    name: str
    init: Callable[[jax.Array], Params]
    apply: Callable[[Params, jax.Array], jax.Array]
    loss: Callable[[Params, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
    input_shape: tuple[int, ...]
    num_classes: int
    num_params: int
    bytes_on_wire: int
    train_loss: Callable[[Params, jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array]] | None = None


def count_params(params: Params) -> int:
    return int(sum(np.prod(np.shape(p)) for p in jax.tree_util.tree_leaves(params)))


def params_bytes(params: Params) -> int:
    return int(sum(np.prod(np.shape(p)) * np.dtype(p.dtype).itemsize for p in jax.tree_util.tree_leaves(params)))


@functools.lru_cache(maxsize=64)
def _jitted_init(init: Callable) -> Callable:
    return jax.jit(init)


def initial_params(model: "Model", key: jax.Array) -> Params:
    """``model.init(key)`` as one jitted program (one per model in a process; the persistent
    compilation cache keeps it for the next process). Run eagerly, every initialiser's operations
    compile one by one in every process, and on a CPU the 4-D random draws of a convolution kernel
    compile slowly (~20 s for the tiny CNN); the values are the eager ones bit for bit
    (tests/test_models.py)."""
    return _jitted_init(model.init)(key)


def make_model(name: str, module: Any, input_shape: tuple[int, ...], num_classes: int,
               train_flag: str | None = None, rng_collections: tuple[str, ...] = ("dropout",)) -> Model:
    """Wraps a flax linen module (``__call__(x) -> logits``) into a :class:`Model`.

    A module with a training switch (dropout, ...) names it with ``train_flag``
    (e.g. ``"train"`` for ``__call__(x, train: bool)``): evaluation calls it with
    ``train=False``, local training with ``train=True`` and the task's PRNG key in
    ``rng_collections``. The module's own initialisers are used. Batch statistics
    (``BatchNorm``) are per-client state and are not supported: use GroupNorm or
    LayerNorm, as the zoo's ResNet does.
    """
    input_shape = tuple(int(d) for d in input_shape)
    eval_kwargs = {} if train_flag is None else {train_flag: False}

    def init(key: jax.Array) -> Params:
        variables = module.init(key, jnp.zeros((1,) + input_shape, jnp.float32), **eval_kwargs)
        if set(variables) - {"params"}:
            raise ValueError(f"model {name}: collections {sorted(set(variables) - {'params'})} besides 'params' "
                             "(e.g. BatchNorm's batch_stats) are per-client state, which is not supported")
        return variables["params"]

    def apply(params: Params, x: jax.Array) -> jax.Array:
        return module.apply({"params": params}, x, **eval_kwargs)

    def loss(params: Params, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = apply(params, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y), logits

    train_loss = None
    if train_flag is not None:
        def train_loss(params: Params, x: jax.Array, y: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
            rngs = {c: jax.random.fold_in(key, i) for i, c in enumerate(rng_collections)}
            logits = module.apply({"params": params}, x, **{train_flag: True}, rngs=rngs)
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
        train_loss=train_loss,
    )
