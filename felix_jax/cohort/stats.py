"""Per-sample loss statistics a client reports, and Oort's statistical utility."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class LossStats(NamedTuple):
    """Moments of the per-sample loss over some set of samples (one task)."""

    count: jax.Array  # () float32: number of samples
    sum: jax.Array  # () float32: sum of losses
    sumsq: jax.Array  # () float32: sum of squared losses

    @staticmethod
    def of(losses: jax.Array, mask: jax.Array) -> "LossStats":
        m = mask.astype(jnp.float32)
        return LossStats(m.sum(), (losses * m).sum(), (losses * losses * m).sum())

    def __add__(self, other: "LossStats") -> "LossStats":  # type: ignore[override]
        return LossStats(self.count + other.count, self.sum + other.sum, self.sumsq + other.sumsq)

    @staticmethod
    def zeros() -> "LossStats":
        z = jnp.zeros((), jnp.float32)
        return LossStats(z, z, z)

    def mean(self):
        return self.sum / np.maximum(self.count, 1)


def statistical_utility(count, sumsq):
    """Oort's statistical utility U = |B| * sqrt(mean_i loss_i^2) = sqrt(|B| * sum_i loss_i^2).

    (Oort, Lai et al. OSDI'21, Sec. 4.2; the paper's reference settings "TierSelect".) Which samples
    form B is the caller's choice: the first batch before any step (the FeLiX
    code) or every sample of every local step. Works on numpy and jax arrays.
    """
    xp = jnp if isinstance(count, jax.Array) else np
    return xp.sqrt(xp.maximum(count, 0) * xp.maximum(sumsq, 0))
