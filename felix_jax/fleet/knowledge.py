"""What the server knows about availability (docs/architecture.md).

- ``none``: learns only from replies (client is AVL_TRAIN) and timeouts (UN_AVL);
  a task sent to an unavailable client waits for it.
- ``oracle``: reads the true trace whenever it decides (the paper's starred
  baselines, e.g. OORT*).
- ``tiertrack``: every client notifies each tier change (FeLiX's TierTrack); the
  view equals the truth, and each notification is a control message. A client
  running a task that leaves its tier is dropped from the in-flight set at once.

``refresh_view`` and ``notifications_between`` recompute from the whole trace
(the reference); :class:`ViewTracker` keeps the same view and counts from the
tier changes that happen between two events only (docs/architecture.md "The server view at
scale"), at O(changes + log N) per event.
"""

from __future__ import annotations

import enum

import numpy as np

from ..traces import AvailabilityTrace, Tier
from ..traces.availability import ChangeCursor
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
    view.set_tier(slice(None), tier, now)


def notifications_between(trace: AvailabilityTrace, t0: float, t1: float) -> int:
    """TierTrack control messages in (t0, t1]: one per real tier change of any client."""
    if t1 <= t0:
        return 0
    clients, _, _ = trace.changes_between(t0, t1)
    return int(len(clients))


def unique_ids(ids: np.ndarray, n: int) -> np.ndarray:
    """``np.unique(ids)`` for client ids in ``[0, n)``: by an (n,) mask when they are many (a slot
    boundary that flips millions of clients: one pass, no hash or sort)."""
    if ids.size * 16 < n:
        return np.unique(ids)
    mask = np.zeros(n, dtype=bool)
    mask[ids] = True
    return np.flatnonzero(mask)


class ViewTracker:
    """Incremental ``refresh_view`` / ``notifications_between`` for one run.

    A :class:`~felix_jax.traces.availability.ChangeCursor` walks the trace's
    changes in time order; a refresh at ``now`` sets, for the clients that changed
    since the last refresh only, ``view.tier = trace.state_at(now)`` (folded as
    ``refresh_view`` folds it), so the view equals the full recomputation at every
    refresh. Under ``none`` it does nothing. The first refresh (of a run, or of a
    run restored from a snapshot) recomputes the whole view once.

    The cursor starts at ``start_t`` on first use: the time notifications were last
    counted up to (TierTrack), so that the changes a restored run has not counted
    yet are still counted; it holds no state a snapshot needs.
    """

    def __init__(self, knowledge: Knowledge, trace: AvailabilityTrace, sees_eval_tier: bool):
        self.knowledge, self.trace, self.sees_eval_tier = knowledge, trace, sees_eval_tier
        self._cursor: ChangeCursor | None = None
        self._synced = False  # the view has had its one full recomputation
        self._dirty: list[np.ndarray] = []  # clients that changed since the last refresh (counted meanwhile)
        self._counted = 0  # cursor changes already reported as notifications

    def _advance(self, now: float, start_t: float) -> np.ndarray:
        if self._cursor is None:  # only TierTrack counts changes from before its first use
            start = min(start_t, now) if self.knowledge is Knowledge.TIERTRACK else now
            self._cursor = self.trace.change_cursor(start)
        return self._cursor.advance(now)

    def refresh(self, view: ClientMap, now: float, start_t: float) -> None:
        """Brings ``view.tier`` up to date at ``now`` (as ``refresh_view`` would)."""
        if self.knowledge is Knowledge.NONE:
            return
        changed = self._advance(now, start_t)
        if not self._synced:
            refresh_view(self.knowledge, view, self.trace, now, self.sees_eval_tier)
            self._synced, self._dirty = True, []
            return
        if self._dirty:
            changed = np.concatenate([*self._dirty, changed])
            self._dirty = []
        if not changed.size:
            return
        if changed.size * 4 >= view.num_clients:  # a slot boundary that flips a good share of the fleet:
            refresh_view(self.knowledge, view, self.trace, now, self.sees_eval_tier)  # whole-array passes
            return
        clients = unique_ids(changed, view.num_clients)
        tier = self.trace.state_at(now, clients)
        if not self.sees_eval_tier:
            tier = np.where(tier == Tier.AVL_EVAL, np.int8(Tier.UN_AVL), tier)
        view.set_tier(clients, tier, now)

    def notifications(self, now: float, start_t: float) -> int:
        """Tier changes since the last call (or since ``start_t``): TierTrack's control messages."""
        changed = self._advance(now, start_t)
        if self._synced and changed.size:
            self._dirty.append(changed)
        n = self._cursor.consumed - self._counted
        self._counted = self._cursor.consumed
        return n

    def next_change(self, now: float, start_t: float) -> float:
        """Time of the next tier change of any client after ``now`` (``inf`` if none)."""
        changed = self._advance(now, start_t)
        if self._synced and changed.size:
            self._dirty.append(changed)
        return self._cursor.peek_time()
