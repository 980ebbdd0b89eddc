"""A comparison's tables and CSV files: ``summary.csv`` (a row per run: :func:`write_summary_csv`, read
back by :func:`rows_from_summary_csv`), ``summary_pooled.csv`` (:func:`write_pooled_csv`) and
``table.txt`` (:func:`comparison_table`, :func:`write_tables`), with the number formats they share
(:func:`sig`, :func:`paired_text`, :func:`per_seed_text`) and the few-seeds warning. The numbers
come from stats.py; this module only lays them out."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from .cells import cell_dir, regime_label
from .stats import default_reference, pool_cells

SUMMARY_COLUMNS = ["strategy", "scenario", "availability", "seed", "time_to_target_s", "time_to_target_h",
                   "bytes_total", "bytes_train", "bytes_eval", "control_bytes", "aggregations", "final_accuracy",
                   "best_accuracy", "agg_interval_p50_s", "agg_interval_p95_s", "staleness_p50", "stop_reason",
                   "host_seconds"]


def write_summary_csv(rows: list[dict], out: Path) -> Path:
    """``summary.csv``: one row per run (its cell's :data:`SUMMARY_COLUMNS` and ``run_dir``)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=SUMMARY_COLUMNS + ["run_dir"], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return out / "summary.csv"


# how each summary.csv column reads back (the rest are text); an empty field is None
INT_COLUMNS = {"seed", "bytes_total", "bytes_train", "bytes_eval", "control_bytes", "aggregations"}
TEXT_COLUMNS = {"strategy", "scenario", "availability", "stop_reason", "run_dir"}


def rows_from_summary_csv(out: Path) -> list[dict]:
    """The rows :func:`run_matrix` returned, read back from ``out/summary.csv`` (for
    :func:`comparison_table` and :func:`plot_comparison` without rerunning).

    A row's ``run_dir`` is its cell folder under ``out`` when that exists (the matrix may have
    been written from another working directory, or moved), else the path the CSV recorded.
    """
    out = Path(out)
    rows = []
    with open(out / "summary.csv", newline="") as f:
        for raw in csv.DictReader(f):
            row: dict = {}
            for key, text in raw.items():
                if key in TEXT_COLUMNS:
                    row[key] = text
                elif text == "":
                    row[key] = None
                else:
                    row[key] = int(float(text)) if key in INT_COLUMNS else float(text)
            moved = cell_dir(out, row["strategy"], row["availability"], row["seed"])
            if moved.is_dir() or not row.get("run_dir"):
                row["run_dir"] = str(moved)
            rows.append(row)
    return rows


def target_of(rows: list[dict]) -> float | None:
    """The comparison's target accuracy, from a cell's config.json (None: none, or unreadable)."""
    for r in rows:
        try:
            return json.loads((Path(r["run_dir"]) / "config.json").read_text())["scenario"].get("target_accuracy")
        except (OSError, ValueError, KeyError):
            continue
    return None


def sig(x: float, digits: int = 3) -> str:
    """``x`` to ``digits`` significant figures, in fixed notation (0.0217, 1.46, 123)."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    return f"{x:.{max(0, digits - 1 - math.floor(math.log10(abs(x))))}f}"


POOLED_COLUMNS = ["strategy", "availability", "seeds", "reached", "n_reached", "n_seeds", "hours_mean", "hours_std",
                  "hours_ci95_low", "hours_ci95_high", "per_seed_ratio", "ref_wins", "ratio_n", "ratio_geomean",
                  "ratio_ci95_low", "ratio_ci95_high", "gb_train", "gb_eval", "gb_total", "aggregations",
                  "final_accuracy"]


def write_pooled_csv(rows: list[dict], strategies: list[str], regimes: list[str], out: Path,
                     reference: str | None = None) -> Path:
    """``summary_pooled.csv``: :func:`pool_cells` (``summary.csv`` keeps one row per run); an
    empty field: none (a std or interval of fewer than 2 seeds, the reference's own ratios)."""
    with open(out / "summary_pooled.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=POOLED_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(pool_cells(rows, strategies, regimes, reference))
    return out / "summary_pooled.csv"


FEW_SEEDS = 3
FEW_SEEDS_WARNING = f"n < {FEW_SEEDS} seeds: intervals are wide or missing; run --seeds 0,1,2"


def few_seeds_warning(pooled: list[dict]) -> str | None:
    """The one-line warning for a table with a cell of fewer than 3 seeds run (None: none)."""
    few = [p for p in pooled if p["n_seeds"] < FEW_SEEDS]
    return None if not few else f"warning: {FEW_SEEDS_WARNING} ({len(few)} of {len(pooled)} cells)"


def paired_text(p: dict) -> str:
    """A pooled cell's paired verdict, ``x1.27 [0.950, 1.70] n=3`` (``-``: no seed both reached)."""
    if p.get("ratio_geomean") is None:
        return "-"
    ci = "" if p["ratio_ci95_low"] is None else f" [{sig(p['ratio_ci95_low'])}, {sig(p['ratio_ci95_high'])}]"
    return f"x{sig(p['ratio_geomean'])}{ci} n={p['ratio_n']}"


def per_seed_text(vs: dict | None, digits: int = 3) -> str:
    """A cell's ratios to the reference in seed order, ``-`` where not both reached the target."""
    return "-" if vs is None else ", ".join("-" if x is None else sig(x, digits) for _, x in vs["ratios"])


def comparison_table(rows: list[dict], strategies: list[str], regimes: list[str], reference: str = "felix",
                     target: float | None = None) -> str:
    """Per regime and strategy, pooled over seeds: seeds that reached the target of those run, virtual
    hours to it over those (mean, sample std, 95% Student t interval; three significant figures), the
    ratio of means to ``reference`` (only where every seed of both reached it), the seeds where the
    reference was faster, GB moved (mean) and the ratio to the reference seed by seed. Footnotes say
    how each is computed, and a warning line follows when a cell ran fewer than 3 seeds."""
    target = target_of(rows) if target is None else target
    cells = pool_cells(rows, strategies, regimes, reference)
    pooled = {(p["strategy"], p["availability"]): p for p in cells}
    seeds = sorted({r["seed"] for r in rows})
    wr = max([18] + [len(regime_label(rg)) for rg in regimes])  # a long regime or variant label widens its column
    ws = max([26] + [len(st) for st in strategies])
    lines = [f"time to target (accuracy {target if target is not None else 'none'}; the mean of the last 20 test "
             f"accuracies and the last one reach it) in virtual hours, over seeds {','.join(map(str, seeds))}; "
             f"reference {reference}",
             f"{'regime':<{wr}} {'strategy':<{ws}} {'n':>7} {'mean h':>7} {'std':>7} {'95% CI':>18} {'x ref':>6} "
             f"{'paired x ref [95% CI]':>28} {'ref wins':>8} {'GB':>8}  per-seed x ref"]
    for rg in regimes:
        ref = pooled.get((reference, rg))
        for st in strategies:
            p = pooled.get((st, rg))
            if p is None:
                continue
            mean = "-" if p["hours_mean"] is None else sig(p["hours_mean"])
            std = "-" if p["hours_std"] is None else sig(p["hours_std"])
            ci = "-" if p["hours_ci95_low"] is None else f"[{sig(p['hours_ci95_low'])}, {sig(p['hours_ci95_high'])}]"
            whole = p["reached"] == p["seeds"] and ref is not None and ref["reached"] == ref["seeds"] and ref["hours_mean"]
            ratio = f"x{sig(p['hours_mean'] / ref['hours_mean'])}" if whole else "-"
            wins = p["ref_wins"] or "-"
            lines.append(f"{regime_label(rg):<{wr}} {st:<{ws}} {p['reached']:>3}/{p['seeds']:<3} {mean:>7} {std:>7} "
                         f"{ci:>18} {ratio:>6} {paired_text(p):>28} {wins:>8} {sig(p['gb_total']):>8}  "
                         f"{per_seed_text(p['versus_reference'])}")
    lines += ["n: seeds that reached the target / seeds run; mean h, std, 95% CI: over the seeds that reached it, "
              "std the sample std (ddof=1), CI the Student t interval on the log scale, exp(mean(log h) -+ "
              "t(0.975, n-1) * std(log h) / sqrt(n)), never below zero (- for n < 2)",
              f"x ref: ratio of means to {reference} (only where every seed of both reached the target); paired x ref: "
              f"the geometric mean of the per-seed ratios with the Student t interval of their logs, over the n seeds "
              f"both reached (no interval for n < 2); ref wins: "
              f"seeds where {reference} reached it first, or alone, of the seeds both ran; per-seed x ref: hours / "
              f"{reference}'s hours seed by seed (- where not both reached it)"]
    warning = few_seeds_warning(cells)
    if warning:
        lines.append(warning)
    return "\n".join(lines)


def write_tables(rows: list[dict], strategies: list[str], regimes: list[str], out: Path,
                 reference: str | None = None) -> str:
    """``table.txt`` (:func:`comparison_table`, then a warning line for variants of a strategy that ran
    identically: ``variants.identical_variant_warnings``) and ``summary_pooled.csv``
    (:func:`write_pooled_csv`) in ``out``, as ``felix-jax compare`` writes them; returns the table's text."""
    from .variants import identical_variant_warnings

    reference = default_reference(strategies) if reference is None else reference
    table = comparison_table(rows, strategies, regimes, reference)
    out = Path(out)
    table = "\n".join([table, *power_lines(rows, strategies, regimes, reference), *curve_lines(
        rows, strategies, regimes, reference, out), *identical_variant_warnings(rows, strategies, regimes)])
    (out / "table.txt").write_text(table + "\n")
    write_pooled_csv(rows, strategies, regimes, out, reference)
    return table



def power_lines(rows: list[dict], strategies: list[str], regimes: list[str], reference: str) -> list[str]:
    """table.txt's power lines: per regime and baseline with 2 or more per-seed ratios to the reference,
    the spread of their logs and about how many seeds a 95% interval within +-10% needs
    (:func:`~felix_jax.experiment.curve.power_line`)."""
    from .curve import power_line

    lines = []
    for p in pool_cells(rows, strategies, regimes, reference):
        vs = p["versus_reference"]
        line = None if vs is None else power_line([x for _, x in vs["ratios"]])
        if line:
            lines.append(f"power, {regime_label(p['availability'])} {p['strategy']}: {line}")
    return lines


def curve_lines(rows: list[dict], strategies: list[str], regimes: list[str], reference: str, out: Path) -> list[str]:
    """Writes ``speedup_vs_target.csv`` (:func:`~felix_jax.experiment.curve.speedup_along_curve`; removed
    when there is no level to read) and returns table.txt's lines for it."""
    from .curve import CURVE_FILE, curve_table_lines, speedup_along_curve, write_curve_csv

    (Path(out) / CURVE_FILE).unlink(missing_ok=True)
    curve = speedup_along_curve(rows, strategies, regimes, reference)
    if not curve:
        return []
    write_curve_csv(curve, out)
    return [f"speed-up along the learning curve (hours / {reference}'s, paired by seed, at every level of 0.01 "
            f"from the first above the untrained model's to the highest {reference} reached, by the same rule; "
            f"{CURVE_FILE}): the lowest and highest level every seed of both reached",
            *curve_table_lines(curve, regimes, strategies, regime_label)]
