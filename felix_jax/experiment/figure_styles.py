"""Keeping a sweep's variants visible in ``compare``'s figures.

Variants of one strategy (``felix@concurrency=4``, ``felix@concurrency=8``) share its color and
differ by line style; where two of them run alike their curves coincide, and a dashed line lies
hidden under the solid one. :func:`variant_markers` gives each variant its own hollow marker, set
along the curve at an offset of its own (so coinciding curves show both markers side by side),
and draws each later variant above the earlier ones, the reference's strategy above the rest.
"""

from __future__ import annotations

from .cells import parse_cell_strategy

VARIANT_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
MARK_EVERY = 0.12  # a marker every this fraction of the axes' diagonal


def variant_markers(styles: dict[str, dict], strategies: list[str], reference: str | None = None) -> dict:
    """Adds ``marker``, ``markevery``, ``ms``, ``mfc`` and a ``zorder`` to each label's style in
    ``styles`` (as :func:`~.compare.strategy_styles` returns them) where labels are variants of one
    strategy. Variant k of n of a strategy gets ``VARIANT_MARKERS[k]`` starting ``k / n`` of the way
    into the marker spacing; its zorder is above variant k - 1's, and the variants of the
    reference's strategy are above every other strategy's lines. Returns ``styles``."""
    bases = {st: parse_cell_strategy(st)[0] for st in strategies}
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
