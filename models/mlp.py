"""A tiny MLP for fast tests and debug-backend parity checks."""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax

from .base import Model, make_model


class MLP(nn.Module):
    hidden: Sequence[int] = (32,)
    num_classes: int = 10

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.reshape(x.shape[0], -1)
        for i, h in enumerate(self.hidden):
            x = nn.relu(nn.Dense(h, name=f"dense_{i}")(x))
        return nn.Dense(self.num_classes, name="out")(x)


def mlp(input_shape: tuple[int, ...], num_classes: int = 10, hidden: Sequence[int] = (32,)) -> Model:
    return make_model(f"mlp{tuple(hidden)}", MLP(tuple(hidden), num_classes), input_shape, num_classes)
