"""The virtual-time event queue: deterministic ordering by (time, sequence number)."""

from __future__ import annotations

import enum
import heapq
from typing import Any, NamedTuple


class EventKind(enum.IntEnum):
    REPLY = 0  # a task's result reaches the server
    CLIENT_LEFT = 1  # a client running a task left its tier (TierTrack notification)
    TIMEOUT = 2  # the server's per-task timer fired
    WAKE = 3  # availability may have changed: retry selection
    SERVED = 4  # a serial server finished processing the reply at the head of its queue (fleet/reading.py)
    SERVER_FREE = 5  # a serial server's blocking work after an aggregation ended: it selects again


class Event(NamedTuple):
    time: float
    seq: int
    kind: EventKind
    payload: Any


class EventQueue:
    """A min-heap of events; ties in time break by insertion order, never by payload."""

    def __init__(self):
        self._heap: list[Event] = []
        self._seq = 0

    def push(self, time: float, kind: EventKind, payload: Any = None) -> None:
        if not time >= 0:  # also rejects NaN
            raise ValueError(f"event time must be >= 0, got {time}")
        heapq.heappush(self._heap, Event(float(time), self._seq, kind, payload))
        self._seq += 1

    def pop(self) -> Event:
        return heapq.heappop(self._heap)

    def peek_time(self) -> float:
        return self._heap[0].time if self._heap else float("inf")

    def __len__(self) -> int:
        return len(self._heap)

    def has(self, kind: EventKind) -> bool:
        return any(e.kind == kind for e in self._heap)

    def state_dict(self) -> dict:
        """The heap as it lies and the next sequence number (snapshots)."""
        return {"heap": list(self._heap), "seq": self._seq}

    def load_state_dict(self, state: dict) -> None:
        self._heap = [Event(float(e.time), int(e.seq), EventKind(e.kind), e.payload) for e in state["heap"]]
        heapq.heapify(self._heap)  # a no-op on a saved heap; guards the invariant all the same
        self._seq = int(state["seq"])
