"""Progress text shared by a run's bar, a comparison's cells and a sweep's batches: durations as
clock time and the whole comparison's ETA. Imports nothing of the package, so every layer that
reports progress can use it."""

from __future__ import annotations


def format_seconds(s: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on."""
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def comparison_eta(walls: list[float], cells_left: int) -> str:
    """The whole comparison's ETA for a progress line: the mean wall time of the cells finished so
    far times the cells left (``""`` before any cell has finished, or with none left). In sweep
    batches a cell's wall time is its batch's over the batch's experiments."""
    if not walls or cells_left <= 0:
        return ""
    mean = sum(walls) / len(walls)
    return (f" | comparison ETA {format_seconds(mean * cells_left)} ({cells_left} cell"
            f"{'s' if cells_left != 1 else ''} left at {format_seconds(mean)} per finished cell)")
