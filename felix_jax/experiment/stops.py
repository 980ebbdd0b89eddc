"""How a run stops before its stop rule, and what it leaves to resume: a signal
(:class:`StopOnSignals`: SIGINT / SIGTERM stop it after the current event), and a failure inside an
event (:data:`RUN_FAILURES`: a plugin's error, a policy's broken contract, a device error;
:func:`replay_to_last_event`: the run replayed to its last whole event, stop reason
:func:`failure_stop_reason`); :func:`finished_stop_reason` tells a finished results folder from one
that stopped to be resumed."""

from __future__ import annotations

import gc
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import jax

from ..fleet.simulator import Checkpoint, FleetSimulator, PolicyError, RunRecord
from ..plugin_calls import PluginError
from .build import build_simulator
from .scenario import Scenario

PLUGIN_ERROR = "plugin_error"  # the stop reason of a run that a plugin's error stopped
POLICY_ERROR = "policy_error"  # ... that a policy's broken contract stopped (bad ids or weights, checked by the server)
DEVICE_ERROR = "device_error"  # ... that the device stopped (out of memory, a lost device)
# what may stop a run inside an event, with the stop reason its results then hold (first match)
RUN_FAILURES = ((PluginError, PLUGIN_ERROR), (PolicyError, POLICY_ERROR), (jax.errors.JaxRuntimeError, DEVICE_ERROR))
FAILURE_TYPES = tuple(t for t, _ in RUN_FAILURES)
# stop reasons of a run that stopped to be resumed, not finished
RESUMABLE_STOPS = ("interrupted", "wall_budget", PLUGIN_ERROR, POLICY_ERROR, DEVICE_ERROR)


def failure_stop_reason(error: BaseException) -> str:
    """The stop reason of a run that ``error`` (one of :data:`FAILURE_TYPES`) stopped."""
    return next(reason for kind, reason in RUN_FAILURES if isinstance(error, kind))


class StopOnSignals:
    """While active, SIGINT and SIGTERM ask what is attached (a simulator, a sweep batch: anything with
    ``request_stop(reason)``) to stop after the event in progress (stop reason ``"interrupted"``), and
    :attr:`signum` keeps the signal; with nothing attached (a comparison between its cells, or writing a
    finished cell's files) the signal is only kept, for the caller to stop at the next safe point. A
    second signal stops at once (KeyboardInterrupt for SIGINT, SystemExit(128 + signal) for SIGTERM; one
    that lands inside a garbage-collection callback, where an exception is dropped, is taken again 0.05 s
    later).

    One guard can serve a whole comparison: entered again (a run inside the comparison's guard) it
    installs nothing more, and the handlers it replaced come back when the outermost ``with`` ends.
    Only the main thread may install handlers; elsewhere this does nothing. A SIGINT that is ignored (a
    shell's background job) stays ignored."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, enabled: bool):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.signum: int | None = None
        self._caught = False  # a signal came to this process (a forwarded stop is not one: :meth:`forward`)
        self._targets: list = []
        self._previous: dict[int, Any] = {}
        self._depth = 0

    @classmethod
    def of(cls, stop_on_signals) -> "StopOnSignals":
        """``stop_on_signals`` as a guard: a guard itself (shared, e.g. a comparison's), else a new one
        enabled when it is true."""
        return stop_on_signals if isinstance(stop_on_signals, cls) else cls(bool(stop_on_signals))

    def __enter__(self) -> "StopOnSignals":
        self._depth += 1
        if self.enabled and self._depth == 1:
            for sig in self.SIGNALS:
                previous = signal.getsignal(sig)
                if sig == signal.SIGINT and previous == signal.SIG_IGN:
                    continue
                self._previous[sig] = previous
                signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame) -> None:
        if self._caught:
            if in_gc_callback(frame):  # raised there it would be printed as "Exception ignored" and dropped:
                # the same signal again in a moment, where the interpreter is out of the callback
                again = threading.Timer(0.05, os.kill, (os.getpid(), signum))
                again.daemon = True  # a process that ends meanwhile does not wait for it
                again.start()
                return
            self._restore()
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(128 + signum)
        self._caught = True
        self.forward(signum)

    def forward(self, signum: int) -> None:
        """A stop asked for from elsewhere, as the first of ``signum`` would: a comparison's worker process
        ignores the terminal's Ctrl-C and is told by the comparison's process instead (cell_pool.py). A
        signal to this process after it is still the first one here (a SIGTERM to the whole process group
        reaches a worker both ways, in either order). Safe from another thread: it only sets flags that the
        run reads between events."""
        if self.signum is None:
            self.signum = signum
            for target in list(self._targets):
                target.request_stop("interrupted")

    def attach(self, target) -> None:
        """From now on a signal stops ``target``; one that came before (while it was being built) stops
        it now."""
        self._targets.append(target)
        if self.signum is not None:
            target.request_stop("interrupted")

    def detach(self, target) -> None:
        """``target`` has stopped: a later signal is only kept."""
        if target in self._targets:
            self._targets.remove(target)

    def _restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous = {}

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._restore()


def in_gc_callback(frame) -> bool:
    """True when ``frame`` (where a signal interrupted the interpreter) runs inside a garbage-collection
    callback (jax registers one): an exception raised there does not propagate."""
    codes = {getattr(getattr(cb, "__func__", cb), "__code__", None) for cb in gc.callbacks}
    codes.discard(None)
    while frame is not None and codes:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def replay_to_last_event(sc: Scenario, settled: int | None, seen: list[Checkpoint], snap_dir: Path,
                          failure: BaseException, events_path: Path | None = None
                          ) -> tuple[FleetSimulator, RunRecord]:
    """The run that ``failure`` stopped, as it stood after its last whole event: a plugin raises in
    the middle of an event, where half of the event's work is done, so a fresh simulator replays the
    run to that point, from the newest snapshot before it (or from the start), and stops there with
    stop reason ``plugin_error`` (``policy_error``, ``device_error``: :func:`failure_stop_reason`); its
    snapshot resumes the run as a signal's would. The replay must
    meet the failed run's checkpoints (a plugin that keeps state of its own outside its init/select
    state may not replay the same): else ``failure`` is raised, saying why no stop snapshot was written
    (and as it is when the run failed before its first event). ``settled``: the failed simulator's
    :attr:`~FleetSimulator.settled_events`; ``seen``: its checkpoints; ``events_path``: the ``events.csv``
    the failed run streamed to, which the replay cuts back to its start and writes on."""
    if settled is None:  # nothing done yet: as if the run had failed while it was built
        raise failure
    sim = build_simulator(sc)
    start = _snapshot_before(snap_dir, settled)
    if start is not None:
        sim.restore(start)
    if events_path is not None:
        sim.stream_events(events_path)
    sim.request_stop(failure_stop_reason(failure), at_events=settled)
    try:
        record = sim.run()
    except FAILURE_TYPES as e:
        failure.no_snapshot = f"replaying its events to the failure, it failed earlier ({_first_line(e)})"
        raise failure
    common = min(len(record.checkpoints), len(seen))
    if record.events_processed != settled or repr(record.checkpoints[:common]) != repr(seen[:common]):
        failure.no_snapshot = ("replaying its events did not give the same run (does the plugin keep state "
                               "outside the value its init() returns?)")
        raise failure
    return sim, record


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def failure_line(error: BaseException) -> str:
    """What a policy's or the device's failure was, in one line."""
    return _first_line(error) if isinstance(error, PolicyError) else f"device error: {_first_line(error)}"


def failure_message(error: BaseException, out: Path) -> str:
    """The one line for a run that ``error`` (a policy's contract, the device; not a plugin's: see the CLI)
    stopped mid-way: the failure, what ``out`` holds now, and the next command."""
    what = failure_line(error)
    if getattr(error, "snapshot", None) is not None:
        n = error.stopped_after
        return (f"{what}; the run stopped after {n} aggregation{'' if n == 1 else 's'}: its results up to its last "
                f"whole event and a stop snapshot are in {out}; continue with: felix-jax run --resume {out} (it meets "
                "the same failure again unless its cause is gone), or run it again with --overwrite")
    why = getattr(error, "no_snapshot", None)
    return (f"{what}; no stop snapshot" + (f" ({why})" if why else "") + f": its checkpoints so far are in {out}; "
            "run it again with --overwrite, or choose another --out")


def _snapshot_before(snap_dir: Path, events: int) -> Path | None:
    """The newest snapshot folder under ``snap_dir`` taken at or before ``events`` events that
    verifies; None if there is none."""
    from ..fleet.snapshot import SnapshotError, verify_snapshot

    found = []
    for p in snap_dir.glob("snap-*") if snap_dir.is_dir() else ():
        parts = p.name.split("-")  # snap-VERSION-EVENTS[-n]
        if p.is_dir() and len(parts) >= 3 and parts[2].isdigit() and int(parts[2]) <= events:
            found.append((int(parts[2]), p.name, p))
    for _, _, p in sorted(found, reverse=True):
        try:
            verify_snapshot(p)
        except SnapshotError:
            continue
        return p
    return None


def finished_stop_reason(out_dir: Path) -> str | None:
    """The stop reason of the finished run whose results ``out_dir`` holds (its ``summary.json``), None
    when there is none or it stopped to be resumed (``interrupted``, ``wall_budget``, ``plugin_error``)."""
    try:
        summary = json.loads((out_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    reason = summary.get("stop_reason") if isinstance(summary, dict) else None
    return reason if isinstance(reason, str) and reason not in RESUMABLE_STOPS else None
