"""Experiments: scenarios, presets, strategies, the runner and its results folder."""

from .presets import PRESETS, get_preset
from .scenario import Scenario
from .strategies import STRATEGIES, Strategy, get_strategy

__all__ = ["PRESETS", "get_preset", "Scenario", "STRATEGIES", "Strategy", "get_strategy"]
