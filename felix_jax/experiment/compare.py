"""``felix-jax compare``: every (strategy, availability, seed) of a scenario, then a table
and paper-style figures (host side).

Writes ``DIR/summary.csv`` (one row per run), ``DIR/summary_pooled.csv`` and ``DIR/table.txt``
(per strategy and regime over seeds: time to target with its sample std and 95% t interval,
ratios against FeLiX seed by seed and the seeds it won, bytes), one results folder per
run (``DIR/runs/<strategy>-<availability>-seed<k>``), and figures:
``accuracy.png`` (accuracy vs virtual hours per regime), ``bytes.png`` (bytes per
strategy, train vs eval), ``cdfs.png`` (staleness, utility age and relative aggregation
weights per strategy) and ``time_to_target.png`` (hours to target seed by seed, with the
mean and its 95% interval).

A cell's strategy may be a variant ``NAME@KEY=VALUE[;KEY=VALUE]`` (:func:`parse_cell_strategy`);
:func:`parse_sweep` and :func:`sweep_strategies` cross every strategy with each value of an
option (``felix-jax compare --sweep timeout_s=30,90``: cells ``felix@timeout_s=30``, ...).

This module is the comparison's one import: the work lives by concern in

- ``cells.py``: a cell's names (strategy variants, sweeps, its folder, a regime's label);
- ``matrix.py``: running the cells into their folders, and what a second run keeps or resumes;
- ``stats.py``: statistics over seeds (intervals, paired ratios, cells pooled over seeds);
- ``tables.py``: ``summary.csv``, ``summary_pooled.csv`` and ``table.txt``;
- ``figures/comparison.py``: the figures, in the look of ``figures/style.py``;
- ``progress.py``: the comparison's ETA.
"""

from __future__ import annotations

from .cells import AXES, cell_dir, cell_overrides, parse_cell_strategy, parse_sweep, regime_label, sweep_strategies
from .figures.comparison import FIGURES, accuracy_curves, plot_comparison, plot_time_to_target
from .figures.style import LINESTYLES, strategy_styles
from .matrix import (UNFINISHED_STOPS, CellChanged, all_kept, changed_cell, finished_summary, recorded_scenario,
                     run_matrix, same_scenario)
from .progress import comparison_eta
from .stats import (default_reference, hours_stats, log_interval, paired_ratio, pool_cells, t_quantile_975,
                    versus_reference)
from .tables import (FEW_SEEDS, FEW_SEEDS_WARNING, INT_COLUMNS, POOLED_COLUMNS, SUMMARY_COLUMNS, TEXT_COLUMNS,
                     comparison_table, few_seeds_warning, paired_text, per_seed_text, rows_from_summary_csv, sig,
                     target_of, write_pooled_csv, write_summary_csv, write_tables)

__all__ = [
    # cells.py
    "AXES", "cell_dir", "cell_overrides", "parse_cell_strategy", "parse_sweep", "regime_label", "sweep_strategies",
    # matrix.py
    "UNFINISHED_STOPS", "CellChanged", "all_kept", "changed_cell", "finished_summary", "recorded_scenario",
    "run_matrix", "same_scenario",
    # stats.py
    "default_reference", "hours_stats", "log_interval", "paired_ratio", "pool_cells", "t_quantile_975",
    "versus_reference",
    # tables.py
    "FEW_SEEDS", "FEW_SEEDS_WARNING", "INT_COLUMNS", "POOLED_COLUMNS", "SUMMARY_COLUMNS", "TEXT_COLUMNS",
    "comparison_table", "few_seeds_warning", "paired_text", "per_seed_text", "rows_from_summary_csv", "sig",
    "target_of", "write_pooled_csv", "write_summary_csv", "write_tables",
    # figures/comparison.py and figures/style.py
    "FIGURES", "LINESTYLES", "accuracy_curves", "plot_comparison", "plot_time_to_target", "strategy_styles",
    # progress.py
    "comparison_eta",
]
