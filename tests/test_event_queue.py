"""The event queue: (time, sequence) order, and timers that a reply withdraws.

* random pushes, timers, cancels and pops (hypothesis) give the order of a single heap that held every
  event and skipped the withdrawn ones, and the same lengths, head times and snapshots;
* timers out of time order and a second timer for one payload are refused;
* a run's queue holds about one timer a task held, not one a task dispatched in the last timeout;
* a snapshot from before timers (its timeouts in the heap) still pops in order.
"""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from felix_jax.fleet import EventKind, EventQueue
from felix_jax.fleet.events import Event


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["push", "timer", "cancel", "pop"]), st.integers(0, 5),
                              st.integers(0, 30)), max_size=60))
def test_timers_pop_as_one_heap_would(ops):
    q, ref, cancelled = EventQueue(), [], set()
    seq, now, timer_at, next_tid = 0, 0.0, 0.0, 0
    for op, dt, pick in ops:
        if op == "push":
            q.push(now + dt, EventKind.REPLY, ("r", seq))
            heapq.heappush(ref, (now + dt, seq, "r"))
            seq += 1
        elif op == "timer":
            timer_at = max(timer_at, now + 3.0)  # a constant delay after a clock that never goes back
            q.push_timer(timer_at, EventKind.TIMEOUT, next_tid)
            heapq.heappush(ref, (timer_at, seq, next_tid))
            seq, next_tid = seq + 1, next_tid + 1
        elif op == "cancel" and next_tid:
            tid = pick % next_tid
            live = any(e[2] == tid for e in ref) and tid not in cancelled
            assert q.cancel_timer(tid) is live
            cancelled.add(tid)
        elif op == "pop":
            while ref and ref[0][2] in cancelled:
                heapq.heappop(ref)
            if not ref:
                assert len(q) == 0 and q.peek_time() == float("inf")
                continue
            assert q.peek_time() == ref[0][0]
            t, s, _ = heapq.heappop(ref)
            got = q.pop()
            assert (got.time, got.seq) == (t, s)
            now = t
        assert len(q) == sum(1 for e in ref if e[2] not in cancelled)
        other = EventQueue()
        other.load_state_dict(q.state_dict())
        assert other.state_dict() == q.state_dict()


def test_timers_refuse_going_back_and_repeats():
    q = EventQueue()
    q.push_timer(5.0, EventKind.TIMEOUT, 1)
    with pytest.raises(ValueError, match="time order"):
        q.push_timer(4.0, EventKind.TIMEOUT, 2)
    with pytest.raises(ValueError, match="already set"):
        q.push_timer(6.0, EventKind.TIMEOUT, 1)
    with pytest.raises(ValueError, match=">= 0"):
        q.push_timer(float("nan"), EventKind.TIMEOUT, 3)
    assert q.has(EventKind.TIMEOUT) and not q.has(EventKind.WAKE)
    assert q.cancel_timer(1) and not q.cancel_timer(1) and len(q) == 0


def test_a_snapshot_from_before_timers_pops_in_order():
    q = EventQueue()
    q.load_state_dict({"heap": [Event(2.0, 1, EventKind.TIMEOUT, 7), Event(1.0, 0, EventKind.REPLY, 7)],
                       "seq": 2})
    q.push_timer(2.0, EventKind.TIMEOUT, 8)
    assert [(e.time, e.seq, e.payload) for e in (q.pop(), q.pop(), q.pop())] == [(1.0, 0, 7), (2.0, 1, 7), (2.0, 2, 8)]


def test_a_run_holds_a_timer_a_task_held_not_one_a_task_dispatched():
    """FeLiX at 50% with a long timeout: every task dispatched set a timer; the replied ones were withdrawn."""
    from felix_jax.experiment.runner import build_simulator
    from felix_jax.experiment.scenario import Scenario

    sc = Scenario(name="timers", strategy="felix", availability="avail50", num_clients=40, concurrency=8,
                  model="mlp", local_mode="steps", local_steps=1, batch_size=8,
                  aggregation_goal=4, max_aggregations=12, timeout_s=1e6, target_accuracy=None, seed=0)
    sim = build_simulator(sc)
    sim.run()
    timers = sim.queue.state_dict()["timers"]
    assert sim.acct.dispatched_train > 3 * len(timers)  # without withdrawal: one a dispatched task
    assert {e.payload for e in timers} <= set(sim.tasks)  # only tasks still held keep one
    assert all(e.kind == EventKind.TIMEOUT for e in timers) and not any(
        e.kind == EventKind.TIMEOUT for e in sim.queue.state_dict()["heap"])

