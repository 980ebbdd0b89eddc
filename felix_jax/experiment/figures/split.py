"""A run's ``partition.png``: how its training data was split over clients (experiment/split.py):
samples per client, largest first (left), and each client's label shares in that order (right)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .style import FONT_L, FONT_XL, GRID_ALPHA, TRAIN_COLOR, pyplot, save


def split_figure(counts: np.ndarray, label_counts: np.ndarray, summary: dict, path: str | Path,
                 title: str = "") -> Path:
    plt = pyplot()
    order = np.argsort(-np.asarray(counts), kind="stable")
    n, k = label_counts.shape
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.bar(np.arange(n), np.asarray(counts)[order], width=1.0, color=TRAIN_COLOR)
    left.set_xlabel("clients, largest first (rank)")
    left.set_ylabel("training samples")
    left.set_title(f"{n} clients: {summary['min']} / {summary['median']:g} / {summary['max']} samples "
                   "(min / median / max)", fontsize=FONT_L)
    left.grid(alpha=GRID_ALPHA)
    shares = label_counts[order] / np.maximum(label_counts[order].sum(axis=1, keepdims=True), 1)
    bottom = np.zeros(n)
    cmap = plt.get_cmap("tab10" if k <= 10 else "tab20")
    for j in range(k):
        right.bar(np.arange(n), shares[:, j], bottom=bottom, width=1.0, color=cmap(j % cmap.N), linewidth=0)
        bottom += shares[:, j]
    right.set_xlabel("clients, largest first (rank)")
    right.set_ylabel("share of the client's samples")
    right.set_ylim(0, 1)
    share = summary.get("mean_top_class_share")
    right.set_title(f"labels per client ({k} classes); mean top-class share "
                    f"{'-' if share is None else f'{share:.2f}'}", fontsize=FONT_L)
    fig.suptitle(title, fontsize=FONT_XL)
    fig.tight_layout()
    return save(fig, path, tight=False)
