"""Oort's guided participant selection (Lai et al., OSDI'21), as the FeLiX code uses it.

Exploration first while unexplored clients exist (epsilon 0.9, x0.98 per call,
floor 0.2); otherwise exploit: score = (clipped U + sqrt(0.1 ln(round) /
last_round)) * min(1, T_pref / t_i)^alpha with T_pref the pacer's percentile of
observed durations, candidates above ``cut_off`` times the score at the exploit
length, sampled by score without replacement (REFERENCE.md "TierSelect",
"Baselines"). The formulas live in :mod:`.oort_math`; this file threads the
selector's state (call count for epsilon, the pacer) and reads the ClientMap.

FeLiX's TierSelect train selector is this selector run on TierTrack's view
(fresh tiers, utilities refreshed by the eval selector).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .base import SelectionContext, Selector
from .oort_math import (OortConfig, PacerState, epsilon_schedule, exploit_candidates, oort_scores,
                        preferred_duration, sample_by_score, split_explore_exploit)


class OortState(NamedTuple):
    calls: int  # selection calls so far (epsilon decays per call)
    pacer: PacerState
    round: int  # last aggregation round the pacer saw


def make_oort_selector(config: OortConfig = OortConfig()) -> Selector:
    pacer = config.pacer()

    def init() -> OortState:
        return OortState(0, pacer.init(config.round_threshold), 0)

    def select(state: OortState, ctx: SelectionContext, k: int):
        view = ctx.view
        pstate = state.pacer
        if ctx.round > state.round:  # one pacer record per aggregation round
            reported = view.utility_round == ctx.round - 1
            pstate = pacer.update(pstate, float(view.utility[reported].sum()))
        explored_all = view.utility_round >= 0
        explored = np.flatnonzero(ctx.eligible & explored_all)
        unexplored = np.flatnonzero(ctx.eligible & ~explored_all)
        eps = epsilon_schedule(state.calls, config.exploration_factor, config.exploration_decay,
                               config.exploration_min)
        n_explore, n_exploit = split_explore_exploit(int(k), eps, len(unexplored), len(explored))
        picked = []
        if n_exploit > 0:
            known = explored_all & np.isfinite(view.duration_s)
            t_pref = preferred_duration(view.duration_s[known], pstate.threshold)
            durations = np.where(np.isfinite(view.duration_s[explored]), view.duration_s[explored], t_pref)
            scores = np.zeros(view.num_clients)
            scores[explored] = oort_scores(view.utility[explored], view.utility_round[explored], ctx.round,
                                           durations, t_pref, config.round_penalty, config.clip_bound,
                                           config.normalize_utility)
            candidates = explored[exploit_candidates(scores[explored], n_exploit, config.cut_off)]
            picked.append(sample_by_score(ctx.rng, candidates, scores, min(n_exploit, len(candidates))))
        if n_explore > 0:
            picked.append(ctx.rng.choice(unexplored, n_explore, replace=False))
        clients = np.concatenate(picked).astype(np.int64) if picked else np.zeros(0, np.int64)
        return clients, OortState(state.calls + 1, pstate, max(ctx.round, state.round))

    return Selector("oort", init, select)
