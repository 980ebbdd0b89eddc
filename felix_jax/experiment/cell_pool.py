"""A comparison's cells in worker processes (``run_matrix(workers=N)``) that stop as a comparison run
in one process does: SIGINT or SIGTERM stops every running cell after its current event, with its
results so far and a stop snapshot, and no other cell starts; a second signal stops them at once.

A terminal's Ctrl-C goes to its whole foreground process group, the workers included. A worker left at
Python's default raises KeyboardInterrupt in the middle of an event (no snapshot), and a pool whose
parent raised waits for every queued cell. So a worker ignores SIGINT, and the comparison's process,
whose :class:`~.stops.StopOnSignals` guard sees the signal, forwards the stop to every worker through
a shared event; SIGTERM sent to one worker alone stops that worker's cell (its own guard). The workers
start with both signals blocked until their handlers are in place (a signal mask survives the exec of
a spawned process), so a Ctrl-C while one still imports its modules cannot kill it. Host-only.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable

from .stops import StopOnSignals

STOP_SIGNALS = frozenset(StopOnSignals.SIGNALS)

# this worker process's guard, set once by its initializer: signal handlers belong to a process, and a
# pool's task reaches its worker with nothing else of the worker's own
_worker_guard: StopOnSignals | None = None


class _ForwardStop:
    """Attached to the comparison's guard: its signal stops every worker's cell (``request_stop``)."""

    def __init__(self, guard: StopOnSignals, stop, signum):
        self.guard, self.stop, self.signum = guard, stop, signum

    def request_stop(self, reason: str) -> None:  # from the signal handler: flags only
        self.signum.value = self.guard.signum or signal.SIGTERM
        self.stop.set()


def _start_worker(stop, signum, abort) -> None:
    """A worker's initializer: SIGINT ignored (the comparison's process forwards it), SIGTERM through
    this process's guard, a thread that follows the forwarded stop, then the signals unblocked."""
    global _worker_guard
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C already pending is dropped with it
    _worker_guard = StopOnSignals(True).__enter__()  # for the worker's life; it keeps SIGINT ignored
    threading.Thread(target=_follow, args=(stop, signum, abort, _worker_guard), daemon=True,
                     name="felix-cell-stop").start()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _follow(stop, signum, abort, guard: StopOnSignals) -> None:
    stop.wait()
    guard.forward(signum.value)  # the running cell stops after its current event
    abort.wait()  # a second signal to the comparison: at once, as a second Ctrl-C stops a cell run in-process
    os._exit(128 + signum.value)


def _call(fn: Callable[..., Any], args: tuple) -> Any:
    if _worker_guard.signum is not None:  # stopped: no other cell starts
        return None
    return fn(*args, signals=_worker_guard)


def run_in_workers(fn: Callable[..., Any], calls: list[tuple], workers: int, signals: StopOnSignals,
                   on_result: Callable[[int, Any], None]) -> None:
    """``fn(*args, signals=guard)`` for each ``args`` of ``calls``, ``workers`` at a time in spawned
    processes (each its own JAX runtime), ``on_result(index, value)`` as each returns (in this process,
    in the order they finish). ``fn`` is a module-level function (it is pickled by name); its
    ``signals`` is the worker's :class:`~.stops.StopOnSignals` guard, which the comparison's guard
    ``signals`` (entered by the caller) stops when a signal comes: each running call stops after its
    current event, and a call not yet started returns None without calling ``fn``. A second signal
    (the guard's KeyboardInterrupt or SystemExit) ends the workers at once and is raised. Another error
    (``fn``'s, raised here) cancels the calls not started and waits for the running ones."""
    ctx = multiprocessing.get_context("spawn")
    stop, signum, abort = ctx.Event(), ctx.Value("i", 0), ctx.Event()
    forward = _ForwardStop(signals, stop, signum)
    # a pool spawns its workers as tasks are submitted: they start with the signals blocked
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_start_worker, initargs=(stop, signum, abort))
    try:
        try:
            futures = {pool.submit(_call, fn, args): i for i, args in enumerate(calls)}
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a signal that came meanwhile is handled now
        signals.attach(forward)
        for fut in as_completed(futures):
            on_result(futures[fut], fut.result())
    except (KeyboardInterrupt, SystemExit):
        signum.value = signum.value or signal.SIGINT
        stop.set()
        abort.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        signals.detach(forward)
    pool.shutdown(wait=True)
