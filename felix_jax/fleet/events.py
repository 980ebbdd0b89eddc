"""The virtual-time event queue: deterministic ordering by (time, sequence number)."""

from __future__ import annotations

import enum
import heapq
from collections import OrderedDict
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
    """A min-heap of events; ties in time break by insertion order, never by payload.

    Timers (:meth:`push_timer`) are events that may be withdrawn before they fire: the server's per-task
    timeout, which a reply makes moot. They come in time order (a constant delay after a clock that
    never goes back), so they wait in an ordered map beside the heap, keyed by payload, and
    :meth:`cancel_timer` removes one in O(1). Both draw sequence numbers from one counter and
    :meth:`pop` takes whichever of the two heads is first by (time, sequence), so the events come out
    in exactly the order one heap of them all would give. A withdrawn timer costs no memory, where
    a stale one in the heap stayed for the whole delay: at 10^4 tasks in flight those were most of the
    queue, growing with the dispatch rate times the timeout.
    """

    def __init__(self):
        self._heap: list[Event] = []
        self._timers: OrderedDict[Any, Event] = OrderedDict()
        self._seq = 0

    def push(self, time: float, kind: EventKind, payload: Any = None) -> None:
        if not time >= 0:  # also rejects NaN
            raise ValueError(f"event time must be >= 0, got {time}")
        heapq.heappush(self._heap, Event(float(time), self._seq, kind, payload))
        self._seq += 1

    def push_timer(self, time: float, kind: EventKind, payload: Any) -> None:
        """An event that :meth:`cancel_timer` (``payload``) may withdraw; no earlier than the last timer."""
        if not time >= 0:
            raise ValueError(f"event time must be >= 0, got {time}")
        if self._timers and time < next(reversed(self._timers.values())).time:
            raise ValueError(f"timers come in time order: {time} is before the last timer "
                             f"({next(reversed(self._timers.values())).time})")
        if payload in self._timers:
            raise ValueError(f"a timer for {payload!r} is already set")
        self._timers[payload] = Event(float(time), self._seq, kind, payload)
        self._seq += 1

    def cancel_timer(self, payload: Any) -> bool:
        """Withdraws the timer set for ``payload``; False if there is none (fired, or never set)."""
        return self._timers.pop(payload, None) is not None

    def pop(self) -> Event:
        if self._timers:
            first = next(iter(self._timers.values()))
            if not self._heap or first < self._heap[0]:  # (time, seq) decide: seqs are unique
                return self._timers.popitem(last=False)[1]
        return heapq.heappop(self._heap)

    def peek_time(self) -> float:
        t = self._heap[0].time if self._heap else float("inf")
        return min(t, next(iter(self._timers.values())).time) if self._timers else t

    def __len__(self) -> int:
        return len(self._heap) + len(self._timers)

    def has(self, kind: EventKind) -> bool:
        return any(e.kind == kind for e in self._heap) or any(e.kind == kind for e in self._timers.values())

    def state_dict(self) -> dict:
        """The heap as it lies, the timers in order and the next sequence number (snapshots)."""
        return {"heap": list(self._heap), "timers": list(self._timers.values()), "seq": self._seq}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`; a snapshot from before timers has its timeouts in the heap (they
        fire there, and a reply cannot withdraw them: their handler ignores a task that has replied)."""
        def event(e):
            return Event(float(e.time), int(e.seq), EventKind(e.kind), e.payload)
        self._heap = [event(e) for e in state["heap"]]
        heapq.heapify(self._heap)  # a no-op on a saved heap; guards the invariant all the same
        self._timers = OrderedDict((e.payload, e) for e in map(event, state.get("timers", [])))
        self._seq = int(state["seq"])
