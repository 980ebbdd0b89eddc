"""The paper's diagnostic figures: drawn in ``figures/paper.py``, importable from here as before."""

from .figures.paper import (FIGURES, LATE_WEIGHT_STRATEGIES, MAX_STALENESS, plot_eval_tier, plot_late_weights,
                            plot_paper_figures, plot_selection, relative_late_weights)

__all__ = ["FIGURES", "LATE_WEIGHT_STRATEGIES", "MAX_STALENESS", "plot_eval_tier", "plot_late_weights",
           "plot_paper_figures", "plot_selection", "relative_late_weights"]
