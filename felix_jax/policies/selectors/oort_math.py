"""Oort's guided participant selection, as vectorised numpy (Lai et al., OSDI'21).

Pure host functions over per-client arrays; the selector class that keeps the
client map and talks to the fleet composes them. Formulas and defaults:
REFERENCE.md "TierSelect" (the FeLiX code's train selector) and "Baselines"
(Oort's own code):

* score = (U_clipped + sqrt(0.1 ln(round) / last_round)) * min(1, T_pref / t_i)^alpha,
  where U is clipped at Oort's ``clip_bound`` order statistic and ``T_pref`` is
  the ``round_threshold``-th percentile of durations (a pacer moves it);
* exploitation samples, without replacement and proportionally to score, among
  clients scoring >= ``cut_off`` times the score at the exploit length;
* exploration share ``epsilon`` = 0.9 decayed by 0.98 per call to a floor.

Oort's own code also min-max rescales the clipped utilities to [0, 1] before
adding the bonus (``normalize_utility=True``); the FeLiX code adds the raw U.
Quantiles here are Oort's order statistic ``sorted(x)[min(floor(n q), n - 1)]``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...cohort.stats import statistical_utility

__all__ = ["OortConfig", "Pacer", "PacerState", "order_statistic", "preferred_duration", "staleness_bonus",
           "system_penalty", "clip_utilities", "oort_scores", "exploit_candidates", "sample_by_score",
           "epsilon_schedule", "split_explore_exploit", "statistical_utility"]


@dataclasses.dataclass(frozen=True)
class OortConfig:
    """Defaults: the FeLiX code's train selector; see the classmethods for Oort's own."""

    exploration_factor: float = 0.9  # initial epsilon
    exploration_decay: float = 0.98  # epsilon *= decay per selection call
    exploration_min: float = 0.2  # FeLiX code; Oort's code: 0.3
    round_threshold: float = 30.0  # initial T_pref percentile of durations
    round_penalty: float = 2.0  # alpha of the system penalty
    pacer_step: int = 20  # rounds per pacer window
    pacer_delta: float = 5.0  # percentile points the pacer moves T_pref by
    clip_bound: float = 0.9  # utility clipped at this order statistic (original Oort repo: 0.98)
    cut_off: float = 0.05  # exploit candidates score >= cut_off * score at exploit length (original: 0.7)
    # Exploration draws from the top sample_window * explore_len unexplored clients
    # (ranked by a prior reward, e.g. data size, times the system penalty), by score.
    sample_window: float = 5.0
    overcommit: float = 1.3  # sync: select int(overcommit * K) clients
    normalize_utility: bool = False  # Oort's code: min-max rescale U before adding the bonus

    @classmethod
    def fedscale(cls, **overrides) -> "OortConfig":
        """Oort's own defaults as FedScale runs them (epsilon floor 0.3)."""
        return cls(**{"exploration_min": 0.3, "normalize_utility": True, **overrides})

    @classmethod
    def original_repo(cls, **overrides) -> "OortConfig":
        """The original Oort repository's defaults (clip 0.98, cut-off 0.7)."""
        return cls.fedscale(**{"clip_bound": 0.98, "cut_off": 0.7, **overrides})

    def pacer(self) -> "Pacer":
        return Pacer(step=self.pacer_step, delta=self.pacer_delta)


def order_statistic(values, q: float) -> float:
    """Oort's quantile: ``sorted(values)[min(floor(n q), n - 1)]``; NaN when empty."""
    v = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if v.size == 0:
        return float("nan")
    return float(v[min(int(np.floor(v.size * q)), v.size - 1)])


def preferred_duration(durations, round_threshold_percent: float) -> float:
    """``T_pref``: the threshold-th percentile of durations; ``inf`` at >= 100 (no penalty)."""
    if round_threshold_percent >= 100.0 or np.size(durations) == 0:
        return float("inf")
    return order_statistic(durations, round_threshold_percent / 100.0)


def staleness_bonus(current_round: int, last_round) -> np.ndarray:
    """Oort's temporal-uncertainty term ``sqrt(0.1 ln(round) / last_round)``.

    ``last_round`` is the round a client last reported utility (Oort's time stamp,
    not an age). Guards: ``ln(round)`` is taken as 0 for ``round <= 1``, and
    ``last_round`` below 1 as 1.
    """
    log_round = np.log(max(float(current_round), 1.0))
    last = np.maximum(np.asarray(last_round, dtype=np.float64), 1.0)
    return np.sqrt(0.1 * log_round / last)


def system_penalty(durations, t_pref: float, alpha: float = 2.0) -> np.ndarray:
    """``min(1, T_pref / t_i)^alpha``: only clients slower than ``T_pref`` are penalised."""
    t = np.maximum(np.asarray(durations, dtype=np.float64), 1e-4)
    return np.minimum(1.0, t_pref / t) ** alpha


def clip_utilities(utility, clip_bound: float = 0.9) -> np.ndarray:
    """``min(U_i, order_statistic(U, clip_bound))`` so a few outliers cannot dominate."""
    u = np.asarray(utility, dtype=np.float64)
    return u if u.size == 0 else np.minimum(u, order_statistic(u, clip_bound))


def oort_scores(utility, last_round, current_round: int, durations, t_pref: float, alpha: float = 2.0,
                clip_bound: float = 0.9, normalize_utility: bool = False) -> np.ndarray:
    """Exploitation scores of explored clients (all arrays (N,), same client order).

    ``(U' + staleness_bonus) * system_penalty`` with ``U'`` the clipped utility,
    min-max rescaled over the given clients when ``normalize_utility``.
    """
    u = np.asarray(utility, dtype=np.float64)
    uc = clip_utilities(u, clip_bound)
    if normalize_utility and u.size:
        lo, hi = u.min(), u.max()
        uc = (uc - lo) / max(hi - lo, 1e-4)
    return (uc + staleness_bonus(current_round, last_round)) * system_penalty(durations, t_pref, alpha)


def exploit_candidates(scores, num_to_pick: int, cut_off: float = 0.05) -> np.ndarray:
    """Indices of clients scoring >= ``cut_off * ref``, best first (ties by index).

    ``ref`` is the score at the exploit length in descending order, i.e.
    ``sorted_desc[min(num_to_pick, n - 1)]`` as in Oort's code (the
    ``num_to_pick + 1``-th best), so for ``cut_off <= 1`` at least ``num_to_pick``
    clients qualify.
    """
    s = np.asarray(scores, dtype=np.float64)
    if num_to_pick <= 0 or s.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(s.size), -s))
    ref = s[order[min(num_to_pick, s.size - 1)]]
    return order[s[order] >= cut_off * ref]


def sample_by_score(rng: np.random.Generator, candidates, scores, k: int) -> np.ndarray:
    """``k`` distinct candidates drawn one by one with probability proportional to score.

    ``scores`` is indexed by client (``scores[candidates]`` are used). Candidates
    with non-positive score are only drawn (uniformly) once the positive ones are
    exhausted.
    """
    cand = np.asarray(candidates, dtype=np.int64)
    if k > cand.size:
        raise ValueError(f"cannot pick {k} from {cand.size} candidates")
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    w = np.maximum(np.asarray(scores, dtype=np.float64)[cand], 0.0)
    pos = cand[w > 0]
    if pos.size < k:
        rest = rng.permutation(cand[w <= 0])[: k - pos.size]
        return np.concatenate([rng.permutation(pos), rest])
    return rng.choice(pos, size=k, replace=False, p=w[w > 0] / w[w > 0].sum())


def epsilon_schedule(call: int, epsilon0: float = 0.9, decay: float = 0.98, floor: float = 0.2) -> float:
    """``max(floor, epsilon0 * decay^call)``: call 0 -> 0.9, 1 -> 0.882, ...

    Oort's code decays before its first use, i.e. uses ``epsilon_schedule(call + 1)``.
    """
    return max(floor, epsilon0 * decay ** int(call))


def split_explore_exploit(num_to_pick: int, epsilon: float, num_unexplored: int,
                          num_explored: int | None = None) -> tuple[int, int]:
    """``(num_explore, num_exploit)`` for one selection call.

    As in Oort: the exploit target is ``floor(num_to_pick * (1 - epsilon))``
    (capped by ``num_explored``), exploration takes the rest while unexplored
    clients last, and exploitation absorbs what exploration cannot fill. So a
    single pick explores while unexplored clients exist (REFERENCE.md
    "TierSelect": "exploration first"). The two may sum to less than
    ``num_to_pick`` only if the population is too small.
    """
    cap = num_to_pick if num_explored is None else min(num_to_pick, num_explored)
    exploit = min(int(np.floor(num_to_pick * (1.0 - epsilon))), cap)
    explore = min(num_unexplored, num_to_pick - exploit)
    exploit = min(num_to_pick - explore, cap)
    return explore, exploit


@dataclasses.dataclass(frozen=True)
class PacerState:
    threshold: float  # current T_pref percentile
    rounds: int = 0  # rounds recorded so far
    history: tuple[float, ...] = ()  # last 2 * step per-round exploitation utilities


@dataclasses.dataclass(frozen=True)
class Pacer:
    """Oort's pacer: relaxes ``T_pref`` when exploitation utility goes flat.

    Each round records the mean utility of the exploited clients that reported.
    Every ``step`` rounds (from round ``2 step`` on) it compares the sums over the
    last two windows: if they differ by at most ``flat_tolerance`` (10%) of the
    previous one, utility has stopped improving and the threshold rises by
    ``delta`` (capped at 100: more, slower clients become acceptable); if they
    differ by at least ``jump_factor`` (5x) times it, the threshold falls by
    ``delta`` (floored at ``delta``). Otherwise it stays.
    """

    step: int = 20
    delta: float = 5.0
    flat_tolerance: float = 0.1
    jump_factor: float | None = 5.0

    def init(self, threshold: float = 30.0) -> PacerState:
        return PacerState(float(threshold))

    def update(self, state: PacerState, round_utility: float) -> PacerState:
        history = (state.history + (float(round_utility),))[-2 * self.step:]
        rounds = state.rounds + 1
        threshold = state.threshold
        if rounds >= 2 * self.step and rounds % self.step == 0:
            previous, current = sum(history[: self.step]), sum(history[self.step:])
            change = abs(current - previous)
            if change <= self.flat_tolerance * previous:
                threshold = min(100.0, threshold + self.delta)
            elif self.jump_factor is not None and change >= self.jump_factor * previous:
                threshold = max(self.delta, threshold - self.delta)
        return PacerState(threshold, rounds, history)
