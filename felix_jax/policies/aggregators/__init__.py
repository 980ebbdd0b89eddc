"""Server aggregators: per-update weights (host) + one jitted weighted reduction (device).

Each module holds a frozen config and a ``make_*(config) -> Aggregator``; the
string ids live only here, at the ``make`` edge.
"""

from __future__ import annotations

from typing import Callable

from .base import Aggregator, BufferInfo, apply_weighted_deltas
from .deltas import DeltaBound, clip_or_normalize_deltas, update_norms
from .fedasync import FedAsyncConfig, StalenessFunction, make_fedasync
from .fedavg import FedAvgConfig, make_fedavg
from .fedbuff import FEDSCALE_MAX_STALENESS, FedBuffConfig, fedbuff_weight, make_fedbuff
from .refl_saa import REFLBufferInfo, REFLSAAConfig, make_refl_saa, relative_change
from .tierfuse import TierFuseConfig, UtilitySignal, make_tierfuse

AGGREGATORS: dict[str, Callable[..., Aggregator]] = {
    "fedavg": make_fedavg,
    "fedbuff": make_fedbuff,
    "fedasync": make_fedasync,
    "refl_saa": make_refl_saa,
    "tierfuse": make_tierfuse,
}

AGGREGATOR_CONFIGS: dict[str, type] = {
    "fedavg": FedAvgConfig,
    "fedbuff": FedBuffConfig,
    "fedasync": FedAsyncConfig,
    "refl_saa": REFLSAAConfig,
    "tierfuse": TierFuseConfig,
}


def make_aggregator(name: str, **overrides) -> Aggregator:
    """``make_aggregator("tierfuse", cap_beta=False)``: registry lookup + config overrides."""
    if name not in AGGREGATORS:
        raise KeyError(f"unknown aggregator {name!r}; known: {sorted(AGGREGATORS)}")
    return AGGREGATORS[name](AGGREGATOR_CONFIGS[name](**overrides))


__all__ = [
    "AGGREGATORS", "AGGREGATOR_CONFIGS", "Aggregator", "BufferInfo", "DeltaBound", "FEDSCALE_MAX_STALENESS",
    "FedAsyncConfig", "FedAvgConfig", "FedBuffConfig", "REFLBufferInfo", "REFLSAAConfig", "StalenessFunction",
    "TierFuseConfig", "UtilitySignal", "apply_weighted_deltas", "clip_or_normalize_deltas", "fedbuff_weight",
    "make_aggregator", "make_fedasync", "make_fedavg", "make_fedbuff", "make_refl_saa", "make_tierfuse",
    "relative_change", "update_norms",
]
