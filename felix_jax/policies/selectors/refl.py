"""REFL's Intelligent Participant Selection (Abdelmoniem et al., EuroSys'23).

Priority goes to clients predicted to *leave* within the next window
[t, t + W] (their data is otherwise lost to training); the "predictor" is the
true trace (an oracle strategy only), optionally thinned to a given accuracy
(the paper's reference settings "Baselines": 90%). Within each group the order is random.

REFL also shrinks the fresh selection by the stale updates it expects; felix-jax
rounds close on K *fresh* updates (stale ones ride along with SAA weights), so
the selection size is left to the server's over-commit (documented deviation).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Mapping

import numpy as np

from ...options import Range
from .base import SelectionContext, Selector
from .refl_math import ips_order, thin_predictions, will_leave_within


@dataclasses.dataclass(frozen=True)
class REFLConfig:
    window_s: float = 600.0  # prediction window W (one slot of the paper's traces)
    accuracy: float = 0.9  # predictor accuracy; 1.0 = the exact trace

    RANGES: ClassVar[Mapping[str, Range]] = {"window_s": Range.above(0), "accuracy": Range.fraction()}


def make_refl_selector(config: REFLConfig = REFLConfig()) -> Selector:
    def select(state, ctx: SelectionContext, k: int):
        if ctx.trace is None:
            raise ValueError("REFL's IPS needs availability predictions: run it with knowledge 'oracle'")
        cands = np.flatnonzero(ctx.eligible)
        nt, ns = ctx.trace.next_change_after(ctx.now, cands)
        leave = thin_predictions(ctx.rng, will_leave_within(ctx.now, config.window_s, nt, ns), config.accuracy)
        priority = np.zeros(ctx.view.num_clients, bool)
        priority[cands] = leave
        return ips_order(ctx.rng, priority, ctx.eligible)[: int(k)].astype(np.int64), state

    return Selector("refl", lambda: None, select)
