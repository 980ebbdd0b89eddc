"""How every figure of felix-jax looks and is saved, defined once: the resolution and
:func:`save`, one scale of font sizes, the grid, the grey of notes, the palette (:func:`palette`),
the legend under the panels (:func:`legend_below`), the room for long tick labels
(:func:`labels_width`), the "no values" note, and each strategy's color, line style and, for a
sweep's variants, marker (:func:`strategy_styles`, :func:`variant_markers`).

Variants of one strategy (``felix@concurrency=4``, ``felix@concurrency=8``) share its color and
differ by line style; where two of them run alike their curves coincide, and a dashed line lies
hidden under the solid one. :func:`variant_markers` gives each variant its own hollow marker, set
along the curve at an offset of its own (so coinciding curves show both markers side by side),
and draws each later variant above the earlier ones, the reference's strategy above the rest.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..cells import parse_cell_strategy

DPI = 110  # every figure's resolution, but a run's own accuracy.png
ACCURACY_DPI = 120  # a run's accuracy.png
# font sizes in points, one scale for every figure
FONT_XL, FONT_L, FONT_M, FONT_S, FONT_XS = 10, 9, 8, 7, 6
GRID_ALPHA = 0.3
NOTE_COLOR = "0.35"  # the grey of notes ("no values", what a panel lacks)
PALETTE = "tab10"  # strategies' colors, in order
TRAIN_COLOR, EVAL_COLOR = "tab:blue", "tab:orange"  # train and eval bytes, and a run's participation

LINESTYLES = ("-", "--", "-.", ":", (0, (8, 2)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 1)))
VARIANT_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
MARK_EVERY = 0.12  # a marker every this fraction of the axes' diagonal


def pyplot():
    """matplotlib's pyplot, drawing to files (the Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def palette(i: int):
    """The ``i``-th color of the palette, cycled past its ten."""
    import matplotlib.pyplot as plt

    return plt.get_cmap(PALETTE)(i % 10)


def save(fig, path: str | Path, dpi: float = DPI, tight: bool = True) -> Path:
    """Writes ``fig`` to ``path`` and closes it. ``tight``: cropped to what is drawn (a legend below
    the panels, a long title), nothing clipped."""
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=dpi, **({"bbox_inches": "tight"} if tight else {}))
    plt.close(fig)
    return Path(path)


def legend_below(fig, handles, labels, fontsize: float = FONT_M) -> None:
    """One legend under the panels, in as many rows as its entries need to fit the figure's width
    (saved with ``bbox_inches="tight"``, so nothing is clipped)."""
    width_in = fig.get_size_inches()[0]
    entry_in = max(len(lab) for lab in labels) * fontsize * 0.55 / 72 + 0.6  # text and line sample
    fits = max(1, min(len(labels), int(width_in // entry_in)))
    ncol = math.ceil(len(labels) / math.ceil(len(labels) / fits))  # rows filled evenly
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=ncol, fontsize=fontsize,
               frameon=False)


def labels_width(labels: list[str], fontsize: float = FONT_S) -> float:
    """Inches of a column of tick labels, added to a figure's width so that long labels (a sweep's
    variants) do not squeeze its panels."""
    return max((len(lab) for lab in labels), default=0) * fontsize * 0.55 / 72


def no_values_note(ax, labels: list[str], empty: bool, y: float = 0.04) -> None:
    """"no values" and the strategies without any, one a line (a sweep's labels are long), in the middle
    of an empty panel or at the bottom right of one with curves (``y``: its bottom, in axes fractions,
    above another note there); outside the layout, so that long labels never make ``tight_layout`` give up."""
    where = dict(x=0.5, y=0.5, ha="center", va="center") if empty else dict(x=0.98, y=y, ha="right", va="bottom")
    text = ax.text(where.pop("x"), where.pop("y"), "\n".join(["no values:", *labels]), transform=ax.transAxes,
                   fontsize=FONT_XS if max(map(len, labels)) > 40 else FONT_S, color=NOTE_COLOR, **where)
    text.set_in_layout(False)


def strategy_base(spec: str) -> str:
    """What a label's color stands for: its strategy, with the components a variant swaps in
    (``felix@aggregator.name=median`` is ``felix[aggregator=median]``, another strategy's color), but not
    its other options (``felix@aggregator.trim=0.3`` is ``felix``: a variant, the same color)."""
    name, options = parse_cell_strategy(spec)
    swaps = [f"{key[:-len('.name')]}={value}" for key, value in options.items() if key.endswith(".name")]
    return f"{name}[{','.join(swaps)}]" if swaps else name


def strategy_styles(strategies: list[str], reference: str | None = None) -> dict[str, dict]:
    """Per strategy label, how its lines are drawn (``color``, ``ls``, ``lw``, ``zorder``): each
    strategy its own color and line style, so curves that lie on one another stay apart; where
    labels are variants of one strategy (a sweep, ``NAME@KEY=VALUE``) they share its color and
    differ by line style. A variant that swaps in a component (``NAME@aggregator.name=X``) is a strategy
    of its own here (:func:`strategy_base`). The reference is drawn thicker and on top.
    :func:`variant_markers` adds the markers that keep a sweep's variants visible where their curves
    coincide."""
    bases = list(dict.fromkeys(strategy_base(st) for st in strategies))
    shared = len(bases) < len(strategies)
    variant_index: dict[str, int] = {}
    styles = {}
    for i, st in enumerate(strategies):
        base = strategy_base(st)
        if shared:
            color, style = bases.index(base), variant_index.get(base, 0)
            variant_index[base] = style + 1
        else:
            color, style = i, i
        top = st == reference
        styles[st] = {"color": palette(color), "ls": LINESTYLES[style % len(LINESTYLES)],
                      "lw": 2.0 if top else 1.3, "zorder": 3 if top else 2}
    if shared:
        variant_markers(styles, strategies, reference)
    return styles


def variant_markers(styles: dict[str, dict], strategies: list[str], reference: str | None = None) -> dict:
    """Adds ``marker``, ``markevery``, ``ms``, ``mfc`` and a ``zorder`` to each label's style in
    ``styles`` (as :func:`strategy_styles` returns them) where labels are variants of one strategy.
    Variant k of n of a strategy gets ``VARIANT_MARKERS[k]`` starting ``k / n`` of the way into the
    marker spacing; its zorder is above variant k - 1's, and the variants of the reference's strategy
    are above every other strategy's lines. Returns ``styles``."""
    bases = {st: strategy_base(st) for st in strategies}
    ref_base = bases.get(reference)
    counts: dict[str, int] = {}
    for st in strategies:
        counts[bases[st]] = counts.get(bases[st], 0) + 1
    seen: dict[str, int] = {}
    for st in strategies:
        base = bases[st]
        k = seen.get(base, 0)
        seen[base] = k + 1
        if counts[base] < 2:
            continue
        style = styles[st]
        style.update(marker=VARIANT_MARKERS[k % len(VARIANT_MARKERS)], ms=4.5, mfc="none", mew=1.1,
                     markevery=(MARK_EVERY * k / counts[base], MARK_EVERY))
        style["zorder"] = (3 if base == ref_base else 2) + 0.1 * k
    return styles


RATIO_TICK_STEPS = ((1.0, 2.0, 5.0), (1.0, 1.5, 2.0, 3.0, 5.0, 7.0),
                    (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0))


def ratio_ticks(low: float, high: float, least: int = 3, most: int = 7) -> list[float]:
    """Ticks for a log axis of ratios from ``low`` to ``high`` (x0.5, x1, x2 ...): the coarsest of
    :data:`RATIO_TICK_STEPS` (per decade) that puts at least ``least`` ticks in the range; a range of
    many decades (a two-seed interval from x0.003 to x900) gets powers of ten, every so many decades,
    at most ``most`` of them with x1 among them, so the labels never run into each other; a range too
    narrow for the finest gets ``least`` ticks spread evenly on the log scale, to 3 significant digits.
    Label them with :func:`ratio_label`."""
    if not (low > 0 and high > low):
        return [1.0]
    for steps in RATIO_TICK_STEPS:
        decades = range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
        ticks = [round(m * 10.0 ** e, 12) for e in decades for m in steps]
        ticks = [t for t in ticks if low <= t <= high]
        if len(ticks) > most and steps is RATIO_TICK_STEPS[0]:
            powers = [e for e in decades if low <= 10.0 ** e <= high]
            every = math.ceil(len(powers) / most)
            return [10.0 ** e for e in powers if e % every == 0]
        if len(ticks) >= least:
            return ticks
    inner = [float(f"{t:.3g}") for t in (low * (high / low) ** ((i + 0.5) / least) for i in range(least))]
    return sorted(set(inner))


def ratio_label(value: float, _pos=None) -> str:
    """A ratio tick's label: ``x0.5``, ``x1``, ``x1.25``, ``x1000``, ``x0.001`` (no exponent below 10^6)."""
    return f"x{value:.3g}" if 0.01 <= value < 1000 else f"x{value:g}"


def wrap_label(label: str, width: int = 28) -> str:
    """A tick label of at most about ``width`` characters a line: broken after ``@``, ``;`` or ``,``
    (a sweep's ``NAME@KEY=VALUE;KEY=VALUE``), else after a space or ``-``; a word longer than
    ``width`` keeps its line."""
    if len(label) <= width:
        return label
    import re

    pieces = [p for p in re.split(r"(?<=[@;,\s-])", label) if p]
    lines, line = [], ""
    for piece in pieces:
        if line and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += piece
    lines.append(line.rstrip())
    return "\n".join(lines)
