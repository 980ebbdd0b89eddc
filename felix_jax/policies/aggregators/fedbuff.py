"""FedBuff (Nguyen et al., AISTATS'22): buffered async FL with 1/sqrt(1 + tau) weights.

the paper's reference settings "Baselines" and "Async runs": buffer K updates, weight each by
``1 / sqrt(1 + tau)``, apply ``w <- w + eta * sum_i(weight_i * delta_i) / K``
with ``eta = 0.3``. The FedScale variant also drops updates with ``tau > 5``
(:data:`FEDSCALE_MAX_STALENESS`; ``FedBuffConfig(max_staleness=5)``, variant
``fedscale``).

``match_step="tierfuse"`` is an ablation, not FedBuff: each buffer keeps FedBuff's
*relative* weights but is rescaled so that ``sum_i w_i`` equals what TierFuse
(paper defaults, :class:`~.tierfuse.TierFuseConfig`) would give the same buffer.
The server step ``eta * sum_i w_i delta_i / K`` then moves the model as far as
FeLiX's would, so "better weights" can be told apart from "bigger steps".
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Mapping

import numpy as np

from ...options import Range
from .base import Aggregator, BufferInfo
from .staleness import drop_beyond
from .tierfuse import tierfuse_weight

FEDSCALE_MAX_STALENESS = 5


@dataclasses.dataclass(frozen=True)
class FedBuffConfig:
    server_lr: float = 0.3  # eta of the paper's async runs
    max_staleness: int | None = None  # None: keep all (FedBuff); 5: the FedScale variant
    match_step: str | None = None  # None (FedBuff) | "tierfuse": rescale to TierFuse's total weight

    RANGES: ClassVar[Mapping[str, Range]] = {"server_lr": Range.above(0), "max_staleness": Range.at_least(0)}

    def __post_init__(self):
        if not (math.isfinite(self.server_lr) and self.server_lr > 0):
            raise ValueError(f"server_lr={self.server_lr!r}: must be a finite number > 0")
        if self.match_step not in (None, "tierfuse"):
            raise ValueError(f"match_step must be none or 'tierfuse', got {self.match_step!r}")

    @classmethod
    def fedscale(cls, **overrides) -> "FedBuffConfig":
        """FedScale's FedBuff: drops updates with staleness > 5."""
        return cls(**{"max_staleness": FEDSCALE_MAX_STALENESS, **overrides})


def fedbuff_weight(staleness) -> np.ndarray:
    """``1 / sqrt(1 + tau)``, elementwise (float64)."""
    return 1.0 / np.sqrt(1.0 + np.asarray(staleness, dtype=np.float64))


def match_total_weight(weights, target_total: float) -> np.ndarray:
    """``weights`` rescaled so they sum to ``target_total`` (all zero stays zero)."""
    w = np.asarray(weights, dtype=np.float64)
    total = w.sum()
    return w * (target_total / total) if total > 0 else w


def make_fedbuff(config: FedBuffConfig = FedBuffConfig()) -> Aggregator:
    def weights(info: BufferInfo) -> np.ndarray:
        w = drop_beyond(fedbuff_weight(info.staleness), info.staleness, config.max_staleness)
        if config.match_step == "tierfuse":
            w = match_total_weight(w, float(tierfuse_weight(info.staleness, info.utility).sum()))
        return w

    # match_step rescales each buffer to a total over the buffer: not a weight an update has on its own
    return Aggregator("fedbuff", weights, normalize=False, server_lr=config.server_lr, accepts_stale=True,
                      per_update=config.match_step is None)
