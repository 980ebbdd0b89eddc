"""Uniform random selection among eligible clients (FedAvg / FedBuff)."""

from __future__ import annotations

import numpy as np

from .base import SelectionContext, Selector
from .ranks import mask_ids_at_ranks


def _select(state, ctx: SelectionContext, k: int):
    # rng.choice(ids, k) draws positions among len(ids) and takes those ids: the same draw by rank,
    # then the clients at the ranks (no list of the eligible ids at 10^7 clients)
    n = int(np.count_nonzero(ctx.eligible)) if ctx.num_eligible is None else int(ctx.num_eligible)
    k = min(int(k), n)
    if k <= 0:
        return np.zeros(0, np.int64), state
    ranks = ctx.rng.choice(n, k, replace=False)
    return np.sort(mask_ids_at_ranks(ctx.view, ctx.eligible, ranks)), state


def make_random_selector() -> Selector:
    return Selector("random", lambda: None, _select)
