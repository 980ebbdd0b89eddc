"""``felix-jax compare``: every (strategy, availability, seed) of a scenario, then a table
and paper-style figures (host side).

Writes ``DIR/summary.csv`` (one row per run), ``DIR/table.txt`` (time-to-target
and bytes per strategy and regime, ratios against FeLiX), one results folder per
run (``DIR/runs/<strategy>-<availability>-seed<k>``), and figures:
``accuracy.png`` (accuracy vs virtual hours per regime), ``bytes.png`` (bytes per
strategy, train vs eval), ``cdfs.png`` (staleness, utility age and aggregation
weights of FeLiX vs OORT+Async).
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from .runner import run
from .scenario import Scenario

SUMMARY_COLUMNS = ["strategy", "scenario", "availability", "seed", "time_to_target_s", "time_to_target_h",
                   "bytes_total", "bytes_train", "bytes_eval", "control_bytes", "aggregations", "final_accuracy",
                   "best_accuracy", "agg_interval_p50_s", "agg_interval_p95_s", "staleness_p50", "stop_reason",
                   "host_seconds"]


FIGURES = ("accuracy.png", "bytes.png", "cdfs.png")


def cell_dir(out: Path, strategy: str, regime: str, seed: int) -> Path:
    name = strategy.replace("@", "+").replace("=", "-").replace(";", "+")  # a variant's label too
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
    recorded, wanted = config.get("scenario", {}), json.loads(json.dumps(sc.to_json(), default=str))
    keys = sorted(k for k in set(recorded) | set(wanted) if recorded.get(k) != wanted.get(k))
    return None if not keys else ", ".join(f"{k} {recorded.get(k)!r} -> {wanted.get(k)!r}" for k in keys[:6])


def parse_cell_strategy(spec: str) -> tuple[str, dict[str, str]]:
    """A matrix cell's strategy: ``NAME`` or a variant ``NAME@KEY=VALUE;KEY=VALUE`` (scenario
    overrides of that cell only, e.g. ``oort-async-oracle@oracle_departure=free_slot``)."""
    name, _, rest = spec.partition("@")
    overrides = {}
    for item in filter(None, (x.strip() for x in rest.split(";"))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"cell strategy {spec!r}: expected NAME@KEY=VALUE[;KEY=VALUE]")
        overrides[key.strip()] = value.strip()
    return name.strip(), overrides


def _finished_row(sc: Scenario, run_dir: Path) -> dict | None:
    """The summary of a finished cell whose config.json is this scenario's, else None."""
    try:
        config = json.loads((run_dir / "config.json").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if summary.get("stop_reason") == "interrupted":  # stopped by a signal: not finished, resumed next time
        return None
    return summary if config.get("scenario") == json.loads(json.dumps(sc.to_json(), default=str)) else None


def _interrupted_with_snapshot(run_dir: Path) -> bool:
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    return summary.get("stop_reason") == "interrupted" and (run_dir / "snapshot" / "LATEST").is_file()


def _run_cell(sc: Scenario, run_dir: Path, progress: bool, deadline: float = math.inf,
              plot: bool = True, cell_budget_s: float | None = None) -> dict | None:
    """One cell's summary; None if it would start after ``deadline`` (``time.time()``). A cell that a
    signal stopped (its snapshot written at the stop) continues from there; any other unfinished cell
    (killed outright) starts again."""
    if time.time() > deadline:
        return None
    resume = _interrupted_with_snapshot(run_dir)
    return run(sc, run_dir, progress=progress, plot=plot, wall_budget_s=cell_budget_s, resume=resume).summary


def _row(sc: Scenario, base: Scenario, summary: dict, run_dir: Path, label: str | None = None) -> dict:
    return {"strategy": label or sc.strategy, "scenario": base.name, "availability": sc.availability, "seed": sc.seed,
            **{k: summary.get(k) for k in SUMMARY_COLUMNS if k in summary}, "run_dir": str(run_dir), "_summary": summary}


def run_matrix(base: Scenario, strategies: list[str], regimes: list[str], seeds: list[int], out: Path,
               progress: bool = True, log: Callable[[str], None] = print, resume: bool = True,
               workers: int = 1, cells: list[tuple[str, str, int]] | None = None,
               deadline: float = math.inf, plot: bool = True, cell_budget_s: float | None = None) -> list[dict]:
    """Runs every (strategy, regime, seed) cell (or the given ``cells``) and writes ``summary.csv``.

    ``resume``: a cell whose folder already holds this scenario's ``config.json`` and a
    ``summary.json`` is read back instead of rerun, so a killed matrix continues where
    it stopped. ``workers > 1`` runs cells in that many processes (spawned, so each
    has its own JAX runtime; on a GPU they share the device). Cells that would start
    after ``deadline`` (``time.time()``) are left out of the result; ``plot=False``
    skips each run's own accuracy figure. ``cell_budget_s``: each cell stops after that much wall
    time (stop reason ``wall_budget``: its results hold up to where it got, and it counts as
    finished on resume).
    """
    todo = cells if cells is not None else [(st, rg, sd) for rg in regimes for st in strategies for sd in seeds]
    scenarios = []
    for spec, rg, sd in todo:  # a cell's strategy may be a variant NAME@KEY=VALUE (parse_cell_strategy)
        name, extra = parse_cell_strategy(spec)
        scenarios.append(base.with_overrides({**extra, "strategy": name, "availability": rg, "seed": sd}))
    labels = [spec for spec, _, _ in todo]
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
        done = _finished_row(sc, run_dir) if resume else None
        if done is not None:
            rows[i] = _row(sc, base, done, run_dir, labels[i])
            log(f"[{i + 1}/{len(todo)}] {labels[i]} on {sc.availability}, seed {sc.seed}: finished earlier, kept")
        else:
            pending.append(i)
    if workers <= 1:
        cells_bar = None
        if progress and pending and sys.stderr.isatty():  # the outer bar over cells (a terminal only:
            from tqdm import tqdm  # elsewhere the per-cell log lines say as much)

            cells_bar = tqdm(total=len(todo), initial=len(todo) - len(pending), desc="cells", unit="cell",
                             file=sys.stderr, leave=True)
        try:
            for i in pending:
                sc = scenarios[i]
                log(f"[{i + 1}/{len(todo)}] {labels[i]} on {sc.availability}, seed {sc.seed}")
                if cells_bar is not None:
                    cells_bar.set_postfix_str(f"{labels[i]}/{sc.availability}/seed{sc.seed}")
                run_dir = cell_dir(out, labels[i], sc.availability, sc.seed)
                summary = _run_cell(sc, run_dir, progress, deadline, plot, cell_budget_s)
                rows[i] = None if summary is None else _row(sc, base, summary, run_dir, labels[i])
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
                                   cell_budget_s): i
                       for i in pending}
            for n, fut in enumerate(as_completed(futures), 1):
                i = futures[fut]
                sc = scenarios[i]
                run_dir = cell_dir(out, labels[i], sc.availability, sc.seed)
                summary = fut.result()
                if summary is None:
                    continue
                rows[i] = _row(sc, base, summary, run_dir, labels[i])
                log(f"[{n}/{len(pending)} run] {labels[i]} on {sc.availability}, seed {sc.seed}: "
                    f"{rows[i]['stop_reason']}")
    done = [r for r in rows if r is not None]
    write_summary_csv(done, out)
    return done


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


def comparison_table(rows: list[dict], strategies: list[str], regimes: list[str], reference: str = "felix") -> str:
    """Hours to target (mean over seeds; '-' if any seed missed it) and GB, with ratios to ``reference``."""
    cell: dict[tuple[str, str], tuple] = {}
    for st in strategies:
        for rg in regimes:
            sel = [r for r in rows if r["strategy"] == st and r["availability"] == rg]
            hours = _mean([r["time_to_target_h"] for r in sel])
            gb = float(np.mean([r["bytes_total"] for r in sel])) / 1e9 if sel else None
            cell[st, rg] = (hours, gb)
    head = f"{'strategy':<22}" + "".join(f"{rg:>26}" for rg in regimes)
    lines = ["time to target in virtual hours (x = ratio to %s), total GB" % reference, head]
    for st in strategies:
        parts = []
        for rg in regimes:
            hours, gb = cell[st, rg]
            ref_h = cell.get((reference, rg), (None, None))[0]
            ratio = f"x{hours / ref_h:.2f}" if hours is not None and ref_h else ""
            parts.append(f"{('-' if hours is None else f'{hours:.2f} h'):>9} {ratio:>6} {gb or 0:>8.3f} GB")
        lines.append(f"{st:<22}" + "".join(f"{p:>26}" for p in parts))
    return "\n".join(lines)


def plot_comparison(rows: list[dict], strategies: list[str], regimes: list[str], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for name in FIGURES:  # every figure is redrawn from the cells there are: none outlives its data
        (out / name).unlink(missing_ok=True)
    fig, axes = plt.subplots(1, len(regimes), figsize=(4.2 * len(regimes), 3.4), squeeze=False)
    for ax, rg in zip(axes[0], regimes):
        for st in strategies:
            for r in rows:
                if r["strategy"] == st and r["availability"] == rg and r["seed"] == rows[0]["seed"]:
                    data = np.genfromtxt(Path(r["run_dir"]) / "metrics.csv", delimiter=",", names=True)
                    ax.plot(np.atleast_1d(data["hours"]), np.atleast_1d(data["accuracy"]), label=st, lw=1.1)
        ax.set_title(rg)
        ax.set_xlabel("virtual hours")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test accuracy")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "accuracy.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    def gigabytes(key: str, rg: str) -> list[float]:
        return [np.mean([r[key] for r in rows if r["strategy"] == st and r["availability"] == rg]) / 1e9
                for st in strategies]

    fig, axes = plt.subplots(1, len(regimes), figsize=(4.2 * len(regimes), 3.4), squeeze=False)
    for ax, rg in zip(axes[0], regimes):
        train, ev = gigabytes("bytes_train", rg), gigabytes("bytes_eval", rg)
        x = np.arange(len(strategies))
        ax.bar(x, train, label="train")
        ax.bar(x, ev, bottom=train, label="eval")
        ax.set_xticks(x, strategies, rotation=45, ha="right", fontsize=7)
        ax.set_title(rg)
    axes[0][0].set_ylabel("GB")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "bytes.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    pair = [s for s in ("felix", "oort-async") if s in strategies]
    if pair:
        fig, axes = plt.subplots(1, 3, figsize=(12, 3.3))
        for ax, key, label in zip(axes, ("staleness", "utility_age", "agg_weights"),
                                  ("staleness at aggregation", "utility age at selection", "aggregation weight")):
            for st in pair:
                values = []
                for r in rows:
                    if r["strategy"] == st:
                        d = json.loads((Path(r["run_dir"]) / "distributions.json").read_text())
                        values.extend(v for v in d[key] if v is not None and v >= 0)
                if values:
                    v = np.sort(np.asarray(values, float))
                    ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=st)
            ax.set_xlabel(label)
            ax.set_ylabel("CDF")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(out / "cdfs.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths
