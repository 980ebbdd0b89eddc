"""``speedup_vs_target.png``: each baseline's paired ratio to the reference against the target accuracy
(:func:`felix_jax.experiment.curve.speedup_along_curve`), with its 95% band, one panel per regime."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..cells import paper_regime, regime_label
from .style import (FONT_M, FONT_S, GRID_ALPHA, NOTE_COLOR, legend_below, pyplot, ratio_label, ratio_ticks, save,
                    strategy_styles)

CURVE_FIGURE = "speedup_vs_target.png"


PAPER_LINE = (0, (1, 3))  # the paper's ratio: sparse dots, apart from every strategy's own line style
PAPER_LABEL_PT = 10.0  # the height a label of the paper's ratio takes in a panel, in points (FONT_S and room)
OUTLIER_FENCE = 3.0  # a ratio this many interquartile ranges (on the log scale) past the quartiles is an outlier ...
OUTLIER_LEAST = 2.0  # ... and at least this factor past them (a tight cluster does not make x1.3 an outlier)


def ratio_axis(curve: list[dict], paper: dict | None = None) -> tuple[float, float]:
    """(low, high) of ``speedup_vs_target.png``'s ratio axis: it fits the ratios inside the fences (the
    quartiles of every level's log ratio -+ :data:`OUTLIER_FENCE` interquartile ranges, at least a
    factor :data:`OUTLIER_LEAST`), x1 and the paper's marks, with room (x1.6). A ratio past the axis
    is an outlier, marked at its edge."""
    ratios = np.log([r["ratio_geomean"] for r in curve if r["ratio_geomean"]] or [1.0])
    q1, q3 = np.percentile(ratios, [25, 75])
    reach = max(OUTLIER_FENCE * (q3 - q1), np.log(OUTLIER_LEAST))
    fence_lo, fence_hi = float(np.exp(q1 - reach)), float(np.exp(q3 + reach))
    inside = [float(np.exp(v)) for v in ratios if fence_lo <= np.exp(v) <= fence_hi]
    shown = inside + [1.0] + [v for v in (paper or {}).values() if v]
    return min(shown) / 1.6, max(shown) * 1.6


def stacked(fractions: list[float], gap: float) -> list[float]:
    """Positions (axes fractions, in the order given) for labels wanted at ``fractions``, each moved as
    little as it takes to be ``gap`` from the next and inside the panel: upwards from the lowest, then
    downwards from the top where they would leave it."""
    order = sorted(range(len(fractions)), key=lambda i: fractions[i])
    pos = [0.0] * len(fractions)
    last = -math.inf
    for i in order:
        last = pos[i] = max(fractions[i], last + gap, gap / 2)
    top = 1 - gap / 2
    for i in reversed(order):
        if pos[i] <= top:
            break
        pos[i], top = top, top - gap
    return pos


def paper_labels(ax, marks: list[tuple[float, str]], y_lo: float, y_hi: float) -> list:
    """``xN`` just right of a panel beside each of the paper's ratios (``marks``: ratio, color) on its log
    axis ``y_lo``-``y_hi`` (outside the data; the legend says whose ratio each is), stacked so that no
    two overlap (:func:`stacked`)."""
    fig = ax.get_figure()
    height_pt = ax.get_position().height * fig.get_size_inches()[1] * 72
    wanted = [(math.log(v) - math.log(y_lo)) / (math.log(y_hi) - math.log(y_lo)) for v, _ in marks]
    return [ax.text(1.01, y, f"x{v:.2f}", transform=ax.transAxes, ha="left", va="center", fontsize=FONT_S,
                    color=color, clip_on=False)
            for (v, color), y in zip(marks, stacked(wanted, PAPER_LABEL_PT / height_pt))]


def _outlier_note(st: str, points: list[dict]) -> str:
    """``fedbuff: x35 at 0.31 (n=1 of 2 seeds)``: the outliers of one strategy past one edge, a range
    where several."""
    g = [p["ratio_geomean"] for p in points]
    levels = [p["target"] for p in points]
    n = sorted({(p["n"], p["seeds"]) for p in points})
    seeds = ", ".join(f"n={a} of {b}" for a, b in n)
    if len(points) == 1:
        return f"{st}: x{g[0]:.3g} at {levels[0]:.2f} ({seeds} seeds)"
    return (f"{st}: {len(points)} levels x{min(g):.3g}-x{max(g):.3g} at {min(levels):.2f}-{max(levels):.2f} "
            f"({seeds} seeds)")


def plot_speedup_vs_target(curve: list[dict], strategies: list[str], regimes: list[str], out: Path,
                           reference: str, paper: dict | None = None, target: float | None = None) -> Path | None:
    """One panel per regime: x = target accuracy, y = baseline hours / reference hours (log), the
    geometric mean over the seeds both reached the level and its 95% t band (where n >= 2, clipped at an
    axis fitted to the means); a dotted
    horizontal line in the baseline's color where the paper gives its ratio (``paper``: (strategy, regime)
    -> ratio, read at the paper's own target), x1 dashed, the scenario's ``target`` as a vertical line.
    A level that not every seed of both reached is drawn hollow. An outlier (:func:`ratio_axis`: a ratio
    far from the rest, often a level one seed pair reached) does not set the axis: it is drawn as a
    triangle at the axis' edge, its ratio, level and seeds written beside it, and the line breaks there.
    The legend explains the markers drawn. None (and no file) without a curve."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    path = Path(out) / CURVE_FIGURE
    path.unlink(missing_ok=True)
    regimes = [rg for rg in regimes if any(r["availability"] == rg for r in curve)]
    if not regimes:
        return None
    plt = pyplot()
    styles = strategy_styles(strategies, reference)
    fig, axes = plt.subplots(1, len(regimes), figsize=(max(4.4 * len(regimes), 5.2), 3.8), squeeze=False,
                             sharey=True)
    handles: dict[str, object] = {}
    marks: set[str] = set()  # what the legend explains: filled, hollow, an outlier at the edge
    # the axis fits the geometric means (and x1, and the paper's marks) but the outliers, not the bands: a
    # band over 2 seeds can span decades and would squash the points; it is clipped at the axis
    y_lo, y_hi = ratio_axis(curve, paper)
    papers: dict[str, list[tuple[str, float]]] = {}  # strategy -> (regime, the paper's ratio): the legend's
    for ax, rg in zip(axes[0], regimes):
        drawn = False
        marks_here: list[tuple[float, str]] = []  # the paper's ratios in this panel: their labels, stacked
        levels = np.array([r["target"] for r in curve if r["availability"] == rg])
        for st in strategies:
            sel = [r for r in curve if r["availability"] == rg and r["strategy"] == st and r["ratio_geomean"]]
            if not sel:
                continue
            color = styles[st]["color"]
            x = np.array([r["target"] for r in sel])
            g = np.array([r["ratio_geomean"] for r in sel])
            full = np.array([r["n"] == r["seeds"] for r in sel])
            out_hi, out_lo = g > y_hi, g < y_lo
            inside = ~(out_hi | out_lo)
            (handles[st],) = ax.plot(x, np.where(inside, g, np.nan), color=color, ls=styles[st]["ls"], lw=1.4,
                                     label=st)
            ax.plot(x[full & inside], g[full & inside], "o", color=color, ms=3)
            ax.plot(x[~full & inside], g[~full & inside], "o", mfc="none", color=color, ms=3)
            if (full & inside).any():
                marks.add("full")
            if (~full & inside).any():
                marks.add("part")
            for side, mask, edge, marker in (("hi", out_hi, y_hi, "^"), ("lo", out_lo, y_lo, "v")):
                if not mask.any():
                    continue
                marks.add("outlier")
                at = edge / 1.04 if side == "hi" else edge * 1.04
                ax.plot(x[mask], np.full(mask.sum(), at), marker, color=color, ms=6, mfc="none" if not
                        full[mask].all() else color, ls="", clip_on=False, zorder=4)
                first = int(np.flatnonzero(mask)[0])
                # the note reads into the panel from its point: leftwards from one near the right edge
                where = (x[first] - levels.min()) / max(float(np.ptp(levels)), 1e-12)
                note = ax.annotate(_outlier_note(st, [sel[i] for i in np.flatnonzero(mask)]), (x[first], at),
                                   xytext=(0, -9 if side == "hi" else 9), textcoords="offset points",
                                   ha="right" if where > 0.6 else "left" if where < 0.4 else "center",
                                   va="top" if side == "hi" else "bottom", fontsize=FONT_S,
                                   color=color, bbox=dict(fc="white", ec="none", alpha=0.8, pad=0.5))
                note.set_in_layout(False)
            band = [(r["target"], r["ratio_ci95_low"], r["ratio_ci95_high"]) for r in sel if r["ratio_ci95_low"]]
            if band:
                bx, blo, bhi = (np.array(v) for v in zip(*band))
                ax.fill_between(bx, blo, bhi, color=color, alpha=0.15, lw=0)
            if paper and paper.get((st, rg)):
                ax.axhline(paper[(st, rg)], color=color, ls=PAPER_LINE, lw=1.2)
                marks_here.append((paper[(st, rg)], color))
                papers.setdefault(st, []).append((rg, paper[(st, rg)]))
            drawn = True
        if not drawn:
            ax.text(0.5, 0.5, "no level both reached", transform=ax.transAxes, ha="center", color=NOTE_COLOR,
                    fontsize=FONT_S)
        ax.axhline(1.0, color="0.4", lw=0.8, ls="--")
        if target is not None:
            ax.axvline(target, color="0.5", lw=0.8, ls="-.")
        ax.set_yscale("log")
        ax.set_ylim(y_lo, y_hi)
        ax.yaxis.set_major_locator(FixedLocator(ratio_ticks(y_lo, y_hi, least=5)))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(FuncFormatter(ratio_label))
        paper_labels(ax, marks_here, y_lo, y_hi)
        ax.set_title(regime_label(rg), fontsize=FONT_M)
        ax.set_xlabel("target accuracy (the paper's rule)", fontsize=FONT_M)
        ax.grid(alpha=GRID_ALPHA, which="both")
    axes[0][0].set_ylabel(f"hours / {reference}'s, paired by seed", fontsize=FONT_M)
    if handles:
        legend, labels = list(handles.values()), list(handles)
        explain = (("full", Line2D([], [], ls="", marker="o", color="0.3", ms=3),
                    "every seed of both reached the level"),
                   ("part", Line2D([], [], ls="", marker="o", mfc="none", color="0.3", ms=3),
                    "not every seed did (n < seeds)"),
                   ("outlier", Line2D([], [], ls="", marker="^", mfc="none", color="0.3", ms=6),
                    "an outlier off the axis: its ratio, level and seeds beside it"))
        for key, handle, label in explain:
            if key in marks:
                legend.append(handle)
                labels.append(label)
        for st, ratios in papers.items():  # the paper's ratios, by the paper's regime names
            legend.append(Line2D([], [], color=styles[st]["color"], ls=PAPER_LINE, lw=1.2))
            labels.append(f"{st}, the paper's ratio: "
                          + ", ".join(f"x{v:.2f} on {paper_regime(rg) or regime_label(rg)}" for rg, v in ratios))
        legend_below(fig, legend, labels)
    return save(fig, path)
