"""How a run stops before its stop rule, and what it leaves to resume: a signal
(:class:`StopOnSignals`: SIGINT / SIGTERM stop it after the current event), and a plugin's error
(:func:`replay_to_last_event`: the run replayed to its last whole event, stop reason
:data:`PLUGIN_ERROR`); :func:`finished_stop_reason` tells a finished results folder from one that
stopped to be resumed."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

from ..fleet.simulator import Checkpoint, FleetSimulator, RunRecord
from ..plugin_calls import PluginError
from .build import build_simulator
from .scenario import Scenario

PLUGIN_ERROR = "plugin_error"  # the stop reason of a run that a plugin's error stopped


class StopOnSignals:
    """While active, SIGINT and SIGTERM ask the simulator to stop after the event in progress
    (stop reason ``"interrupted"``); a second signal stops at once (KeyboardInterrupt for SIGINT,
    SystemExit(128 + signal) for SIGTERM). The previous handlers come back on exit. Only the main
    thread may install handlers; elsewhere this does nothing. A SIGINT that is ignored (a shell's
    background job) stays ignored."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, enabled: bool):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.signum: int | None = None
        self._sim: FleetSimulator | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopOnSignals":
        if self.enabled:
            for sig in self.SIGNALS:
                previous = signal.getsignal(sig)
                if sig == signal.SIGINT and previous == signal.SIG_IGN:
                    continue
                self._previous[sig] = previous
                signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame) -> None:
        if self.signum is not None:
            self._restore()
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(128 + signum)
        self.signum = signum
        if self._sim is not None:
            self._sim.request_stop("interrupted")

    def attach(self, sim: FleetSimulator) -> None:
        """From now on a signal stops ``sim``; one that came while it was being built stops it now."""
        self._sim = sim
        if self.signum is not None:
            sim.request_stop("interrupted")

    def _restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous = {}

    def __exit__(self, *exc) -> None:
        self._restore()


def replay_to_last_event(sc: Scenario, settled: int | None, seen: list[Checkpoint], snap_dir: Path,
                          failure: PluginError, events_path: Path | None = None) -> tuple[FleetSimulator, RunRecord]:
    """The run that ``failure`` stopped, as it stood after its last whole event: a plugin raises in
    the middle of an event, where half of the event's work is done, so a fresh simulator replays the
    run to that point, from the newest snapshot before it (or from the start), and stops there with
    stop reason ``plugin_error``; its snapshot resumes the run as a signal's would. The replay must
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
    sim.request_stop(PLUGIN_ERROR, at_events=settled)
    try:
        record = sim.run()
    except PluginError as e:
        failure.no_snapshot = f"replaying its events to the failure, the plugin failed earlier ({e})"
        raise failure
    common = min(len(record.checkpoints), len(seen))
    if record.events_processed != settled or repr(record.checkpoints[:common]) != repr(seen[:common]):
        failure.no_snapshot = ("replaying its events did not give the same run (does the plugin keep state "
                               "outside the value its init() returns?)")
        raise failure
    return sim, record


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
    return reason if isinstance(reason, str) and reason not in ("interrupted", "wall_budget", PLUGIN_ERROR) else None
