"""What a run hands between its parts: a test :class:`Checkpoint` (the simulator writes it, results
and snapshots read it) and an :class:`Update` waiting in the aggregation buffer (the simulator, the
modes and snapshots). Plain records, with no behaviour, so that none of those modules needs another
to know them."""

from __future__ import annotations

import dataclasses

from .executor import TrainOutcome
from .tasks import Task


@dataclasses.dataclass
class Update:
    """A training reply waiting in the aggregation buffer."""

    task: Task
    outcome: TrainOutcome
    staleness: int
    # the client's statistical utility as its reply left it (TierFuse's U: the update's own, not one recorded
    # later by an eval reply or its next task); None in a snapshot written before it was kept (the view's then)
    utility: float | None = None


@dataclasses.dataclass
class Checkpoint:
    time_s: float
    version: int
    accuracy: float
    loss: float
    bytes_total: int
    staleness_mean: float
    interval_s: float
