"""A run's own figures, written into its results folder: ``accuracy.png`` (test accuracy against
virtual hours, the target dashed) and ``participation.png`` (updates aggregated per client, and when
each client's updates entered an aggregation). They draw what they are given: the checkpoints come
from results.py (:func:`~felix_jax.experiment.results.plot_accuracy`, which refuses a run without
any), the counts and fairness indices from event_log.py
(:func:`~felix_jax.experiment.event_log.plot_participation`). ``felix-jax report RUN_DIR`` adds its
curves (:func:`run_curves_figure`: accuracy, bytes moved, staleness), drawn for the page only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .style import ACCURACY_DPI, FONT_L, FONT_S, FONT_XL, FONT_XS, GRID_ALPHA, NOTE_COLOR, TRAIN_COLOR, pyplot, save


def accuracy_figure(checkpoints: list, path: Path, title: str = "", target: float | None = None) -> Path:
    """``accuracy.png`` of a run's test checkpoints (at least one)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    accuracy_panel(ax, checkpoints, target)
    ax.set_title(title)
    fig.tight_layout()
    return save(fig, path, dpi=ACCURACY_DPI, tight=False)


def accuracy_panel(ax, checkpoints: list, target: float | None = None) -> None:
    """A run's test accuracy against virtual hours on ``ax``, the target dashed, a legend naming both."""
    ax.plot([c.time_s / 3600 for c in checkpoints], [c.accuracy for c in checkpoints], lw=1.2,
            label="test accuracy")
    if target:
        ax.axhline(target, color="grey", ls="--", lw=0.8, label=f"target {target:g}")
        ax.legend(loc="lower right", fontsize=FONT_S, framealpha=0.85)
    ax.set_xlabel("virtual hours")
    ax.set_ylabel("test accuracy (fraction correct)")
    ax.grid(alpha=GRID_ALPHA)


# Above this many clients, participation.png draws the population's distribution, not a bar per client
# (10^5 bars took minutes and came out blank), and the raster as the updates' density
MAX_CLIENT_BARS = 2_000
MAX_RASTER_MARKS = 20_000  # updates drawn one mark each; more as a 2-D histogram
RASTER_BINS = 200  # the 2-D histogram's bins along each axis, at most
QUANTILES = (50, 90, 99)  # the percentiles of updates per client marked on the histogram
NAMED = 3  # clients named at each end: the most updates and the fewest


def participation_figure(counts: np.ndarray, stats: dict, hours: np.ndarray, clients: np.ndarray,
                         path: str | Path, title: str = "") -> Path:
    """``participation.png`` (see :func:`participation_axes`), written to ``path``."""
    return save(participation_axes(counts, stats, hours, clients, title), path, tight=False)


def participation_axes(counts: np.ndarray, stats: dict, hours: np.ndarray, clients: np.ndarray, title: str = ""):
    """``participation.png``'s figure: ``counts`` (updates per client) with the fairness indices ``stats``
    (left), and each update that entered an aggregation at ``hours`` (virtual) from ``clients`` (right).

    Up to :data:`MAX_CLIENT_BARS` clients the left panel is a bar per client, most first, and the right a
    mark per update (client id against hours). A larger population is drawn in the same time at any size
    (seconds at 10^7 clients): a histogram of updates per client with its percentiles and the clients at
    each end named, and more than :data:`MAX_RASTER_MARKS` updates as a 2-D histogram of updates per
    (hours, client ids); each panel says so."""
    plt = pyplot()
    counts = np.asarray(counts)
    hours, clients = np.asarray(hours, np.float64), np.asarray(clients, np.int64)
    num_clients = counts.size
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))

    def fmt(v):
        return "-" if v is None else f"{v:.2f}"

    left.set_title(f"{stats['clients_trained']:,} of {num_clients:,} clients; Gini "
                   f"{fmt(stats['participation_gini'])}, Jain {fmt(stats['participation_jain'])}, top 10% "
                   f"{fmt(stats['participation_top10_share'])}", fontsize=FONT_L)
    if num_clients <= MAX_CLIENT_BARS:
        order = np.argsort(-counts, kind="stable")
        left.bar(np.arange(num_clients), counts[order], width=1.0, color=TRAIN_COLOR)
        left.set_xlabel("clients, most updates first (rank)")
        left.set_ylabel("updates aggregated (count)")
    else:
        _counts_histogram(left, counts)
    if hours.size <= MAX_RASTER_MARKS:
        if hours.size:
            right.scatter(hours, clients, s=30, marker="|", linewidths=1.0, color=TRAIN_COLOR)
        right.set_title("updates entering an aggregation", fontsize=FONT_L)
    else:
        _updates_density(fig, right, hours, clients, num_clients)
    right.set_xlabel("virtual hours")
    right.set_ylabel("client id")
    for ax in (left, right):
        ax.grid(alpha=GRID_ALPHA)
    fig.suptitle(title, fontsize=FONT_XL)
    fig.tight_layout()
    return fig


def _counts_histogram(ax, counts: np.ndarray) -> None:
    """Updates per client as a histogram (clients on a log axis), :data:`QUANTILES` marked, and the
    :data:`NAMED` clients with the most and the fewest updates named; O(clients), no sort."""
    n = counts.size
    top = int(counts.max(initial=0))
    if top <= 60:  # one bin per count
        edges = np.arange(-0.5, top + 1.5)
        clients_per_bin = np.bincount(counts, minlength=top + 1)
    else:
        clients_per_bin, edges = np.histogram(counts, bins=50)
    ax.stairs(clients_per_bin, edges, fill=True, color=TRAIN_COLOR)
    ax.set_yscale("log")
    ax.set_ylim(0.7, n * 60)  # room above the tallest bin for the note
    ax.set_xlabel("updates aggregated per client (count)")
    _thousands(ax.xaxis)
    ax.set_ylabel("clients")
    marks = np.percentile(counts, QUANTILES, method="inverted_cdf")
    for q, value, ls in zip(QUANTILES, marks, ("-", "--", ":")):
        ax.axvline(value, color="0.2", ls=ls, lw=0.9, label=f"P{q} {value:g}")
    ax.legend(loc="center right", fontsize=FONT_S, framealpha=0.85)
    most = np.argpartition(-counts, NAMED - 1)[:NAMED]
    most = most[np.lexsort((most, -counts[most]))]
    low = int(counts.min())
    at_low = np.flatnonzero(counts == low)
    if at_low.size >= NAMED:  # ties at the bottom (often the clients never trained): the first few ids
        fewest = f"{at_low.size:,} clients at {low:,} (client {', '.join(map(str, at_low[:NAMED]))}...)"
    else:
        ids = np.argpartition(counts, NAMED - 1)[:NAMED]
        fewest = ", ".join(f"client {i} ({counts[i]:,})" for i in ids[np.lexsort((ids, counts[ids]))])
    text = ax.text(0.98, 0.97, f"{n:,} clients: shown as a histogram\n"
                   f"most: {', '.join(f'client {i} ({counts[i]:,})' for i in most)}\nfewest: {fewest}",
                   transform=ax.transAxes, ha="right", va="top", fontsize=FONT_XS, color=NOTE_COLOR,
                   bbox=dict(facecolor="white", edgecolor="none", alpha=0.85, pad=1.5))
    text.set_in_layout(False)


def _thousands(axis) -> None:
    """At most 6 ticks on ``axis``, labelled 100,000 rather than 1e5 (they would run into each other)."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    axis.set_major_locator(MaxNLocator(6, integer=True))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))


def _updates_density(fig, ax, hours: np.ndarray, clients: np.ndarray, num_clients: int) -> None:
    """The updates as a 2-D histogram: updates per (virtual hours, client ids) bin, zero white."""
    id_bins = min(RASTER_BINS, max(1, num_clients))
    t0, t1 = float(hours.min()), float(hours.max())
    span = t1 - t0 if t1 > t0 else 1.0
    time_bins = RASTER_BINS
    row = np.minimum(clients * id_bins // max(num_clients, 1), id_bins - 1)
    col = np.minimum(((hours - t0) / span * time_bins).astype(np.int64), time_bins - 1)
    grid = np.bincount(row * time_bins + col, minlength=id_bins * time_bins).reshape(id_bins, time_bins)
    shown = np.ma.masked_equal(grid, 0)
    from matplotlib.colors import LogNorm

    image = ax.imshow(shown, origin="lower", aspect="auto", interpolation="nearest", cmap="viridis",
                      norm=LogNorm(vmin=1, vmax=max(2, int(grid.max()))), extent=(t0, t0 + span, 0, num_clients))
    _thousands(ax.yaxis)
    per_bin = -(-num_clients // id_bins)
    fig.colorbar(image, ax=ax, pad=0.01).set_label(f"updates per bin ({per_bin:,} client ids x "
                                                   f"{span / time_bins:.2g} h)", fontsize=FONT_S)
    ax.set_title(f"{hours.size:,} updates entering an aggregation: shown as a 2-D histogram", fontsize=FONT_L)


def run_curves_figure(checkpoints: list, staleness: list, path: str | Path, title: str = "",
                      target: float | None = None) -> Path:
    """A run's curves for its report: test accuracy and bytes moved (in the unit that fits) against
    virtual hours, and the staleness of the aggregated updates (a histogram; none: said so)."""
    from ..units import byte_unit

    plt = pyplot()
    fig, (acc, moved, stale) = plt.subplots(1, 3, figsize=(13, 3.6))
    hours = [c.time_s / 3600 for c in checkpoints]
    accuracy_panel(acc, checkpoints, target)
    acc.set_title("test accuracy", fontsize=FONT_L)
    unit, per_unit = byte_unit(max(c.bytes_total for c in checkpoints))
    moved.plot(hours, [c.bytes_total / per_unit for c in checkpoints], lw=1.2, color=TRAIN_COLOR)
    moved.set_xlabel("virtual hours")
    moved.set_ylabel(f"{unit} moved (train + eval, cumulative)")
    moved.set_title("bytes moved", fontsize=FONT_L)
    if staleness:
        values = np.asarray(staleness, np.float64)
        edges = np.arange(-0.5, values.max() + 1.5) if values.max() <= 60 else 30
        stale.hist(values, bins=edges, color=TRAIN_COLOR, edgecolor="white")
        stale.set_title(f"staleness of {values.size} aggregated updates (P50 {np.median(values):g})", fontsize=FONT_L)
    else:
        stale.text(0.5, 0.5, "no aggregated updates", ha="center", va="center", transform=stale.transAxes)
        stale.set_title("staleness", fontsize=FONT_L)
    stale.set_xlabel("staleness (rounds)")
    stale.set_ylabel("updates")
    for ax in (acc, moved, stale):
        ax.grid(alpha=GRID_ALPHA)
    fig.suptitle(title, fontsize=FONT_XL)
    fig.tight_layout()
    return save(fig, path, dpi=ACCURACY_DPI, tight=False)
