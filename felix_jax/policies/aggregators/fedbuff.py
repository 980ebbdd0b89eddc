"""FedBuff (Nguyen et al., AISTATS'22): buffered async FL with 1/sqrt(1 + tau) weights.

REFERENCE.md "Baselines" and "Async runs": buffer K updates, weight each by
``1 / sqrt(1 + tau)``, apply ``w <- w + eta * sum_i(weight_i * delta_i) / K``
with ``eta = 0.3``. The FedScale variant also drops updates with ``tau > 5``
(:data:`FEDSCALE_MAX_STALENESS`; ``FedBuffConfig(max_staleness=5)``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .base import Aggregator, BufferInfo
from .staleness import drop_beyond

FEDSCALE_MAX_STALENESS = 5


@dataclasses.dataclass(frozen=True)
class FedBuffConfig:
    server_lr: float = 0.3  # eta of the paper's async runs
    max_staleness: int | None = None  # None: keep all (FedBuff); 5: the FedScale variant


def fedbuff_weight(staleness) -> np.ndarray:
    """``1 / sqrt(1 + tau)``, elementwise (float64)."""
    return 1.0 / np.sqrt(1.0 + np.asarray(staleness, dtype=np.float64))


def make_fedbuff(config: FedBuffConfig = FedBuffConfig()) -> Aggregator:
    def weights(info: BufferInfo) -> np.ndarray:
        return drop_beyond(fedbuff_weight(info.staleness), info.staleness, config.max_staleness)

    return Aggregator("fedbuff", weights, normalize=False, server_lr=config.server_lr, accepts_stale=True)
