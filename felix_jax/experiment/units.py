"""Byte counts in a unit that fits them (decimal: 1 MB = 10^6 bytes, as the rest of felix-jax counts)."""

from __future__ import annotations

BYTE_UNITS = (("B", 1.0), ("kB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12))


def byte_unit(largest: float) -> tuple[str, float]:
    """The unit, and bytes per unit, in which ``largest`` (bytes) reads between 1 and 1000 (B below
    1 kB, TB past 1000 TB)."""
    largest = abs(float(largest or 0.0))
    chosen = BYTE_UNITS[0]
    for unit in BYTE_UNITS:
        if largest >= unit[1]:
            chosen = unit
    return chosen


def bytes_text(n: float | None, digits: int = 3) -> str:
    """``n`` bytes with 3 significant digits in the unit that fits: ``888 kB``, ``1.23 GB``; ``-`` for None."""
    if n is None:
        return "-"
    unit, scale = byte_unit(n)
    value = float(n) / scale
    text = f"{value:.{digits}g}" if abs(value) < 10 ** digits else f"{value:,.0f}"
    return f"{text} {unit}"
