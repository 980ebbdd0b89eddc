"""TierSelect's eval selector (FeLiX paper, "TierSelect"; REFERENCE.md).

Sends cheap forward-pass eval tasks to clients that trained at least once, are in
AVL_TRAIN or AVL_EVAL and idle, and whose utility is at least ``min_age`` rounds
old (code: 35), stalest first; the server caps it at e = int(1.5 K) per
aggregation round. Replies refresh U and last_utility_round and free the client.
"""

from __future__ import annotations

import numpy as np

from .base import SelectionContext, Selector
from .tierselect_math import DEFAULT_MIN_AGE, select_for_eval


def make_tierselect_eval(min_age: int = DEFAULT_MIN_AGE) -> Selector:
    def select(state, ctx: SelectionContext, k: int):
        v = ctx.view
        ids = select_for_eval(v.times_trained > 0, v.tier, v.busy, v.utility_round, ctx.round,
                              v.num_clients if k is None else int(k), min_age)
        return ids[ctx.eligible[ids]].astype(np.int64), state

    return Selector("tierselect-eval", lambda: None, select)
