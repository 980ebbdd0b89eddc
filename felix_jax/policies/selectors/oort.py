"""Oort's guided participant selection (Lai et al., OSDI'21) on the server's client map.

Each call splits ``k`` into exploration (never-explored eligible clients) and
exploitation (explored eligible clients, sampled by Oort score among the
candidates above the cut-off); :class:`~.oort_math.OortConfig` chooses how each
step is done (the FeLiX code's way by default, FedScale's or the Oort
repository's by variant). The formulas live in :mod:`.oort_math`; this file
threads the selector's state (call count for epsilon, the pacer, the clients
exploited since the last pacer record) and reads the ClientMap:

* explored = has a utility (``utility_round >= 0``);
* a client's duration is its observed one (``duration_s``), else its registered
  one (``registered_duration_s``), else unknown (NaN: not penalised, and not in
  ``T_pref``'s population);
* ``exploit="sampled:M"`` scores a uniform sample of M explored eligible clients, when more are
  eligible, instead of all of them (:func:`_sampled_explored`); ``T_pref``, the pacer, the split and
  exploration are unchanged. What stays O(explored) a call then: nothing with the defaults
  (``T_pref`` over explored durations is one lookup in the view's sorted durations); ``t_pref_over=
  "registered"`` and ``normalize_utility`` (their populations are every client / every eligible one)
  and ``shortfall="random"`` list what they did before;
* the pacer records once per aggregation round, and once at the first call (an
  empty record, as Oort's code records at its first call): the utility of the
  clients this selector exploited since the previous record that have sent a
  training reply since they were picked (:func:`~.oort_math.pacer_input`; eval
  replies and explored-at-random clients do not count).

FeLiX's TierSelect train selector is this selector run on TierTrack's view
(fresh tiers, utilities refreshed by the eval selector).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .base import SelectionContext, Selector
from .ranks import ids_at_ranks as _ids_at_ranks, ids_at_ranks_counted as _ids_at_ranks_counted  # noqa: F401
from .ranks import ids_at_ranks_of_both
from .oort_math import (OortConfig, PacerState, epsilon_schedule, exploit_pick as exploit_pick_of, exploration_prior,
                        exploration_window, oort_scores, pacer_input, preferred_duration,
                        preferred_duration_sorted, sample_by_score, split_explore_exploit)

_NO_CLIENTS = np.zeros(0, np.int64)


class OortState(NamedTuple):
    calls: int  # selection calls so far (epsilon decays per call)
    pacer: PacerState
    round: int  # last aggregation round the pacer recorded (-1: none yet)
    exploited: np.ndarray = _NO_CLIENTS  # clients exploited since the last pacer record
    exploited_trained: np.ndarray = _NO_CLIENTS  # their times_trained when picked
    exhausted: bool = False  # shortfall="random": no client was left unexplored, epsilon is 0
    t_pref: float = float("inf")  # T_pref of the last call


def _durations(view, clients: np.ndarray | None = None) -> np.ndarray:
    """Observed duration, else registered (profile) duration, else NaN (of ``clients``, default all)."""
    if clients is None:
        return np.where(np.isfinite(view.duration_s), view.duration_s, view.registered_duration_s)
    observed = view.duration_s[clients]
    return np.where(np.isfinite(observed), observed, view.registered_duration_s[clients])


def _listed(ids, mask: np.ndarray) -> np.ndarray:
    """The ids (a sorted array or the view's ``SortedSequence``) that ``mask`` sets, ascending."""
    ids = np.asarray(ids)
    return ids[mask[ids]]


def _t_pref(view, t_pref_over: str, threshold: float, eligible_mask: np.ndarray, num_eligible: int,
            unknown_s: float) -> float:
    """``T_pref``, a percentile of durations.

    "explored": of the observed durations of the explored clients (kept in order by the view);
    "registered": of every client's duration, observed or else registered, where known;
    "eligible_unsorted" / "all_unsorted": the FeLiX code's, the duration of the one client at position
    ``int(n thr / 100)`` of the eligible (or all) clients in client order, ``unknown_s`` if never trained.
    """
    if t_pref_over == "explored":
        return preferred_duration_sorted(view.explored_durations(), threshold)
    if t_pref_over in ("eligible_unsorted", "all_unsorted"):
        n = num_eligible if t_pref_over == "eligible_unsorted" else view.num_clients
        if n == 0 or threshold >= 100.0:
            return float("inf")
        rank = min(int(n * float(threshold) / 100.0), n - 1)  # the list's order is client order
        client = rank if t_pref_over == "all_unsorted" else int(
            _ids_at_ranks(lambda a, b: eligible_mask[a:b], np.array([rank]))[0])
        d = float(view.duration_s[client])
        return d if np.isfinite(d) else float(unknown_s)
    durations = _durations(view)
    return preferred_duration(durations[np.isfinite(durations)], threshold)


def _sampled_explored(ctx, eligible_mask: np.ndarray, explored_mask: np.ndarray, kept, explored,
                      num_explored: int, size: int) -> np.ndarray:
    """``exploit="sampled:M"``: ``size`` of the ``num_explored`` explored eligible clients, uniformly without
    replacement (one draw of ranks from ``ctx.rng``), ascending. Where the view keeps the explored eligible
    clients' block counts (``kept``) the ranks are found by a search over the counts and one gather of the
    rows of the blocks they fall in (:func:`~.ranks.ids_at_ranks_of_both`: O(size + blocks hit x block
    rows) bool rows, up to every row once when size nears the number of blocks, but no list of every
    explored eligible id and nothing scored); else from ``explored``, the list the call made of them
    (O(explored))."""
    ranks = np.sort(ctx.rng.choice(num_explored, size, replace=False))
    if kept is None:
        return explored[ranks]
    return ids_at_ranks_of_both(eligible_mask, explored_mask, kept[1], kept[2], ranks)


def make_oort_selector(config: OortConfig = OortConfig()) -> Selector:
    pacer = config.pacer()

    def init() -> OortState:
        return OortState(0, pacer.init(config.round_threshold), -1)

    def select(state: OortState, ctx: SelectionContext, k: int):
        view = ctx.view
        pstate, exploited, base = state.pacer, state.exploited, state.exploited_trained
        per_call = config.pacer_rule == "raise_only_per_call"
        if per_call and ctx.round % config.pacer_step == 0:  # the FeLiX code checks at every call of such a round
            pstate = pacer.raise_only(pstate)
        if not per_call and ctx.round > state.round:  # one pacer record per aggregation round
            reported = view.times_trained[exploited] > base
            pstate = pacer.update(pstate, pacer_input(view.utility[exploited[reported]]))
            exploited, base = _NO_CLIENTS, _NO_CLIENTS
        # Per-call quantities over index sets, not all N rows: the explored clients are few, the
        # never-explored eligible ones are listed only when a step needs them all. Every array below is
        # the one the (N,)-mask formulation gives, in the same (ascending client) order, so the draws
        # from ctx.rng (which depend on sizes and weights only) and their results are the same.
        eligible_mask = np.asarray(ctx.eligible, dtype=bool)
        explored_mask = view.explored_mask()  # utility_round >= 0 (read-only, kept by the view)
        explored_all = view.explored_ids()  # ids of every explored client
        # how many eligible clients are explored, and per block, where the view keeps the eligible mask:
        # the ids of the explored eligible clients are then listed only when exploitation scores them
        kept = view.explored_block_counts(ctx.eligible) if hasattr(view, "explored_block_counts") else None
        explored = None if kept is not None else _listed(explored_all, eligible_mask)
        num_explored = kept[0] if kept is not None else len(explored)
        num_eligible = int(np.count_nonzero(eligible_mask)) if ctx.num_eligible is None else ctx.num_eligible
        num_unexplored = num_eligible - num_explored
        eps = 0.0 if state.exhausted else epsilon_schedule(
            state.calls, config.exploration_factor, config.exploration_decay, config.exploration_min,
            config.decay_before_use)
        draw = int(ctx.rng.binomial(int(k), eps)) if config.split_rounding == "binomial_explore" else None
        n_explore, n_exploit = split_explore_exploit(int(k), eps, num_unexplored, num_explored,
                                                     config.split_rounding, absorb=config.shortfall == "exploit",
                                                     explore_draw=draw)
        t_pref = _t_pref(view, config.t_pref_over, pstate.threshold, eligible_mask, num_eligible,
                         config.unknown_duration_s)

        def unexplored_rows(start, stop):  # eligible & ~explored, rows [start, stop)
            return np.greater(eligible_mask[start:stop], explored_mask[start:stop])

        unexplored = None  # their ids, when a step needs them all
        if (config.explore_by_prior or config.normalize_utility or config.shortfall == "random"
                or n_explore > 64):
            unexplored = np.flatnonzero(unexplored_rows(0, len(eligible_mask)))
        eligible = np.flatnonzero(eligible_mask) if config.normalize_utility or config.shortfall == "random" else None
        prior = None  # of the unexplored eligible clients, in their order
        if config.explore_by_prior or config.normalize_utility:
            prior = exploration_prior(view.num_samples[unexplored], _durations(view, unexplored), t_pref,
                                      config.round_penalty, config.prior_cap)
        picked = []
        exploit_pick = _NO_CLIENTS
        if n_exploit > 0:
            sample = None if config.exploit_sample is None else max(config.exploit_sample, n_exploit)
            if sample is not None and num_explored > sample:  # sampled: scores `sample` of them only
                scored = _sampled_explored(ctx, eligible_mask, explored_mask, kept, explored, num_explored, sample)
            else:
                if explored is None:
                    explored = _listed(explored_all, eligible_mask)
                scored = explored
            population = None
            if config.normalize_utility:  # rewards of the eligible clients: U, or the raw prior if unexplored
                raw = view.num_samples[eligible].astype(np.float64)
                if config.prior_cap is not None:
                    raw = np.minimum(raw, float(config.prior_cap))
                population = np.where(explored_mask[eligible], view.utility[eligible], raw)  # eligible: ~unexplored
            scores = oort_scores(view.utility[scored], view.utility_round[scored], ctx.round,
                                 _durations(view, scored), t_pref, config.round_penalty, config.clip_bound,
                                 config.normalize_utility, population)  # of the (sampled) explored eligible
            if config.abs_scores:
                scores = np.abs(scores)
            exploit_pick = scored[exploit_pick_of(ctx.rng, scores, n_exploit, config.cut_off,
                                                  config.min_candidates_factor)]
            picked.append(exploit_pick)
        if n_explore > 0:
            if config.explore_by_prior:
                window = exploration_window(prior, n_explore, config.sample_window)
                picked.append(unexplored[sample_by_score(ctx.rng, window, prior, n_explore)])
            elif unexplored is not None:
                picked.append(ctx.rng.choice(unexplored, n_explore, replace=False))
            else:  # the same draw by rank (it depends on the population size only), then the ids at the ranks
                ranks = ctx.rng.choice(num_unexplored, n_explore, replace=False)
                blocks = view.block_counts(ctx.eligible) if hasattr(view, "block_counts") else None
                if blocks is None:
                    picked.append(_ids_at_ranks(unexplored_rows, ranks))
                else:  # the eligible rows' block counts, less the explored eligible clients in each block
                    counts, rows = blocks
                    counts = counts - (kept[1] if kept is not None else
                                       np.bincount(explored // rows, minlength=counts.size))
                    picked.append(_ids_at_ranks_counted(unexplored_rows, counts, rows, ranks))
        clients = np.concatenate(picked).astype(np.int64) if picked else _NO_CLIENTS
        exhausted = state.exhausted
        if config.shortfall == "random":
            missing = int(k) - len(clients)
            if missing > 0:
                rest = eligible[~np.isin(eligible, clients)]
                clients = np.concatenate([clients, ctx.rng.permutation(rest)[:missing]])
            exhausted = exhausted or len(explored_all) == view.num_clients
        if per_call and len(exploit_pick):  # a record per call that exploited: their mean current U
            pstate = pacer.record(pstate, float(np.mean(view.utility[exploit_pick])))
        new = ~np.isin(exploit_pick, exploited)
        exploited = np.concatenate([exploited, exploit_pick[new]])
        base = np.concatenate([base, view.times_trained[exploit_pick[new]]])
        return clients, OortState(state.calls + 1, pstate, max(ctx.round, state.round), exploited, base,
                                  exhausted, t_pref)

    return Selector("oort", init, select)
