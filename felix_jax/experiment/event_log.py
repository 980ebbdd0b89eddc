"""A run's per-event log (``events.csv``) and the participation it shows (docs/results.md).

The simulator logs one row per event (host side, a tuple each): who did what when, so
per-client participation, fairness and timelines can be taken apart after the run. A run
with a results folder streams its rows to ``events.csv`` as it goes, in bounded chunks
(:mod:`felix_jax.fleet.event_stream`); one without holds them in ``Accounting.events``.
Rows (:data:`EVENT_COLUMNS`):

* ``dispatch``: the server sent a task (``version``: the model it carries);
* ``start``: the task started running, when it had to wait for its client's tier first;
* ``leave`` / ``return``: its client left the task's tier while the task was out / came back;
* ``reply``: the server processed the task's reply (``staleness``: rounds behind, training);
* ``timeout``: the server's timer fired with no reply; ``detached``: the task left the in-flight
  set at its client's departure (TierTrack, or an oracle freeing the slot);
* ``partial``: its client left and the task sends the update of the local steps it finished
  (``interruption=partial``, FedProx): ``staleness`` holds that number of steps;
* ``aggregated``: an update entered an aggregation with ``weight`` (its aggregator's relative
  weight); ``aggregation``: a new model ``version`` (client -1).

``tier`` is the client's true tier at that time (2 AVL_TRAIN, 1 AVL_EVAL, 0 UN_AVL; -1: no client).
"""

from __future__ import annotations

import csv
import math
from array import array
from pathlib import Path

import numpy as np

from ..fleet.event_stream import EVENT_COLUMNS

EVENTS_FILE = "events.csv"


def write_event_log(path: str | Path, events: list, end_time_s: float) -> Path:
    """``events.csv``, in time order (ties in the order they were logged); rows past the run's end
    (a task's future start or departure, logged at its dispatch) are left out."""
    path = Path(path)
    order = sorted(range(len(events)), key=lambda i: events[i][0])
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(EVENT_COLUMNS)
        for i in order:
            row = events[i]
            if row[0] > end_time_s:
                continue
            w.writerow(["" if v is None else v for v in row])
    return path


def aggregated_updates(events) -> tuple[np.ndarray, np.ndarray]:
    """The ``aggregated`` rows of a log (a list of rows, or the path of an ``events.csv``, read
    line by line): their times (float64, seconds) and clients (int64), 16 bytes an update."""
    if not isinstance(events, (str, Path)):
        rows = [(r[0], r[2]) for r in events if r[1] == "aggregated"]
        return np.array([t for t, _ in rows], np.float64), np.array([c for _, c in rows], np.int64)
    times, clients = array("d"), array("q")
    with open(events, newline="") as f:
        for line in f:
            if ",aggregated," in line:  # time_s,event,client,...: no other field holds that word
                t, _, c, _ = line.split(",", 3)
                times.append(float(t))
                clients.append(int(c))
    return np.frombuffer(times, np.float64), np.frombuffer(clients, np.int64)


def updates_per_client(events, num_clients: int) -> np.ndarray:
    """(N,) int64: updates each client contributed to aggregations (``aggregated`` rows of a list of
    rows or of an ``events.csv``)."""
    return _counts(aggregated_updates(events)[1], num_clients)


def _counts(clients: np.ndarray, num_clients: int) -> np.ndarray:
    return np.bincount(clients, minlength=num_clients)[:num_clients]


def gini(counts) -> float | None:
    """Gini index of non-negative counts over the whole population (0: all equal, -> 1: one holds all);
    ``sum_i (2 i - n - 1) x_(i) / (n sum x)`` over ascending ``x_(i)``, i = 1..n. None if all are 0."""
    x = np.sort(np.asarray(counts, np.float64))
    n, total = x.size, x.sum()
    if n == 0 or total == 0:
        return None
    i = np.arange(1, n + 1)
    return float(((2 * i - n - 1) * x).sum() / (n * total))


def jain(counts) -> float | None:
    """Jain's fairness index ``(sum x)^2 / (n sum x^2)`` (1: all equal, 1/n: one holds all)."""
    x = np.asarray(counts, np.float64)
    if x.size == 0 or not x.any():
        return None
    return float(x.sum() ** 2 / (x.size * (x * x).sum()))


def top_share(counts, fraction: float = 0.1) -> float | None:
    """The share of all updates that came from the ``ceil(fraction n)`` clients with the most."""
    x = np.sort(np.asarray(counts, np.float64))[::-1]
    if x.size == 0 or x.sum() == 0:
        return None
    return float(x[:math.ceil(fraction * x.size)].sum() / x.sum())


def participation(events, num_clients: int) -> dict:
    """``summary.json``'s participation fields, over the updates that entered aggregations (of a list
    of rows or of an ``events.csv``)."""
    return _participation(updates_per_client(events, num_clients))


def _participation(counts: np.ndarray) -> dict:
    return {"clients_trained": int(np.count_nonzero(counts)), "participation_gini": gini(counts),
            "participation_jain": jain(counts), "participation_top10_share": top_share(counts, 0.1)}


def read_event_log(path: str | Path) -> list:
    """The rows of an ``events.csv`` as :func:`write_event_log` wrote them (``felix-jax plot``)."""
    rows = []
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or tuple(header) != EVENT_COLUMNS:
            raise ValueError(f"{path}: not an events.csv (expected the header {','.join(EVENT_COLUMNS)})")
        for r in reader:
            rows.append((float(r[0]), r[1], int(r[2]), r[3], int(r[4]), int(r[5]), float(r[6]) if r[6] else None,
                         int(r[7])))
    return rows


def plot_participation(events, num_clients: int, path: str | Path, title: str = "") -> Path:
    """``participation.png``: updates per client, most first, with the fairness indices (left), and
    when each client's updates entered an aggregation (right: a client raster over virtual hours); a
    population past a few thousand clients as histograms, in seconds at any size; drawn by
    :func:`~felix_jax.experiment.figures.run.participation_figure`."""
    from .figures.run import participation_figure

    times, clients = aggregated_updates(events)
    counts = _counts(clients, num_clients)
    return participation_figure(counts, _participation(counts), times / 3600, clients, path, title)
