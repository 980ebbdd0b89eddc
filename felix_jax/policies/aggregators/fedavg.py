"""Synchronous FedAvg (McMahan et al. 2017): the sample-weighted mean of fresh updates.

the paper's reference settings "Sync OORT": aggregate the first K fresh updates with weights
``n_i / sum_j n_j`` and drop the rest as stale, so ``normalize=True`` (divide by
the sum of weights), ``server_lr=1`` (the new model is the weighted mean of the
local models) and ``accepts_stale=False`` (the server discards late updates
before they reach the buffer; the weights themselves ignore staleness).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Mapping

import numpy as np

from ...options import Range
from .base import Aggregator, BufferInfo


@dataclasses.dataclass(frozen=True)
class FedAvgConfig:
    server_lr: float = 1.0  # eta; 1 gives plain FedAvg

    RANGES: ClassVar[Mapping[str, Range]] = {"server_lr": Range.above(0)}

    def __post_init__(self):
        if not (math.isfinite(self.server_lr) and self.server_lr > 0):
            raise ValueError(f"server_lr={self.server_lr!r}: must be a finite number > 0")


def fedavg_weights(num_samples: np.ndarray) -> np.ndarray:
    """``n_i`` (normalised by the server step): (K,) float64."""
    return np.asarray(num_samples, dtype=np.float64)


def make_fedavg(config: FedAvgConfig = FedAvgConfig()) -> Aggregator:
    def weights(info: BufferInfo) -> np.ndarray:
        return fedavg_weights(info.num_samples)

    return Aggregator("fedavg", weights, normalize=True, server_lr=config.server_lr, accepts_stale=False,
                      per_update=True)
