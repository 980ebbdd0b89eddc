"""``speedup_vs_target.png``: each baseline's paired ratio to the reference against the target accuracy
(:func:`felix_jax.experiment.curve.speedup_along_curve`), with its 95% band, one panel per regime."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..cells import regime_label
from .style import FONT_M, FONT_S, GRID_ALPHA, NOTE_COLOR, legend_below, pyplot, save, strategy_styles

CURVE_FIGURE = "speedup_vs_target.png"


def plot_speedup_vs_target(curve: list[dict], strategies: list[str], regimes: list[str], out: Path,
                           reference: str, paper: dict | None = None, target: float | None = None) -> Path | None:
    """One panel per regime: x = target accuracy, y = baseline hours / reference hours (log), the
    geometric mean over the seeds both reached the level and its 95% t band (where n >= 2, clipped at an
    axis fitted to the means); a dotted
    horizontal line in the baseline's color where the paper gives its ratio (``paper``: (strategy, regime)
    -> ratio, read at the paper's own target), x1 dashed, the scenario's ``target`` as a vertical line.
    A level that not every seed of both reached is drawn hollow. None (and no file) without a curve."""
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
    # the axis fits the geometric means (and x1, and the paper's marks), not the bands: a band over 2 seeds
    # can span decades and would squash the points; it is clipped at the axis
    shown = [r["ratio_geomean"] for r in curve if r["ratio_geomean"]] + [1.0] + list((paper or {}).values())
    y_lo, y_hi = min(shown) / 1.6, max(shown) * 1.6
    for ax, rg in zip(axes[0], regimes):
        drawn = False
        for st in strategies:
            sel = [r for r in curve if r["availability"] == rg and r["strategy"] == st and r["ratio_geomean"]]
            if not sel:
                continue
            color = styles[st]["color"]
            x = np.array([r["target"] for r in sel])
            g = np.array([r["ratio_geomean"] for r in sel])
            full = np.array([r["n"] == r["seeds"] for r in sel])
            (handles[st],) = ax.plot(x, g, color=color, ls=styles[st]["ls"], lw=1.4, label=st)
            ax.plot(x[full], g[full], "o", color=color, ms=3)
            ax.plot(x[~full], g[~full], "o", mfc="none", color=color, ms=3)
            band = [(r["target"], r["ratio_ci95_low"], r["ratio_ci95_high"]) for r in sel if r["ratio_ci95_low"]]
            if band:
                bx, blo, bhi = (np.array(v) for v in zip(*band))
                ax.fill_between(bx, blo, bhi, color=color, alpha=0.15, lw=0)
            if paper and paper.get((st, rg)):
                ax.axhline(paper[(st, rg)], color=color, ls=":", lw=1.2)
                ax.annotate(f"paper x{paper[(st, rg)]:.2f}", (1.0, paper[(st, rg)]), xycoords=("axes fraction", "data"),
                            xytext=(-2, 2), textcoords="offset points", ha="right", fontsize=FONT_S, color=color)
            drawn = True
        if not drawn:
            ax.text(0.5, 0.5, "no level both reached", transform=ax.transAxes, ha="center", color=NOTE_COLOR,
                    fontsize=FONT_S)
        ax.axhline(1.0, color="0.4", lw=0.8, ls="--")
        if target is not None:
            ax.axvline(target, color="0.5", lw=0.8, ls="-.")
        ax.set_yscale("log")
        ax.set_ylim(y_lo, y_hi)
        ticks = [m * 10.0 ** e for e in range(-3, 4) for m in (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)]
        ax.yaxis.set_major_locator(FixedLocator([t for t in ticks if y_lo <= t <= y_hi]))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"x{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.set_title(regime_label(rg), fontsize=FONT_M)
        ax.set_xlabel("target accuracy (the paper's rule)", fontsize=FONT_M)
        ax.grid(alpha=GRID_ALPHA, which="both")
    axes[0][0].set_ylabel(f"hours / {reference}'s, paired by seed", fontsize=FONT_M)
    if handles:
        legend_below(fig, list(handles.values()), list(handles))
    return save(fig, path)
