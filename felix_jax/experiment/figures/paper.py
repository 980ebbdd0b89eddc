"""The paper's diagnostic figures, drawn from a matrix's finished runs.

Each row is one finished run: ``strategy`` (its cell label), ``availability``, ``seed``,
``run_dir`` (its results folder) and ``_summary`` (its summary.json), as
``benchmarks/paper_matrix.py`` and :func:`felix_jax.experiment.matrix.run_matrix` produce.

- ``selection.png`` (the paper's Fig. 13): per regime, the mean utility and the mean
  duration of the clients each strategy picked for training (mean over seeds, bars from
  the lowest to the highest seed).
- ``eval_tier.png`` (Fig. 14): FeLiX with and without its eval tier (``felix-no-eval``),
  where both ran: the same two quantities, the hours to the target, and what the tier did
  (evals per aggregation, the share of train picks on a utility an eval refreshed).
- ``late_weights.png`` (Fig. 15): the aggregation weight of an update against its
  staleness, relative to the strategy's mean weight of fresh updates (TierFuse in ``felix``,
  FedBuff's weights in ``felix-no-tierfuse`` and the OORT+Async strategies), and the hours to
  the target of ``felix`` against ``felix-no-tierfuse``.

A figure whose strategies did not run is not drawn (and an old copy is removed); a panel
whose cells have no values says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np

from ..cells import regime_label
from .style import FONT_L, FONT_M, FONT_S, FONT_XS, GRID_ALPHA, NOTE_COLOR, palette, pyplot, save

FIGURES = ("selection.png", "eval_tier.png", "late_weights.png")

# the strategies whose weights Fig. 15 compares: TierFuse, and FedBuff's 1/sqrt(1+s) in the others
LATE_WEIGHT_STRATEGIES = ("felix", "felix-no-tierfuse", "oort-async-oracle", "oort-async")
MAX_STALENESS = 20  # Fig. 15's x axis: staleness 0..20 (later updates pooled at 20)


def _cells(rows: list[dict], st: str, rg: str) -> list[dict]:
    return [r for r in rows if r["strategy"] == st and r["availability"] == rg]


def _values(cells: list[dict], key: str) -> list[float]:
    return [float(r["_summary"][key]) for r in cells if r["_summary"].get(key) is not None]


def _bar(ax, x: float, values: list[float], color, width: float = 0.8) -> None:
    """A bar at the mean of ``values`` with a line from their lowest to their highest; a missing
    value is a small grey cross at 0."""
    if not values:
        ax.plot([x], [0], marker="x", color="0.5")
        return
    mean = float(np.mean(values))
    ax.bar(x, mean, width=width, color=color)
    if len(values) > 1:
        ax.vlines(x, min(values), max(values), color="k", lw=0.8)
    ax.annotate(f"{mean:.3g}", (x, max(values)), ha="center", va="bottom", fontsize=FONT_XS, xytext=(0, 1),
                textcoords="offset points")


def _bar_axes(ax, names: list[str], title: str, ylabel: str, **ticks) -> None:
    # ``title``: the regime on its own line above what the panel shows (a trace's name with it is long)
    ax.set_xticks(range(len(names)), names, fontsize=FONT_S, **ticks)
    ax.set_title(title, fontsize=FONT_M)
    ax.set_xlabel("strategy", fontsize=FONT_S)
    ax.set_ylabel(ylabel, fontsize=FONT_S)
    ax.grid(axis="y", alpha=GRID_ALPHA)
    low, high = ax.get_ylim()  # after the bars: headroom for the value over the highest
    ax.set_ylim(low, high + 0.12 * (high - low))


def _save(fig, out: Path, name: str, title: str) -> Path:
    fig.suptitle(title, fontsize=FONT_L)
    fig.tight_layout()
    return save(fig, out / name)  # cropped to what is drawn: a long title is not cut at a narrow figure's edges


def plot_selection(rows: list[dict], strategies: list[str], regimes: list[str], out: Path,
                   label: Callable[[str], str] = regime_label) -> Path | None:
    """``selection.png``: mean picked utility and duration per strategy and regime (Fig. 13)."""
    import matplotlib.pyplot as plt

    regimes = [rg for rg in regimes if any(_cells(rows, st, rg) for st in strategies)]
    if not regimes:
        return None
    colors = {st: palette(i) for i, st in enumerate(strategies)}
    fig, axes = plt.subplots(2, len(regimes), figsize=(3.6 * len(regimes), 6.4), squeeze=False)
    for col, rg in enumerate(regimes):
        names = [st for st in strategies if _cells(rows, st, rg)]
        for row, (key, title, ylabel) in enumerate((
                ("picked_utility_mean", "utility of picked clients (higher is better)", "utility (mean per pick)"),
                ("picked_duration_mean_s", "duration of picked clients, s (lower is better)",
                 "task duration (s, mean per pick)"))):
            ax = axes[row][col]
            for i, st in enumerate(names):
                _bar(ax, i, _values(_cells(rows, st, rg), key), colors[st])
            _bar_axes(ax, names, f"{label(rg)}:\n{title}", ylabel, rotation=45, ha="right")
    return _save(fig, out, "selection.png", "selected clients (mean over seeds, line: lowest to highest seed)")


def plot_eval_tier(rows: list[dict], regimes: list[str], out: Path, label: Callable[[str], str] = regime_label,
                   on: str = "felix", off: str = "felix-no-eval") -> Path | None:
    """``eval_tier.png``: ``on`` against ``off`` where both ran (Fig. 14)."""
    import matplotlib.pyplot as plt

    regimes = [rg for rg in regimes if _cells(rows, on, rg) and _cells(rows, off, rg)]
    if not regimes:
        return None
    panels = (("picked_utility_mean", "picked utility", "utility (mean per pick)"),
              ("picked_duration_mean_s", "picked duration, s", "task duration (s)"),
              ("time_to_target_h", "hours to target", "virtual hours to target"),
              ("evals_per_aggregation", "evals per aggregation", "eval tasks per aggregation"),
              ("train_picks_eval_utility_share", "train picks on an eval's utility", "share of train picks"))
    fig, axes = plt.subplots(len(regimes), len(panels), figsize=(2.7 * len(panels), 2.8 * len(regimes)),
                             squeeze=False)
    for row, rg in zip(axes, regimes):
        for ax, (key, title, ylabel) in zip(row, panels):
            for i, (st, color) in enumerate(((on, "tab:blue"), (off, "tab:gray"))):
                cells = _cells(rows, st, rg)
                values = _values(cells, key)
                _bar(ax, i, values, color)
                if key == "time_to_target_h" and len(values) < len(cells):
                    ax.annotate(f"{len(values)}/{len(cells)} reached", (i, 0), ha="center", va="bottom",
                                fontsize=FONT_XS)
            _bar_axes(ax, [on, off], f"{label(rg)}:\n{title}", ylabel)
    return _save(fig, out, "eval_tier.png", "the eval tier on and off (mean over seeds, line: lowest to highest seed)")


def relative_late_weights(cells: list[dict], max_staleness: int = MAX_STALENESS) -> np.ndarray | None:
    """(max_staleness + 1,) the mean aggregation weight of updates of each staleness (the last
    entry pools everything later), over the mean weight of fresh updates; NaN where no update
    had that staleness. None without a fresh update (nothing to scale by)."""
    stale, weights = [], []
    for r in cells:
        d = json.loads((Path(r["run_dir"]) / "distributions.json").read_text())
        s, w = np.asarray(d["staleness"], np.int64), np.asarray(d["agg_weights"], np.float64)
        if s.shape == w.shape:
            keep = s >= 0
            stale.append(s[keep])
            weights.append(w[keep])
    if not stale:
        return None
    s, w = np.concatenate(stale), np.concatenate(weights)
    fresh = w[s == 0]
    if not fresh.size or fresh.mean() <= 0:
        return None
    s = np.minimum(s, max_staleness)
    total = np.bincount(s, weights=w, minlength=max_staleness + 1)
    count = np.bincount(s, minlength=max_staleness + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / count, np.nan) / fresh.mean()


def plot_late_weights(rows: list[dict], regimes: list[str], out: Path, label: Callable[[str], str] = regime_label,
                      strategies: tuple[str, ...] = LATE_WEIGHT_STRATEGIES) -> Path | None:
    """``late_weights.png``: weight against staleness, and TierFuse's time to target (Fig. 15)."""
    import matplotlib.pyplot as plt

    regimes = [rg for rg in regimes if _cells(rows, "felix", rg)]
    if not regimes:
        return None
    fig, axes = plt.subplots(len(regimes), 2, figsize=(9, 2.9 * len(regimes)), squeeze=False,
                             gridspec_kw={"width_ratios": (2.2, 1)})
    colors = {st: palette(i) for i, st in enumerate(strategies)}
    x = np.arange(MAX_STALENESS + 1)
    for (ax, bars), rg in zip(axes, regimes):
        missing = []
        for st in strategies:
            cells = _cells(rows, st, rg)
            rel = relative_late_weights(cells) if cells else None
            if rel is None:
                if cells:
                    missing.append(st)
                continue
            ax.plot(x, rel, marker=".", lw=1, color=colors[st], label=st)
        if missing:
            ax.text(0.98, 0.04, "no fresh updates: " + ", ".join(missing), transform=ax.transAxes, ha="right",
                    fontsize=FONT_S, color=NOTE_COLOR)
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        ax.set_xlabel(f"staleness at aggregation (>= {MAX_STALENESS} pooled; FedBuff's strategies overlap)")
        ax.set_ylabel("weight / fresh weight")
        ax.set_title(f"{label(rg)}: weight of late updates", fontsize=FONT_M)
        ax.grid(alpha=GRID_ALPHA)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=FONT_S)
        names = [st for st in ("felix", "felix-no-tierfuse") if _cells(rows, st, rg)]
        for i, st in enumerate(names):
            _bar(bars, i, _values(_cells(rows, st, rg), "time_to_target_h"), colors[st])
        _bar_axes(bars, names, f"{label(rg)}:\nhours to target", "virtual hours to target")
    return _save(fig, out, "late_weights.png", "TierFuse against FedBuff weights (all seeds' updates pooled)")


def plot_paper_figures(rows: list[dict], strategies: list[str], regimes: list[str], out: Path,
                       label: Callable[[str], str] = regime_label) -> list[Path]:
    """Every figure of the module docstring that the rows allow, under ``out``."""
    pyplot()  # drawing to files
    out.mkdir(parents=True, exist_ok=True)
    for name in FIGURES:
        (out / name).unlink(missing_ok=True)
    main = [st for st in strategies if "@" not in st]  # variants (STRATEGY@KEY=VALUE) only in the tables
    paths = [plot_selection(rows, main, regimes, out, label), plot_eval_tier(rows, regimes, out, label),
             plot_late_weights(rows, regimes, out, label)]
    return [p for p in paths if p is not None]
