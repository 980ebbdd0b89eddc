"""What the server knows about availability (DESIGN.md layer 4).

- ``none``: learns only from replies (client is AVL_TRAIN) and timeouts (UN_AVL);
  a task sent to an unavailable client waits for it.
- ``oracle``: reads the true trace whenever it decides (the paper's starred
  baselines, e.g. OORT*).
- ``tiertrack``: every client notifies each tier change (FeLiX's TierTrack); the
  view equals the truth, and each notification is a control message. A client
  running a task that leaves its tier is dropped from the in-flight set at once.
"""

from __future__ import annotations

import enum

import numpy as np

from ..traces import AvailabilityTrace, Tier
from .clientmap import ClientMap


class Knowledge(str, enum.Enum):
    NONE = "none"
    ORACLE = "oracle"
    TIERTRACK = "tiertrack"


def refresh_view(knowledge: Knowledge, view: ClientMap, trace: AvailabilityTrace, now: float,
                 sees_eval_tier: bool) -> None:
    """Brings ``view.tier`` up to date at ``now`` (no-op for ``none``).

    ``sees_eval_tier=False`` folds AVL_EVAL into UN_AVL, for strategies that have
    no eval selector (only an eval selector may use AVL_EVAL clients).
    """
    if knowledge is Knowledge.NONE:
        return
    tier = trace.state_at(now)
    if not sees_eval_tier:
        tier = np.where(tier == Tier.AVL_EVAL, Tier.UN_AVL, tier)
    view.tier[:] = tier


def notifications_between(trace: AvailabilityTrace, t0: float, t1: float) -> int:
    """TierTrack control messages in (t0, t1]: one per real tier change of any client."""
    if t1 <= t0:
        return 0
    clients, _, _ = trace.changes_between(t0, t1)
    return int(len(clients))
