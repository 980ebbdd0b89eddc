"""A run's own figures, written into its results folder: ``accuracy.png`` (test accuracy against
virtual hours, the target dashed) and ``participation.png`` (updates aggregated per client, and when
each client's updates entered an aggregation). They draw what they are given: the checkpoints come
from results.py (:func:`~felix_jax.experiment.results.plot_accuracy`, which refuses a run without
any), the counts and fairness indices from event_log.py
(:func:`~felix_jax.experiment.event_log.plot_participation`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .style import ACCURACY_DPI, FONT_L, FONT_XL, GRID_ALPHA, TRAIN_COLOR, pyplot, save


def accuracy_figure(checkpoints: list, path: Path, title: str = "", target: float | None = None) -> Path:
    """``accuracy.png`` of a run's test checkpoints (at least one)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    hours = [c.time_s / 3600 for c in checkpoints]
    ax.plot(hours, [c.accuracy for c in checkpoints], lw=1.2)
    if target:
        ax.axhline(target, color="grey", ls="--", lw=0.8)
    ax.set_xlabel("virtual hours")
    ax.set_ylabel("test accuracy")
    ax.set_title(title)
    ax.grid(alpha=GRID_ALPHA)
    fig.tight_layout()
    return save(fig, path, dpi=ACCURACY_DPI, tight=False)


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
