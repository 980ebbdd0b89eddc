"""Uniform random selection among eligible clients (FedAvg / FedBuff)."""

from __future__ import annotations

import numpy as np

from .base import SelectionContext, Selector


def _select(state, ctx: SelectionContext, k: int):
    candidates = np.flatnonzero(ctx.eligible)
    k = min(int(k), len(candidates))
    if k <= 0:
        return np.zeros(0, np.int64), state
    return np.sort(ctx.rng.choice(candidates, k, replace=False)), state


def make_random_selector() -> Selector:
    return Selector("random", lambda: None, _select)
