"""FreeMemoryRelease: glibc's free pages handed back at aggregations, no more often than its interval."""

from __future__ import annotations


def test_the_allocators_free_memory_goes_back_at_most_every_interval(monkeypatch):
    """The simulator hands glibc's free pages back at aggregations, at most every 10 s of wall time."""
    from felix_jax import memory

    clock = [100.0]
    monkeypatch.setattr(memory.time, "perf_counter", lambda: clock[0])
    trims = []
    monkeypatch.setattr(memory, "_malloc_trim", lambda: trims.append)
    r = memory.FreeMemoryRelease(interval_s=10.0)
    assert not r.tick() and trims == []  # not before the interval
    clock[0] = 110.0
    assert r.tick() and trims == [0] and r.calls == 1
    clock[0] = 119.0
    assert not r.tick()
    clock[0] = 120.5
    assert r.tick() and trims == [0, 0]
    monkeypatch.setattr(memory, "_malloc_trim", lambda: None)  # no glibc: nothing to do, never an error
    assert not memory.FreeMemoryRelease(interval_s=0.0).tick()
