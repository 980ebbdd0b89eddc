"""A run's ``partition.png``: how its training data was split over clients (experiment/split.py):
samples per client, largest first (left), and each client's label shares in that order (right)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .style import FONT_L, FONT_XL, GRID_ALPHA, TRAIN_COLOR, pyplot, save

MAX_BARS = 2000  # clients drawn one bar each; a larger fleet is drawn at evenly spaced ranks


def split_figure(counts: np.ndarray, label_counts: np.ndarray, summary: dict, path: str | Path,
                 title: str = "") -> Path:
    plt = pyplot()
    counts = np.asarray(counts)
    n = counts.size
    order = np.argsort(-counts, kind="stable")
    # past MAX_BARS clients, every (n / MAX_BARS)-th rank stands for its neighbours
    ranks = np.arange(n) if n <= MAX_BARS else np.linspace(0, n - 1, MAX_BARS).round().astype(np.int64)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.bar(ranks, counts[order][ranks], width=max(1.0, n / len(ranks)), color=TRAIN_COLOR)
    left.set_xlabel("clients, largest first (rank)")
    left.set_ylabel("training samples")
    left.set_title(f"{n:,} clients: {summary['min']} / {summary['median']:g} / {summary['max']} samples "
                   "(min / median / max)", fontsize=FONT_L)
    left.grid(alpha=GRID_ALPHA)
    share = summary.get("mean_top_class_share")
    if label_counts is None:  # a fleet whose label counts were not kept (experiment/split.py)
        right.text(0.5, 0.5, f"labels per client are kept for fleets of at most\nthe split's detail limit; "
                   f"mean top-class share {'-' if share is None else f'{share:.2f}'}", ha="center", va="center",
                   transform=right.transAxes, fontsize=FONT_L)
        right.set_axis_off()
        fig.suptitle(title, fontsize=FONT_XL)
        fig.tight_layout()
        return save(fig, path, tight=False)
    k = label_counts.shape[1]
    picked = label_counts[order][ranks]
    shares = picked / np.maximum(picked.sum(axis=1, keepdims=True), 1)
    n_drawn = len(ranks)
    bottom = np.zeros(n_drawn)
    cmap = plt.get_cmap("tab10" if k <= 10 else "tab20")
    for j in range(k):
        right.bar(ranks, shares[:, j], bottom=bottom, width=max(1.0, n / n_drawn), color=cmap(j % cmap.N),
                  linewidth=0)
        bottom += shares[:, j]
    right.set_xlabel("clients, largest first (rank)")
    right.set_ylabel("share of the client's samples")
    right.set_ylim(0, 1)
    right.set_title(f"labels per client ({k} classes); mean top-class share "
                    f"{'-' if share is None else f'{share:.2f}'}", fontsize=FONT_L)
    fig.suptitle(title, fontsize=FONT_XL)
    fig.tight_layout()
    return save(fig, path, tight=False)
