"""REFL's staleness-aware aggregation (SAA; Abdelmoniem et al., EuroSys'23).

the paper's reference settings "Baselines": in a synchronous round, fresh updates (``tau == 0``)
weigh 1; a stale update with ``1 <= tau <= threshold`` (5 in REFL's E2 runs;
``None``: no limit) weighs

    (1 - beta) / (tau + 1) + beta * (1 - exp(-Lambda_i / Lambda_max) / s)

with ``beta = 0.35``; staler updates weigh 0; the weights are normalised
(``normalize=True``). ``s`` is REFL's "scaling coefficient to boost the good
stale updates" (its run scripts use 1, the default here; keep ``s >= 1`` or a
weight can turn negative).

``Lambda_i`` is the relative change stale update i makes to the fresh average:
with F fresh points ``x_f`` and fresh mean ``m = sum_f x_f / F``,

    Lambda_i = || (x_i + F m) / (F + 1) - m ||^2 / || m ||^2
             = || x_i - m ||^2 / ((F + 1)^2 || m ||^2),

squared L2 norms over all parameters, as REFL's aggregator computes it.
``Lambda_max`` is the largest ``Lambda`` among the stale updates that are kept.
Only ``Lambda / Lambda_max`` enters the weight, so the ``(F + 1)^2 ||m||^2``
factor cancels; when ``m = 0`` (e.g. no fresh update) ``Lambda_i`` is just
``||x_i - m||^2``, and when ``Lambda_max = 0`` the ratio is taken as 0.

REFL's points ``x`` are the local models (it averages models). The server picks
what it passes to :func:`relative_change`: the local models
``w_{v_i} + delta_i`` (REFL's definition; the base-version drift then counts
as deviation) or the deltas alone. REFL's public code never adds the stale
models to the global model (the paper's reference settings); this implements the formula.

``Lambda`` needs the deltas, which :class:`BufferInfo` does not carry: the
server computes them on device with :func:`relative_change`, slices off any
padding rows, and hands :class:`REFLBufferInfo` to ``weights``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...options import Range
from .base import Aggregator, BufferInfo


@dataclasses.dataclass(frozen=True)
class REFLSAAConfig:
    beta: float = 0.35  # mix between staleness damping and deviation boosting
    threshold: int | None = 5  # largest staleness kept; None keeps all
    scale: float = 1.0  # s, REFL's scale coefficient
    server_lr: float = 1.0  # sync rounds: the new model is the weighted mean

    RANGES: ClassVar[Mapping[str, Range]] = {"beta": Range.fraction(), "threshold": Range.at_least(0),
                                             "scale": Range.above(0), "server_lr": Range.above(0)}

    def __post_init__(self):
        if not (math.isfinite(self.server_lr) and self.server_lr > 0):
            raise ValueError(f"server_lr={self.server_lr!r}: must be a finite number > 0")


class REFLBufferInfo(NamedTuple):
    """:class:`BufferInfo` plus the per-update relative change ``Lambda``."""

    staleness: np.ndarray  # (K,) int
    num_samples: np.ndarray  # (K,) float
    utility: np.ndarray  # (K,) float
    loss_mean: np.ndarray  # (K,) float
    delta_norms: np.ndarray  # (K,) float
    relative_change: np.ndarray  # (K,) float: Lambda_i from relative_change(); ignored for fresh rows
    label_time_s: np.ndarray | None = None  # as BufferInfo's
    proxy_fraction: np.ndarray | None = None
    start_loss: np.ndarray | None = None
    work_fraction: np.ndarray | None = None

    @classmethod
    def of(cls, info: BufferInfo, relative_change) -> "REFLBufferInfo":
        return cls(**info._asdict(), relative_change=np.asarray(relative_change, dtype=np.float64))


@jax.jit
def relative_change(points, fresh_mask: jax.Array) -> jax.Array:
    """``Lambda_i`` for every row (see module docstring): (K,) float32.

    ``points`` is an array (K, P) or a pytree of (K, ...) leaves; ``fresh_mask``
    is (K,) bool. Rows outside the mask (stale or padding) do not enter the mean.
    """
    f = fresh_mask.astype(jnp.float32)
    num_fresh = f.sum()
    num = jnp.zeros(f.shape, jnp.float32)
    den = jnp.zeros((), jnp.float32)
    for leaf in jax.tree_util.tree_leaves(points):
        x = leaf.reshape(leaf.shape[0], -1).astype(jnp.float32)
        mean = (f @ x) / jnp.maximum(num_fresh, 1.0)
        num = num + jnp.sum(jnp.square(x - mean), axis=1)
        den = den + jnp.sum(jnp.square(mean))
    den = den * jnp.square(num_fresh + 1.0)
    return num / jnp.where(den > 0, den, 1.0)


def saa_weights(staleness, lambdas, beta: float = 0.35, threshold: int | None = 5,
                s: float = 1.0) -> np.ndarray:
    """REFL SAA weights (un-normalised): (K,) float64; see the module docstring."""
    tau = np.asarray(staleness, dtype=np.float64)
    lam = np.asarray(lambdas, dtype=np.float64)
    kept_stale = (tau > 0) if threshold is None else (tau > 0) & (tau <= threshold)
    lam_max = lam[kept_stale].max() if kept_stale.any() else 0.0
    ratio = lam / lam_max if lam_max > 0 else np.zeros_like(lam)
    stale_w = (1.0 - beta) / (tau + 1.0) + beta * (1.0 - np.exp(-ratio) / s)
    return np.where(tau <= 0, 1.0, np.where(kept_stale, stale_w, 0.0))


def make_refl_saa(config: REFLSAAConfig = REFLSAAConfig()) -> Aggregator:
    if config.scale <= 0:
        raise ValueError(f"scale s must be > 0, got {config.scale}")

    def weights(info: REFLBufferInfo) -> np.ndarray:
        lam = getattr(info, "relative_change", None)
        if lam is None:
            raise TypeError("refl_saa needs REFLBufferInfo (BufferInfo + relative_change); "
                            "compute Lambda with refl_saa.relative_change on the buffer")
        return saa_weights(info.staleness, lam, config.beta, config.threshold, config.scale)

    def augment_info(info: BufferInfo, deltas) -> REFLBufferInfo:
        # the server's deltas are w_local - w_start; Lambda compares them with the fresh mean
        fresh = jnp.asarray(np.asarray(info.staleness) == 0)
        return REFLBufferInfo.of(info, np.asarray(relative_change(deltas, fresh), np.float64))

    return Aggregator("refl_saa", weights, normalize=True, server_lr=config.server_lr, accepts_stale=True,
                      augment_info=augment_info)
