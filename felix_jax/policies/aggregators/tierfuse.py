"""TierFuse: utility-aware, delay-robust weights (FeLiX paper Sec. 3.4).

``w_i = sigma * alpha(T_i) + (1 - sigma) * beta(L_i)`` with
``alpha(T) = (1 + T)^-a`` (staleness decay) and
``beta(L) = min(1.5 - (1 + L)^-b, 1)`` (utility gain). T is the staleness; L is
the update's statistical utility ``U`` (``info.utility``), "derived from the
client's local loss" (paper) and what the FeLiX code feeds in (the paper's reference settings
"TierFuse": about 120 at the median); ``utility_signal=MEAN_LOSS`` feeds the
task's mean training loss instead.

Defaults follow the paper where it is explicit and the code otherwise
(the paper's reference settings "TierFuse"):

* ``sigma = 0.4, a = 0.25, b = 0.1`` (code);
* ``cap_beta=True``: the paper's ``min(., 1)``; the code has no cap (``False``).
  The cap only binds when ``(1 + L)^-b < 0.5``, i.e. ``L > 1023`` at ``b = 0.1``;
* ``max_staleness`` = the paper's ``T_max`` ("updates older than T_max are clipped
  or dropped"): ``None`` (code) keeps all; otherwise older updates get weight 0,
  or with ``clamp_staleness=True`` are weighted as if ``T = T_max``;
* optional per-update L2 ``clip``/``normalize`` of the deltas (``delta_bound``,
  ``max_norm``): the server applies :func:`clip_or_normalize_deltas` to the
  buffer before the weighted reduction (see :func:`bound_deltas`);
* server step ``eta = 0.3`` with ``/ K`` (the code and the paper's async runs);
  ``normalize=True`` divides by ``sum_i w_i`` instead (the paper's "normalized
  server updates").
"""

from __future__ import annotations

import dataclasses
import math
import enum
from typing import ClassVar, Mapping

import numpy as np

from ...options import Range
from .base import Aggregator, BufferInfo
from .deltas import DeltaBound, clip_or_normalize_deltas
from .staleness import drop_beyond

__all__ = ["TierFuseConfig", "UtilitySignal", "DeltaBound", "alpha_staleness", "beta_utility",
           "tierfuse_weight", "make_tierfuse", "bound_deltas", "clip_or_normalize_deltas"]


class UtilitySignal(enum.Enum):
    UTILITY = "utility"  # info.utility: Oort's statistical utility U (paper and code)
    MEAN_LOSS = "mean_loss"  # info.loss_mean


@dataclasses.dataclass(frozen=True)
class TierFuseConfig:
    sigma: float = 0.4  # trade-off between staleness decay and utility gain
    a: float = 0.25  # staleness decay exponent
    b: float = 0.1  # utility saturation exponent
    cap_beta: bool = True  # paper: beta <= 1; FeLiX code: no cap
    max_staleness: int | None = None  # T_max; None: no limit (code)
    clamp_staleness: bool = False  # beyond T_max: False drops (weight 0), True uses alpha(T_max)
    utility_signal: UtilitySignal = UtilitySignal.UTILITY
    delta_bound: DeltaBound | None = None  # optional per-update L2 clip / normalisation
    max_norm: float = 1.0  # bound for delta_bound
    server_lr: float = 0.3  # eta
    normalize: bool = False  # False: / K (code); True: / sum of weights

    RANGES: ClassVar[Mapping[str, Range]] = {
        "sigma": Range.fraction(), "a": Range.at_least(0), "b": Range.at_least(0),
        "max_staleness": Range.at_least(0), "max_norm": Range.above(0), "server_lr": Range.above(0)}

    def __post_init__(self):
        if not (math.isfinite(self.server_lr) and self.server_lr > 0):
            raise ValueError(f"server_lr={self.server_lr!r}: must be a finite number > 0")

    @classmethod
    def felix_code(cls, **overrides) -> "TierFuseConfig":
        """The FeLiX reference code's variant: no beta cap, no T_max."""
        return cls(**{"cap_beta": False, "max_staleness": None, **overrides})


def alpha_staleness(staleness, a: float = 0.25) -> np.ndarray:
    """``alpha(T) = (1 + T)^-a``."""
    return (1.0 + np.asarray(staleness, dtype=np.float64)) ** (-a)


def beta_utility(utility, b: float = 0.1, cap: bool = True) -> np.ndarray:
    """``beta(L) = 1.5 - (1 + L)^-b``, capped at 1 when ``cap``; L < 0 is read as 0."""
    gain = 1.5 - (1.0 + np.maximum(np.asarray(utility, dtype=np.float64), 0.0)) ** (-b)
    return np.minimum(gain, 1.0) if cap else gain


def tierfuse_weight(staleness, utility, config: TierFuseConfig = TierFuseConfig()) -> np.ndarray:
    """Per-update TierFuse weight, including the ``T_max`` rule; (K,) float64."""
    tau = np.asarray(staleness, dtype=np.float64)
    if config.max_staleness is not None and config.clamp_staleness:
        tau = np.minimum(tau, config.max_staleness)
    w = config.sigma * alpha_staleness(tau, config.a) + (1.0 - config.sigma) * beta_utility(
        utility, config.b, config.cap_beta)
    if config.clamp_staleness:
        return w
    return drop_beyond(w, staleness, config.max_staleness)


def make_tierfuse(config: TierFuseConfig = TierFuseConfig()) -> Aggregator:
    def weights(info: BufferInfo) -> np.ndarray:
        signal = info.utility if config.utility_signal is UtilitySignal.UTILITY else info.loss_mean
        return tierfuse_weight(info.staleness, signal, config)

    transform = None if config.delta_bound is None else (lambda deltas: bound_deltas(config, deltas))
    return Aggregator("tierfuse", weights, normalize=config.normalize, server_lr=config.server_lr,
                      accepts_stale=True, transform_deltas=transform, per_update=True)


def bound_deltas(config: TierFuseConfig, deltas):
    """The server's pre-reduction step for TierFuse: the configured clip/normalisation."""
    return clip_or_normalize_deltas(deltas, config.delta_bound, config.max_norm)
