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
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

# cell names and sweep specs (cells.py) and the ETA (progress.py): public here too, as before
from .cells import AXES, cell_overrides, parse_cell_strategy, parse_sweep, regime_label, sweep_strategies  # noqa: F401
from .progress import comparison_eta  # noqa: F401
from .runner import PLUGIN_ERROR, run
from .scenario import Scenario

SUMMARY_COLUMNS = ["strategy", "scenario", "availability", "seed", "time_to_target_s", "time_to_target_h",
                   "bytes_total", "bytes_train", "bytes_eval", "control_bytes", "aggregations", "final_accuracy",
                   "best_accuracy", "agg_interval_p50_s", "agg_interval_p95_s", "staleness_p50", "stop_reason",
                   "host_seconds"]


FIGURES = ("accuracy.png", "bytes.png", "cdfs.png", "time_to_target.png")


def cell_dir(out: Path, strategy: str, regime: str, seed: int) -> Path:
    name = strategy.replace("@", "+").replace("=", "-").replace(";", "+")  # a variant's label too
    name = name.replace("/", "_").replace("\\", "_")  # an option's value that is a path: one folder
    if "/" in regime or "\\" in regime:  # a trace file: its name, not its path, names the folder
        regime = "file_" + Path(regime).name
    return out / "runs" / f"{name}-{regime.replace(':', '_')}-seed{seed}"


class CellChanged(ValueError):
    """A finished cell's recorded scenario differs from the one asked for (one line naming both)."""


def _changed_cell(sc: Scenario, run_dir: Path) -> str | None:
    """The keys in which a finished cell's recorded scenario differs from ``sc`` (None: no finished
    cell there, or the same scenario)."""
    try:
        config = json.loads((run_dir / "config.json").read_text())
        json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    recorded, wanted = recorded_scenario(config.get("scenario", {})), _as_recorded(sc.to_json())
    keys = sorted(k for k in set(recorded) | set(wanted) if recorded.get(k) != wanted.get(k))
    return None if not keys else ", ".join(f"{k} {recorded.get(k)!r} -> {wanted.get(k)!r}" for k in keys[:6])


# a cell stopped with one of these is not finished: its stop snapshot continues it (a signal's, or the
# state before a plugin's error, once the plugin is fixed)
UNFINISHED_STOPS = ("interrupted", PLUGIN_ERROR)


def finished_summary(sc: Scenario, run_dir: Path) -> dict | None:
    """The summary of a finished cell whose config.json is this scenario's, else None."""
    try:
        config = json.loads((run_dir / "config.json").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if summary.get("stop_reason") in UNFINISHED_STOPS:  # stopped by a signal or a plugin: resumed next time
        return None
    return summary if same_scenario(config.get("scenario"), sc) else None


def _as_recorded(fields: dict) -> dict:
    """Scenario fields as config.json writes them (JSON types)."""
    return json.loads(json.dumps(fields, default=str))


def recorded_scenario(stored: dict) -> dict:
    """A results folder's recorded scenario (its config.json's ``scenario``) with every field it lacks
    at its default: such a field was added to felix-jax after that run, and its default is the
    behaviour the run had. Fields this felix-jax does not know are kept as recorded."""
    defaults = _as_recorded(Scenario().to_json())
    return {**{k: v for k, v in defaults.items() if k not in stored}, **stored}


def same_scenario(stored, sc: Scenario) -> bool:
    """Whether a recorded scenario is ``sc`` (:func:`recorded_scenario`: a field the record lacks counts
    as its default, so a matrix keeps the cells it finished before the field existed)."""
    return isinstance(stored, dict) and recorded_scenario(stored) == _as_recorded(sc.to_json())


def _interrupted_with_snapshot(run_dir: Path) -> bool:
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    return summary.get("stop_reason") in UNFINISHED_STOPS and (run_dir / "snapshot" / "LATEST").is_file()


def _killed_with_snapshot(sc: Scenario, run_dir: Path) -> bool:
    """A cell of this scenario killed outright (no summary) after one of its periodic snapshots."""
    if (run_dir / "summary.json").exists() or not (run_dir / "snapshot" / "LATEST").is_file():
        return False
    try:
        stored = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return same_scenario(stored.get("scenario") if isinstance(stored, dict) else None, sc)


def _run_cell(sc: Scenario, run_dir: Path, progress: bool, deadline: float = math.inf,
              plot: bool = True, cell_budget_s: float | None = None,
              snapshot_minutes: float | None = None, writers: tuple = ()) -> dict | None:
    """One cell's summary; None if it would start after ``deadline`` (``time.time()``). A cell that a
    signal stopped (its snapshot written at the stop) continues from there, and so does one killed
    outright after a periodic snapshot (``snapshot_minutes``: one every that many minutes of wall
    time); any other unfinished cell starts again."""
    if time.time() > deadline:
        return None
    killed = _killed_with_snapshot(sc, run_dir)
    if killed:
        from ..fleet.snapshot import SnapshotError

        try:
            return run(sc, run_dir, progress=progress, plot=plot, wall_budget_s=cell_budget_s, resume=True,
                       snapshot_minutes=snapshot_minutes, writers=writers).summary
        except SnapshotError as err:  # written by another felix-jax (a changed simulator): the cell starts again
            print(f"{run_dir}: its snapshot cannot be resumed ({err}); the cell starts again", file=sys.stderr)
    resume = _interrupted_with_snapshot(run_dir)
    return run(sc, run_dir, progress=progress, plot=plot, wall_budget_s=cell_budget_s, resume=resume,
               snapshot_minutes=snapshot_minutes, writers=writers).summary


def _row(sc: Scenario, base: Scenario, summary: dict, run_dir: Path, label: str | None = None) -> dict:
    return {"strategy": label or sc.strategy, "scenario": base.name, "availability": sc.availability, "seed": sc.seed,
            **{k: summary.get(k) for k in SUMMARY_COLUMNS if k in summary}, "run_dir": str(run_dir), "_summary": summary}


def run_matrix(base: Scenario, strategies: list[str], regimes: list[str], seeds: list[int], out: Path,
               progress: bool = True, log: Callable[[str], None] = print, resume: bool = True,
               workers: int = 1, cells: list[tuple[str, str, int]] | None = None,
               deadline: float = math.inf, plot: bool = True, cell_budget_s: float | None = None,
               batch: int = 1, executor: str = "local", ray_address: str | None = None,
               snapshot_minutes: float | None = None, writers=(), ray_max_retries: int = 3) -> list[dict]:
    """Runs every (strategy, regime, seed) cell (or the given ``cells``) and writes ``summary.csv``.

    ``resume``: a cell whose folder already holds this scenario's ``config.json`` and a
    ``summary.json`` is read back instead of rerun, so a killed matrix continues where
    it stopped. ``workers > 1`` runs cells in that many processes (spawned, so each
    has its own JAX runtime; on a GPU they share the device). Cells that would start
    after ``deadline`` (``time.time()``) are left out of the result; ``plot=False``
    skips each run's own accuracy figure. ``cell_budget_s``: each cell stops after that much wall
    time (stop reason ``wall_budget``: its results hold up to where it got, and it counts as
    finished on resume). ``batch > 1`` runs the cells in sweep batches of that many experiments
    in this process, their device calls shared (``experiment/sweep.py``; same results; with
    ``workers``, not both). ``executor="ray"``: the batches run as Ray tasks
    (``ray_executor.py``; ``ray_address`` of the cluster, None: ``RAY_ADDRESS`` or a local instance).
    ``snapshot_minutes``: each cell (cell by cell or in ``workers``) snapshots every that many minutes of
    wall time, so that a matrix killed outright (``kill -9``, a machine stopped) resumes its running
    cells from their last snapshot, not from the start.
    ``writers``: metric writers (``experiment/writers.py``), one log per cell under ``out``; a kept
    cell that has none yet is logged from its files.
    """
    todo = cells if cells is not None else [(st, rg, sd) for rg in regimes for st in strategies for sd in seeds]
    scenarios = []
    for spec, rg, sd in todo:  # a cell's strategy may be a variant NAME@KEY=VALUE (parse_cell_strategy)
        scenarios.append(base.with_overrides({**cell_overrides(spec), "availability": rg, "seed": sd}))
    labels = [spec for spec, _, _ in todo]
    from .writers import for_cell, make_writers

    writers = make_writers(writers)
    cell_writers = [for_cell(writers, out, labels[i], sc.availability, sc.seed) for i, sc in enumerate(scenarios)]
    rows: list[dict | None] = [None] * len(todo)
    pending = []
    if len(set(map(tuple, todo))) < len(todo):
        twice = sorted({f"{a}/{b}/seed{c}" for a, b, c in todo if todo.count((a, b, c)) > 1})
        raise CellChanged(f"cells asked for twice: {', '.join(twice)} (repeated strategies, regimes or seeds)")
    for i, sc in enumerate(scenarios):
        run_dir = cell_dir(out, labels[i], sc.availability, sc.seed)
        changed = _changed_cell(sc, run_dir) if resume else None
        if changed is not None:
            raise CellChanged(f"cell {run_dir} finished with another scenario ({changed}); pass --overwrite to "
                              "rerun it, or choose another --out")
        done = finished_summary(sc, run_dir) if resume else None
        if done is not None:
            rows[i] = {**_row(sc, base, done, run_dir, labels[i]), "_kept": True}
            if writers:
                from .writers import backfill

                backfill(cell_writers[i], run_dir)
            log(f"[{i + 1}/{len(todo)}] {labels[i]} on {regime_label(sc.availability)}, seed {sc.seed}: "
                "finished earlier, kept")
        else:
            pending.append(i)
    if batch > 1 and workers > 1:
        raise ValueError("batch and workers: choose one (a batch shares one process's device calls)")
    if snapshot_minutes is not None and (batch > 1 or executor == "ray"):
        raise ValueError("snapshot_minutes: cell by cell or with workers (a sweep batch snapshots at a stop only)")
    if executor not in ("local", "ray"):
        raise ValueError(f"executor must be 'local' or 'ray', got {executor!r}")
    if pending and (executor == "ray" or workers > 1):  # a shared store made once, not by racing processes
        for w in writers:
            w.prepare()
    if (executor == "ray" or batch > 1) and pending:
        from .sweep import SweepJob, run_sweep

        dirs = [cell_dir(out, labels[i], scenarios[i].availability, scenarios[i].seed) for i in pending]
        # Ray workers may start elsewhere: their folders by absolute path
        jobs = [SweepJob(scenarios[i], d.resolve() if executor == "ray" else d, resume=_interrupted_with_snapshot(d),
                         writers=cell_writers[i]) for i, d in zip(pending, dirs)]
        if executor == "ray":
            from .ray_executor import run_on_ray

            summaries = run_on_ray(jobs, batch, address=ray_address, plot=plot, wall_budget_s=cell_budget_s, log=log,
                                   max_retries=ray_max_retries)
        else:
            summaries = [None if r is None else r.summary for r in
                         run_sweep(jobs, batch, plot=plot, wall_budget_s=cell_budget_s, stop_on_signals=True,
                                   deadline=deadline, log=log)]
        for i, d, summary in zip(pending, dirs, summaries):
            if summary is not None:
                rows[i] = _row(scenarios[i], base, summary, d, labels[i])
        if any(sm is not None and sm["stop_reason"] == "interrupted" for sm in summaries):
            write_summary_csv([r for r in rows if r is not None], out)
            raise KeyboardInterrupt  # as the cell-by-cell path: stopped cells resume from their snapshots
    elif workers <= 1:
        cells_bar = None
        if progress and pending and sys.stderr.isatty():  # the outer bar over cells (a terminal only:
            from tqdm import tqdm  # elsewhere the per-cell log lines say as much)

            cells_bar = tqdm(total=len(todo), initial=len(todo) - len(pending), desc="cells", unit="cell",
                             file=sys.stderr, leave=True)
        try:
            walls: list[float] = []  # wall seconds of each cell run here: the whole comparison's ETA
            for n, i in enumerate(pending):
                sc = scenarios[i]
                log(f"[{i + 1}/{len(todo)}] {labels[i]} on {regime_label(sc.availability)}, seed {sc.seed}"
                    f"{comparison_eta(walls, len(pending) - n)}")
                started = time.perf_counter()
                if cells_bar is not None:
                    cells_bar.set_postfix_str(f"{labels[i]}/{regime_label(sc.availability)}/seed{sc.seed}")
                run_dir = cell_dir(out, labels[i], sc.availability, sc.seed)
                summary = _run_cell(sc, run_dir, progress, deadline, plot, cell_budget_s, snapshot_minutes,
                                    cell_writers[i])
                rows[i] = None if summary is None else _row(sc, base, summary, run_dir, labels[i])
                walls.append(time.perf_counter() - started)
                if cells_bar is not None:
                    cells_bar.update(1)
        finally:
            if cells_bar is not None:
                cells_bar.close()
    elif pending:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_run_cell, scenarios[i], cell_dir(out, labels[i],
                                   scenarios[i].availability, scenarios[i].seed), False, deadline, plot,
                                   cell_budget_s, snapshot_minutes, cell_writers[i]): i
                       for i in pending}
            started = time.perf_counter()
            for n, fut in enumerate(as_completed(futures), 1):
                i = futures[fut]
                sc = scenarios[i]
                run_dir = cell_dir(out, labels[i], sc.availability, sc.seed)
                summary = fut.result()
                if summary is None:
                    continue
                rows[i] = _row(sc, base, summary, run_dir, labels[i])
                # cells finish ``workers`` at a time: the mean per finished cell is over the elapsed time
                per_cell = [(time.perf_counter() - started) / n] * n
                log(f"[{n}/{len(pending)} run] {labels[i]} on {regime_label(sc.availability)}, seed {sc.seed}: "
                    f"{rows[i]['stop_reason']}{comparison_eta(per_cell, len(pending) - n)}")
    done = [r for r in rows if r is not None]
    write_summary_csv(done, out)
    return done


def all_kept(rows: list[dict]) -> bool:
    """Every cell of :func:`run_matrix`'s rows had finished earlier and none ran now."""
    return bool(rows) and all(r.get("_kept") for r in rows)


def write_summary_csv(rows: list[dict], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=SUMMARY_COLUMNS + ["run_dir"], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return out / "summary.csv"


# how each summary.csv column reads back (the rest are text); an empty field is None
_INT_COLUMNS = {"seed", "bytes_total", "bytes_train", "bytes_eval", "control_bytes", "aggregations"}
_TEXT_COLUMNS = {"strategy", "scenario", "availability", "stop_reason", "run_dir"}


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
                if key in _TEXT_COLUMNS:
                    row[key] = text
                elif text == "":
                    row[key] = None
                else:
                    row[key] = int(float(text)) if key in _INT_COLUMNS else float(text)
            moved = cell_dir(out, row["strategy"], row["availability"], row["seed"])
            if moved.is_dir() or not row.get("run_dir"):
                row["run_dir"] = str(moved)
            rows.append(row)
    return rows


def _mean(values):
    vals = [v for v in values if v is not None]
    return None if len(vals) < len(values) or not vals else float(np.mean(vals))


def _target_of(rows: list[dict]) -> float | None:
    """The comparison's target accuracy, from a cell's config.json (None: none, or unreadable)."""
    for r in rows:
        try:
            return json.loads((Path(r["run_dir"]) / "config.json").read_text())["scenario"].get("target_accuracy")
        except (OSError, ValueError, KeyError):
            continue
    return None


def _sig(x: float, digits: int = 3) -> str:
    """``x`` to ``digits`` significant figures, in fixed notation (0.0217, 1.46, 123)."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    return f"{x:.{max(0, digits - 1 - math.floor(math.log10(abs(x))))}f}"


def t_quantile_975(df: int) -> float:
    """Student t's 0.975 quantile with ``df`` degrees of freedom (scipy, a dependency of JAX):
    the half-width factor of a two-sided 95% interval (12.706 for df 1, 4.303 for df 2)."""
    from scipy.stats import t

    return float(t.ppf(0.975, df))


def log_interval(values: list[float]) -> tuple[float | None, float | None]:
    """The 95% Student t interval computed on the logs of positive ``values`` and mapped back:
    exp(mean(log x) -+ t(0.975, n-1) * std(log x, ddof=1) / sqrt(n)); (None, None) for n < 2. An
    interval for the geometric mean that is never below zero (hours, ratios)."""
    n = len(values)
    if n < 2:
        return None, None
    logs = np.log(np.asarray(values, np.float64))
    half = t_quantile_975(n - 1) * float(np.std(logs, ddof=1)) / math.sqrt(n)
    centre = float(np.mean(logs))
    return math.exp(centre - half), math.exp(centre + half)


def hours_stats(hours: list[float]) -> dict:
    """Over the hours of the seeds that reached the target: ``n``, ``mean``, ``std`` (the sample
    std, ddof=1; None for n < 2) and the 95% interval ``ci95_low`` / ``ci95_high`` computed on the
    log scale (:func:`log_interval`: never below zero hours; None for n < 2), whose centre is the
    geometric mean ``geomean``."""
    n = len(hours)
    mean = float(np.mean(hours)) if n else None
    std = float(np.std(hours, ddof=1)) if n >= 2 else None
    positive = n and min(hours) > 0
    low, high = log_interval(hours) if n >= 2 and positive else (None, None)
    geomean = math.exp(float(np.mean(np.log(hours)))) if positive else None
    return {"n": n, "mean": mean, "std": std, "ci95_low": low, "ci95_high": high, "geomean": geomean}


def paired_ratio(ratios: list[float]) -> dict | None:
    """A verdict over seeds from per-seed ratios (a strategy's hours / the reference's, seeds where both
    reached the target): ``n``, ``geomean`` (exp of the mean log ratio) and its 95% t interval on the
    log ratios, ``ci95_low`` / ``ci95_high`` (None for n < 2). None: no ratio."""
    vals = [float(r) for r in ratios if r is not None]
    if not vals:
        return None
    if min(vals) <= 0:
        raise ValueError(f"paired_ratio: ratios must be positive, got {min(vals)}")
    low, high = log_interval(vals)
    return {"n": len(vals), "geomean": math.exp(float(np.mean(np.log(vals)))), "ci95_low": low, "ci95_high": high}


def versus_reference(rows: list[dict], strategy: str, regime: str, reference: str) -> dict | None:
    """Seed by seed against ``reference`` on ``regime``, over the seeds both ran: ``ratios``, a list
    of (seed, hours / reference's hours), the ratio None where not both reached the target;
    ``ref_wins``, the seeds where the reference reached it first, or alone; ``paired``, the seeds
    both ran (a seed neither reached is no one's win). None: the reference itself, or no seed in
    common."""
    if strategy == reference:
        return None

    def hours_by_seed(st):
        return {r["seed"]: r["time_to_target_h"] for r in rows if r["strategy"] == st and r["availability"] == regime}
    mine, ref = hours_by_seed(strategy), hours_by_seed(reference)
    seeds = sorted(set(mine) & set(ref))
    if not seeds:
        return None
    ratios, wins = [], 0
    for sd in seeds:
        h, h_ref = mine[sd], ref[sd]
        both = h is not None and h_ref is not None
        ratios.append((sd, h / h_ref if both and h_ref > 0 else None))
        wins += int((h_ref is not None and h is None) or (both and h_ref < h))
    return {"ratios": ratios, "ref_wins": wins, "paired": len(seeds)}


def _default_reference(strategies: list[str]) -> str | None:
    return "felix" if "felix" in strategies else (strategies[0] if strategies else None)


def _ratio_text(x: float) -> str:
    return f"{x:.6g}"


def pool_cells(rows: list[dict], strategies: list[str], regimes: list[str],
               reference: str | None = None) -> list[dict]:
    """One row per (strategy, regime) over its seeds: how many reached the target (``reached`` =
    ``n_reached``, of ``seeds`` = ``n_seeds``), hours to it over those that did (:func:`hours_stats`:
    mean, sample std, 95% t interval), seed by seed against ``reference`` (default ``felix``, else
    the first strategy; :func:`versus_reference`: ``per_seed_ratio`` as ``SEED:RATIO;...`` over the
    seeds both reached, ``ref_wins`` as ``WINS/PAIRED``), the paired verdict over those per-seed
    ratios (:func:`paired_ratio`: ``ratio_n``, ``ratio_geomean``, ``ratio_ci95_low`` / ``_high``), GB
    train / eval / total and aggregations (means)."""
    reference = _default_reference(strategies) if reference is None else reference
    pooled = []
    for rg in regimes:
        for st in strategies:
            sel = [r for r in rows if r["strategy"] == st and r["availability"] == rg]
            if not sel:
                continue
            hours = [r["time_to_target_h"] for r in sel if r["time_to_target_h"] is not None]
            stats = hours_stats(hours)
            vs = versus_reference(rows, st, rg, reference) if reference is not None else None
            pr = None if vs is None else paired_ratio([x for _, x in vs["ratios"]])
            pooled.append({
                "strategy": st, "availability": rg, "seeds": len(sel), "reached": len(hours),
                "n_reached": len(hours), "n_seeds": len(sel),
                "hours_mean": stats["mean"], "hours_std": stats["std"],
                "hours_ci95_low": stats["ci95_low"], "hours_ci95_high": stats["ci95_high"],
                "per_seed_ratio": None if vs is None else
                ";".join(f"{sd}:{_ratio_text(x)}" for sd, x in vs["ratios"] if x is not None),
                "ref_wins": None if vs is None else f"{vs['ref_wins']}/{vs['paired']}",
                "versus_reference": vs,
                "ratio_n": None if pr is None else pr["n"],
                "ratio_geomean": None if pr is None else pr["geomean"],
                "ratio_ci95_low": None if pr is None else pr["ci95_low"],
                "ratio_ci95_high": None if pr is None else pr["ci95_high"],
                "gb_train": float(np.mean([r["bytes_train"] or 0 for r in sel])) / 1e9,
                "gb_eval": float(np.mean([r["bytes_eval"] or 0 for r in sel])) / 1e9,
                "gb_total": float(np.mean([r["bytes_total"] or 0 for r in sel])) / 1e9,
                "aggregations": float(np.mean([r["aggregations"] or 0 for r in sel])),
                "final_accuracy": float(np.mean([r["final_accuracy"] or 0 for r in sel]))})
    return pooled


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
    ci = "" if p["ratio_ci95_low"] is None else f" [{_sig(p['ratio_ci95_low'])}, {_sig(p['ratio_ci95_high'])}]"
    return f"x{_sig(p['ratio_geomean'])}{ci} n={p['ratio_n']}"


def per_seed_text(vs: dict | None, digits: int = 3) -> str:
    """A cell's ratios to the reference in seed order, ``-`` where not both reached the target."""
    return "-" if vs is None else ", ".join("-" if x is None else _sig(x, digits) for _, x in vs["ratios"])


def comparison_table(rows: list[dict], strategies: list[str], regimes: list[str], reference: str = "felix",
                     target: float | None = None) -> str:
    """Per regime and strategy, pooled over seeds: seeds that reached the target of those run, virtual
    hours to it over those (mean, sample std, 95% Student t interval; three significant figures), the
    ratio of means to ``reference`` (only where every seed of both reached it), the seeds where the
    reference was faster, GB moved (mean) and the ratio to the reference seed by seed. Footnotes say
    how each is computed, and a warning line follows when a cell ran fewer than 3 seeds."""
    target = _target_of(rows) if target is None else target
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
            mean = "-" if p["hours_mean"] is None else _sig(p["hours_mean"])
            std = "-" if p["hours_std"] is None else _sig(p["hours_std"])
            ci = "-" if p["hours_ci95_low"] is None else f"[{_sig(p['hours_ci95_low'])}, {_sig(p['hours_ci95_high'])}]"
            whole = p["reached"] == p["seeds"] and ref is not None and ref["reached"] == ref["seeds"] and ref["hours_mean"]
            ratio = f"x{_sig(p['hours_mean'] / ref['hours_mean'])}" if whole else "-"
            wins = p["ref_wins"] or "-"
            lines.append(f"{regime_label(rg):<{wr}} {st:<{ws}} {p['reached']:>3}/{p['seeds']:<3} {mean:>7} {std:>7} "
                         f"{ci:>18} {ratio:>6} {paired_text(p):>28} {wins:>8} {_sig(p['gb_total']):>8}  "
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

    reference = _default_reference(strategies) if reference is None else reference
    table = comparison_table(rows, strategies, regimes, reference)
    table = "\n".join([table, *identical_variant_warnings(rows, strategies, regimes)])  # an option that did nothing
    out = Path(out)
    (out / "table.txt").write_text(table + "\n")
    write_pooled_csv(rows, strategies, regimes, out, reference)
    return table


def _accuracy_curves(rows: list[dict], st: str, rg: str, grid: np.ndarray) -> np.ndarray | None:
    """(seeds, len(grid)) accuracy of each seed's run, held between checkpoints up to the run's end
    (its summary's ``end_time_s``, else its last checkpoint: a stalled run stays flat to where it
    stopped), NaN after it."""
    curves = []
    for r in rows:
        if r["strategy"] != st or r["availability"] != rg:
            continue
        data = np.genfromtxt(Path(r["run_dir"]) / "metrics.csv", delimiter=",", names=True)
        hours, acc = np.atleast_1d(data["hours"]), np.atleast_1d(data["accuracy"])
        end_s = (r.get("_summary") or {}).get("end_time_s")
        end_h = max(float(hours[-1]), end_s / 3600 if end_s is not None else 0.0)
        idx = np.searchsorted(hours, grid, side="right") - 1
        curve = np.where(idx >= 0, acc[np.clip(idx, 0, None)], np.nan)
        curves.append(np.where(grid <= end_h, curve, np.nan))
    return np.array(curves) if curves else None


LINESTYLES = ("-", "--", "-.", ":", (0, (8, 2)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 1)))


def strategy_styles(strategies: list[str], reference: str | None = None) -> dict[str, dict]:
    """Per strategy label, how its lines are drawn (``color``, ``ls``, ``lw``, ``zorder``): each
    strategy its own color and line style, so curves that lie on one another stay apart; where
    labels are variants of one strategy (a sweep, ``NAME@KEY=VALUE``) they share its color and
    differ by line style. The reference is drawn thicker and on top. :func:`variant_markers` adds
    the markers that keep a sweep's variants visible where their curves coincide."""
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab10")
    bases = list(dict.fromkeys(parse_cell_strategy(st)[0] for st in strategies))
    shared = len(bases) < len(strategies)
    variant_index: dict[str, int] = {}
    styles = {}
    for i, st in enumerate(strategies):
        base = parse_cell_strategy(st)[0]
        if shared:
            color, style = bases.index(base), variant_index.get(base, 0)
            variant_index[base] = style + 1
        else:
            color, style = i, i
        top = st == reference
        styles[st] = {"color": cmap(color % 10), "ls": LINESTYLES[style % len(LINESTYLES)],
                      "lw": 2.0 if top else 1.3, "zorder": 3 if top else 2}
    if shared:
        from .figure_styles import variant_markers

        variant_markers(styles, strategies, reference)
    return styles


def _drawing_order(strategies: list[str], reference: str | None) -> list[str]:
    """The reference last: drawn on top of the others."""
    return [st for st in strategies if st != reference] + ([reference] if reference in strategies else [])


def _legend_below(fig, handles, labels, fontsize: float = 8) -> None:
    """One legend under the panels, in as many rows as its entries need to fit the figure's width
    (saved with ``bbox_inches="tight"``, so nothing is clipped)."""
    width_in = fig.get_size_inches()[0]
    entry_in = max(len(lab) for lab in labels) * fontsize * 0.55 / 72 + 0.6  # text and line sample
    fits = max(1, min(len(labels), int(width_in // entry_in)))
    ncol = math.ceil(len(labels) / math.ceil(len(labels) / fits))  # rows filled evenly
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=ncol, fontsize=fontsize,
               frameon=False)


def _labels_width(labels: list[str], fontsize: float = 7) -> float:
    """Inches of a column of tick labels, added to a figure's width so that long labels (a sweep's
    variants) do not squeeze its panels."""
    return max((len(lab) for lab in labels), default=0) * fontsize * 0.55 / 72


def _no_values_note(ax, labels: list[str], empty: bool) -> None:
    """"no values" and the strategies without any, one a line (a sweep's labels are long), in the middle
    of an empty panel or at the bottom right of one with curves; outside the layout, so that long labels
    never make ``tight_layout`` give up."""
    where = dict(x=0.5, y=0.5, ha="center", va="center") if empty else dict(x=0.98, y=0.04, ha="right", va="bottom")
    text = ax.text(where.pop("x"), where.pop("y"), "\n".join(["no values:", *labels]), transform=ax.transAxes,
                   fontsize=6 if max(map(len, labels)) > 40 else 7, color="0.35", **where)
    text.set_in_layout(False)


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _end_hours(row: dict) -> float | None:
    """Where a run ended, in virtual hours: its summary's ``end_time_s`` (from the row, else its
    ``summary.json``), else its last checkpoint; None if none of them can be read."""
    summary = row.get("_summary")
    if not summary:
        try:
            summary = json.loads((Path(row["run_dir"]) / "summary.json").read_text())
        except (OSError, ValueError, KeyError, TypeError):
            summary = {}
    if summary.get("end_time_s") is not None:
        return summary["end_time_s"] / 3600
    try:
        data = np.genfromtxt(Path(row["run_dir"]) / "metrics.csv", delimiter=",", names=True)
        return float(np.atleast_1d(data["hours"])[-1])
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def plot_comparison(rows: list[dict], strategies: list[str], regimes: list[str], out: Path,
                    target: float | None = None, reference: str | None = None) -> list[Path]:
    """``accuracy.png`` (mean over seeds with a min-max band, the target line, shared axes, one
    legend below), ``bytes.png`` (GB per strategy, train and eval stacked, each bar labelled with its
    total and eval share), ``cdfs.png`` (per regime: staleness at aggregation, utility age at a train
    pick and aggregation weight relative to the strategy's mean weight; a strategy with no such
    values says so) and, when there is a target, ``time_to_target.png`` (:func:`plot_time_to_target`).
    Every strategy keeps one color and line style (:func:`strategy_styles`); the ``reference``
    (default ``felix``, else the first strategy) is drawn on top. A trace file's regime is titled by
    its file name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = _target_of(rows) if target is None else target
    reference = _default_reference(strategies) if reference is None else reference
    paths = []
    for name in FIGURES:  # every figure is redrawn from the cells there are: none outlives its data
        (out / name).unlink(missing_ok=True)
    styles = strategy_styles(strategies, reference)
    order = _drawing_order(strategies, reference)
    seeds = sorted({r["seed"] for r in rows})
    end_h = max([h for h in map(_end_hours, rows) if h is not None] or [0.0])
    grid = np.linspace(0.0, max(end_h, 1e-6), 400)
    fig, axes = plt.subplots(1, len(regimes), figsize=(max(4.2 * len(regimes), 5.0), 3.6), squeeze=False,
                             sharex=True, sharey=True)
    handles: dict[str, object] = {}
    for ax, rg in zip(axes[0], regimes):
        for st in order:
            curves = _accuracy_curves(rows, st, rg, grid)
            if curves is None:
                continue
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns after every run's end
                mean, lo, hi = np.nanmean(curves, 0), np.nanmin(curves, 0), np.nanmax(curves, 0)
            (handles[st],) = ax.plot(grid, mean, label=st, **styles[st])
            if len(curves) > 1:
                ax.fill_between(grid, lo, hi, color=styles[st]["color"], alpha=0.15, lw=0,
                                zorder=styles[st]["zorder"] - 1)
        if target is not None:
            handles["_target"] = ax.axhline(target, color="k", ls="--", lw=0.8, zorder=1)
        ax.set_title(regime_label(rg))
        ax.set_xlabel("virtual hours")
        ax.set_ylabel("test accuracy (fraction correct)")
        ax.grid(alpha=0.3)
    fig.suptitle(f"mean over seeds {','.join(map(str, seeds))}, band: min-max" if len(seeds) > 1
                 else f"seed {seeds[0]}" if seeds else "", fontsize=9)
    fig.tight_layout()
    names = [st for st in strategies if st in handles] + (["_target"] if "_target" in handles else [])
    if names:
        _legend_below(fig, [handles[n] for n in names],
                      [f"target {target:g}" if n == "_target" else n for n in names])
    paths.append(_save(fig, out / "accuracy.png"))

    pooled = {(p["strategy"], p["availability"]): p for p in pool_cells(rows, strategies, regimes, reference)}
    rows_in = len(strategies)  # horizontal bars: a long label (a sweep's variant) reads along its row
    fig, axes = plt.subplots(1, len(regimes), figsize=(4.2 * len(regimes) + _labels_width(strategies),
                                                       1.3 + 0.4 * rows_in), squeeze=False, sharex=True, sharey=True)
    top = max([p["gb_train"] + p["gb_eval"] for p in pooled.values()] or [0.0])
    for ax, rg in zip(axes[0], regimes):
        names = [st for st in strategies if (st, rg) in pooled]
        train = [pooled[st, rg]["gb_train"] for st in names]
        ev = [pooled[st, rg]["gb_eval"] for st in names]
        y = [strategies.index(st) for st in names]
        ax.barh(y, train, label="train", color="tab:blue")
        ax.barh(y, ev, left=train, label="eval", color="tab:orange")
        for yi, t, e in zip(y, train, ev):
            share = f", eval {100 * e / (t + e):.1f}%" if e > 0 else ""
            ax.annotate(f"{_sig(t + e)} GB{share}", (t + e, yi), ha="left", va="center", fontsize=7,
                        xytext=(3, 0), textcoords="offset points")
        ax.set_yticks(np.arange(rows_in), strategies, fontsize=7)
        ax.set_ylim(rows_in - 0.5, -0.5)  # the first strategy on top
        ax.set_title(regime_label(rg))
        ax.set_xlabel("GB moved (mean over seeds)")
        ax.set_xlim(0, top * 1.05 if top > 0 else 1.0)
        ax.grid(alpha=0.3, axis="x")
        ax.set_axisbelow(True)  # the grid behind the bars and their labels
    axes[0][0].set_ylabel("strategy")  # the rows are shared: named once, beside their labels
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.tight_layout()
    from .figure_styles import fit_bar_labels

    fit_bar_labels(fig, axes[0])  # a label that does not fit beside its bar goes inside it
    _legend_below(fig, handles, labels)
    paths.append(_save(fig, out / "bytes.png"))

    keys = (("staleness", "staleness at aggregation", "staleness (rounds)", "CDF (share of aggregated updates)"),
            ("utility_age", "utility age at a train pick", "utility age (rounds)", "CDF (share of train picks)"),
            ("agg_weights", "aggregation weight", "aggregation weight (relative: / the strategy's mean weight)",
             "CDF (share of aggregated updates)"))
    fig, axes = plt.subplots(len(regimes), 3, figsize=(13, 3.3 * len(regimes)), squeeze=False)
    handles = {}
    for row, rg in zip(axes, regimes):
        for ax, (key, title, xlabel, ylabel) in zip(row, keys):
            missing = []
            for st in order:
                values = []
                for r in rows:
                    if r["strategy"] == st and r["availability"] == rg:
                        d = json.loads((Path(r["run_dir"]) / "distributions.json").read_text())
                        values.extend(v for v in d[key] if v is not None and v >= 0)
                if values:
                    v = np.sort(np.asarray(values, float))
                    if key == "agg_weights" and v.mean() > 0:  # FedAvg's n_i and relative weights on one axis
                        v = v / v.mean()
                    (handles[st],) = ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=st,
                                             **styles[st])
                else:
                    missing.append(st)
            if missing:
                _no_values_note(ax, sorted(missing, key=strategies.index), empty=len(missing) == len(order))
            ax.set_title(f"{regime_label(rg)}: {title}", fontsize=9)
            ax.set_xlabel(xlabel, fontsize=8)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.grid(alpha=0.3)
    fig.tight_layout()
    names = [st for st in strategies if st in handles]
    if names:
        _legend_below(fig, [handles[n] for n in names], names)
    paths.append(_save(fig, out / "cdfs.png"))
    if target is not None:
        paths.append(plot_time_to_target(rows, strategies, regimes, out, target, reference))
    return paths


def _paired_ratio_panels(axes, rows: list[dict], others: list[str], regimes: list[str], reference: str,
                         styles: dict) -> None:
    """One panel per regime: each strategy's paired verdict against ``reference`` (the geometric mean of
    its per-seed hours ratios, its 95% t interval on the log ratios) on a log axis, 1 (a tie) marked."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    for ax, rg in zip(axes, regimes):
        lo, hi = 1.0, 1.0
        for y, st in enumerate(others):
            vs = versus_reference(rows, st, rg, reference)
            pr = None if vs is None else paired_ratio([x for _, x in vs["ratios"]])
            if pr is None:
                ax.annotate("no seed both reached", (1.0, y), xytext=(4, 0), textcoords="offset points",
                            xycoords=("data", "data"), va="center", fontsize=7, color="0.35")
                continue
            g, color = pr["geomean"], styles[st]["color"]
            if pr["ci95_low"] is not None:
                ax.errorbar(g, y, xerr=[[g - pr["ci95_low"]], [pr["ci95_high"] - g]], fmt="D", color=color, ms=4,
                            capsize=3, lw=1.2, zorder=3)
                lo, hi = min(lo, pr["ci95_low"]), max(hi, pr["ci95_high"])
            else:
                ax.plot(g, y, "D", color=color, ms=4, zorder=3)
                lo, hi = min(lo, g), max(hi, g)
            ax.annotate(f"n={pr['n']}", (1.0, y), xycoords=("axes fraction", "data"), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=7)
        ax.axvline(1.0, color="0.4", lw=0.8, ls="--", zorder=1)
        ax.set_xscale("log")
        ax.set_xlim(lo / 1.25, hi * 1.25)
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"x{v:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.set_yticks(np.arange(len(others)), others, fontsize=7)
        ax.set_ylim(len(others) - 0.5, -0.5)
        ax.set_xlabel(f"hours / {reference}'s hours, paired by seed", fontsize=8)
        ax.grid(alpha=0.3, axis="x", which="both")
    axes[0].set_ylabel(f"x {reference} (right: seeds both reached)", fontsize=8)


def plot_time_to_target(rows: list[dict], strategies: list[str], regimes: list[str], out: Path,
                        target: float | None = None, reference: str | None = None) -> Path:
    """``time_to_target.png``: one panel per regime, a row per strategy: a point per seed (spread
    across the row's upper part so that equal times stay apart), filled where the seed reached the
    target, open at its run's end where it did not, and in a lane of its own below them the geometric
    mean over the seeds that reached it, a black bar, with its 95% t interval on the log scale
    (:func:`hours_stats`; drawn for 2 or more such seeds: one seed's point is its mean). Right of each
    row: the seeds that reached the target / the seeds run. Below, where there is a reference and
    another strategy: per regime, each strategy's paired verdict against the reference
    (:func:`paired_ratio`: the geometric mean of its per-seed ratios with their 95% t interval, on a log
    axis with 1 marked; the seeds it pools right of the row). The legend explains only what is drawn
    (no "did not" marker when every seed reached it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    reference = _default_reference(strategies) if reference is None else reference
    styles = strategy_styles(strategies, reference)
    rows_in = len(strategies)  # a row per strategy: a long label (a sweep's variant) reads along it
    xmax = 0.0  # the furthest point or interval end of any panel: the shared hours axis spans it
    drawn: set[str] = set()  # what the legend explains: a seed that missed, a mean with its interval
    others = [st for st in strategies if st != reference] if reference in strategies else []
    ratio_rows = 1 if others else 0
    heights = [1.6 + 0.45 * rows_in] + ([1.2 + 0.45 * len(others)] if ratio_rows else [])
    fig, axes = plt.subplots(1 + ratio_rows, len(regimes), squeeze=False, sharey="row",
                             figsize=(max(4.2 * len(regimes), 5.0) + _labels_width(strategies), sum(heights)),
                             gridspec_kw={"height_ratios": heights})
    for ax in axes[0][1:]:
        ax.sharex(axes[0][0])
    for ax, rg in zip(axes[0], regimes):
        for st in strategies:
            sel = sorted((r for r in rows if r["strategy"] == st and r["availability"] == rg),
                         key=lambda r: r["seed"])
            if not sel:
                continue
            y = strategies.index(st)
            # the seeds in the row's upper part, the mean in a lane of its own below them
            offsets = np.linspace(-0.34, -0.04, len(sel)) if len(sel) > 1 else np.full(1, -0.15)
            color = styles[st]["color"]
            for dy, r in zip(offsets, sel):
                hours = r["time_to_target_h"]
                if hours is not None:
                    ax.plot(hours, y + dy, "o", color=color, ms=5, zorder=3)
                    xmax = max(xmax, hours)
                else:
                    end = _end_hours(r)
                    if end is not None:
                        ax.plot(end, y + dy, "^", mfc="none", mec=color, ms=6, mew=1.2, zorder=3)
                        xmax = max(xmax, end)
                        drawn.add("missed")
            reached = [r["time_to_target_h"] for r in sel if r["time_to_target_h"] is not None]
            stats = hours_stats(reached)
            if stats["n"] >= 2 and stats["ci95_low"] is not None:  # one seed's mean is that seed's point
                drawn.add("mean")
                centre = stats["geomean"]
                ax.errorbar(centre, y + 0.24, xerr=[[centre - stats["ci95_low"]], [stats["ci95_high"] - centre]],
                            fmt="|", color="k", ms=11, mew=2.2, capsize=3, lw=1, zorder=4)
                xmax = max(xmax, stats["ci95_high"])
            ax.annotate(f"{len(reached)}/{len(sel)}", (1.0, y), xycoords=("axes fraction", "data"), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=7)
        ax.set_yticks(np.arange(rows_in), strategies, fontsize=7)
        ax.set_ylim(rows_in - 0.5, -0.5)  # the first strategy on top
        ax.set_title(regime_label(rg))
        ax.set_xlabel("virtual hours to target")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
        ax.grid(alpha=0.3, axis="x")
    axes[0][0].set_ylabel("strategy (right: seeds that reached it / run)", fontsize=8)  # shared rows: once
    axes[0][0].set_xlim(0, xmax * 1.08 if xmax > 0 else 1.0)  # from 0, with room for the furthest marker
    if target is not None:
        fig.suptitle(f"time to target accuracy {target:g} (the mean of the last 20 test accuracies and the last one)",
                     fontsize=9)
    fig.tight_layout()
    legend = [Line2D([], [], ls="", marker="o", color="0.3", ms=5, label="a seed that reached the target")]
    if "missed" in drawn:  # only when a seed did not reach it
        legend.append(Line2D([], [], ls="", marker="^", mfc="none", mec="0.3", ms=6,
                             label="a seed that did not: at its run's end"))
    if "mean" in drawn:
        legend.append(Line2D([], [], ls="-", marker="|", color="k", ms=11, mew=2.2, lw=1,
                             label="geometric mean over the seeds that reached it (2 or more), 95% t interval "
                                   "(log scale)"))
    if ratio_rows:
        legend.append(Line2D([], [], ls="-", marker="D", color="0.3", ms=4, lw=1.2,
                             label=f"below: the geometric mean of the per-seed ratios, 95% t interval (> 1: "
                                   f"{reference} faster)"))
        _paired_ratio_panels(axes[1], rows, others, regimes, reference, styles)
    _legend_below(fig, legend, [h.get_label() for h in legend])
    return _save(fig, out / "time_to_target.png")
