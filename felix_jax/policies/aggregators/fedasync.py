"""FedAsync's staleness functions (Xie et al. 2019, Sec. 5) in the buffered server step.

the paper's reference settings "Baselines" lists them as FedBuff variants:

* constant: ``s(tau) = 1``;
* polynomial: ``s(tau) = (1 + tau)^-a``, FedAsync's experiments use ``a = 0.5``;
* hinge: ``s(tau) = 1`` if ``tau <= b`` else ``1 / (a (tau - b) + 1)``, with
  ``a = 10, b = 4`` in FedAsync's experiments.

FedAsync proper mixes one update at a time, ``w <- (1 - alpha_t) w + alpha_t w_new``
with ``alpha_t = alpha * s(tau)``, which is this aggregator with K = 1 and
``server_lr = alpha``. By default it shares the async runs' buffer and
``eta = 0.3`` (the paper's reference settings "Async runs") so that only the weighting differs
from FedBuff.
"""

from __future__ import annotations

import dataclasses
import math
import enum
from typing import ClassVar, Mapping

import numpy as np

from ...options import Range
from .base import Aggregator, BufferInfo
from .staleness import drop_beyond


class StalenessFunction(enum.Enum):
    CONSTANT = "constant"
    POLYNOMIAL = "polynomial"
    HINGE = "hinge"


@dataclasses.dataclass(frozen=True)
class FedAsyncConfig:
    function: StalenessFunction = StalenessFunction.POLYNOMIAL
    poly_a: float = 0.5  # polynomial exponent a
    hinge_a: float = 10.0  # hinge slope a
    hinge_b: float = 4.0  # hinge knee b: no discount while tau <= b
    server_lr: float = 0.3
    max_staleness: int | None = None

    RANGES: ClassVar[Mapping[str, Range]] = {
        "poly_a": Range.at_least(0), "hinge_a": Range.at_least(0), "hinge_b": Range.at_least(0),
        "server_lr": Range.above(0), "max_staleness": Range.at_least(0)}

    def __post_init__(self):
        if not (math.isfinite(self.server_lr) and self.server_lr > 0):
            raise ValueError(f"server_lr={self.server_lr!r}: must be a finite number > 0")


def polynomial_weight(staleness, a: float = 0.5) -> np.ndarray:
    """``(1 + tau)^-a``."""
    return (1.0 + np.asarray(staleness, dtype=np.float64)) ** (-a)


def hinge_weight(staleness, a: float = 10.0, b: float = 4.0) -> np.ndarray:
    """``1`` if ``tau <= b`` else ``1 / (a (tau - b) + 1)``."""
    tau = np.asarray(staleness, dtype=np.float64)
    return np.where(tau <= b, 1.0, 1.0 / (a * np.maximum(tau - b, 0.0) + 1.0))


def fedasync_weight(staleness, config: FedAsyncConfig = FedAsyncConfig()) -> np.ndarray:
    if config.function is StalenessFunction.POLYNOMIAL:
        return polynomial_weight(staleness, config.poly_a)
    if config.function is StalenessFunction.HINGE:
        return hinge_weight(staleness, config.hinge_a, config.hinge_b)
    return np.ones(np.shape(staleness), dtype=np.float64)


def make_fedasync(config: FedAsyncConfig = FedAsyncConfig()) -> Aggregator:
    def weights(info: BufferInfo) -> np.ndarray:
        return drop_beyond(fedasync_weight(info.staleness, config), info.staleness, config.max_staleness)

    name = f"fedasync_{config.function.value}"
    return Aggregator(name, weights, normalize=False, server_lr=config.server_lr, accepts_stale=True, per_update=True)
