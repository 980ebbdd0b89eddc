"""Configuration of clients' local work (frozen, hashable: used as a jit static)."""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np
import optax


@dataclasses.dataclass(frozen=True)
class LocalTrainConfig:
    """How a client trains (the paper's reference settings: CIFAR-10 uses 1 epoch, batch 32, SGD 0.04).

    ``mode='epochs'``: ``local_epochs`` passes over the client's own data, each a
    fresh permutation cut into ``steps_per_epoch`` batches; with ``drop_last`` the
    last partial batch is dropped (the paper's loader), except that a client with
    fewer samples than a batch still takes one masked step over all its samples
    (otherwise it could never contribute), unless ``min_one_step`` is off (the FeLiX
    code's loader: such a client takes no step). ``mode='steps'``: exactly
    ``local_steps`` steps, cycling through epochs of the client's data the same way.
    """

    batch_size: int = 32
    learning_rate: float = 0.04
    momentum: float = 0.0
    weight_decay: float = 0.0
    mode: Literal["epochs", "steps"] = "epochs"
    local_epochs: int = 1
    local_steps: int = 5
    drop_last: bool = True
    augment: bool = False  # random crop (pad 4) + horizontal flip, images only
    # a client with fewer samples than a batch takes one masked step (False: none, the FeLiX code's
    # drop_last loader, trainer main.py:271-278; epochs mode)
    min_one_step: bool = True
    # with augment: the first-batch utility statistics are the first step's own (augmented) losses, as
    # the FeLiX code measures them (trainer.py:543-576); False: a forward pass over the un-augmented batch
    utility_on_augmented: bool = False

    def __post_init__(self):
        for name in ("batch_size", "local_epochs", "local_steps"):  # a whole number, not a float or a bool
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"{name} must be a whole number, got {value!r}")
        for name in ("learning_rate", "momentum", "weight_decay"):  # NaN compares false: checked as finite
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        for name in ("drop_last", "augment", "min_one_step", "utility_on_augmented"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.momentum < 0 or self.weight_decay < 0:
            raise ValueError(f"momentum and weight_decay must be >= 0, got {self.momentum} and {self.weight_decay}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.mode not in ("epochs", "steps"):
            raise ValueError(f"mode must be 'epochs' or 'steps', got {self.mode!r}")
        if self.mode == "epochs" and self.local_epochs < 1:
            raise ValueError(f"local_epochs must be >= 1, got {self.local_epochs}")
        if self.mode == "steps" and self.local_steps < 1:
            raise ValueError(f"local_steps must be >= 1, got {self.local_steps}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")

    def optimizer(self) -> optax.GradientTransformation:
        """The client's optimizer as an optax transformation."""
        sgd = optax.sgd(self.learning_rate, momentum=self.momentum or None)
        if self.weight_decay:
            return optax.chain(optax.add_decayed_weights(self.weight_decay), sgd)
        return sgd

    def steps_per_epoch(self, counts):
        """Batches per epoch for clients with ``counts`` samples (numpy or jnp)."""
        b = self.batch_size
        if isinstance(counts, np.ndarray) or np.isscalar(counts):
            full = np.asarray(counts) // b if self.drop_last else -(-np.asarray(counts) // b)
            return np.maximum(full, 1)
        import jax.numpy as jnp

        full = counts // b if self.drop_last else -(-counts // b)
        return jnp.maximum(full, 1)

    def num_steps(self, counts):
        """Total local steps of a training task for clients with ``counts`` samples."""
        if self.mode == "steps":
            return np.full(np.shape(counts), self.local_steps, np.int32)
        steps = self.steps_per_epoch(np.asarray(counts)) * self.local_epochs
        if not self.min_one_step and self.drop_last:
            steps = np.where(np.asarray(counts) < self.batch_size, 0, steps)
        return steps.astype(np.int32)


@dataclasses.dataclass(frozen=True)
class LocalEvalConfig:
    """An eval task: a forward pass over ``max_batches`` batches of the client's data.

    ``max_batches=None`` evaluates all of the client's samples; ``max_batches=1`` is
    the FeLiX code's utility probe (one shuffled batch of 32 before any step).
    """

    batch_size: int = 32
    max_batches: int | None = None

    def num_batches(self, counts) -> np.ndarray:
        full = -(-np.asarray(counts) // self.batch_size)
        if self.max_batches is not None:
            full = np.minimum(full, self.max_batches)
        return np.maximum(full, 1).astype(np.int32)
