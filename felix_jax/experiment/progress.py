"""Progress as the user sees it: a run's bar toward its stop rule (:class:`RunProgress`, its
numbers in :class:`StopProgress`), and the text a comparison's cells and a sweep's batches share
(durations as clock time, the whole comparison's ETA)."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import sys
import threading
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


def comparison_eta(walls: list[float], cells_left: int, shares: list[float] | None = None, *, workers: int = 1,
                   cell_budget_s: float | None = None, starts_left_s: float = math.inf) -> str:
    """The whole comparison's ETA for a progress line: the mean wall time of the cells finished so
    far times the cells left, over the ``workers`` that run them at once (``""`` with no cell left, or
    with no basis: no finished cell and no ``cell_budget_s``). In sweep batches a cell's wall time is
    its batch's over the batch's experiments. ``shares``: the share of its budget (the nearer cap:
    :func:`budget_share`) each finished cell used: the line then adds an upper bound, the wall time per
    whole budget over the cells so far times the cells left, for cells that the target ended early say
    little of one that runs to its cap. The cells' caps bound both: ``cell_budget_s`` (each cell stops
    after that much wall time; before any cell has finished, the bound is that alone), and
    ``starts_left_s`` (the comparison's budget: no cell starts after that many seconds from now, so
    the end comes at most one cell later)."""
    if cells_left <= 0 or (not walls and cell_budget_s is None):
        return ""
    cap = math.inf if cell_budget_s is None else cell_budget_s
    lanes = max(1, min(workers, cells_left))

    def total(per_cell: float) -> float:  # the cells left, ``lanes`` at a time, none started after the budget
        return min(per_cell * cells_left / lanes, starts_left_s + per_cell)

    at_once = f", {lanes} at a time" if lanes > 1 else ""
    plural = "s" if cells_left != 1 else ""
    budget = (f"; no cell starts after {format_seconds(starts_left_s)} (the comparison's budget)"
              if math.isfinite(starts_left_s) else "")
    if not walls:  # only the cells' own wall cap to go by
        return (f" | comparison ETA <= {format_seconds(total(cap))} ({cells_left} cell{plural} left, each "
                f"stopped by {format_seconds(cap)} of wall time{at_once}{budget})")
    mean = min(sum(walls) / len(walls), cap)
    bound = ""
    if shares is not None and sum(shares) > 0:
        whole = min(sum(walls) / sum(shares), cap)  # wall seconds a cell takes to use all of its budget
        if total(whole) > 1.05 * total(mean):
            bound = f"; <= {format_seconds(total(whole))} if each runs to its cap"
    return (f" | comparison ETA {format_seconds(total(mean))} ({cells_left} cell{plural} left at "
            f"{format_seconds(mean)} per finished cell{at_once}{bound}{budget})")


def budget_share(sc: "Scenario", summary: dict) -> float:
    """The share of its stop rule's budget a finished run used: the nearer of aggregations over
    ``max_aggregations`` and virtual time over ``max_virtual_hours`` (1 for a run stopped at a cap,
    its wall budget included: a cell cut at ``cell_budget_s`` ran as long as it may)."""
    if summary.get("stop_reason") == "wall_budget":
        return 1.0
    shares = [summary.get("aggregations", 0) / sc.max_aggregations]
    if math.isfinite(sc.max_virtual_hours):
        shares.append(summary.get("end_time_s", 0.0) / (sc.max_virtual_hours * 3600))
    return min(max(shares), 1.0)


@dataclasses.dataclass(frozen=True)
class StopProgress:
    """How far a run is toward each part of its stop rule (fractions in [0, 1]).

    ``aggregations`` and ``virtual_time`` are the caps' budgets used; ``accuracy`` is the mean of the
    last ``window`` test accuracies over the target (the paper's rule,
    :class:`~felix_jax.fleet.config.StopRule`), shown apart: it is no share of any budget (the
    untrained model alone scores a third of a typical target, and a curve may sit just below it for
    hours). ``eta_s`` is the wall time to the nearest cap at the run's rate, None until there is a
    rate; reaching the target may end the run sooner.
    """

    aggregations: float
    accuracy: float | None  # None: no target
    virtual_time: float | None  # None: no virtual-time limit
    eta_s: float | None
    shown: float = 0.0  # what the bar shows: the largest ``budget`` so far (it never goes backwards)

    @property
    def budget(self) -> float:
        """The share of the stop rule's budget used: the nearer cap (aggregations or virtual hours)."""
        return max(f for f in (self.aggregations, self.virtual_time) if f is not None)

    @property
    def reached(self) -> bool:
        """A stop is reached: a cap, or the target."""
        return self.budget >= 1.0 or (self.accuracy is not None and self.accuracy >= 1.0)


class RunProgress:
    """Progress of a run: the bar shows the share of its budget used, the nearer of aggregations / cap
    and virtual hours / limit (it never goes backwards); the text shows each cap, the last-``window``
    mean accuracy against the target apart from the budget, and a wall-clock ETA to the nearer cap.
    The ETA's rate is taken from the first checkpoint after the initial model (compilation is behind
    it) to the latest, over at most the last ``recent`` checkpoints (default: all of them): a run's
    rate steadies as it goes, so the ETA does not swing with a few fast or slow aggregations. It needs
    3 checkpoints (before that, and once a stop is reached, ``ETA -``); with a target it reads
    ``<= T`` (the cap's, an upper bound: the target may end the run sooner). ``wall_budget_s``: the
    run stops after that much wall time (a comparison's ``cell_budget_s``), from this object's
    creation: the ETA is never later, and before there is a rate it is that bound (``<= T``).
    ``label``: what the lines and the bar call the run (default ``strategy/regime``, the strategy by
    its label: ``felix[aggregator=median]/avail50``).

    On a terminal a tqdm bar; elsewhere (a notebook, a log file) plain lines, at most one per
    ``every_s`` seconds of wall time and one at the end. Fed every checkpoint; ``latest`` holds the
    last :class:`StopProgress` with or without a display.
    """

    def __init__(self, sc: Scenario, enabled: bool, clock: Callable[[], float] = time.perf_counter,
                 recent: int | None = None, every_s: float = 15.0, terminal: bool | None = None,
                 label: str | None = None, wall_budget_s: float | None = None):
        self.stop = StopRule(target_accuracy=sc.target_accuracy, max_virtual_s=sc.max_virtual_hours * 3600,
                             max_aggregations=sc.max_aggregations, stop_at_target=sc.stop_at_target)
        self.clock = clock
        self.wall_end = math.inf if wall_budget_s is None else clock() + wall_budget_s
        self._eta_bound = False  # the ETA is the wall budget's, an upper bound (no rate yet)
        self.accuracies: list[float] = []
        # (wall, version, virtual s) of the checkpoints after the initial model's: the rate runs from the
        # oldest kept to the latest; with every checkpoint counted (recent=None) only the first, the latest
        # and their number are kept, not one tuple a checkpoint for the whole run
        self.recent = recent
        self.samples: collections.deque[tuple[float, int, float]] = collections.deque(
            maxlen=1 if recent is None else max(recent, 2))
        self._first: tuple[float, int, float] | None = None
        self._seen = 0
        self.latest: StopProgress | None = None
        self.bar = None
        self.terminal = False  # a tqdm bar, drawn from the first checkpoint (nothing before the run's first line)
        self.lines = False  # plain periodic lines instead of a bar
        self.every_s, self._last_line, self._last_cp, self._printed = every_s, -math.inf, None, None
        self._shown = 0.0
        # a component swapped into the strategy shows: felix[aggregator=median]/avail50
        self.label = label or f"{sc.resolve_strategy().strategy.label}/{Path(sc.availability).name}"
        if enabled:
            terminal = sys.stderr.isatty() if terminal is None else terminal
            if terminal:
                self.terminal = True
            else:
                self.lines = True

    def update(self, cp: Checkpoint) -> StopProgress:
        stop = self.stop
        self.accuracies.append(cp.accuracy)
        if cp.version > 0 or cp.time_s > 0:  # the initial model's checkpoint comes before compilation ends
            sample = (self.clock(), cp.version, cp.time_s)
            self._first = self._first or sample
            self.samples.append(sample)
            self._seen += 1
        recent = self.accuracies[-stop.window:]
        accuracy = (None if stop.target_accuracy is None or not stop.stop_at_target  # the target ends no run
                    else min(sum(recent) / len(recent) / stop.target_accuracy, 1.0))
        timed = math.isfinite(stop.max_virtual_s)
        virtual_time = min(cp.time_s / stop.max_virtual_s, 1.0) if timed else None
        p = StopProgress(min(cp.version / stop.max_aggregations, 1.0), accuracy, virtual_time, self._eta(cp))
        self._shown = max(self._shown, p.budget)
        if p.reached:
            p = dataclasses.replace(p, eta_s=None)  # a stop is reached: nothing left to estimate
        self.latest = dataclasses.replace(p, shown=self._shown)
        return self.latest

    def _eta(self, cp: Checkpoint) -> float | None:
        """Wall seconds to the nearest cap: the aggregations' and virtual time's at the rate since the
        oldest sample kept, and the wall budget's."""
        wall_left = max(self.wall_end - self.clock(), 0.0) if math.isfinite(self.wall_end) else None
        rate_eta = self._rate_eta(cp)
        self._eta_bound = rate_eta is None and wall_left is not None
        return min((e for e in (rate_eta, wall_left) if e is not None), default=None)

    def _rate_eta(self, cp: Checkpoint) -> float | None:
        if (self._seen if self.recent is None else len(self.samples)) < 3:  # no rate to speak of yet
            return None
        wall0, version0, time0 = self._first if self.recent is None else self.samples[0]
        wall1 = self.samples[-1][0]
        if wall1 <= wall0:
            return None
        etas = []
        for done, before, cap in ((cp.version, version0, self.stop.max_aggregations),
                                  (cp.time_s, time0, self.stop.max_virtual_s)):
            rate = (done - before) / (wall1 - wall0)
            if rate > 0 and math.isfinite(cap):
                etas.append(max(cap - done, 0) / rate)
        return min(etas) if etas else None

    def describe(self, cp: Checkpoint) -> str:
        """The postfix: each cap, the accuracy against the target, and the ETA."""
        p, stop = self.latest, self.stop
        recent = self.accuracies[-stop.window:]
        acc = f"last-{stop.window} acc {sum(recent) / len(recent):.3f}"
        if stop.target_accuracy is not None:
            acc += f" (target {stop.target_accuracy:g}{'' if stop.stop_at_target else ', runs on past it'}"
            acc += ", reached)" if p.accuracy is not None and p.accuracy >= 1.0 else ")"
        hours = f"{cp.time_s / 3600:.2f}"
        hours += f" of {stop.max_virtual_s / 3600:g} virtual h" if p.virtual_time is not None else " virtual h"
        eta = "-" if p.eta_s is None else format_seconds(p.eta_s)
        if p.eta_s is not None and (p.accuracy is not None or self._eta_bound):  # it may end before the cap
            eta = "<= " + eta
        return f"agg {cp.version}/{stop.max_aggregations} | {hours} | {acc} | ETA {eta}"

    def __call__(self, cp: Checkpoint) -> None:
        self.update(cp)
        self._last_cp = cp
        if self.terminal and self.bar is None:  # drawn once there is something to show (a refused run shows none)
            from tqdm import tqdm

            self.bar = tqdm(total=1.0, file=sys.stderr, leave=True, desc=self.label,
                            bar_format="{desc}: {percentage:3.0f}% of the budget|{bar}| [{elapsed}{postfix}]")
        if self.bar is not None:
            self.bar.n = round(self.latest.shown, 4)
            self.bar.set_postfix_str(self.describe(cp), refresh=True)
        elif self.lines and self.clock() - self._last_line >= self.every_s:
            self._print_line(cp)

    def _print_line(self, cp: Checkpoint) -> None:
        self._last_line, self._printed = self.clock(), cp
        print(f"{self.label}: {100 * self.latest.shown:3.0f}% of the budget | {self.describe(cp)}",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.lines and self._last_cp is not None and self._printed is not self._last_cp:  # the last, once
            self._print_line(self._last_cp)

    @contextlib.contextmanager
    def writing(self, what: str, slow_s: float = 3.0):
        """Around writing one of the run's files once it has stopped (``summary.json``'s reading of the
        event log, a figure): where it takes more than ``slow_s`` seconds, a line says what is being
        written, and another when it is done, so that the last progress line is not followed by
        minutes of silence. Nothing is printed without a display, or for a quick file."""
        if not self.terminal and not self.lines:
            yield
            return
        start = self.clock()
        said = threading.Event()

        def say() -> None:
            said.set()
            print(f"{self.label}: writing {what} ...", file=sys.stderr, flush=True)

        timer = threading.Timer(slow_s, say)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            timer.join()  # a line being said is said whole, before the one after it
            if said.is_set():
                print(f"{self.label}: {what} written in {self.clock() - start:,.1f} s", file=sys.stderr,
                      flush=True)
