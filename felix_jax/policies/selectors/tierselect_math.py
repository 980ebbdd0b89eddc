"""TierSelect's eval selector as vectorised numpy (FeLiX paper Sec. 3.3, Algorithm 2).

the paper's reference settings "TierSelect": eval tasks go to clients that trained at least once,
are in ``AVL_TRAIN`` or ``AVL_EVAL``, are not busy with a task, and whose
utility is at least ``min_age`` rounds old (35 in the code), stalest first; at
most ``e = int(1.5 K)`` eval tasks per aggregation round (15 at K = 10). The
train selector reuses :mod:`oort_math`.
"""

from __future__ import annotations

import numpy as np

from ...traces.availability import Tier

__all__ = ["DEFAULT_MIN_AGE", "eval_budget", "eval_eligible", "select_for_eval", "select_for_eval_in_order"]

DEFAULT_MIN_AGE = 35  # rounds, the FeLiX code


def eval_budget(k: int, factor: float = 1.5) -> int:
    """``e = int(factor * K)``: eval tasks allowed per aggregation round."""
    return int(factor * k)


def eval_eligible(trained_once, tier, busy, utility_round, current_round: int,
                  min_age: int = DEFAULT_MIN_AGE) -> np.ndarray:
    """(N,) bool: may receive an eval task now."""
    tier = np.asarray(tier)
    available = (tier == int(Tier.AVL_TRAIN)) | (tier == int(Tier.AVL_EVAL))
    old_enough = current_round - np.asarray(utility_round) >= min_age
    return np.asarray(trained_once, dtype=bool) & available & ~np.asarray(busy, dtype=bool) & old_enough


def select_for_eval(trained_once, tier, busy, utility_round, current_round: int, budget: int,
                    min_age: int = DEFAULT_MIN_AGE) -> np.ndarray:
    """At most ``budget`` eligible client ids, stalest utility first, ties by id.

    ``utility_round`` is each client's ``last_utility_round`` (round/version of
    its latest utility report); all arrays are (N,) indexed by client id.
    """
    idx = np.flatnonzero(eval_eligible(trained_once, tier, busy, utility_round, current_round, min_age))
    order = np.lexsort((idx, np.asarray(utility_round)[idx]))
    return idx[order][: max(int(budget), 0)]


def select_for_eval_in_order(staleness_keys, tier, busy, current_round: int, budget: int,
                             min_age: int = DEFAULT_MIN_AGE) -> np.ndarray:
    """:func:`select_for_eval` over the trained clients given in staleness order.

    ``staleness_keys``: ascending keys ``utility_round * N + id`` of the clients that trained at
    least once (``N = len(tier)``), as ``ClientMap.staleness_order`` keeps them. The old-enough
    clients are a prefix of that order; it is read in growing chunks until ``budget`` of them are
    available and idle, so the cost is the clients passed over plus the budget, not the number
    of clients that trained. Same ids, in the same order, as ``select_for_eval``.
    """
    # an int64 array or the view's SortedSequence: only its length, slices and searchsorted are read
    keys = staleness_keys if hasattr(staleness_keys, "searchsorted") else np.asarray(staleness_keys, np.int64)
    n = np.int64(len(tier))
    budget = max(int(budget), 0)
    # in Python ints, then clipped to the keys' int64: a min_age near int64's top must not wrap around
    first_too_young = (int(current_round) - int(min_age) + 1) * int(n)
    old_enough = int(keys.searchsorted(min(max(first_too_young, -2 ** 63), 2 ** 63 - 1), side="left"))
    picked, found, start, chunk = [], 0, 0, max(2 * budget, 256)
    while found < budget and start < old_enough:
        rounds, ids = np.divmod(np.asarray(keys[start:min(start + chunk, old_enough)], np.int64), n)
        ok = ids[eval_eligible(True, tier[ids], busy[ids], rounds, current_round, min_age)]
        picked.append(ok[:budget - found])
        found += len(picked[-1])
        start += chunk
        chunk *= 2
    return np.concatenate(picked) if picked else np.zeros(0, np.int64)
