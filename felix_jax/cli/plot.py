"""``felix-jax plot``: a run's or a comparison's figures redrawn from its saved files (host-only)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from ..traces import DataFileError
from .common import USER_ERRORS, add_traceback_flag, one_line, user_path

def _replot_run(run_dir: Path) -> Path:
    """``accuracy.png`` of a run folder, from its ``metrics.csv`` (and ``config.json`` for the title)."""
    import types

    from ..experiment.results import plot_accuracy, read_metrics_csv, run_title

    checkpoints = read_metrics_csv(run_dir / "metrics.csv")  # a DataFileError naming the file and line
    try:
        scenario = json.loads((run_dir / "config.json").read_text()).get("scenario", {})
    except (OSError, ValueError):
        scenario = {}
    # plot_accuracy reads only the record's checkpoints
    record = types.SimpleNamespace(checkpoints=checkpoints)
    plot_accuracy(record, run_dir / "accuracy.png", title=run_title({"scenario": scenario}),  # as the run drew it
                  target=scenario.get("target_accuracy"))
    return run_dir / "accuracy.png"


def _plot(args: argparse.Namespace) -> int:
    from ..experiment.figures.comparison import plot_comparison
    from ..experiment.tables import rows_from_summary_csv

    folder = user_path(args.dir)
    try:
        if (folder / "summary.csv").is_file() and (folder / "runs").is_dir():
            _check_summary_csv(folder / "summary.csv")
            rows = rows_from_summary_csv(folder)
            if not rows:
                raise SystemExit(f"felix-jax plot: {folder}/summary.csv holds no runs")
            from ..experiment.sweep_axes import read_view

            view = read_view(folder, rows)  # the axes and reference compare recorded
            figures = [_replot_run(Path(r["run_dir"])) for r in rows if (Path(r["run_dir"]) / "metrics.csv").is_file()]
            figures += plot_comparison(view.rows, view.strategies, view.regimes, folder, reference=view.reference)
        elif (folder / "metrics.csv").is_file():
            figures = [_replot_run(folder)]
        else:
            raise SystemExit(f"felix-jax plot: {folder} is neither a run folder (metrics.csv) nor a compare folder "
                             "(summary.csv and runs/)")
    except (*USER_ERRORS, ValueError) as e:  # a missing or malformed results file
        raise SystemExit(f"felix-jax plot: {one_line(e)}")
    print("wrote " + ", ".join(str(p) for p in figures))
    return 0


def _check_summary_csv(path: Path) -> None:
    """A comparison's ``summary.csv`` as :func:`rows_from_summary_csv` reads it: the columns a plot
    needs, and a number (a whole, finite one for the integer columns) in every numeric field; a
    :class:`DataFileError` naming the file, the line and the column otherwise."""
    import csv

    from ..experiment.tables import INT_COLUMNS, SUMMARY_COLUMNS, TEXT_COLUMNS

    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("strategy", "availability", "seed") if c not in (reader.fieldnames or [])]
        if missing:
            raise DataFileError(path, f"no column {', '.join(missing)}: not a comparison's summary.csv (expected "
                                      f"the header {','.join(SUMMARY_COLUMNS)},run_dir)")
        for line, row in enumerate(reader, start=2):
            for key, text in row.items():
                if key is None or text is None:
                    raise DataFileError(path, f"line {line}: {len(reader.fieldnames)} columns expected")
                if key in TEXT_COLUMNS or text == "":
                    continue
                try:
                    value = float(text)
                    if key in INT_COLUMNS and not (math.isfinite(value) and value == int(value)):
                        raise ValueError
                except ValueError:
                    kind = "a whole number" if key in INT_COLUMNS else "a number"
                    raise DataFileError(path, f"line {line}: {key} is {text!r}, not {kind}") from None


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``plot`` command and its folder argument."""
    plot = sub.add_parser("plot", help="redraw the figures of a run or compare results folder from its saved files")
    plot.add_argument("dir", help="a run folder (metrics.csv) or a compare folder (summary.csv and runs/)")
    plot.set_defaults(func=_plot)
    add_traceback_flag(plot)
    return plot
