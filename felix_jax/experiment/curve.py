"""The speed-up along the learning curve: time to every accuracy on a grid, by the paper's rule, and each
baseline's paired ratio to the reference at every level (numbers only; the figure is
``figures/curve.py``).

One target hides a verdict that depends on the target: on the flat early stretch of a curve a small
change of target moves the time a lot. A run that goes on past its target (``stop_at_target=false``
with a horizon) gives its time to every level from one trajectory, so the ratio can be read along the
whole curve.

The rule is the run's own stop rule (:class:`~felix_jax.fleet.config.StopRule`): a level is reached at
the first test checkpoint where the mean of the last ``window`` accuracies (fewer early on: those so
far) and the last accuracy are both at or above it. :func:`rule_levels` computes that mean the way the
rule does, so :func:`crossing_times` at a run's target gives its ``time_to_target_s`` exactly.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from .stats import default_reference, paired_ratio, t_quantile_975

CURVE_FILE = "speedup_vs_target.csv"
CURVE_COLUMNS = ["availability", "strategy", "reference", "target", "n", "seeds", "reference_reached",
                 "strategy_reached", "ratio_geomean", "ratio_ci95_low", "ratio_ci95_high", "reference_hours_mean",
                 "strategy_hours_mean", "per_seed_ratio"]
DEFAULT_STEP = 0.01


def rule_levels(accuracies, window: int = 20, full_window: bool = False) -> np.ndarray:
    """(checkpoints,) float64: at each checkpoint, the highest level the stop rule holds for there:
    min(mean of the last ``window`` accuracies, the last accuracy); ``full_window``
    (``reading.stop_window_fill=full``): -inf until ``window`` accuracies exist. The mean is summed as the
    rule sums it (``math.fsum``, correctly rounded), so a level compares with a target exactly as the rule does."""
    acc = [float(a) for a in accuracies]
    out = np.empty(len(acc), np.float64)
    for i in range(len(acc)):
        if full_window and i + 1 < window:
            out[i] = -np.inf
            continue
        recent = acc[max(0, i + 1 - window):i + 1]
        out[i] = min(math.fsum(recent) / len(recent), acc[i])
    return out


def crossing_times(times, accuracies, targets, window: int = 20, full_window: bool = False) -> np.ndarray:
    """(len(targets),) float64: the time of the first checkpoint where the rule holds for each target
    (NaN where it never does). A curve that dips back under a level does not undo its crossing."""
    times = np.asarray(times, np.float64)
    targets = np.atleast_1d(np.asarray(targets, np.float64))
    if len(times) != len(accuracies):
        raise ValueError(f"{len(times)} times for {len(accuracies)} accuracies")
    if len(times) == 0:
        return np.full(targets.shape, np.nan)
    best = np.maximum.accumulate(rule_levels(accuracies, window, full_window))
    idx = np.searchsorted(best, targets, side="left")  # first checkpoint whose running best >= target
    out = np.full(targets.shape, np.nan)
    hit = idx < len(best)
    out[hit] = times[idx[hit]]
    return out


def target_grid(levels_by_run: dict, reference_runs: list, step: float = DEFAULT_STEP) -> np.ndarray:
    """The levels a comparison is read at: multiples of ``step`` from the first one above every run's
    first level (the untrained model's; under a full-window rule, its first full window's: every level
    up to it is reached at that same checkpoint by the run) to the highest the reference reaches on any
    seed. ``levels_by_run``: run -> :func:`rule_levels`. Empty when the reference reaches nothing above
    the start, or no run has a level yet (runs cut before their first full window)."""
    firsts = [float(lv[np.isfinite(lv)][0]) for lv in levels_by_run.values() if np.isfinite(lv).any()]
    if not firsts or not reference_runs:
        return np.zeros(0)
    start = max(firsts)
    top = max((float(np.max(levels_by_run[r])) for r in reference_runs if len(levels_by_run[r])), default=start)
    k0 = math.floor(start / step + 1e-9) + 1  # strictly above the start
    k1 = math.floor(top / step + 1e-9)
    if k1 < k0:
        return np.zeros(0)
    return np.round(np.arange(k0, k1 + 1) * step, 10)


def read_curve(run_dir: str | Path) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """A run's checkpoint times (s), accuracies and its stop rule's window and ``full_window``, from its
    folder (config.json's ``stop``)."""
    import json

    run_dir = Path(run_dir)
    times, acc = [], []
    with open(run_dir / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            times.append(float(row["time_s"]))
            acc.append(float(row["accuracy"]))
    stop = {}
    cfg = run_dir / "config.json"
    if cfg.is_file():
        stop = json.loads(cfg.read_text()).get("stop", {})
    return np.asarray(times), np.asarray(acc), int(stop.get("window", 20)), bool(stop.get("full_window", False))


def _rule(curve: tuple) -> tuple[int, bool]:
    """A curve's (window, full_window): (times, accuracies, window[, full_window])."""
    return int(curve[2]), bool(curve[3]) if len(curve) > 3 else False


def speedup_along_curve(rows: list[dict], strategies: list[str], regimes: list[str], reference: str | None = None,
                        step: float = DEFAULT_STEP, curves: dict | None = None) -> list[dict]:
    """Per regime, baseline and level of :func:`target_grid`: the seeds both the baseline and the
    reference reached the level (``n``), the paired ratio of their times (baseline / reference:
    :func:`~felix_jax.experiment.stats.paired_ratio`, geometric mean and 95% t interval), how many
    seeds each reached it, and their mean hours. ``rows``: a comparison's rows (``run_dir`` each);
    ``curves``: (strategy, regime, seed) -> (times, accuracies, window), read from the rows' folders
    where not given (e.g. accuracies on a subset of the test set, :mod:`felix_jax.experiment.test_hits`);
    a curve may carry a fourth element, its rule's ``full_window``."""
    reference = default_reference(strategies) if reference is None else reference
    curves = dict(curves or {})
    for r in rows:
        key = (r["strategy"], r["availability"], r["seed"])
        if key not in curves and r.get("run_dir") and (Path(r["run_dir"]) / "metrics.csv").is_file():
            curves[key] = read_curve(r["run_dir"])
    out = []
    for rg in regimes:
        runs = {k: v for k, v in curves.items() if k[1] == rg and k[0] in strategies}
        levels = {k: rule_levels(v[1], *_rule(v)) for k, v in runs.items()}
        ref_runs = [k for k in runs if k[0] == reference]
        grid = target_grid(levels, ref_runs, step)
        if not len(grid):
            continue
        cross = {k: crossing_times(v[0], v[1], grid, *_rule(v)) for k, v in runs.items()}
        ref_seeds = {k[2]: cross[k] for k in ref_runs}
        for st in strategies:
            if st == reference:
                continue
            mine = {k[2]: cross[k] for k in runs if k[0] == st}
            seeds = sorted(set(mine) & set(ref_seeds))
            if not seeds:
                continue
            for j, target in enumerate(grid):
                ratios = [(sd, mine[sd][j] / ref_seeds[sd][j]) for sd in seeds
                          if np.isfinite(mine[sd][j]) and np.isfinite(ref_seeds[sd][j]) and ref_seeds[sd][j] > 0]
                pr = paired_ratio([x for _, x in ratios]) if ratios else None
                ref_h = [ref_seeds[sd][j] / 3600 for sd in seeds if np.isfinite(ref_seeds[sd][j])]
                my_h = [mine[sd][j] / 3600 for sd in seeds if np.isfinite(mine[sd][j])]
                out.append({
                    "availability": rg, "strategy": st, "reference": reference, "target": float(target),
                    "n": 0 if pr is None else pr["n"], "seeds": len(seeds),
                    "reference_reached": len(ref_h), "strategy_reached": len(my_h),
                    "ratio_geomean": None if pr is None else pr["geomean"],
                    "ratio_ci95_low": None if pr is None else pr["ci95_low"],
                    "ratio_ci95_high": None if pr is None else pr["ci95_high"],
                    "reference_hours_mean": float(np.mean(ref_h)) if ref_h else None,
                    "strategy_hours_mean": float(np.mean(my_h)) if my_h else None,
                    "per_seed_ratio": ";".join(f"{sd}:{x:.6g}" for sd, x in ratios)})
    return out


def write_curve_csv(curve: list[dict], out: Path) -> Path:
    """``speedup_vs_target.csv``: one row per (regime, baseline, level) of :func:`speedup_along_curve`."""
    path = Path(out) / CURVE_FILE
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CURVE_COLUMNS)
        w.writeheader()
        for row in curve:
            w.writerow({k: "" if row[k] is None else row[k] for k in CURVE_COLUMNS})
    return path


def highest_common_level(curve: list[dict], regime: str, strategy: str) -> float | None:
    """The highest level at which every seed of both the baseline and the reference reached it."""
    full = [r["target"] for r in curve if r["availability"] == regime and r["strategy"] == strategy
            and r["n"] == r["seeds"] and r["n"] > 0]
    return max(full) if full else None


def seeds_for_precision(log_ratio_sd: float, precision: float = 0.10, most: int = 10_000) -> int | None:
    """About how many seeds a 95% t interval of the paired ratio needs to be within x(1 -+ precision)
    (half-width log(1 + precision) on the log scale), given the per-seed sample sd of the log ratios:
    the smallest n >= 2 with t(0.975, n-1) * sd / sqrt(n) <= log(1 + precision). None past ``most``."""
    if not math.isfinite(log_ratio_sd) or log_ratio_sd < 0:
        return None
    half = math.log1p(precision)
    if log_ratio_sd == 0:
        return 2
    # t(0.975, n-1) > 1.96 for every n, so no n below the normal approximation's can do: start there
    n = max(2, math.ceil((1.959963984540054 * log_ratio_sd / half) ** 2))
    while n <= most:
        if t_quantile_975(n - 1) * log_ratio_sd / math.sqrt(n) <= half:
            return n
        n += 1
    return None


def power_line(per_seed_ratios: list[float], precision: float = 0.10) -> str | None:
    """One line: the per-seed spread of the log ratios and about how many seeds a +-10% interval needs
    (None for fewer than 2 ratios)."""
    vals = [float(x) for x in per_seed_ratios if x is not None and x > 0]
    if len(vals) < 2:
        return None
    sd = float(np.std(np.log(vals), ddof=1))
    n = seeds_for_precision(sd, precision)
    need = f"about {n} seeds" if n is not None else "more than 10,000 seeds"
    return (f"sd of log ratio {sd:.3f} over {len(vals)} seeds: a 95% interval within +-{precision:.0%} needs "
            f"{need}")


def curve_table_lines(curve: list[dict], regimes: list[str], strategies: list[str], label) -> list[str]:
    """table.txt's lines for the curve: per regime and baseline, the ratio at the lowest and highest level
    every seed of both reached, and its range between them."""
    lines = []
    for rg in regimes:
        for st in strategies:
            sel = [r for r in curve if r["availability"] == rg and r["strategy"] == st]
            if not sel:
                continue
            top = highest_common_level(curve, rg, st)
            full = [r for r in sel if r["n"] == r["seeds"] and r["n"] > 0 and r["ratio_geomean"] is not None]
            if top is None or not full:
                lines.append(f"  {label(rg)} {st}: no level above the start that every seed of both reached "
                             f"(levels {sel[0]['target']:.2f}-{sel[-1]['target']:.2f} read)")
                continue
            lo, hi = full[0], full[-1]
            g = [r["ratio_geomean"] for r in full]

            def at(r):
                ci = "" if r["ratio_ci95_low"] is None else f" [{r['ratio_ci95_low']:.3g}, {r['ratio_ci95_high']:.3g}]"
                return f"x{r['ratio_geomean']:.3g}{ci} at {r['target']:.2f}"
            lines.append(f"  {label(rg)} {st}: {at(lo)} ... {at(hi)}; range x{min(g):.3g}-{max(g):.3g} over "
                         f"{len(full)} levels (n={hi['n']})")
    return lines
