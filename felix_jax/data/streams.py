"""Client data streams: arrivals over virtual time, drift in the class mix, delayed labels
(host side, numpy, seeded; the device side is :func:`stream_view`).

A client starts with its partition's samples (arrived and labelled at t = 0) and then
receives new samples as a Poisson process (``rate_per_hour``, optionally diurnal). A
sample arriving at time tau has a class drawn from the client's class mix at tau (its
partition's class histogram, moved by the drift model) and is a training-set sample of
that class drawn uniformly (samples are re-drawn from the data set: the stream is a
resampling of it). Its label arrives ``delay`` later (exponential with mean
``label_delay_hours``); before that it is unusable, or carries a proxy label that is
right with probability ``proxy_accuracy``.

Everything is precomputed into fixed-shape tables, one row per client, arrivals in
ascending time order: indices into the training set, arrival times, label times and
the label a training task sees before the true one arrives. A client's data at time t
is a mask over its row: arrived by t, inside the window (the last ``window_hours`` and
the last ``window_samples`` arrivals), and labelled by t (or proxy-labelled).

Drift models (``drift``):

- ``none``: the partition's class mix throughout.
- ``rotation``: every client's class mix turns by one class each ``period_hours``
  (linearly in between): class k's share moves to class k+1.
- ``surge``: a global "viral trend": between ``start_hours`` and ``start_hours +
  duration_hours`` every client's mix is ``(1 - strength) * own + strength * uniform
  over surge_classes``.
- ``per_client``: each client switches, at a uniform random time in the horizon, to a
  fresh Dirichlet(``alpha``) mix.

``StreamConfig()`` (no arrivals, no drift, no delay) is the static special case.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Mapping

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from ..options import OptionError, Range
from .partition import Partition

DRIFTS = ("none", "rotation", "surge", "per_client")


class StreamError(OptionError):
    """A stream option is out of range (one line, naming it)."""


@dataclasses.dataclass(frozen=True)
class StreamConfig:
    rate_per_hour: float = 0.0  # new samples per client per virtual hour (0: static data)
    diurnal_amplitude: float = 0.0  # rate(t) = rate * (1 + a * sin(2 pi (t / 24 h + phase_client))), a in [0, 1]
    window_hours: float = math.inf  # a client keeps samples that arrived in the last window_hours
    window_samples: int | None = None  # ... and at most its last window_samples arrivals
    drift: str = "none"  # none | rotation | surge | per_client
    period_hours: float = 6.0  # rotation: hours per class step
    start_hours: float = 1.0  # surge
    duration_hours: float = 2.0  # surge
    surge_classes: tuple[int, ...] = (0,)  # surge
    strength: float = 0.8  # surge: share of the surging classes
    # surge: the surging classes are new - absent from every client's data and mix before the surge
    # (the partition's samples of them appear at its start): a model that never saw them must adapt
    surge_new: bool = False
    alpha: float = 0.1  # per_client: Dirichlet concentration of the new mix
    label_delay_hours: float = 0.0  # mean of the exponential label delay (0: labels come with the sample)
    proxy_accuracy: float | None = None  # None: unlabelled samples are unusable; p: proxy label right w.p. p
    live_eval: bool = True  # test accuracy weighted to the population's class mix at the checkpoint

    RANGES: ClassVar[Mapping[str, Range]] = {
        "rate_per_hour": Range.at_least(0), "diurnal_amplitude": Range.fraction(),
        # window_samples goes to the device as an int32 (streams_to_device): its range ends there
        "window_hours": Range.above(0, inf_ok=True), "window_samples": Range(1, 2 ** 31 - 1),
        "period_hours": Range.above(0), "start_hours": Range.at_least(0), "duration_hours": Range.above(0),
        "strength": Range.fraction(), "alpha": Range.above(0), "label_delay_hours": Range.at_least(0),
        "proxy_accuracy": Range.fraction()}

    def __post_init__(self):
        classes = self.surge_classes
        if isinstance(classes, str):  # --set stream.surge_classes=0,3
            try:
                classes = [int(c) for c in classes.replace(" ", "").split(",") if c]
            except ValueError:
                raise StreamError(f"stream.surge_classes={self.surge_classes!r}: must be class numbers, "
                                  "e.g. 0,3") from None
        if isinstance(classes, (list, tuple, np.ndarray)):
            object.__setattr__(self, "surge_classes", tuple(int(c) for c in classes))
        checks = [
            ("rate_per_hour", self.rate_per_hour >= 0 and math.isfinite(self.rate_per_hour), ">= 0"),
            ("diurnal_amplitude", 0 <= self.diurnal_amplitude <= 1, "in [0, 1]"),
            ("window_hours", self.window_hours > 0, "> 0 (inf: keep everything)"),
            ("window_samples", self.window_samples is None or self.window_samples >= 1, ">= 1 (or none)"),
            ("drift", self.drift in DRIFTS, " | ".join(DRIFTS)),
            ("period_hours", self.period_hours > 0, "> 0"),
            ("start_hours", self.start_hours >= 0, ">= 0"),
            ("duration_hours", self.duration_hours > 0, "> 0"),
            ("strength", 0 <= self.strength <= 1, "in [0, 1]"),
            ("surge_classes", len(self.surge_classes) > 0, "a non-empty list of classes"),
            ("alpha", self.alpha > 0, "> 0"),
            ("label_delay_hours", self.label_delay_hours >= 0 and math.isfinite(self.label_delay_hours), ">= 0"),
            ("proxy_accuracy", self.proxy_accuracy is None or 0 <= self.proxy_accuracy <= 1, "in [0, 1] (or none)"),
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise StreamError(f"stream.{name}={getattr(self, name)!r}: must be {allowed}")

    @property
    def is_static(self) -> bool:
        """No arrivals, no drift, no label delay: today's static client data."""
        return self.rate_per_hour == 0 and self.drift == "none" and self.label_delay_hours == 0

    def shift_times_s(self) -> list[float]:
        """The sudden shifts (seconds): a surge's start and end. Gradual and per-client drift have none."""
        if self.drift == "surge":
            return [3600.0 * self.start_hours, 3600.0 * (self.start_hours + self.duration_hours)]
        return []

    def check_classes(self, num_classes: int) -> None:
        bad = [c for c in self.surge_classes if not 0 <= c < num_classes]
        if self.drift == "surge" and bad:
            raise StreamError(f"stream.surge_classes={list(self.surge_classes)}: classes must lie in "
                              f"[0, {num_classes})")


def class_histograms(partition: Partition, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """(num_clients, num_classes) class shares of each client's partition data."""
    counts = np.asarray(partition.counts)
    valid = np.arange(partition.index_table.shape[1])[None, :] < counts[:, None]
    y = np.asarray(labels)[np.asarray(partition.index_table)]
    hist = np.zeros((len(counts), num_classes), np.float64)
    rows = np.broadcast_to(np.arange(len(counts))[:, None], y.shape)
    np.add.at(hist, (rows[valid], y[valid]), 1.0)
    return hist / np.maximum(hist.sum(1, keepdims=True), 1.0)


@dataclasses.dataclass(frozen=True)
class DriftSchedule:
    """Each client's class mix as a function of virtual time (seconds)."""

    cfg: StreamConfig
    base: np.ndarray  # (num_clients, num_classes) the partition's mix
    switch_s: np.ndarray  # (num_clients,) per_client: when the client switches (inf: never)
    new_mix: np.ndarray  # (num_clients, num_classes) per_client: the mix after the switch

    @classmethod
    def create(cls, cfg: StreamConfig, base: np.ndarray, horizon_s: float, rng: np.random.Generator):
        n, k = base.shape
        switch = np.full(n, np.inf)
        new = base.copy()
        if cfg.drift == "per_client":
            switch = rng.uniform(0.0, horizon_s, n)
            new = rng.dirichlet(np.full(k, cfg.alpha), n)
        return cls(cfg, np.asarray(base, np.float64), switch, new)

    def mix_at(self, clients, t_s) -> np.ndarray:
        """(m, classes): client ``clients[i]``'s class mix at time ``t_s[i]`` (seconds)."""
        clients = np.asarray(clients, np.int64).reshape(-1)
        t = np.broadcast_to(np.asarray(t_s, np.float64), clients.shape)
        base = self.base[clients]
        cfg, k = self.cfg, self.base.shape[1]
        if cfg.drift == "rotation":  # class j's share at shift s comes from class j - s
            steps = t / (3600.0 * cfg.period_hours)
            whole, frac = np.floor(steps).astype(np.int64), (steps - np.floor(steps))[:, None]
            idx = np.arange(k)[None, :]
            lo = np.take_along_axis(base, (idx - whole[:, None]) % k, 1)
            hi = np.take_along_axis(base, (idx - whole[:, None] - 1) % k, 1)
            return (1 - frac) * lo + frac * hi
        if cfg.drift == "surge":
            target = np.zeros(k)
            target[list(cfg.surge_classes)] = 1.0 / len(cfg.surge_classes)
            start = 3600.0 * cfg.start_hours
            on = (t >= start) & (t < 3600.0 * (cfg.start_hours + cfg.duration_hours))
            w = np.where(on, cfg.strength, 0.0)[:, None]
            out = (1 - w) * base + w * target
            if cfg.surge_new:  # before the surge the surging classes do not exist yet
                before = base * (1 - target.astype(bool))
                mass = before.sum(1, keepdims=True)
                others = (1 - target.astype(bool)) / max((1 - target.astype(bool)).sum(), 1)
                before = np.where(mass > 0, before / np.maximum(mass, 1e-300), others)
                out = np.where((t < start)[:, None], before, out)
            return out
        if cfg.drift == "per_client":
            return np.where((t >= self.switch_s[clients])[:, None], self.new_mix[clients], base)
        return base.copy()

    def mix(self, t_s: float) -> np.ndarray:
        """(clients, classes): every client's class mix at ``t_s``."""
        return self.mix_at(np.arange(len(self.base)), float(t_s))

    def population_mix(self, t_s: float, weights: np.ndarray | None = None) -> np.ndarray:
        """The population's class mix at ``t_s``: the clients' mixes averaged (by ``weights``)."""
        m = self.mix(float(t_s))
        w = np.ones(len(m)) if weights is None else np.asarray(weights, np.float64)
        return (w[:, None] * m).sum(0) / w.sum()


@dataclasses.dataclass(frozen=True, eq=False)
class ClientStreams:
    """Fixed-shape stream tables, one row per client, arrivals in ascending time order."""

    index_table: np.ndarray  # (clients, width) int32 training-set rows (padding: 0)
    arrival_s: np.ndarray  # (clients, width) float32 seconds, inf past the row's entries
    label_s: np.ndarray  # (clients, width) float32: when the true label arrives
    proxy_y: np.ndarray  # (clients, width) int32: the label a task sees before label_s (-1: unusable)
    schedule: DriftSchedule
    cfg: StreamConfig

    @property
    def width(self) -> int:
        return int(self.index_table.shape[1])

    @property
    def max_usable(self) -> int:
        """The most samples a client can hold at once (bounds a task's length)."""
        w = self.cfg.window_samples
        return self.width if w is None else min(self.width, w)

    def usable(self, clients, t_s) -> np.ndarray:
        """(len(clients), width) bool: the samples each client can train on at ``t_s``
        (arrived, in the window, labelled or proxy-labelled)."""
        clients = np.asarray(clients)
        t = np.broadcast_to(np.asarray(t_s, np.float32), clients.shape)[:, None]  # float32: as stream_view
        arr = self.arrival_s[clients]
        mask = arr <= t
        if math.isfinite(self.cfg.window_hours):
            mask &= arr > t - np.float32(3600.0 * self.cfg.window_hours)
        if self.cfg.window_samples is not None:
            arrived = (arr <= t).sum(1, keepdims=True)
            mask &= np.arange(self.width)[None, :] >= arrived - self.cfg.window_samples
        mask &= (self.label_s[clients] <= t) | (self.proxy_y[clients] >= 0)
        return mask

    def label_report(self, client: int, t_s: float) -> tuple[float, float]:
        """What a task started at ``t_s`` on ``client`` trains on, label-wise: the time the newest
        ground-truth label in its data arrived (0 if none), and the share of its samples that carry
        a proxy label (their true label not there yet)."""
        usable = self.usable([client], t_s)[0]
        if not usable.any():
            return 0.0, 0.0
        label = self.label_s[client][usable]
        truth = label <= np.float32(t_s)
        newest = float(label[truth].max()) if truth.any() else 0.0
        return newest, float(1.0 - truth.mean())

    def counts(self, clients, t_s) -> np.ndarray:
        """Usable samples per client at ``t_s``."""
        return self.usable(clients, t_s).sum(1).astype(np.int32)


# bytes a stream table cell costs: sample index (int32), arrival and label times (float64) on the host,
# their device copies, and the masks built from them
STREAM_CELL_BYTES = 48


def build_streams(partition: Partition, labels: np.ndarray, num_classes: int, cfg: StreamConfig,
                  horizon_s: float, seed: int | np.random.SeedSequence = 0) -> ClientStreams:
    """The stream tables for ``partition`` over ``[0, horizon_s]`` (seeded)."""
    cfg.check_classes(num_classes)
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    counts = np.asarray(partition.counts)
    table = np.asarray(partition.index_table)
    n = len(counts)
    base = class_histograms(partition, labels, num_classes)
    if cfg.rate_per_hour > 0 and not math.isfinite(horizon_s):
        raise StreamError("stream.rate_per_hour > 0 needs a finite horizon (max_virtual_hours)")
    if cfg.rate_per_hour > 0:  # the tables below are (clients x the longest stream): refused before allocating
        from ..memory import check_fits

        width = float(counts.max(initial=0)) + cfg.rate_per_hour * (1 + cfg.diurnal_amplitude) * horizon_s / 3600.0
        check_fits(n * width * STREAM_CELL_BYTES, f"stream.rate_per_hour={cfg.rate_per_hour:g}",
                   f"the streams of {n} clients (up to ~{width:,.0f} samples each over {horizon_s / 3600:g} virtual "
                   f"hours, {STREAM_CELL_BYTES} bytes a sample on the host and the device)")
    schedule = DriftSchedule.create(cfg, base, horizon_s if math.isfinite(horizon_s) else 0.0, rng)
    # every training sample, grouped by class: class k's samples are by_class[starts[k]:starts[k] + sizes[k]]
    by_class = np.argsort(labels, kind="stable")
    sizes = np.bincount(labels, minlength=num_classes)[:num_classes]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rows_arr = []
    phase = rng.uniform(0.0, 1.0, n)
    for c in range(n):  # host-side precomputation at build time, once per run
        arr = np.zeros(0)
        if cfg.rate_per_hour > 0:
            peak = cfg.rate_per_hour * (1 + cfg.diurnal_amplitude) / 3600.0
            m = rng.poisson(peak * horizon_s)
            cand = np.sort(rng.uniform(0.0, horizon_s, m))
            rate = 1 + cfg.diurnal_amplitude * np.sin(2 * np.pi * (cand / 86400.0 + phase[c]))
            arr = cand[rng.uniform(0.0, 1 + cfg.diurnal_amplitude, m) < rate]
        rows_arr.append(arr)
    # classes and samples of every arrival, drawn in one go from each client's mix at its time
    idx_rows = []
    for c in range(n):
        arr = rows_arr[c]
        if len(arr):
            mix = schedule.mix_at(np.full(len(arr), c), arr)  # (m, classes)
            cum = np.cumsum(mix, 1)
            cls = np.minimum((rng.uniform(0, 1, (len(arr), 1)) * cum[:, -1:] > cum).sum(1), num_classes - 1)
            keep = sizes[cls] > 0  # a class absent from the data set cannot arrive
            arr, cls = arr[keep], cls[keep]
            picks = by_class[starts[cls] + rng.integers(0, sizes[cls])].astype(np.int64)
        else:
            picks = np.zeros(0, np.int64)
        rows_arr[c] = np.concatenate([np.zeros(counts[c]), arr])
        idx_rows.append(np.concatenate([table[c, :counts[c]], picks]))
    width = max(len(r) for r in idx_rows)
    index_table = np.zeros((n, width), np.int32)
    arrival = np.full((n, width), np.inf)
    for c in range(n):
        index_table[c, :len(idx_rows[c])] = idx_rows[c]
        arrival[c, :len(rows_arr[c])] = rows_arr[c]
    delay = np.zeros((n, width))
    if cfg.label_delay_hours > 0:
        delay = rng.exponential(3600.0 * cfg.label_delay_hours, (n, width))
    initial = np.arange(width)[None, :] < counts[:, None]
    if cfg.drift == "surge" and cfg.surge_new:  # the partition's samples of new classes appear at the surge
        new_class = initial & np.isin(labels[index_table], cfg.surge_classes)
        arrival = np.where(new_class, 3600.0 * cfg.start_hours, arrival)
        order = np.argsort(arrival, axis=1, kind="stable")  # rows stay in arrival order
        index_table, arrival = np.take_along_axis(index_table, order, 1), np.take_along_axis(arrival, order, 1)
        initial = np.take_along_axis(initial, order, 1)
    label = np.where(initial, arrival, arrival + delay)  # the partition's own samples come labelled
    # float32 seconds here as on the device, so the host's counts and the device's masks agree
    arrival, label = arrival.astype(np.float32), label.astype(np.float32)
    true_y = labels[index_table]
    proxy = np.full((n, width), -1, np.int32)
    if cfg.proxy_accuracy is not None:
        right = rng.uniform(0, 1, (n, width)) < cfg.proxy_accuracy
        wrong = (true_y + rng.integers(1, max(num_classes, 2), (n, width))) % num_classes  # another class
        proxy = np.where(right, true_y, wrong).astype(np.int32)
    return ClientStreams(index_table, arrival, label, proxy, schedule, cfg)


@flax.struct.dataclass
class DeviceStreams:
    """The stream tables on the device (float32 seconds; a jax pytree)."""

    arrival_s: jax.Array  # (clients, width)
    label_s: jax.Array
    proxy_y: jax.Array  # int32, -1: unusable before label_s
    window_s: jax.Array  # () float32, inf: no time window
    window_samples: jax.Array  # () int32, width: no count window


def streams_to_device(streams: ClientStreams) -> DeviceStreams:
    cfg = streams.cfg
    return DeviceStreams(jnp.asarray(streams.arrival_s, jnp.float32), jnp.asarray(streams.label_s, jnp.float32),
                         jnp.asarray(streams.proxy_y, jnp.int32), jnp.float32(3600.0 * cfg.window_hours),
                         jnp.int32(cfg.window_samples if cfg.window_samples is not None else streams.width))


def stream_view(streams: DeviceStreams, client: jax.Array, t_s: jax.Array, row: jax.Array,
                true_y: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One client's training data at ``t_s`` on the device: its usable positions first (in
    arrival order), their count, and the label each position carries (the true one once it
    has arrived, else the proxy). Returns (row, count, labels), rows of the table's width."""
    arr = streams.arrival_s[client]
    t = t_s.astype(jnp.float32)
    width = arr.shape[0]
    arrived = arr <= t
    pos = jnp.arange(width)
    labelled = streams.label_s[client] <= t
    proxy = streams.proxy_y[client]
    mask = (arrived & (arr > t - streams.window_s) & (pos >= arrived.sum() - streams.window_samples)
            & (labelled | (proxy >= 0)))
    order = jnp.argsort(jnp.where(mask, pos, width + pos))
    labels = jnp.where(labelled, true_y, proxy)
    return row[order], mask.sum().astype(jnp.int32), labels[order]
