"""A run's ``partition.png``: how its training data was split over clients (experiment/split.py):
samples per client, largest first (left), and each client's label shares in that order (right), with a
legend of the classes' colors."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .style import FONT_L, FONT_S, FONT_XL, GRID_ALPHA, NOTE_COLOR, TRAIN_COLOR, pyplot, save

MAX_BARS = 2000  # clients drawn one column each; a larger fleet is drawn at evenly spaced ranks
SHARE_PIXELS = 200  # the label-share image's height in levels


def split_figure(counts: np.ndarray, label_counts: np.ndarray, summary: dict, path: str | Path,
                 title: str = "") -> Path:
    plt = pyplot()
    from matplotlib.patches import Patch

    counts = np.asarray(counts)
    n = counts.size
    order = np.argsort(-counts, kind="stable")
    # past MAX_BARS clients, every (n / MAX_BARS)-th rank stands for its neighbours
    ranks = np.arange(n) if n <= MAX_BARS else np.linspace(0, n - 1, MAX_BARS).round().astype(np.int64)
    k = 0 if label_counts is None else label_counts.shape[1]
    colors = min(k, 20)  # tab10 up to 10 classes, else tab20, cycled past 20
    legend_cols = 1 if colors <= 10 else 2
    legend_in = legend_cols * 0.75 if k else 0.0  # room right of the label shares for their class legend
    fig, (left, right) = plt.subplots(1, 2, figsize=(10 + legend_in, 3.8))
    sizes = counts[order][ranks]
    # one polygon, not a bar per client: a step over the ranks
    left.fill_between(np.append(ranks, n), np.append(sizes, sizes[-1]), step="post", color=TRAIN_COLOR, lw=0)
    left.set_xlim(0, n)
    left.set_ylim(0, max(1, int(sizes.max())) * 1.05)
    left.set_xlabel("clients, largest first (rank)")
    left.set_ylabel("training samples")
    left.set_title(f"{n:,} clients: {summary['min']} / {summary['median']:g} / {summary['max']} samples "
                   "(min / median / max)", fontsize=FONT_L)
    left.grid(alpha=GRID_ALPHA)
    if n > MAX_BARS:  # said in the panel: a column stands for its neighbours' ranks
        left.text(0.98, 0.95, f"{n:,} clients: shown at {MAX_BARS:,} evenly spaced ranks", transform=left.transAxes,
                  ha="right", va="top", fontsize=FONT_S, color=NOTE_COLOR).set_in_layout(False)
    share = summary.get("mean_top_class_share")
    if label_counts is None:  # a fleet whose label counts were not kept (experiment/split.py)
        right.text(0.5, 0.5, f"labels per client are kept for fleets of at most\nthe split's detail limit; "
                   f"mean top-class share {'-' if share is None else f'{share:.2f}'}", ha="center", va="center",
                   transform=right.transAxes, fontsize=FONT_L)
        right.set_axis_off()
        fig.suptitle(title, fontsize=FONT_XL)
        fig.tight_layout()
        return save(fig, path, tight=False)
    picked = label_counts[order][ranks].astype(np.float64)
    cum = np.cumsum(picked, axis=1) / np.maximum(picked.sum(axis=1, keepdims=True), 1)
    # an image: column = client (by rank), pixel row = share level, its color the class holding that level
    levels = (np.arange(SHARE_PIXELS) + 0.5) / SHARE_PIXELS
    cls = np.minimum((levels[:, None, None] >= cum[None, :, :]).sum(axis=2), k - 1)
    empty = picked.sum(axis=1) == 0
    cmap = plt.get_cmap("tab10" if k <= 10 else "tab20")
    image = np.asarray(cmap(cls % cmap.N))[..., :3]
    image[:, empty] = 1.0  # a client without samples: white
    right.imshow(image, origin="lower", aspect="auto", extent=(0, n, 0, 1), interpolation="nearest")
    right.set_xlabel("clients, largest first (rank)")
    right.set_ylabel("share of the client's samples")
    right.set_ylim(0, 1)
    right.set_title(f"labels per client ({k} classes); mean top-class share "
                    f"{'-' if share is None else f'{share:.2f}'}", fontsize=FONT_L)
    fig.suptitle(title, fontsize=FONT_XL)
    right_edge = 1 - legend_in / fig.get_size_inches()[0]
    fig.tight_layout(rect=(0, 0, right_edge, 1))
    # which color is which class: class i, and where colors cycle (past 20 classes) every class sharing it
    labels = [", ".join(str(c) for c in range(i, k, cmap.N)) for i in range(colors)]
    fig.legend([Patch(facecolor=cmap(i)) for i in range(colors)], labels, title="class", loc="center left",
               bbox_to_anchor=(right_edge, 0.5), ncol=legend_cols, fontsize=FONT_S, title_fontsize=FONT_S,
               frameon=False, handlelength=1.0, columnspacing=0.8)
    return save(fig, path, tight=False)
