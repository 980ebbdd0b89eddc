"""Progress as the user sees it: a run's bar toward its stop rule (:class:`RunProgress`, its
numbers in :class:`StopProgress`), and the text a comparison's cells and a sweep's batches share
(durations as clock time, the whole comparison's ETA)."""

from __future__ import annotations

import collections
import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..fleet.config import StopRule

if TYPE_CHECKING:  # annotations only
    from ..fleet.simulator import Checkpoint
    from .scenario import Scenario


def format_seconds(s: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on."""
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def comparison_eta(walls: list[float], cells_left: int) -> str:
    """The whole comparison's ETA for a progress line: the mean wall time of the cells finished so
    far times the cells left (``""`` before any cell has finished, or with none left). In sweep
    batches a cell's wall time is its batch's over the batch's experiments."""
    if not walls or cells_left <= 0:
        return ""
    mean = sum(walls) / len(walls)
    return (f" | comparison ETA {format_seconds(mean * cells_left)} ({cells_left} cell"
            f"{'s' if cells_left != 1 else ''} left at {format_seconds(mean)} per finished cell)")


@dataclasses.dataclass(frozen=True)
class StopProgress:
    """How far a run is toward each part of its stop rule (fractions in [0, 1]).

    ``accuracy`` is the mean of the last ``window`` test accuracies over the target (the
    paper's rule, :class:`~felix_jax.fleet.config.StopRule`); ``eta_s`` is the wall time to
    the nearest cap (aggregations or virtual hours) at the recent rate, None until there is
    a rate. Reaching the target may end the run sooner.
    """

    aggregations: float
    accuracy: float | None  # None: no target
    virtual_time: float | None  # None: no virtual-time limit
    eta_s: float | None
    shown: float = 0.0  # what the bar shows: the largest ``overall`` so far (it never goes backwards)

    @property
    def overall(self) -> float:
        """Progress toward whichever stop comes first."""
        return max(f for f in (self.aggregations, self.accuracy, self.virtual_time) if f is not None)


class RunProgress:
    """Progress toward the stop rule: the share shown is the nearest of aggregations / cap, accuracy
    (last-``window`` mean) / target and virtual hours / limit, and never goes backwards (the largest
    so far: a falling accuracy does not undo it); the text shows each part and a wall-clock ETA to
    the nearest cap from the rate over the last ``recent`` checkpoints, once there are at least 3
    (before that, and once a stop is reached, ``ETA -``). The checkpoint at t = 0 (the initial model,
    no aggregation yet) moves nothing: the share stays 0% until the first checkpoint after it, though
    its accuracy enters the window's mean as the stop rule counts it. The target gives no ETA, when accuracy
    will reach it has no basis: with a target the ETA reads ``<= T`` (the cap's, an upper bound).

    On a terminal a tqdm bar; elsewhere (a notebook, a log file) plain lines, at most one per
    ``every_s`` seconds of wall time and one at the end. Fed every checkpoint; ``latest`` holds the
    last :class:`StopProgress` with or without a display.
    """

    def __init__(self, sc: Scenario, enabled: bool, clock: Callable[[], float] = time.perf_counter,
                 recent: int = 10, every_s: float = 15.0, terminal: bool | None = None):
        self.stop = StopRule(target_accuracy=sc.target_accuracy, max_virtual_s=sc.max_virtual_hours * 3600,
                             max_aggregations=sc.max_aggregations, stop_at_target=sc.stop_at_target)
        self.clock = clock
        self.accuracies: list[float] = []
        self.samples: collections.deque[tuple[float, int, float]] = collections.deque(maxlen=max(recent, 2))
        self.latest: StopProgress | None = None
        self.bar = None
        self.lines = False  # plain periodic lines instead of a bar
        self.every_s, self._last_line, self._last_cp = every_s, -math.inf, None
        self._shown = 0.0
        self.label = f"{sc.strategy}/{Path(sc.availability).name}"
        if enabled:
            terminal = sys.stderr.isatty() if terminal is None else terminal
            if terminal:
                from tqdm import tqdm

                self.bar = tqdm(total=1.0, file=sys.stderr, leave=True, desc=self.label,
                                bar_format="{desc}: {percentage:3.0f}% to the stop rule|{bar}| [{elapsed}{postfix}]")
            else:
                self.lines = True

    def update(self, cp: Checkpoint) -> StopProgress:
        stop = self.stop
        self.accuracies.append(cp.accuracy)
        self.samples.append((self.clock(), cp.version, cp.time_s))
        recent = self.accuracies[-stop.window:]
        accuracy = (None if stop.target_accuracy is None or not stop.stop_at_target  # the target ends no run
                    else min(sum(recent) / len(recent) / stop.target_accuracy, 1.0))
        timed = math.isfinite(stop.max_virtual_s)
        virtual_time = min(cp.time_s / stop.max_virtual_s, 1.0) if timed else None
        p = StopProgress(min(cp.version / stop.max_aggregations, 1.0), accuracy, virtual_time, self._eta(cp))
        if cp.version > 0 or cp.time_s > 0:  # the initial model's accuracy is no progress toward the target
            self._shown = max(self._shown, p.overall)
        if p.overall >= 1.0:
            p = dataclasses.replace(p, eta_s=None)  # a stop is reached: nothing left to estimate
        self.latest = dataclasses.replace(p, shown=self._shown)
        return self.latest

    def _eta(self, cp: Checkpoint) -> float | None:
        """Wall seconds to the nearest cap at the rate since the oldest recent sample."""
        wall0, version0, time0 = self.samples[0]
        wall1 = self.samples[-1][0]
        if len(self.samples) < 3 or wall1 <= wall0:  # no rate to speak of yet
            return None
        etas = []
        for done, before, cap in ((cp.version, version0, self.stop.max_aggregations),
                                  (cp.time_s, time0, self.stop.max_virtual_s)):
            rate = (done - before) / (wall1 - wall0)
            if rate > 0 and math.isfinite(cap):
                etas.append(max(cap - done, 0) / rate)
        return min(etas) if etas else None

    def describe(self, cp: Checkpoint) -> str:
        """The postfix: each part of the stop rule and the ETA."""
        p, stop = self.latest, self.stop
        recent = self.accuracies[-stop.window:]
        acc = f"last-{stop.window} acc {sum(recent) / len(recent):.3f}"
        if stop.target_accuracy is not None:
            acc += f" -> {stop.target_accuracy:g}"
        hours = f"{cp.time_s / 3600:.2f}"
        hours += f" of {stop.max_virtual_s / 3600:g} virtual h" if p.virtual_time is not None else " virtual h"
        eta = "-" if p.eta_s is None else format_seconds(p.eta_s)
        if p.eta_s is not None and p.accuracy is not None:  # the target may end the run before the cap
            eta = "<= " + eta
        return f"{acc} | agg {cp.version}/{stop.max_aggregations} | {hours} | ETA {eta}"

    def __call__(self, cp: Checkpoint) -> None:
        self.update(cp)
        self._last_cp = cp
        if self.bar is not None:
            self.bar.n = round(self.latest.shown, 4)
            self.bar.set_postfix_str(self.describe(cp), refresh=True)
        elif self.lines and self.clock() - self._last_line >= self.every_s:
            self._print_line(cp)

    def _print_line(self, cp: Checkpoint) -> None:
        self._last_line = self.clock()
        print(f"{self.label}: {100 * self.latest.shown:3.0f}% to the stop rule | {self.describe(cp)}",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.lines and self._last_cp is not None and self._last_line != self.clock():
            self._print_line(self._last_cp)
