"""Policies: selectors (who trains / evaluates) and aggregators (how updates merge).

Registry lookups by name happen here, once per run (strings only at the edge).
"""

from __future__ import annotations

from .aggregators.base import Aggregator, BufferInfo, apply_weighted_deltas
from .selectors.base import SelectionContext, Selector


def make_aggregator(name: str, server_lr: float | None = None, **options) -> Aggregator:
    """The aggregator registered as ``name``; ``server_lr`` overrides its default eta."""
    from .aggregators import AGGREGATORS

    try:
        factory = AGGREGATORS[name]
    except KeyError:
        raise KeyError(f"unknown aggregator {name!r}; known: {', '.join(AGGREGATORS)}") from None
    agg = factory(**options) if options else factory()
    return agg._replace(server_lr=float(server_lr)) if server_lr is not None else agg


def make_selector(name: str, **options) -> Selector:
    from .selectors import SELECTORS

    try:
        factory = SELECTORS[name]
    except KeyError:
        raise KeyError(f"unknown selector {name!r}; known: {', '.join(SELECTORS)}") from None
    return factory(**options)


__all__ = ["Aggregator", "BufferInfo", "apply_weighted_deltas", "SelectionContext", "Selector", "make_aggregator",
           "make_selector"]
