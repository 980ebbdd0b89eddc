"""Server aggregators: per-update weights (host) + one jitted weighted reduction (device).

Each module holds a frozen config and a ``make_*(config) -> Aggregator``; the
string ids live only here, at the ``make`` edge. The robust rules
(``trimmed-mean``, ``median``: :mod:`.robust`) replace the weighted reduction
with their own ``combine``; the Byzantine-robust selections (``krum``,
``multi-krum``, ``bulyan``: :mod:`.byzantine`) weigh what they select and
reduce it with theirs.
"""

from __future__ import annotations

from typing import Callable

import jax

from ...options import OptionSpec
from ...plugin_calls import check_signature, guarded, is_plugin
from .base import Aggregator, BufferInfo, apply_weighted_deltas
from .byzantine import (BulyanConfig, KrumConfig, MultiKrumConfig, bulyan_update, make_bulyan, make_krum,
                        make_multi_krum, multi_krum_update)
from .deltas import DeltaBound, clip_or_normalize_deltas, update_norms
from .fedasync import FedAsyncConfig, StalenessFunction, make_fedasync
from .fedavg import FedAvgConfig, make_fedavg
from .fedbuff import FEDSCALE_MAX_STALENESS, FedBuffConfig, fedbuff_weight, make_fedbuff
from .fedprox import FedProxConfig, make_fedprox
from .qfedavg import QFedAvgConfig, make_qfedavg, qfedavg_weights
from .refl_saa import REFLBufferInfo, REFLSAAConfig, make_refl_saa, relative_change
from .robust import (MedianConfig, TrimmedMeanConfig, make_median, make_trimmed_mean, median_update,
                     trimmed_mean_update)
from .tierfuse import TierFuseConfig, UtilitySignal, make_tierfuse

AGGREGATORS: dict[str, Callable[..., Aggregator]] = {
    "fedavg": make_fedavg,
    "fedbuff": make_fedbuff,
    "fedasync": make_fedasync,
    "refl_saa": make_refl_saa,
    "tierfuse": make_tierfuse,
    "trimmed-mean": make_trimmed_mean,
    "median": make_median,
    "fedprox": make_fedprox,
    "qfedavg": make_qfedavg,
    "krum": make_krum,
    "multi-krum": make_multi_krum,
    "bulyan": make_bulyan,
}

# How each aggregator is configured from a scenario (``aggregator.<field>``), with named variants.
AGGREGATOR_OPTIONS: dict[str, OptionSpec] = {
    "fedavg": OptionSpec(FedAvgConfig),
    "fedbuff": OptionSpec(FedBuffConfig, {"fedbuff": FedBuffConfig, "fedscale": FedBuffConfig.fedscale}),
    "fedasync": OptionSpec(FedAsyncConfig),
    "refl_saa": OptionSpec(REFLSAAConfig),
    "tierfuse": OptionSpec(TierFuseConfig, {"paper": TierFuseConfig, "code": TierFuseConfig.felix_code}),
    "trimmed-mean": OptionSpec(TrimmedMeanConfig),
    "median": OptionSpec(MedianConfig),
    "fedprox": OptionSpec(FedProxConfig),
    "qfedavg": OptionSpec(QFedAvgConfig),
    "krum": OptionSpec(KrumConfig),
    "multi-krum": OptionSpec(MultiKrumConfig),
    "bulyan": OptionSpec(BulyanConfig),
}


def aggregator_config(name: str, **options):
    """The config instance of aggregator ``name`` for ``options`` (strings parsed by field type)."""
    if name not in AGGREGATORS:
        from ...suggest import known_names

        raise KeyError(f"unknown aggregator {name!r}{known_names(name, AGGREGATORS, 'aggregators')}")
    return AGGREGATOR_OPTIONS[name].build("aggregator", options)


def make_aggregator(name: str, config=None, **options) -> Aggregator:
    """``make_aggregator("tierfuse", normalize=True)``: registry lookup + config options.

    Pass either a ready ``config`` instance or option keywords (any field of the
    aggregator's config, or ``variant``); unknown keys raise one-line errors.
    """
    if config is None:
        config = aggregator_config(name, **options)
    elif options:
        raise TypeError("pass either config or options, not both")
    factory = AGGREGATORS[name]
    if not is_plugin(factory):
        return factory(config)
    # a user's aggregator: what it raises is reported naming it and the call (plugin_calls.py)
    what = f"aggregator {name!r} factory {getattr(factory, '__name__', 'make')}()"
    check_signature(what, factory, (config,), f"make(config: {type(config).__name__}) -> Aggregator")
    made = guarded(what, factory)(config)
    hooks = {field: guarded(f"aggregator {name!r}.{field}", getattr(made, field))
             for field in ("weights", "transform_deltas", "augment_info") if callable(getattr(made, field, None))}
    if callable(getattr(made, "combine", None)):  # jitted here: a plugin writes plain jnp code
        hooks["combine"] = guarded(f"aggregator {name!r}.combine", jax.jit(made.combine))
    return made._replace(**hooks)


__all__ = [
    "FedProxConfig", "QFedAvgConfig", "make_fedprox", "make_qfedavg", "qfedavg_weights",
    "AGGREGATORS", "AGGREGATOR_OPTIONS", "aggregator_config", "Aggregator", "BufferInfo", "BulyanConfig", "DeltaBound",
    "FEDSCALE_MAX_STALENESS", "FedAsyncConfig", "FedAvgConfig", "FedBuffConfig", "KrumConfig", "MedianConfig",
    "MultiKrumConfig", "REFLBufferInfo", "REFLSAAConfig",
    "StalenessFunction", "TierFuseConfig", "TrimmedMeanConfig", "UtilitySignal", "apply_weighted_deltas",
    "bulyan_update", "clip_or_normalize_deltas", "fedbuff_weight", "make_aggregator", "make_bulyan", "make_fedasync",
    "make_fedavg", "make_fedbuff", "make_krum", "make_median", "make_multi_krum", "make_refl_saa", "make_tierfuse",
    "make_trimmed_mean", "median_update", "multi_krum_update", "relative_change", "trimmed_mean_update",
    "update_norms",
]
