"""Policies: selectors (who trains / evaluates) and aggregators (how updates merge).

Registry lookups by name happen in the two subpackages, once per run (strings only
at the edge); every option of a policy is a field of its frozen config.
"""

from __future__ import annotations

from .aggregators import AGGREGATOR_OPTIONS, aggregator_config, make_aggregator
from .aggregators.base import Aggregator, BufferInfo, apply_weighted_deltas
from .selectors import SELECTOR_OPTIONS, make_selector, selector_config
from .selectors.base import SelectionContext, Selector

__all__ = ["AGGREGATOR_OPTIONS", "Aggregator", "BufferInfo", "SELECTOR_OPTIONS", "SelectionContext", "Selector",
           "aggregator_config", "apply_weighted_deltas", "make_aggregator", "make_selector", "selector_config"]
