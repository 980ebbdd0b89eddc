"""A comparison's cell matrix: :func:`run_matrix` runs every (strategy, regime, seed) cell of a scenario
into its folder (``DIR/runs/<cell>``, :func:`~.cells.cell_dir`), cell by cell, in worker processes,
in sweep batches (sweep.py) or as Ray tasks (ray_executor.py), and writes ``summary.csv``.

It owns what a cell's folder means on a second run: a finished cell of the same scenario is kept
(:func:`finished_summary`, :func:`same_scenario`: a field its record lacks counts as its default)
unless a file it read changed since (inputs.py: then it runs again), a
cell that finished with another scenario is refused (:class:`CellChanged`), and one stopped by a
signal or a plugin, or killed after a periodic snapshot, continues from its snapshot. Its rows feed
the tables (tables.py) and the figures (figures/comparison.py).
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from pathlib import Path
from typing import Callable

from .cells import cell_dir, cell_overrides, regime_label
from .inputs import changed_in_folder
from .progress import RunProgress, budget_share, comparison_eta
from .runner import run
from .scenario import Scenario
from .stops import DEVICE_ERROR, PLUGIN_ERROR, POLICY_ERROR
from .tables import SUMMARY_COLUMNS, write_summary_csv


class CellChanged(ValueError):
    """A finished cell's recorded scenario differs from the one asked for (one line naming both)."""


class MatrixInterrupted(Exception):
    """A signal stopped the comparison (``run_matrix(stop_on_signals=True)``): the running cells stopped
    after their current event, each with its results so far and a stop snapshot (``stopped``: their
    folders), cells that had finished are whole, the rest did not start; ``summary.csv`` holds the rows
    so far. The same matrix run again continues the stopped cells from their snapshots."""

    def __init__(self, signum: int, stopped: list[Path], not_started: int):
        super().__init__(f"stopped by signal {signum}")
        self.signum, self.stopped, self.not_started = signum, stopped, not_started

    def explain(self, out: Path) -> str:
        """What the signal left of the comparison in ``out``, and how to continue it (one line)."""
        import signal

        name = signal.Signals(self.signum).name
        n = len(self.stopped)
        stopped = (f"{n} running cell{'s' if n != 1 else ''} stopped after {'its' if n == 1 else 'their'} current "
                   f"event with {'its' if n == 1 else 'their'} results so far and a snapshot "
                   f"({', '.join(p.name for p in self.stopped)})" if self.stopped else "no cell was running")
        left = f"; {self.not_started} not started" if self.not_started else ""
        return (f"interrupted by {name}: {stopped}{left}; finished cells are kept in {out}/runs; run the same "
                "command again to continue")


def stopped_at_once(out: Path) -> str:
    """The line for a comparison that a second signal stopped at once (its running cells without a stop
    snapshot): what ``out`` keeps, and how to continue."""
    return (f"interrupted, stopped at once; finished cells are kept in {out}/runs, and the same command continues "
            "from them (a cell stopped at once starts again)")


def came_after_last_cell(signum: int, out: Path, what: str) -> str:
    """The line for a comparison (``what``) that a signal reached after its last cell, as it wrote its tables
    and figures: they were finished first, and the caller then exits with 128 + ``signum``."""
    return (f"{signal.Signals(signum).name} came after the last cell, as {what} wrote its tables and figures; "
            f"they are complete in {out}")


def resolve_regimes(base: Scenario, regimes: list[str]) -> list[str]:
    """Each regime as a cell's scenario holds it (``availability``): a name as given, a trace file by its
    absolute path. Cells' rows carry that value, and the tables, figures and report find a regime's
    rows by it, so a comparison's regimes are resolved once, before it runs: ``diurnal.csv``,
    ``./diurnal.csv`` and its absolute path are one regime."""
    return [base.with_overrides({"availability": rg}).availability for rg in regimes]


def changed_cell(sc: Scenario, run_dir: Path) -> str | None:
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
# state before a plugin's error once the plugin is fixed, a policy's or the device's)
UNFINISHED_STOPS = ("interrupted", PLUGIN_ERROR, POLICY_ERROR, DEVICE_ERROR)


def finished_summary(sc: Scenario, run_dir: Path) -> dict | None:
    """The summary of a finished cell whose config.json is this scenario's, else None."""
    try:
        config = json.loads((run_dir / "config.json").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if summary.get("stop_reason") in UNFINISHED_STOPS:  # stopped by a signal or a plugin: resumed next time
        return None
    if changed_in_folder(run_dir):  # its data, trace, profile or plugin changed: its numbers are not current
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
    return summary.get("stop_reason") in UNFINISHED_STOPS and (run_dir / "snapshot" / "LATEST").is_file() \
        and not changed_in_folder(run_dir)


def _killed_with_snapshot(sc: Scenario, run_dir: Path) -> bool:
    """A cell of this scenario killed outright (no summary) after one of its periodic snapshots."""
    if (run_dir / "summary.json").exists() or not (run_dir / "snapshot" / "LATEST").is_file():
        return False
    try:
        stored = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return same_scenario(stored.get("scenario") if isinstance(stored, dict) else None, sc) \
        and not changed_in_folder(run_dir)


CELL_LINES_EVERY_S = 30.0  # a progress line per running cell in worker processes, at most this often


def cell_name(label: str, sc: Scenario) -> str:
    """A cell as the comparison's lines name it: ``felix on 50% (ref:syn_50), seed 0``."""
    return f"{label} on {regime_label(sc.availability)}, seed {sc.seed}"


def _run_cell(sc: Scenario, run_dir: Path, progress: bool | str, deadline: float = math.inf,
              plot: bool = True, cell_budget_s: float | None = None,
              snapshot_minutes: float | None = None, writers: tuple = (), name: str | None = None,
              signals=False) -> dict | None:
    """One cell's summary; None if it would start after ``deadline`` (``time.time()``). A cell that a
    signal stopped (its snapshot written at the stop) continues from there, and so does one killed
    outright after a periodic snapshot (``snapshot_minutes``: one every that many minutes of wall
    time); any other unfinished cell starts again. ``signals``: the comparison's
    :class:`~.stops.StopOnSignals` guard (a signal stops the cell after its current event).
    ``progress="lines"``: a line when the cell starts and a plain progress line every
    :data:`CELL_LINES_EVERY_S` seconds (a worker process's cell, beside the others'), the cell called
    ``name``; its ETA honours ``cell_budget_s``."""
    if time.time() > deadline:
        return None
    killed = _killed_with_snapshot(sc, run_dir)
    resume = killed or _interrupted_with_snapshot(run_dir)
    if progress == "lines":
        print(f"{name}: {'resumed from its snapshot' if resume else 'started'}", file=sys.stderr, flush=True)

    def bar() -> RunProgress | bool:
        if not progress:
            return False
        lines = progress == "lines"
        return RunProgress(sc, True, terminal=False if lines else None, every_s=CELL_LINES_EVERY_S if lines else 15.0,
                           label=name if lines else None, wall_budget_s=cell_budget_s)

    if killed:
        from ..fleet.snapshot import SnapshotError

        try:
            return run(sc, run_dir, progress=bar(), plot=plot, wall_budget_s=cell_budget_s, resume=True,
                       snapshot_minutes=snapshot_minutes, writers=writers, stop_on_signals=signals).summary
        except SnapshotError as err:  # written by another felix-jax (a changed simulator): the cell starts again
            print(f"{run_dir}: its snapshot cannot be resumed ({err}); the cell starts again", file=sys.stderr)
    resume = _interrupted_with_snapshot(run_dir)
    return run(sc, run_dir, progress=bar(), plot=plot, wall_budget_s=cell_budget_s, resume=resume,
               snapshot_minutes=snapshot_minutes, writers=writers, stop_on_signals=signals).summary


def _row(sc: Scenario, base: Scenario, summary: dict, run_dir: Path, label: str | None = None) -> dict:
    return {"strategy": label or sc.strategy, "scenario": base.name, "availability": sc.availability, "seed": sc.seed,
            **{k: summary.get(k) for k in SUMMARY_COLUMNS if k in summary}, "run_dir": str(run_dir), "_summary": summary}


def run_matrix(base: Scenario, strategies: list[str], regimes: list[str], seeds: list[int], out: Path,
               progress: bool = True, log: Callable[[str], None] = print, resume: bool = True,
               workers: int = 1, cells: list[tuple[str, str, int]] | None = None,
               deadline: float = math.inf, plot: bool = True, cell_budget_s: float | None = None,
               batch: int = 1, executor: str = "local", ray_address: str | None = None,
               snapshot_minutes: float | None = None, writers=(), ray_max_retries: int = 3,
               stop_on_signals=False) -> list[dict]:
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
    ``writers``: metric writers (``experiment/writers/``), one log per cell under ``out``; a kept
    cell that has none yet is logged from its files.
    ``stop_on_signals``: from the main thread, SIGINT / SIGTERM stop the running cell (or sweep batch)
    after its current event with its results so far and a stop snapshot, and no later cell starts; a
    signal while a finished cell writes its files lets it finish them first. ``summary.csv`` is
    written, then :class:`MatrixInterrupted` is raised; the same call again continues from there
    (cell by cell, in sweep batches and in ``workers``: cell_pool.py forwards the stop to them; not
    with Ray, where Ctrl-C stops at once). A :class:`~.stops.StopOnSignals` guard (a caller's, entered
    around its reporting too) serves as given. In ``workers`` each cell prints a line when it starts and a progress line every
    :data:`CELL_LINES_EVERY_S` seconds, and the comparison's ETA honours the deadline, the workers
    and ``cell_budget_s`` (progress.comparison_eta).
    """
    todo = cells if cells is not None else [(st, rg, sd) for rg in regimes for st in strategies for sd in seeds]
    scenarios = []
    for spec, rg, sd in todo:  # a cell's strategy may be a variant NAME@KEY=VALUE (parse_cell_strategy)
        scenarios.append(base.with_overrides({**cell_overrides(spec), "availability": rg, "seed": sd}))
    labels = [spec for spec, _, _ in todo]
    from .writers.feed import for_cell, make_writers

    writers = make_writers(writers)
    cell_writers = [for_cell(writers, out, labels[i], sc.availability, sc.seed) for i, sc in enumerate(scenarios)]
    rows: list[dict | None] = [None] * len(todo)
    pending = []
    if len(set(map(tuple, todo))) < len(todo):
        twice = sorted({f"{a}/{b}/seed{c}" for a, b, c in todo if todo.count((a, b, c)) > 1})
        raise CellChanged(f"cells asked for twice: {', '.join(twice)} (repeated strategies, regimes or seeds)")
    for i, sc in enumerate(scenarios):
        run_dir = cell_dir(out, labels[i], sc.availability, sc.seed)
        changed = changed_cell(sc, run_dir) if resume else None
        if changed is not None:
            raise CellChanged(f"cell {run_dir} finished with another scenario ({changed}); pass --overwrite to "
                              "rerun it, or choose another --out")
        stale = changed_in_folder(run_dir) if resume and (run_dir / "summary.json").is_file() else []
        if stale:
            log(f"[{i + 1}/{len(todo)}] {labels[i]} on {regime_label(sc.availability)}, seed {sc.seed}: "
                f"{stale[0]}{f' and {len(stale) - 1} more' if len(stale) > 1 else ''} since it ran: run again")
        done = finished_summary(sc, run_dir) if resume else None
        if done is not None:
            rows[i] = {**_row(sc, base, done, run_dir, labels[i]), "_kept": True}
            if writers:
                from .writers.feed import backfill

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
    from .stops import StopOnSignals

    signals = StopOnSignals.of(stop_on_signals if executor != "ray" else False)  # Ray: Ctrl-C stops at once
    with signals:
        if (executor == "ray" or batch > 1) and pending:
            from .sweep import SweepJob, run_sweep

            dirs = [cell_dir(out, labels[i], scenarios[i].availability, scenarios[i].seed) for i in pending]
            # Ray workers may start elsewhere: their folders by absolute path
            jobs = [SweepJob(scenarios[i], d.resolve() if executor == "ray" else d,
                             resume=_interrupted_with_snapshot(d), writers=cell_writers[i])
                    for i, d in zip(pending, dirs)]
            if executor == "ray":
                from .ray_executor import run_on_ray

                summaries = run_on_ray(jobs, batch, address=ray_address, plot=plot, wall_budget_s=cell_budget_s,
                                       log=log, max_retries=ray_max_retries)
            else:
                summaries = [None if r is None else r.summary for r in
                             run_sweep(jobs, batch, plot=plot, wall_budget_s=cell_budget_s, stop_on_signals=signals,
                                       deadline=deadline, log=log)]
            for i, d, summary in zip(pending, dirs, summaries):
                if summary is not None:
                    rows[i] = _row(scenarios[i], base, summary, d, labels[i])
        elif workers <= 1:
            cells_bar = None
            if progress and pending and sys.stderr.isatty():  # the outer bar over cells (a terminal only:
                from tqdm import tqdm  # elsewhere the per-cell log lines say as much)

                cells_bar = tqdm(total=len(todo), initial=len(todo) - len(pending), desc="cells", unit="cell",
                                 file=sys.stderr, leave=True)
            try:
                walls: list[float] = []  # wall seconds of each cell run here: the whole comparison's ETA
                shares: list[float] = []  # and the share of its budget each used (progress.budget_share)
                for n, i in enumerate(pending):
                    if signals.signum is not None:  # stopped between cells: no other starts
                        break
                    sc = scenarios[i]
                    log(f"[{i + 1}/{len(todo)}] {cell_name(labels[i], sc)}"
                        + comparison_eta(walls, len(pending) - n, shares, cell_budget_s=cell_budget_s,
                                         starts_left_s=deadline - time.time()))
                    started = time.perf_counter()
                    if cells_bar is not None:
                        cells_bar.set_postfix_str(f"{labels[i]}/{regime_label(sc.availability)}/seed{sc.seed}")
                    run_dir = cell_dir(out, labels[i], sc.availability, sc.seed)
                    summary = _run_cell(sc, run_dir, progress, deadline, plot, cell_budget_s, snapshot_minutes,
                                        cell_writers[i], signals=signals)
                    rows[i] = None if summary is None else _row(sc, base, summary, run_dir, labels[i])
                    walls.append(time.perf_counter() - started)
                    shares.append(1.0 if summary is None else budget_share(sc, summary))
                    if cells_bar is not None:
                        cells_bar.update(1)
            finally:
                if cells_bar is not None:
                    cells_bar.close()
        elif pending:
            from .cell_pool import run_in_workers

            started = time.perf_counter()
            shares: list[float] = []  # the share of its budget each finished cell used (progress.budget_share)
            log(f"{len(pending)} cells to run, {workers} at a time"
                + ("; each says when it starts and how far it got" if progress else "")
                + comparison_eta([], len(pending), workers=workers, cell_budget_s=cell_budget_s,
                                 starts_left_s=deadline - time.time()))

            def finished(k: int, summary: dict | None) -> None:
                i = pending[k]
                if summary is None:  # not started: the deadline, or a signal
                    return
                sc = scenarios[i]
                rows[i] = _row(sc, base, summary, cell_dir(out, labels[i], sc.availability, sc.seed), labels[i])
                shares.append(budget_share(sc, summary))
                n = len(shares)
                # ``workers`` at a time: a cell's wall time is the elapsed time per finished cell times that
                per_cell = (time.perf_counter() - started) * min(workers, len(pending)) / n
                eta = "" if signals.signum is not None else comparison_eta(
                    [per_cell] * n, len(pending) - n, shares, workers=workers, cell_budget_s=cell_budget_s,
                    starts_left_s=deadline - time.time())
                log(f"[{n}/{len(pending)} run] {cell_name(labels[i], sc)}: {rows[i]['stop_reason']}{eta}")

            run_in_workers(_run_cell, [
                (scenarios[i], cell_dir(out, labels[i], scenarios[i].availability, scenarios[i].seed),
                 "lines" if progress else False,
                 deadline, plot, cell_budget_s, snapshot_minutes, cell_writers[i],
                 f"[{i + 1}/{len(todo)}] {cell_name(labels[i], scenarios[i])}") for i in pending],
                workers, signals, finished)
        done = [r for r in rows if r is not None]
        write_summary_csv(done, out)
        if signals.signum is not None:
            stopped = [Path(r["run_dir"]) for r in done if r.get("stop_reason") == "interrupted"]
            raise MatrixInterrupted(signals.signum, stopped, len(todo) - len(done))
        return done


def all_kept(rows: list[dict]) -> bool:
    """Every cell of :func:`run_matrix`'s rows had finished earlier and none ran now."""
    return bool(rows) and all(r.get("_kept") for r in rows)

