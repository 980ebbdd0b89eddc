"""A comparison's figures (``felix-jax compare``, ``felix-jax plot`` of a comparison's folder):
``accuracy.png`` (accuracy against virtual hours per regime, the mean over seeds with a min-max band,
the hours framed on where the runs learn: :func:`accuracy_frame`), ``bytes.png`` (bytes per strategy
in the unit that fits, train and eval stacked), ``cdfs.png`` (staleness, utility age and relative
aggregation weights, a long tail cut at a stated percentile: :func:`clip_long_tail`) and
``time_to_target.png`` (hours to the target seed by seed, their mean with its 95% interval, and each
strategy's paired ratio to the reference), and ``speedup_vs_target.png`` (that ratio along the
learning curve, ``figures/curve.py``), drawn from the rows of
:func:`~felix_jax.experiment.matrix.run_matrix` (or ``summary.csv``) and each cell's files.
Statistics from stats.py, the look from style.py."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from ..cells import regime_label
from ..curve import speedup_along_curve
from ..stats import default_reference, hours_stats, paired_ratio, pool_cells, versus_reference
from ..tables import sig, target_of
from ..units import byte_unit
from .curve import plot_speedup_vs_target
from .style import (EVAL_COLOR, FONT_L, FONT_M, FONT_S, FONT_XS, GRID_ALPHA, NOTE_COLOR, TRAIN_COLOR, labels_width,
                    legend_below, no_values_note, pyplot, ratio_label, ratio_ticks, save, strategy_styles,
                    wrap_label)

FIGURES = ("accuracy.png", "bytes.png", "cdfs.png", "time_to_target.png")


def accuracy_curves(rows: list[dict], st: str, rg: str, grid: np.ndarray) -> np.ndarray | None:
    """(seeds, len(grid)) accuracy of each seed's run, held between checkpoints up to the run's end
    (its summary's ``end_time_s``, from the row's ``_summary`` else its ``summary.json``; else its last
    checkpoint: a stalled run stays flat to where it stopped), NaN after it."""
    curves = []
    for r in rows:
        if r["strategy"] != st or r["availability"] != rg:
            continue
        data = np.genfromtxt(Path(r["run_dir"]) / "metrics.csv", delimiter=",", names=True)
        hours, acc = np.atleast_1d(data["hours"]), np.atleast_1d(data["accuracy"])
        end_s = _summary_of(r).get("end_time_s")
        end_h = max(float(hours[-1]), end_s / 3600 if end_s is not None else 0.0)
        idx = np.searchsorted(hours, grid, side="right") - 1
        curve = np.where(idx >= 0, acc[np.clip(idx, 0, None)], np.nan)
        curves.append(np.where(grid <= end_h, curve, np.nan))
    return np.array(curves) if curves else None


def _drawing_order(strategies: list[str], reference: str | None) -> list[str]:
    """The reference last: drawn on top of the others."""
    return [st for st in strategies if st != reference] + ([reference] if reference in strategies else [])


def _summary_of(row: dict) -> dict:
    """A run's summary: the row's ``_summary``, else its ``summary.json`` ({} if neither can be read)."""
    summary = row.get("_summary")
    if not summary:
        try:
            summary = json.loads((Path(row["run_dir"]) / "summary.json").read_text())
        except (OSError, ValueError, KeyError, TypeError):
            summary = {}
    return summary if isinstance(summary, dict) else {}


def _end_hours(row: dict) -> float | None:
    """Where a run ended, in virtual hours: its summary's ``end_time_s`` (from the row, else its
    ``summary.json``), else its last checkpoint; None if none of them can be read."""
    summary = _summary_of(row)
    if summary.get("end_time_s") is not None:
        return summary["end_time_s"] / 3600
    try:
        data = np.genfromtxt(Path(row["run_dir"]) / "metrics.csv", delimiter=",", names=True)
        return float(np.atleast_1d(data["hours"])[-1])
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


STALL_SHARE = 0.25  # a gap without a checkpoint this share of a run's length (or more) ...
STALL_TYPICAL = 5.0  # ... and this many times its typical gap between checkpoints: the run stalled there
FRAME_TARGET = 1.5  # accuracy.png's hours reach at least this many times the latest time to the target


def run_span(row: dict) -> dict | None:
    """Where a run learnt and where it ended, in virtual hours: ``end`` (its summary's ``end_time_s``,
    else its last checkpoint), ``active`` (where it stalled, else ``end``) and ``stalled``. A run
    stalled at the checkpoint that starts its first long gap: one without a checkpoint for
    :data:`STALL_SHARE` of the run or more and :data:`STALL_TYPICAL` times its other gaps' median
    (the gap to its end included), or the gap to its end where its stop reason says it stalled
    (the simulator's "stalled: no pending events"). None where its checkpoints cannot be read."""
    try:
        data = np.genfromtxt(Path(row["run_dir"]) / "metrics.csv", delimiter=",", names=True)
        hours = np.sort(np.atleast_1d(data["hours"]).astype(float))
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    if not hours.size or not np.isfinite(hours).all():
        return None
    summary = _summary_of(row)
    end = max(float(hours[-1]), summary["end_time_s"] / 3600 if summary.get("end_time_s") is not None else 0.0)
    points = np.append(hours, end)
    gaps = np.diff(points)
    active, stalled = end, False
    if gaps.size and end > 0:
        typical = float(np.median(np.delete(gaps, np.argmax(gaps)))) if gaps.size > 1 else 0.0
        long = (gaps >= STALL_SHARE * end) & (gaps > STALL_TYPICAL * typical)
        if str(summary.get("stop_reason") or "").startswith("stalled") and gaps[-1] > 0:
            long[-1] = True
        if long.any():
            first = int(np.argmax(long))
            active, stalled = float(points[first]), True
    return {"end": end, "active": active, "stalled": stalled}


def accuracy_frame(rows: list[dict], target: float | None) -> float:
    """``accuracy.png``'s hours axis end: where the comparison happens, never set by a stalled run's flat
    tail. The furthest of: every run's ``active`` end (:func:`run_span`: a run that did not stall
    counts to its end, one that stalled to where it stalled) and :data:`FRAME_TARGET` times the latest
    time any seed reached the target, with 4% room, at most the longest run. Where there is a target
    and no seed reached it, the whole range (the longest run)."""
    spans = [s for s in map(run_span, rows) if s is not None]
    ends = [s["end"] for s in spans] + [h for h in map(_end_hours, rows) if h is not None]
    full = max(ends or [0.0])
    reached = [r["time_to_target_h"] for r in rows if r.get("time_to_target_h") is not None]
    if full <= 0 or (target is not None and not reached) or not spans:
        return full
    frame = max(s["active"] for s in spans)
    if reached:
        frame = max(frame, FRAME_TARGET * max(reached))
    return min(full, frame * 1.04) if frame > 0 else full


def _beyond_frame(rows: list[dict], st: str, rg: str, frame: float) -> tuple[float, float] | None:
    """(where the first of its runs that go on past ``frame`` stalled, the furthest end): for a
    strategy whose runs on a regime go on past ``frame``; None where none does."""
    spans = [run_span(r) for r in rows if r["strategy"] == st and r["availability"] == rg]
    past = [s for s in spans if s is not None and s["end"] > frame * 1.001]
    if not past:
        return None
    return min(s["active"] for s in past), max(s["end"] for s in past)


def fit_bar_labels(fig, axes, pad_px: float = 4.0) -> None:
    """``bytes.png``'s bar labels (annotations right of each bar's end) without an axis that runs far
    past the longest bar: a label that would cross the axes' right edge moves inside its bar (right
    aligned, white) when the bar is long enough to hold it; otherwise the shared hours axis grows
    just enough for it. Call after ``tight_layout`` (it measures the drawn labels)."""
    renderer = fig.canvas.get_renderer()
    right = axes[0].get_xlim()[1]
    needed = right
    for ax in axes:
        width = ax.get_window_extent(renderer).width
        for label in ax.texts:
            if not hasattr(label, "xy"):  # an empty panel's note, not a bar's label
                continue
            end = label.xy[0]
            text_px = label.get_window_extent(renderer).width
            bar_px = width * end / right
            if bar_px + text_px + 2 * pad_px <= width:
                continue  # fits beside its bar
            if text_px + 2 * pad_px <= bar_px:
                label.set_horizontalalignment("right")
                label.set_position((-pad_px * 72 / fig.dpi, 0))  # offset points
                label.set_color("white")
                continue
            needed = max(needed, end * width / max(width - text_px - 2 * pad_px, 1.0))
    if needed > right:
        axes[0].set_xlim(0, needed)  # the axes are shared: every panel follows


TAIL_PERCENTILE = 99  # cdfs.png: a long tail is cut at this percentile of all the panel's values ...
TAIL_RATIO = 2.0  # ... where its largest value is more than this many times that percentile (from the panel's lowest)


def clip_long_tail(ax, values: dict[str, np.ndarray], strategies: list[str], unit: str = "") -> int:
    """``cdfs.png``'s panel ``ax`` of the CDFs of ``values`` (strategy -> its sorted values): where the
    largest value lies more than :data:`TAIL_RATIO` times further from the lowest than the
    :data:`TAIL_PERCENTILE`-th percentile of all of them (pooled), the x axis ends at that percentile
    (a tail of one strategy no longer squashes every curve against the y axis: each curve reaches at
    least the share of its values below the cut at the axis' right edge), and a note at the bottom right says
    where the axis ends and, per strategy with values past it, their share and its largest value.
    Returns the note's lines (0: not cut)."""
    if not values:
        return 0
    pooled = np.concatenate(list(values.values()))
    low, top = float(pooled.min()), float(pooled.max())
    cut = float(np.percentile(pooled, TAIL_PERCENTILE, method="higher"))
    if cut <= low:  # most values at the lowest: the next one up
        above = pooled[pooled > low]
        cut = float(above.min()) if above.size else top
    if not (top - low > TAIL_RATIO * (cut - low) > 0):
        return 0
    room = 0.04 * (cut - low)
    ax.set_xlim(low - room, cut + room)
    suffix = f" {unit}" if unit else ""
    lines = [f"axis cut at the {TAIL_PERCENTILE}th percentile of all ({cut:.3g}{suffix}); beyond it:"]
    for st in sorted(values, key=strategies.index):
        v = values[st]
        past = int(np.count_nonzero(v > cut))
        if past:
            share = 100.0 * past / v.size
            lines.append(f"{st}: {share:.2g}% of its values, max {float(v.max()):.3g}{suffix}")
    note = ax.text(0.98, 0.04, "\n".join(lines), transform=ax.transAxes, ha="right", va="bottom", fontsize=FONT_S,
                   color=NOTE_COLOR, bbox=dict(fc="white", ec="none", alpha=0.85, pad=1.0))
    note.set_in_layout(False)
    return len(lines)


def plot_comparison(rows: list[dict], strategies: list[str], regimes: list[str], out: Path,
                    target: float | None = None, reference: str | None = None,
                    paper_ratios: dict | None = None) -> list[Path]:
    """``accuracy.png`` (mean over seeds with a min-max band, the target line, shared axes, one
    legend below), ``bytes.png`` (bytes per strategy in the unit that fits, train and eval stacked,
    each bar labelled with its total and eval share), ``cdfs.png`` (per regime: staleness at aggregation, utility age at a train
    pick and aggregation weight relative to the strategy's mean weight; a strategy with no such
    values says so) and, when there is a target, ``time_to_target.png`` (:func:`plot_time_to_target`).
    Every strategy keeps one color and line style (:func:`strategy_styles`); the ``reference``
    (default ``felix``, else the first strategy) is drawn on top. A trace file's regime is titled by
    its file name. ``speedup_vs_target.png`` (:func:`~.curve.plot_speedup_vs_target`) follows where a level
    above the start was reached; ``paper_ratios``: (strategy, regime) -> the paper's ratio, marked on it.
    ``accuracy.png``'s hours end at :func:`accuracy_frame` (a stalled run's flat tail does not set them:
    its line runs to the edge, an arrow and a note there); ``cdfs.png``'s panels cut a long tail
    (:func:`clip_long_tail`); ``bytes.png``'s legend has its own patches, and an empty panel says so."""
    plt = pyplot()

    target = target_of(rows) if target is None else target
    reference = default_reference(strategies) if reference is None else reference
    paths = []
    for name in FIGURES:  # every figure is redrawn from the cells there are: none outlives its data
        (out / name).unlink(missing_ok=True)
    styles = strategy_styles(strategies, reference)
    order = _drawing_order(strategies, reference)
    seeds = sorted({r["seed"] for r in rows})
    # each regime framed on its own runs (a regime where every strategy is done in minutes is not drawn on
    # another's hours), and a stalled run's flat tail does not set the hours axis
    fig, axes = plt.subplots(1, len(regimes), figsize=(max(4.2 * len(regimes), 5.0), 3.6), squeeze=False,
                             sharey=True)
    handles: dict[str, object] = {}
    arrows = False  # a stalled strategy's line runs on past the axis somewhere: the legend explains the arrow
    any_framed = False
    for ax, rg in zip(axes[0], regimes):
        in_regime = [r for r in rows if r["availability"] == rg]
        end_h = max([h for h in map(_end_hours, in_regime) if h is not None] or [0.0])
        frame = accuracy_frame(in_regime, target)
        framed = 0 < frame < end_h * 0.999
        any_framed |= framed
        grid = np.linspace(0.0, max(frame if framed else end_h, 1e-6), 400)
        past = []  # (strategy, where it stalled, where it ended): its line runs on past the frame
        for st in order:
            curves = accuracy_curves(rows, st, rg, grid)
            if curves is None:
                continue
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns after every run's end
                mean, lo, hi = np.nanmean(curves, 0), np.nanmin(curves, 0), np.nanmax(curves, 0)
            (handles[st],) = ax.plot(grid, mean, label=st, **styles[st])
            if len(curves) > 1:
                ax.fill_between(grid, lo, hi, color=styles[st]["color"], alpha=0.15, lw=0,
                                zorder=styles[st]["zorder"] - 1)
            beyond = _beyond_frame(rows, st, rg, grid[-1]) if framed else None
            if beyond is not None and np.isfinite(mean[-1]):
                ax.plot(grid[-1], mean[-1], ">", color=styles[st]["color"], ms=7, clip_on=False,
                        zorder=styles[st]["zorder"] + 1)
                past.append((st, *beyond))
                arrows = True
        for i, (st, stalled_h, last_h) in enumerate(reversed(sorted(past, key=lambda p: strategies.index(p[0])))):
            note = ax.annotate(f"{st}: stalled at {stalled_h:.3g} h, runs to {last_h:.3g} h",
                               (1.0, 0.0), xycoords="axes fraction", xytext=(-4, 4 + 10 * i),
                               textcoords="offset points", ha="right", va="bottom", fontsize=FONT_S,
                               color=styles[st]["color"], bbox=dict(fc="white", ec="none", alpha=0.8, pad=0.5))
            note.set_in_layout(False)
        if target is not None:
            handles["_target"] = ax.axhline(target, color="k", ls="--", lw=0.8, zorder=1)
        ax.set_title(regime_label(rg) + (f" (hours to {grid[-1]:.3g} of {end_h:.3g})" if framed else ""))
        ax.set_xlabel("virtual hours")
        ax.set_ylabel("test accuracy (fraction correct)")
        ax.grid(alpha=GRID_ALPHA)
        ax.set_xlim(0, grid[-1] * (1.0 if framed else 1.02))
    title = (f"mean over seeds {','.join(map(str, seeds))}, band: min-max" if len(seeds) > 1
             else f"seed {seeds[0]}" if seeds else "")
    if any_framed:
        title += "; each regime's hours framed on its runs (a stalled run does not set the axis)"
    fig.suptitle(title, fontsize=FONT_L)
    fig.tight_layout()
    names = [st for st in strategies if st in handles] + (["_target"] if "_target" in handles else [])
    if names:
        labels = [f"target {target:g}" if n == "_target" else n for n in names]
        legend = [handles[n] for n in names]
        if arrows:
            from matplotlib.lines import Line2D

            legend.append(Line2D([], [], ls="", marker=">", color="0.3", ms=7))
            labels.append("stalled: flat past the axis")
        legend_below(fig, legend, labels)
    paths.append(save(fig, out / "accuracy.png"))

    pooled = {(p["strategy"], p["availability"]): p for p in pool_cells(rows, strategies, regimes, reference)}
    rows_in = len(strategies)  # horizontal bars: a long label (a sweep's variant) reads along its row
    fig, axes = plt.subplots(1, len(regimes), figsize=(4.2 * len(regimes) + labels_width(strategies),
                                                       1.3 + 0.4 * rows_in), squeeze=False, sharex=True, sharey=True)
    unit, per_unit = byte_unit(max([(p["gb_train"] + p["gb_eval"]) * 1e9 for p in pooled.values()] or [0.0]))
    scale = 1e9 / per_unit  # the pooled means are in GB: drawn in the unit that fits the largest
    top = max([(p["gb_train"] + p["gb_eval"]) * scale for p in pooled.values()] or [0.0])
    for ax, rg in zip(axes[0], regimes):
        names = [st for st in strategies if (st, rg) in pooled]
        train = [pooled[st, rg]["gb_train"] * scale for st in names]
        ev = [pooled[st, rg]["gb_eval"] * scale for st in names]
        y = [strategies.index(st) for st in names]
        if not names or not any(t + e > 0 for t, e in zip(train, ev)):  # an empty panel says so
            ax.text(0.5, 0.5, "no finished runs" if not names else "no bytes moved", transform=ax.transAxes,
                    ha="center", va="center", fontsize=FONT_S, color=NOTE_COLOR)
            names = y = train = ev = []
        ax.barh(y, train, color=TRAIN_COLOR)
        ax.barh(y, ev, left=train, color=EVAL_COLOR)
        for yi, t, e in zip(y, train, ev):
            share = f", eval {100 * e / (t + e):.1f}%" if e > 0 else ""
            ax.annotate(f"{sig(t + e)} {unit}{share}", (t + e, yi), ha="left", va="center", fontsize=FONT_S,
                        xytext=(3, 0), textcoords="offset points")
        ax.set_yticks(np.arange(rows_in), strategies, fontsize=FONT_S)
        ax.set_ylim(rows_in - 0.5, -0.5)  # the first strategy on top
        ax.set_title(regime_label(rg))
        ax.set_xlabel(f"{unit} moved (mean over seeds)")
        ax.set_xlim(0, top * 1.05 if top > 0 else 1.0)
        ax.grid(alpha=GRID_ALPHA, axis="x")
        ax.set_axisbelow(True)  # the grid behind the bars and their labels
    axes[0][0].set_ylabel("strategy")  # the rows are shared: named once, beside their labels
    fig.tight_layout()
    fit_bar_labels(fig, axes[0])  # a label that does not fit beside its bar goes inside it
    if top > 0:  # the legend's own patches: an empty panel's bars would lend it matplotlib's default color
        from matplotlib.patches import Patch

        legend_below(fig, [Patch(facecolor=TRAIN_COLOR), Patch(facecolor=EVAL_COLOR)], ["train", "eval"])
    paths.append(save(fig, out / "bytes.png"))

    keys = (("staleness", "staleness at aggregation", "staleness (rounds)", "CDF (share of aggregated updates)"),
            ("utility_age", "utility age at a train pick", "utility age (rounds)", "CDF (share of train picks)"),
            ("agg_weights", "aggregation weight", "aggregation weight (relative: / the strategy's mean weight)",
             "CDF (share of aggregated updates)"))
    fig, axes = plt.subplots(len(regimes), 3, figsize=(13, 3.3 * len(regimes)), squeeze=False)
    handles = {}
    for row, rg in zip(axes, regimes):
        for ax, (key, title, xlabel, ylabel) in zip(row, keys):
            missing, drawn = [], {}
            for st in order:
                values = []
                for r in rows:
                    if r["strategy"] == st and r["availability"] == rg:
                        d = json.loads((Path(r["run_dir"]) / "distributions.json").read_text())
                        values.extend(v for v in d[key] if v is not None and v >= 0)
                if values:
                    v = np.sort(np.asarray(values, float))
                    if key == "agg_weights" and v.mean() > 0:  # FedAvg's n_i and relative weights on one axis
                        v = v / v.mean()
                    (handles[st],) = ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=st,
                                             **styles[st])
                    drawn[st] = v
                else:
                    missing.append(st)
            tail_lines = clip_long_tail(ax, drawn, strategies, "rounds" if key != "agg_weights" else "")
            if missing:
                no_values_note(ax, sorted(missing, key=strategies.index), empty=len(missing) == len(order),
                               y=0.06 + 0.075 * tail_lines if tail_lines else 0.04)
            ax.set_title(f"{regime_label(rg)}: {title}", fontsize=FONT_L)
            ax.set_xlabel(xlabel, fontsize=FONT_M)
            ax.set_ylabel(ylabel, fontsize=FONT_M)
            ax.grid(alpha=GRID_ALPHA)
    fig.tight_layout()
    names = [st for st in strategies if st in handles]
    if names:
        legend_below(fig, [handles[n] for n in names], names)
    paths.append(save(fig, out / "cdfs.png"))
    if target is not None:
        paths.append(plot_time_to_target(rows, strategies, regimes, out, target, reference))
    curve = plot_speedup_vs_target(speedup_along_curve(rows, strategies, regimes, reference), strategies, regimes,
                                   out, reference, paper=paper_ratios, target=target)
    if curve is not None:
        paths.append(curve)
    return paths


def _paired_ratio_panels(axes, rows: list[dict], others: list[str], regimes: list[str], reference: str,
                         styles: dict) -> None:
    """One panel per regime: each strategy's paired verdict against ``reference`` (the geometric mean of
    its per-seed hours ratios, its 95% t interval on the log ratios) on a log axis, 1 (a tie) marked."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    for ax, rg in zip(axes, regimes):
        lo, hi = 1.0, 1.0
        for y, st in enumerate(others):
            vs = versus_reference(rows, st, rg, reference)
            pr = None if vs is None else paired_ratio([x for _, x in vs["ratios"]])
            if pr is None:
                ax.annotate("no seed both reached", (1.0, y), xytext=(4, 0), textcoords="offset points",
                            xycoords=("data", "data"), va="center", fontsize=FONT_S, color=NOTE_COLOR)
                continue
            g, color = pr["geomean"], styles[st]["color"]
            if pr["ci95_low"] is not None:
                ax.errorbar(g, y, xerr=[[g - pr["ci95_low"]], [pr["ci95_high"] - g]], fmt="D", color=color, ms=4,
                            capsize=3, lw=1.2, zorder=3)
                lo, hi = min(lo, pr["ci95_low"]), max(hi, pr["ci95_high"])
            else:
                ax.plot(g, y, "D", color=color, ms=4, zorder=3)
                lo, hi = min(lo, g), max(hi, g)
            ax.annotate(f"n={pr['n']}", (1.0, y), xycoords=("axes fraction", "data"), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=FONT_S)
        ax.axvline(1.0, color="0.4", lw=0.8, ls="--", zorder=1)
        ax.set_xscale("log")
        ax.set_xlim(lo / 1.25, hi * 1.25)
        # ticks that span the data (x0.8, x1, x1.2 ... or x0.5, x1, x2, x5 ...), never a lone x1
        ax.xaxis.set_major_locator(FixedLocator(ratio_ticks(lo / 1.25, hi * 1.25)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(ratio_label))
        ax.set_yticks(np.arange(len(others)), [wrap_label(st) for st in others], fontsize=FONT_S)
        ax.set_ylim(len(others) - 0.5, -0.5)
        ax.set_xlabel(f"hours / {reference}'s hours, paired by seed", fontsize=FONT_M)
        ax.grid(alpha=GRID_ALPHA, axis="x")
        column_header(ax, "n: both\nreached")
    axes[0].set_ylabel(f"strategy\n(against {reference})", fontsize=FONT_M)


def column_header(ax, text: str) -> None:
    """The header of the column of counts right of a panel's rows (``3/3``, ``n=3``): above it, so that
    the y axis' label stays short."""
    ax.annotate(text, (1.0, 1.0), xycoords="axes fraction", xytext=(4, 2), textcoords="offset points", ha="left",
                va="bottom", fontsize=FONT_XS, color=NOTE_COLOR, linespacing=1.0)


INTERVAL_ROOM = 1.6  # an interval may stretch the hours axis to this many times the furthest point


def interval_axis_end(furthest_point: float, interval_ends: list[float]) -> float:
    """The hours axis' end: room for the furthest point (x 1.08) and for the intervals' ends, but at most
    :data:`INTERVAL_ROOM` times the furthest point, so that a wide interval (few seeds) does not squash
    the points; an interval past the end is cut there (:func:`_draw_interval`)."""
    if furthest_point <= 0:
        return max([1.0] + [h * 1.03 for h in interval_ends])
    room = furthest_point * 1.08
    return max(room, min(max([0.0] + interval_ends) * 1.03, furthest_point * INTERVAL_ROOM))


def _draw_interval(ax, centre: float, y: float, low: float, high: float, right: float) -> None:
    """The mean's bar and its interval; an interval ending past ``right`` runs to the edge as an arrow
    and its end is written there."""
    cut = high > right
    shown = right * 0.985 if cut else high
    ax.errorbar(centre, y, xerr=[[centre - low], [shown - centre]], fmt="|", color="k", ms=11, mew=2.2,
                capsize=3 if not cut else 0, lw=1, zorder=4)
    if cut:
        ax.plot(shown, y, ">", color="k", ms=5, zorder=4)
        ax.annotate(f"to {sig(high)} h", (shown, y), xytext=(-4, 6), textcoords="offset points", ha="right",
                    va="bottom", fontsize=FONT_S)


def plot_time_to_target(rows: list[dict], strategies: list[str], regimes: list[str], out: Path,
                        target: float | None = None, reference: str | None = None) -> Path:
    """``time_to_target.png``: one panel per regime, a row per strategy: a point per seed (spread
    across the row's upper part so that equal times stay apart), filled where the seed reached the
    target, open at its run's end where it did not, and in a lane of its own below them the geometric
    mean over the seeds that reached it, a black bar, with its 95% t interval on the log scale
    (:func:`hours_stats`; drawn for 2 or more such seeds: one seed's point is its mean). Right of each
    row: the seeds that reached the target / the seeds run. Below, where there is a reference and
    another strategy: per regime, each strategy's paired verdict against the reference
    (:func:`paired_ratio`: the geometric mean of its per-seed ratios with their 95% t interval, on a log
    axis with 1 marked; the seeds it pools right of the row). The legend explains only what is drawn
    (no "did not" marker when every seed reached it)."""
    plt = pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    reference = default_reference(strategies) if reference is None else reference
    styles = strategy_styles(strategies, reference)
    rows_in = len(strategies)  # a row per strategy: a long label (a sweep's variant) reads along it
    shown = [wrap_label(st) for st in strategies]  # a long one on lines of its own: a row is tall enough
    row_in = max(0.45, 0.16 + 0.14 * max(lab.count("\n") + 1 for lab in shown))
    xmax = 0.0  # the furthest point or mean of any panel: the shared hours axis spans it
    intervals = []  # (axes, mean, row, low, high): drawn once the axis is known (a wide one is cut at its edge)
    drawn: set[str] = set()  # what the legend explains: a seed that missed, a mean with its interval
    missed = []  # (axes, run end, row, color) of the seeds that did not reach it: drawn once the axis is known
    others = [st for st in strategies if st != reference] if reference in strategies else []
    ratio_rows = 1 if others else 0
    heights = [1.6 + row_in * rows_in] + ([1.2 + row_in * len(others)] if ratio_rows else [])
    fig, axes = plt.subplots(1 + ratio_rows, len(regimes), squeeze=False, sharey="row",
                             figsize=(max(4.2 * len(regimes), 5.0) + labels_width([line for lab in shown
                                                                                   for line in lab.splitlines()]),
                                      sum(heights)),
                             gridspec_kw={"height_ratios": heights})
    for ax in axes[0][1:]:
        ax.sharex(axes[0][0])
    for ax, rg in zip(axes[0], regimes):
        for st in strategies:
            sel = sorted((r for r in rows if r["strategy"] == st and r["availability"] == rg),
                         key=lambda r: r["seed"])
            if not sel:
                continue
            y = strategies.index(st)
            # the seeds in the row's upper part, the mean in a lane of its own below them
            offsets = np.linspace(-0.34, -0.04, len(sel)) if len(sel) > 1 else np.full(1, -0.15)
            color = styles[st]["color"]
            for dy, r in zip(offsets, sel):
                hours = r["time_to_target_h"]
                if hours is not None:
                    ax.plot(hours, y + dy, "o", color=color, ms=5, zorder=3)
                    xmax = max(xmax, hours)
                else:
                    end = _end_hours(r)
                    if end is not None:
                        # a stalled run's flat tail does not set the axis: it counts to where it stalled,
                        # and its marker waits for the axis (at its end, or at the edge with its end written)
                        span = run_span(r)
                        missed.append((ax, end, y + dy, color))
                        xmax = max(xmax, span["active"] if span and span["stalled"] else end)
                        drawn.add("missed")
            reached = [r["time_to_target_h"] for r in sel if r["time_to_target_h"] is not None]
            stats = hours_stats(reached)
            if stats["n"] >= 2 and stats["ci95_low"] is not None:  # one seed's mean is that seed's point
                drawn.add("mean")
                intervals.append((ax, stats["geomean"], y + 0.24, stats["ci95_low"], stats["ci95_high"]))
                xmax = max(xmax, stats["geomean"])
            ax.annotate(f"{len(reached)}/{len(sel)}", (1.0, y), xycoords=("axes fraction", "data"), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=FONT_S)
        ax.set_yticks(np.arange(rows_in), shown, fontsize=FONT_S)
        ax.set_ylim(rows_in - 0.5, -0.5)  # the first strategy on top
        ax.set_title(regime_label(rg))
        ax.set_xlabel("virtual hours to target")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
        ax.grid(alpha=GRID_ALPHA, axis="x")
        column_header(ax, "reached\n/ run")
    axes[0][0].set_ylabel("strategy", fontsize=FONT_M)  # shared rows: once; the right column has its header
    right = interval_axis_end(xmax, [high for *_, high in intervals])
    for ax, centre, y, low, high in intervals:
        _draw_interval(ax, centre, y, low, high, right)
    for ax, end, y, color in missed:
        ax.plot(min(end, right * 0.985), y, "^", mfc="none", mec=color, ms=6, mew=1.2, zorder=3)
        if end > right:  # a stalled run: at the edge, its end written
            drawn.add("stalled")
            ax.annotate(f"stalled, ends {end:.3g} h", (right * 0.985, y), xytext=(-6, 0), textcoords="offset points",
                        ha="right", va="center", fontsize=FONT_S, color=color)
    axes[0][0].set_xlim(0, right)  # from 0, with room for the furthest marker
    if target is not None:
        fig.suptitle(f"time to target accuracy {target:g} (the mean of the last 20 test accuracies and the last one)",
                     fontsize=FONT_L)
    fig.tight_layout()
    legend = [Line2D([], [], ls="", marker="o", color="0.3", ms=5, label="a seed that reached the target")]
    if "missed" in drawn:  # only when a seed did not reach it
        legend.append(Line2D([], [], ls="", marker="^", mfc="none", mec="0.3", ms=6,
                             label="a seed that did not: at its run's end" +
                                   ("; a stalled run's at the axis' edge" if "stalled" in drawn else "")))
    if "mean" in drawn:
        legend.append(Line2D([], [], ls="-", marker="|", color="k", ms=11, mew=2.2, lw=1,
                             label="geometric mean over the seeds that reached it (2 or more), 95% t interval "
                                   "(log scale)"))
    if ratio_rows:
        legend.append(Line2D([], [], ls="-", marker="D", color="0.3", ms=4, lw=1.2,
                             label=f"below: the geometric mean of the per-seed ratios, 95% t interval (> 1: "
                                   f"{reference} faster)"))
        _paired_ratio_panels(axes[1], rows, others, regimes, reference, styles)
    legend_below(fig, legend, [h.get_label() for h in legend])
    return save(fig, out / "time_to_target.png")
