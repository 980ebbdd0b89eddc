"""Staleness helpers shared by the buffered aggregators (host side, numpy).

Staleness ``tau`` is the server version at arrival minus the version the client
trained from (the paper's reference settings "Async runs"); 0 means fresh.
"""

from __future__ import annotations

import numpy as np


def drop_beyond(weights: np.ndarray, staleness: np.ndarray, max_staleness: int | None) -> np.ndarray:
    """Zero the weight of updates with ``staleness > max_staleness`` (``None``: keep all).

    The FedScale FedBuff variant uses 5 (the paper's reference settings "Baselines"); TierFuse's
    ``T_max`` drop (paper Sec. 3.4) and REFL's stale threshold use it too.
    """
    weights = np.asarray(weights, dtype=np.float64)
    if max_staleness is None:
        return weights
    return np.where(np.asarray(staleness) > max_staleness, 0.0, weights)
