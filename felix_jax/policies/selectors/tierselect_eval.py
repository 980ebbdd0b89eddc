"""TierSelect's eval selector (FeLiX paper, "TierSelect"; the paper's reference settings).

Sends cheap forward-pass eval tasks to clients that trained at least once, are in
AVL_TRAIN or AVL_EVAL and idle, and whose utility is at least ``min_age`` rounds
old (code: 35), stalest first; the server caps it at e = int(budget_factor * K)
(code: 1.5) per aggregation round. Replies refresh U and last_utility_round and
free the client.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Mapping

import numpy as np

from ...options import Range
from .base import SelectionContext, Selector
from .tierselect_math import DEFAULT_MIN_AGE, eval_budget, select_for_eval_in_order


@dataclasses.dataclass(frozen=True)
class TierSelectEvalConfig:
    min_age: int = DEFAULT_MIN_AGE  # rounds; refresh utilities at least this old (FeLiX code: 35)
    budget_factor: float = 1.5  # at most int(budget_factor * K) eval tasks per aggregation round (code)

    RANGES: ClassVar[Mapping[str, Range]] = {"min_age": Range.at_least(0), "budget_factor": Range.at_least(0)}

    def __post_init__(self):
        if self.min_age < 0:
            raise ValueError(f"min_age must be >= 0, got {self.min_age}")
        if not self.budget_factor >= 0:
            raise ValueError(f"budget_factor must be >= 0, got {self.budget_factor}")

    def budget(self, aggregation_goal: int) -> int:
        return eval_budget(aggregation_goal, self.budget_factor)


def make_tierselect_eval(config: TierSelectEvalConfig = TierSelectEvalConfig()) -> Selector:
    def select(state, ctx: SelectionContext, k: int):
        v = ctx.view
        # Only the clients that trained at least once can qualify: the view keeps them in staleness
        # order, so the stalest available ones are read off its front (select_for_eval's result).
        ids = select_for_eval_in_order(v.staleness_order(), v.tier, v.busy, ctx.round,
                                       v.num_clients if k is None else int(k), config.min_age)
        return ids[ctx.eligible[ids]].astype(np.int64), state

    return Selector("tierselect-eval", lambda: None, select)
