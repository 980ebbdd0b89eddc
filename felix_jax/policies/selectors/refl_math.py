"""REFL's intelligent participant selection (IPS; Abdelmoniem et al., EuroSys'23), vectorised.

the paper's reference settings "Baselines": IPS gives priority to clients that will leave within
the next window ``[t, t + W]``; the "predictor" is the availability trace,
optionally degraded to 90% accuracy. The lead passes the oracle arrays (e.g.
from ``AvailabilityTrace.next_change_after``); everything here is pure numpy.

Two ways to degrade the oracle:

* :func:`thin_predictions` (default): each prediction is wrong with probability
  ``1 - accuracy`` (a predictor with per-client accuracy ``accuracy``);
* :func:`subsample_groups` (REFL's code): a random ``1 - accuracy`` share of the
  priority group and of the rest is left out of the candidate pool this round.

Adaptive selection size (:func:`adaptive_selection_size`) follows REFL's code:
select fewer fresh clients by the number of stale updates expected to land
within the round.
"""

from __future__ import annotations

import numpy as np

from ...traces.availability import Tier

__all__ = ["will_leave_within", "thin_predictions", "subsample_groups", "ips_order", "adaptive_selection_size"]


def will_leave_within(t: float, window: float, next_change_time, next_state) -> np.ndarray:
    """Clients whose next tier change, within ``(t, t + window]``, takes them out of ``AVL_TRAIN``.

    ``next_change_time`` / ``next_state``: (N,) from the oracle trace (time ``inf``
    where no change comes). Meant for clients that can train now.
    """
    time = np.asarray(next_change_time, dtype=np.float64)
    return (time <= t + window) & (np.asarray(next_state) != int(Tier.AVL_TRAIN))


def thin_predictions(rng: np.random.Generator, will_leave, accuracy: float = 0.9) -> np.ndarray:
    """Flip each boolean prediction independently with probability ``1 - accuracy``."""
    pred = np.asarray(will_leave, dtype=bool)
    if accuracy >= 1.0:
        return pred.copy()
    return pred ^ (rng.random(pred.shape) >= accuracy)


def subsample_groups(rng: np.random.Generator, will_leave, accuracy: float = 0.9) -> np.ndarray:
    """REFL code's degradation: keep ``floor(accuracy * size)`` random members of each group.

    Returns the (N,) bool mask of clients kept as candidates.
    """
    pred = np.asarray(will_leave, dtype=bool)
    keep = np.zeros(pred.shape, dtype=bool)
    for group in (pred, ~pred):  # two groups, not a loop over clients
        idx = np.flatnonzero(group)
        chosen = rng.permutation(idx)[: int(np.floor(accuracy * idx.size + 1e-9))]
        keep[chosen] = True
    return keep


def ips_order(rng: np.random.Generator, priority, eligible=None) -> np.ndarray:
    """Client indices, priority clients first, random order within each group.

    ``eligible`` (bool (N,), default all) drops the rest; the selector takes a
    prefix of the result.
    """
    prio = np.asarray(priority, dtype=bool)
    idx = np.arange(prio.size) if eligible is None else np.flatnonzero(np.asarray(eligible, dtype=bool))
    order = np.lexsort((rng.random(idx.size), ~prio[idx]))
    return idx[order]


def adaptive_selection_size(target: int, expected_stale_arrivals: int, min_fraction: float | None = None) -> int:
    """Fresh clients to select when stale updates will also arrive this round.

    REFL's rule: ``max(1, target - stale)``, or with a cap
    ``max(ceil(min_fraction * target), target - stale)``.
    """
    reduced = int(target) - max(int(expected_stale_arrivals), 0)
    floor = 1 if min_fraction is None else int(np.ceil(min_fraction * target))
    return max(floor, reduced)
