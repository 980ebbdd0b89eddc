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

from .style import ACCURACY_DPI, FONT_L, FONT_S, FONT_XL, GRID_ALPHA, TRAIN_COLOR, pyplot, save


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


def participation_figure(counts: np.ndarray, stats: dict, aggregated: list[tuple[float, int]], path: str | Path,
                         title: str = "") -> Path:
    """``participation.png``: ``counts`` (updates per client), most first, with the fairness indices
    ``stats`` (left), and ``aggregated`` (virtual hours, client) of each update that entered an
    aggregation (right: a client raster over virtual hours)."""
    plt = pyplot()
    num_clients = len(counts)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    order = np.argsort(-counts, kind="stable")
    left.bar(np.arange(num_clients), counts[order], width=1.0, color=TRAIN_COLOR)
    left.set_xlabel("clients, most updates first (rank)")
    left.set_ylabel("updates aggregated (count)")

    def fmt(v):
        return "-" if v is None else f"{v:.2f}"

    left.set_title(f"{stats['clients_trained']} of {num_clients} clients; Gini {fmt(stats['participation_gini'])}, "
                   f"Jain {fmt(stats['participation_jain'])}, top 10% {fmt(stats['participation_top10_share'])}",
                   fontsize=FONT_L)
    if aggregated:
        t, c = zip(*aggregated)
        right.scatter(t, c, s=30, marker="|", linewidths=1.0, color=TRAIN_COLOR)
    right.set_xlabel("virtual hours")
    right.set_ylabel("client id")
    right.set_title("updates entering an aggregation", fontsize=FONT_L)
    for ax in (left, right):
        ax.grid(alpha=GRID_ALPHA)
    fig.suptitle(title, fontsize=FONT_XL)
    fig.tight_layout()
    return save(fig, path, tight=False)


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
