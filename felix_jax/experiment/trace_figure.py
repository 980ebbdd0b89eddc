"""``felix-jax plot-trace``'s figure: drawn in ``figures/trace.py``, importable from here as before."""

from .figures.trace import (DEFAULT_CLIENTS, DEFAULT_HOURS, MAX_RASTER_CLIENTS, TIER_COLORS, TIME_POINTS, default_out,
                            plot_trace, trace_for_plot)

__all__ = ["DEFAULT_CLIENTS", "DEFAULT_HOURS", "MAX_RASTER_CLIENTS", "TIER_COLORS", "TIME_POINTS", "default_out",
           "plot_trace", "trace_for_plot"]
