"""Oort's guided participant selection, as vectorised numpy (Lai et al., OSDI'21).

Pure host functions over per-client arrays; the selector in :mod:`.oort` keeps
the state and reads the client map. Formulas (the paper's reference settings "TierSelect" and
"Baselines"):

* exploit score = (U' + sqrt(0.1 ln(round) / last_round)) * system penalty, the
  penalty ``(T_pref / t_i)^alpha`` applying only to clients slower than ``T_pref``,
  ``T_pref`` the pacer's percentile of durations; ``U'`` is U clipped at the
  ``clip_bound`` order statistic, or, with ``normalize_utility``, Oort's rescaling
  ``(min(U, clip) - 0.999 lo) / (hi - 0.999 lo)`` over the positive rewards of the
  eligible clients (never-explored clients contribute their prior);
* exploitation samples, without replacement and proportionally to score, among
  clients scoring >= ``cut_off`` times the score at the exploit length (``exploit="sampled:M"``:
  among a uniform sample of M explored eligible clients, when more are eligible);
* exploration share ``epsilon`` = ``exploration_factor`` decayed per call to a
  floor; exploration is uniform, or (``explore_by_prior``) drawn by prior from the
  ``sample_window`` x explore-count never-explored clients with the largest prior
  (data size times system penalty).

:class:`OortConfig` holds every switch; :data:`OORT_VARIANTS` names the three
configurations (the FeLiX code's, FedScale's Oort and the Oort repository's).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, ClassVar, Mapping

import numpy as np

from ...cohort.stats import statistical_utility
from ...options import Range

__all__ = ["OORT_VARIANTS", "OortConfig", "Pacer", "PacerState", "order_statistic", "preferred_duration",
           "staleness_bonus", "system_penalty", "clip_utilities", "normalised_utilities", "oort_scores",
           "exploit_candidates", "sample_by_score", "epsilon_schedule", "split_explore_exploit",
           "exploration_prior", "exploration_window", "pacer_input", "statistical_utility",
           "exploit_sample_size"]

_SPLIT_ROUNDINGS = ("floor_exploit", "floor_explore", "binomial_explore")
_SHORTFALLS = ("exploit", "random")
_T_PREF_POPULATIONS = ("explored", "registered", "eligible_unsorted", "all_unsorted")
_PACER_RULES = ("oort", "raise_only_per_call")


@dataclasses.dataclass(frozen=True)
class OortConfig:
    """Every Oort switch, as plain fields (a scenario option ``selector.<field>=value`` sets one).

    The defaults, ``OortConfig()`` = ``OORT_VARIANTS["felix"]``, are FeLiX's train
    selector as the paper describes it (the paper's reference settings "TierSelect"), used by
    every strategy unless a scenario names another variant: epsilon 0.9 decayed by 0.98 per call
    from the first call on, floor 0.2, uniform exploration, raw (clipped) U plus
    the bonus, ``T_pref`` a percentile of the durations observed from explored clients, Oort's
    two-way pacer, exploitation absorbing what exploration cannot fill. The FeLiX *code* as it ran
    differs in T_pref (an unsorted pick), the pacer (raise-only, per call), the clip (none) and the
    cut-off (none for refills): the ``paper_code`` reading sets those fields (docs/readings.md).

    ``fedscale()`` is Oort as FedScale's ``thirdparty/oort`` runs it and
    ``original_repo()`` the Oort repository's ``oort/oort.py`` with that
    repository's argument defaults; each sets the switches that reproduce its
    code (values in the field comments: FeLiX / FedScale / Oort repository).

    Overcommit is not a selector setting: sync mode selects
    ``int(overcommit * K)`` clients with the scenario's ``overcommit``
    (FedScale 1.3, the Oort repository 1.1).
    """

    exploration_factor: float = 0.9  # initial epsilon: 0.9 / 0.9 / 0.9
    exploration_decay: float = 0.98  # epsilon *= decay per selection call: 0.98 / 0.98 / 0.95
    exploration_min: float = 0.2  # epsilon floor: 0.2 / 0.3 / 0.2
    # True: epsilon is decayed before its use, so call 0 uses 0.9 * 0.98 = 0.882 (FedScale, Oort repository).
    decay_before_use: bool = False
    round_threshold: float = 30.0  # initial T_pref percentile of durations: 30 / 30 / 10
    round_penalty: float = 2.0  # alpha of the system penalty
    pacer_step: int = 20  # selection rounds per pacer window
    pacer_delta: float = 5.0  # percentile points the pacer moves T_pref by
    clip_bound: float = 0.9  # U clipped at this order statistic: 0.9 / 0.9 / 0.98
    cut_off: float = 0.05  # exploit candidates score >= cut_off * score at exploit length: 0.05 / 0.05 / 0.7
    # Candidates past the cut-off are still kept until more than min_candidates_factor * exploit length
    # are kept: 0 / 10 (FedScale) / 0.
    min_candidates_factor: float = 0.0
    # "floor_exploit": exploit = floor(k (1 - epsilon)) (FeLiX, Oort repository);
    # "floor_explore": explore = floor(k epsilon), exploit = k - explore (FedScale).
    # "binomial_explore": explore ~ Binomial(k, epsilon), each requested client an exploration with
    # probability epsilon (same mean as k epsilon), exploit = k - explore (FedScale's Oort in async mode,
    # variant "fedscale_async": FedScale's split has no rule for small requests, and an async refill of
    # one or two clients would never explore once any client is explored).
    split_rounding: str = "floor_exploit"
    # When too few never-explored clients are eligible: "exploit" = exploitation takes the free slots
    # (FeLiX; FedScale, following the Oort paper where FedScale's code re-sends the previous call's explore
    # list); "random" = the free slots are filled uniformly from the eligible clients, and once no client is
    # left unexplored epsilon is 0 from the next call on (Oort repository).
    shortfall: str = "exploit"
    # False: explore uniformly among eligible never-explored clients (FeLiX). True: rank them by prior
    # (data size, capped at prior_cap) times system penalty, keep the top sample_window * explore count and
    # draw from those proportionally to prior times penalty, without replacement (FedScale, Oort repository).
    explore_by_prior: bool = False
    sample_window: float = 5.0
    # Cap of the prior reward of a never-explored client (the peers register min(size, local_steps *
    # batch_size)); None: the data size itself.
    prior_cap: int | None = None
    # T_pref population: "explored" = observed durations of explored clients (FeLiX); "registered" = every
    # client, its observed duration or else its registered (profile) one (FedScale, Oort repository).
    # The FeLiX code as it ran (docs/readings.md, A4): "eligible_unsorted" = the duration at position
    # int(n thr / 100) of the *unsorted* list, in client order, of the clients eligible now (async,
    # async_oort.py:480-523); "all_unsorted" = the same over every client (sync, oort.py:427-467); a client
    # never trained counts as ``unknown_duration_s`` in both.
    t_pref_over: str = "explored"
    unknown_duration_s: float = 60.0
    # "oort": Oort's two-way pacer, one record per aggregation round. "raise_only_per_call": the FeLiX
    # code's (A6, async_oort.py:396-418, 602-616, 1301): a record per selection call that exploited (the
    # mean current U of the exploited clients), checked at every call in every pacer_step-th round: the
    # threshold rises by pacer_delta when the sum of the older pacer_step records exceeds the newer's;
    # it never falls.
    pacer_rule: str = "oort"
    # False: U' = clipped U (FeLiX). True: Oort's normaliser, see normalised_utilities (FedScale, Oort repo).
    normalize_utility: bool = False
    abs_scores: bool = False  # exploit scores taken as |score| (FedScale)
    # "exact": exploitation scores every explored eligible client at each call (Oort's; O(explored eligible)
    # a call). "sampled:M": when more than max(M, exploit count) explored clients are eligible, it scores a
    # uniform sample of that many of them, drawn without replacement from the call's rng, and picks among
    # those only (T_pref, the pacer and everything else unchanged; the clip and the cut-off are then taken
    # over the sample); with as many or fewer it is "exact", the same picks and draws. An approximation
    # of Oort for fleets where scoring every explored client at every call is the host's cost.
    exploit: str = "exact"

    # epsilon and its floor are shares of a request (above 1 a call would pick more clients than asked);
    # round_threshold is a percentile; clip_bound an order statistic's rank as a fraction
    RANGES: ClassVar[Mapping[str, Range]] = {
        "exploration_factor": Range.fraction(), "exploration_decay": Range.fraction(),
        "exploration_min": Range.fraction(), "round_threshold": Range(0.0, 100.0),
        "round_penalty": Range.at_least(0), "pacer_step": Range.at_least(1), "pacer_delta": Range.at_least(0),
        "clip_bound": Range.fraction(), "cut_off": Range.fraction(), "min_candidates_factor": Range.at_least(0),
        "sample_window": Range.above(0), "prior_cap": Range.at_least(1), "unknown_duration_s": Range.above(0)}
    # what the string options accept, for ``run --list`` (OptionSpec.describe)
    HELP: ClassVar[Mapping[str, str]] = {
        "split_rounding": "floor_exploit | floor_explore | binomial_explore (how a call's k splits into "
                          "exploit and explore)",
        "shortfall": "exploit | random (who fills the slots exploration cannot)",
        "t_pref_over": "explored | registered | eligible_unsorted | all_unsorted (T_pref's population)",
        "pacer_rule": "oort | raise_only_per_call (how the pacer moves T_pref)",
        "exploit": "exact | sampled:M (exact scores every explored eligible client a call, sampled:M a uniform "
                   "sample of M of them when more are eligible: O(M) scoring, an approximation of Oort)"}

    def __post_init__(self):
        for name, allowed in (("split_rounding", _SPLIT_ROUNDINGS), ("shortfall", _SHORTFALLS),
                              ("t_pref_over", _T_PREF_POPULATIONS), ("pacer_rule", _PACER_RULES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"OortConfig.{name} must be one of {allowed}, not {getattr(self, name)!r}")
        if self.sample_window <= 0:
            raise ValueError("OortConfig.sample_window must be > 0")
        if not (self.unknown_duration_s > 0 and np.isfinite(self.unknown_duration_s)):
            raise ValueError("OortConfig.unknown_duration_s must be a finite number of seconds > 0")
        exploit_sample_size(self.exploit)  # raises on anything but "exact" or "sampled:M"

    @property
    def exploit_sample(self) -> int | None:
        """``M`` of ``exploit="sampled:M"``; ``None`` for ``"exact"``."""
        return exploit_sample_size(self.exploit)

    @classmethod
    def felix(cls, **overrides) -> "OortConfig":
        """The FeLiX code's train selector (the defaults)."""
        return cls(**overrides)

    @classmethod
    def fedscale(cls, **overrides) -> "OortConfig":
        """Oort as FedScale's ``thirdparty/oort/oort.py`` runs it, FedScale's defaults.

        One deliberate difference: when too few never-explored clients are
        eligible, exploitation fills the free slots (the Oort paper) where
        FedScale's code re-sends the previous call's explore list.
        """
        return cls(**{"exploration_min": 0.3, "decay_before_use": True, "min_candidates_factor": 10.0,
                      "split_rounding": "floor_explore", "shortfall": "exploit", "explore_by_prior": True,
                      "t_pref_over": "registered", "normalize_utility": True, "abs_scores": True, **overrides})

    @classmethod
    def fedscale_async(cls, **overrides) -> "OortConfig":
        """FedScale's Oort for async refills: :meth:`fedscale` with ``split_rounding="binomial_explore"``.

        FedScale's code splits a request of ``k`` clients as ``explore = int(k * epsilon)``, with
        no case for small ``k`` (its Oort serves sync rounds of ``k >= K``). An async server
        refills one or two slots per call, where that split explores nothing once any client has
        been explored (driven directly: 39 of 300 clients explored after 1,500 replies). Here each
        requested client is an exploration with probability ``epsilon``: the same expected share
        as ``k * epsilon``, at any ``k``. Sync runs keep :meth:`fedscale`, the authors' split.
        """
        return cls.fedscale(**{"split_rounding": "binomial_explore", **overrides})

    @classmethod
    def original_repo(cls, **overrides) -> "OortConfig":
        """The Oort repository's ``oort/oort.py`` with its argument defaults."""
        return cls(**{"exploration_decay": 0.95, "exploration_min": 0.2, "decay_before_use": True,
                      "round_threshold": 10.0, "clip_bound": 0.98, "cut_off": 0.7,
                      "split_rounding": "floor_exploit", "shortfall": "random", "explore_by_prior": True,
                      "t_pref_over": "registered", "normalize_utility": True, **overrides})

    def pacer(self) -> "Pacer":
        return Pacer(step=self.pacer_step, delta=self.pacer_delta)


_SAMPLED = re.compile(r"sampled:([0-9]+)")


def exploit_sample_size(exploit) -> int | None:
    """``M`` of ``"sampled:M"`` (M an integer >= 1), ``None`` of ``"exact"``; a one-line ``ValueError`` for
    anything else."""
    if exploit == "exact":
        return None
    match = _SAMPLED.fullmatch(exploit) if isinstance(exploit, str) else None
    if match is None or int(match.group(1)) < 1:
        raise ValueError(f"OortConfig.exploit must be 'exact' or 'sampled:M' with M an integer >= 1 "
                         f"(e.g. 'sampled:4096'), not {exploit!r}")
    return int(match.group(1))


#: Named Oort configurations; each constructor accepts field overrides.
OORT_VARIANTS: dict[str, Callable[..., OortConfig]] = {
    "felix": OortConfig.felix,
    "fedscale": OortConfig.fedscale,
    "fedscale_async": OortConfig.fedscale_async,
    "original_repo": OortConfig.original_repo,
}


def order_statistic(values, q: float) -> float:
    """``sorted(values)[min(floor(n q), n - 1)]``; NaN when empty. By a partition, O(n): the same value as
    the sort gives (NaNs go last in both), without ordering the rest."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        return float("nan")
    i = min(int(np.floor(v.size * q)), v.size - 1)
    return float(np.partition(v, i)[i])


def preferred_duration(durations, round_threshold_percent: float) -> float:
    """``T_pref = sorted(d)[min(int(n * threshold / 100), n - 1)]``; ``inf`` at >= 100 or when empty.

    The index is computed as Oort's code does (``n * threshold`` first), which
    differs from ``floor(n * (threshold / 100))`` at some float edges, e.g. n = 180
    at 35%: index 63, not 62.
    """
    d = np.asarray(durations, dtype=np.float64).ravel()
    i = _t_pref_index(d.size, round_threshold_percent)
    return float("inf") if i is None else float(np.partition(d, i)[i])  # sorted(d)[i] in O(n)


def preferred_duration_sorted(durations, round_threshold_percent: float) -> float:
    """:func:`preferred_duration` of durations already in ascending order: one lookup."""
    i = _t_pref_index(len(durations), round_threshold_percent)
    return float("inf") if i is None else float(durations[i])


def _t_pref_index(n: int, round_threshold_percent: float) -> int | None:
    if round_threshold_percent >= 100.0 or n == 0:
        return None
    return min(int(n * float(round_threshold_percent) / 100.0), n - 1)


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
    """``(T_pref / max(t_i, 1e-4))^alpha`` for clients with ``t_i > T_pref``, else 1.

    An unknown duration (NaN) is not penalised.
    """
    t = np.asarray(durations, dtype=np.float64)
    slow = t > t_pref
    ratio = np.where(slow, t_pref / np.maximum(np.where(slow, t, 1.0), 1e-4), 1.0)
    return ratio ** alpha


def clip_utilities(utility, clip_bound: float = 0.9) -> np.ndarray:
    """``min(U_i, order_statistic(U, clip_bound))`` so a few outliers cannot dominate."""
    u = np.asarray(utility, dtype=np.float64)
    return u if u.size == 0 else np.minimum(u, order_statistic(u, clip_bound))


def normalised_utilities(utility, population, clip_bound: float) -> np.ndarray:
    """Oort's normaliser: ``(min(U, clip) - 0.999 lo) / max(hi - 0.999 lo, 1e-4)``.

    ``clip`` (the ``clip_bound`` order statistic), ``lo`` and ``hi`` are taken over
    the positive values of ``population`` only (in Oort: the rewards of all eligible
    clients, never-explored ones contributing their prior). With no positive value
    the utilities are returned unchanged.
    """
    u = np.asarray(utility, dtype=np.float64)
    pop = np.asarray(population, dtype=np.float64).ravel()
    pop = pop[pop > 0]
    if pop.size == 0:
        return u
    lo = 0.999 * float(pop.min())
    span = max(float(pop.max()) - lo, 1e-4)
    return (np.minimum(u, order_statistic(pop, clip_bound)) - lo) / span


def oort_scores(utility, last_round, current_round: int, durations, t_pref: float, alpha: float = 2.0,
                clip_bound: float = 0.9, normalize_utility: bool = False, population=None) -> np.ndarray:
    """Exploitation scores of explored clients (arrays (N,), same client order).

    ``(U' + staleness_bonus) * system_penalty``: ``U'`` is U clipped at its own
    ``clip_bound`` order statistic, or with ``normalize_utility``
    :func:`normalised_utilities` over ``population`` (default: ``utility``).
    """
    u = np.asarray(utility, dtype=np.float64)
    if normalize_utility:
        uc = normalised_utilities(u, u if population is None else population, clip_bound)
    else:
        uc = clip_utilities(u, clip_bound)
    return (uc + staleness_bonus(current_round, last_round)) * system_penalty(durations, t_pref, alpha)


def exploit_candidates(scores, num_to_pick: int, cut_off: float = 0.05, min_factor: float = 0.0) -> np.ndarray:
    """Indices of exploit candidates, best first (ties by index).

    A client qualifies when it scores >= ``cut_off * ref``, ``ref`` being the score
    at the exploit length, ``sorted_desc[min(num_to_pick, n - 1)]`` (so for
    ``cut_off <= 1`` at least ``num_to_pick`` qualify). With ``min_factor > 0`` the
    ranking is taken further, past the cut-off, until more than
    ``min_factor * num_to_pick`` candidates are kept (FedScale: 10).
    """
    s = np.asarray(scores, dtype=np.float64)
    if num_to_pick <= 0 or s.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(s.size), -s))
    ref = s[order[min(num_to_pick, s.size - 1)]]
    count = int(np.count_nonzero(s >= cut_off * ref))
    if min_factor > 0:
        count = max(count, int(np.floor(min_factor * num_to_pick)) + 1)
    return order[:min(count, s.size)]


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


# An exploiting call at or above this many scored clients, picking at most _FAST_PICKS, draws by weighted
# selection (no sort of every score); below, by the sort (the same picks either way).
_FAST_MIN_SCORED = 2048
_FAST_PICKS = 8
_EPS = 2.0 ** -53


def exploit_pick(rng: np.random.Generator, scores, num_to_pick: int, cut_off: float = 0.05,
                 min_factor: float = 0.0) -> np.ndarray:
    """Indices (into ``scores``) of the exploited clients: exactly
    ``sample_by_score(rng, c, scores, min(num_to_pick, len(c)))`` with
    ``c = exploit_candidates(scores, num_to_pick, cut_off, min_factor)``, the same picks and the same
    draws from ``rng``.

    Many scores and few picks (an async refill) are drawn without sorting every score, which costs
    O(n log n) at every call: numpy's weighted draw without replacement (``rng.choice`` with ``p``) picks
    the first candidate, in rank order, whose cumulative weight exceeds ``x`` times the total (``x``
    uniform). That candidate is found by splitting the scores at their median, again and again,
    keeping the half where the cumulative weight crosses ``x``: O(n) in all. The floating-point sums
    differ from numpy's running sum by at most a few ``n`` ulps, so a draw within that distance of a
    boundary between two candidates (probability about ``n^2`` ulps) is redone the sorted way, from
    the generator's state before the call.
    """
    s = np.asarray(scores, dtype=np.float64)
    n = s.size
    k_max = min(int(num_to_pick), n)
    if (n < _FAST_MIN_SCORED or num_to_pick <= 0 or k_max > _FAST_PICKS or not np.isfinite(s).all()):
        return _exploit_pick_sorted(rng, s, num_to_pick, cut_off, min_factor)
    state = rng.bit_generator.state
    picked = _exploit_pick_by_selection(rng, s, int(num_to_pick), cut_off, min_factor)
    if picked is None:  # a draw too near a boundary (or a case the selection leaves to the sort)
        rng.bit_generator.state = state
        return _exploit_pick_sorted(rng, s, num_to_pick, cut_off, min_factor)
    return picked


def _exploit_pick_sorted(rng, s, num_to_pick, cut_off, min_factor) -> np.ndarray:
    candidates = exploit_candidates(s, num_to_pick, cut_off, min_factor)
    return sample_by_score(rng, candidates, s, min(num_to_pick, len(candidates)))


def _exploit_pick_by_selection(rng, s, m, cut_off, min_factor) -> np.ndarray | None:
    n = s.size
    r = min(m, n - 1)
    ref = np.partition(s, n - 1 - r)[n - 1 - r]  # the score at descending rank r (the sort's ref)
    candidate = s >= cut_off * ref
    count = int(np.count_nonzero(candidate))
    if min_factor > 0 and count <= int(np.floor(min_factor * m)):
        # more than min_factor x m: the first `count` in (score descending, index) order
        count = min(int(np.floor(min_factor * m)) + 1, n)
        v = np.partition(s, n - count)[n - count]  # the lowest candidate's score
        candidate = s > v
        ties = np.flatnonzero(s == v)[:count - int(np.count_nonzero(candidate))]  # by index, as the sort keeps them
        candidate[ties] = True
    k = min(m, count)
    positive = candidate & (s > 0)
    ids = np.flatnonzero(positive)
    if ids.size < k:  # non-positive candidates drawn too: the sorted way
        return None
    sp = s[ids]
    wp = sp.copy()  # the weights; a drawn candidate's goes to 0
    total = float(wp.sum())
    if not (np.isfinite(total) and total > 0) or float(wp.min()) < 1e-290 * total:
        return None
    margin = (8.0 * ids.size + 64.0) * _EPS  # relative: numpy's running sums and these sums, with room
    found: list[int] = []
    while len(found) < k:  # numpy's loop: draws for the missing picks, first occurrences kept
        xs = rng.random(k - len(found))
        remaining = float(wp.sum())
        new = []
        for x in xs.tolist():
            hit = _first_over(sp, ids, wp, x * remaining, margin * remaining)
            if hit is None:
                return None
            if hit not in new:
                new.append(hit)
        for hit in new:
            found.append(hit)
            wp[np.searchsorted(ids, hit)] = 0.0  # drawn: weight 0 from the next draws on
    return np.asarray(found, dtype=np.int64)


def _first_over(s, ids, w, t: float, margin: float) -> int | None:
    """The id of the first entry, in (``s`` descending, ``ids``) order, whose cumulative weight ``w``
    exceeds ``t``; None when ``t`` lies within ``margin`` of a cumulative weight at that entry."""
    base = 0.0
    while s.size > 512:
        sample = s[::max(1, s.size // 255)]  # a pivot near the median, from a strided sample (no draw)
        pivot = np.partition(sample, sample.size // 2)[sample.size // 2]
        hi = s > pivot
        above = float(w[hi].sum())
        if base + above > t:
            s, ids, w = s[hi], ids[hi], w[hi]
            continue
        eq = s == pivot
        level = float(w[eq].sum())
        if base + above + level > t:  # within the entries that tie with the pivot: by id
            base += above
            s, ids, w = s[eq], ids[eq], w[eq]
            break
        base += above + level
        lo = s < pivot
        s, ids, w = s[lo], ids[lo], w[lo]
    order = np.lexsort((ids, -s))
    cum = base + np.cumsum(w[order])
    j = int(np.searchsorted(cum, t, side="right"))
    if j == cum.size:
        return None
    before = float(cum[j - 1]) if j else base
    if t - before <= margin or float(cum[j]) - t <= margin:
        return None
    return int(ids[order[j]])


def epsilon_schedule(call: int, epsilon0: float = 0.9, decay: float = 0.98, floor: float = 0.2,
                     decay_before_use: bool = False) -> float:
    """Epsilon at selection call ``call`` (0-based): ``max(floor, epsilon0 * decay^c)``.

    ``c = call``, or ``call + 1`` with ``decay_before_use`` (Oort's code decays
    before the first use: 0.882 at call 0 with 0.9 and 0.98).
    """
    return max(floor, epsilon0 * decay ** (int(call) + int(bool(decay_before_use))))


def split_explore_exploit(num_to_pick: int, epsilon: float, num_unexplored: int,
                          num_explored: int | None = None, rounding: str = "floor_exploit",
                          absorb: bool = True, explore_draw: int | None = None) -> tuple[int, int]:
    """``(num_explore, num_exploit)`` for one selection call.

    Exploit target: ``floor(k (1 - epsilon))`` (``rounding="floor_exploit"``),
    ``k - floor(k epsilon)`` (``"floor_explore"``) or ``k - explore_draw``
    (``"binomial_explore"``: the caller draws ``explore_draw ~ Binomial(k, epsilon)``),
    capped by ``num_explored``;
    exploration takes the rest while unexplored clients last. With ``absorb``,
    exploitation then takes what exploration cannot fill (still capped), so with
    ``"floor_exploit"`` a single pick explores while unexplored clients exist. The
    two may sum to less than ``k`` if the population is too small or, without
    ``absorb``, when unexplored clients run short.
    """
    cap = num_to_pick if num_explored is None else min(num_to_pick, num_explored)
    if rounding == "floor_exploit":
        target = int(np.floor(num_to_pick * (1.0 - epsilon)))
    elif rounding == "floor_explore":
        target = num_to_pick - int(np.floor(num_to_pick * epsilon))
    elif rounding == "binomial_explore":
        if explore_draw is None or not 0 <= explore_draw <= num_to_pick:
            raise ValueError(f"binomial_explore needs explore_draw in [0, {num_to_pick}], got {explore_draw}")
        target = num_to_pick - int(explore_draw)
    else:
        raise ValueError(f"unknown split rounding {rounding!r}")
    exploit = min(target, cap)
    explore = min(num_unexplored, num_to_pick - exploit)
    if absorb:
        exploit = min(num_to_pick - explore, cap)
    return explore, exploit


def exploration_prior(num_samples, durations, t_pref: float, alpha: float = 2.0,
                      prior_cap: int | None = None) -> np.ndarray:
    """Prior reward of never-explored clients: ``min(size, prior_cap) * system_penalty``."""
    size = np.asarray(num_samples, dtype=np.float64)
    if prior_cap is not None:
        size = np.minimum(size, float(prior_cap))
    return size * system_penalty(durations, t_pref, alpha)


def exploration_window(prior, num_explore: int, sample_window: float = 5.0) -> np.ndarray:
    """Indices of the ``min(int(sample_window * num_explore), n)`` largest priors, best first (ties by index).

    Never fewer than ``num_explore`` (when that many exist).
    """
    p = np.asarray(prior, dtype=np.float64)
    size = min(max(int(sample_window * num_explore), num_explore), p.size)
    return np.lexsort((np.arange(p.size), -p))[:size]


def pacer_input(utilities) -> float:
    """One pacer record: ``sum(U) / (count + 1e-4)`` over the exploited clients that reported (Oort's code)."""
    u = np.asarray(utilities, dtype=np.float64)
    return float(u.sum() / (u.size + 1e-4))


@dataclasses.dataclass(frozen=True)
class PacerState:
    threshold: float  # current T_pref percentile
    rounds: int = 0  # records so far
    history: tuple[float, ...] = ()  # last 2 * step records


@dataclasses.dataclass(frozen=True)
class Pacer:
    """Oort's pacer: relaxes ``T_pref`` when exploitation utility goes flat.

    Each record is one :func:`pacer_input`. After every ``step``-th record (from
    record ``2 step`` on) it compares the sums over the last two windows: if they
    differ by at most ``flat_tolerance`` (10%) of the previous one, the threshold
    rises by ``delta`` (capped at 100); if they differ by at least ``jump_factor``
    (5x) times it, the threshold falls by ``delta`` (floored at ``delta``).
    Otherwise it stays.
    """

    step: int = 20
    delta: float = 5.0
    flat_tolerance: float = 0.1
    jump_factor: float | None = 5.0

    def init(self, threshold: float = 30.0) -> PacerState:
        return PacerState(float(threshold))

    def record(self, state: PacerState, utility: float) -> PacerState:
        """The raise-only pacer's record (no decision): the last ``2 step`` records are kept."""
        return PacerState(state.threshold, state.rounds + 1, (state.history + (float(utility),))[-2 * self.step:])

    def raise_only(self, state: PacerState) -> PacerState:
        """The FeLiX code's check (async_oort.py:396-418): with ``2 step`` records, the threshold rises by
        ``delta`` (capped at 100) when the older ``step`` records sum to more than the newer ``step``;
        it never falls."""
        if len(state.history) < 2 * self.step:
            return state
        previous, current = sum(state.history[-2 * self.step:-self.step]), sum(state.history[-self.step:])
        if previous > current:
            return dataclasses.replace(state, threshold=min(100.0, state.threshold + self.delta))
        return state

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
