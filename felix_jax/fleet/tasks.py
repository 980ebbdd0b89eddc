"""Task records and the time/bytes a task costs (host side)."""

from __future__ import annotations

import dataclasses

from .lifecycle import Timeline


@dataclasses.dataclass
class Task:
    task_id: int
    client: int
    kind: str  # "train" | "eval"
    version: int  # model version it starts from
    round: int  # aggregation round it was dispatched in
    dispatch_s: float
    work_s: float  # download + compute + upload, as the client reports it
    timeline: Timeline
    in_flight: bool = True  # counts toward the concurrency / round quota
    replied: bool = False
    timed_out: bool = False
    # client streams: the newest ground-truth label in the data it trains on (s), and the share of
    # its samples with proxy labels (static data: 0, 0)
    label_time_s: float = 0.0
    proxy_fraction: float = 0.0
    # interruption=partial: the local steps the task's update holds when its client left before the rest
    # (lifecycle.partial_work), of the full_steps its client would have run; None: all of them
    steps: int | None = None
    full_steps: int = 0
