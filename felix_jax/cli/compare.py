"""``felix-jax compare``: strategies x availability regimes x seeds, their tables, figures and report
(host-only)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from pathlib import Path

from ..plugin_calls import PluginError
from .common import (USER_ERRORS, HelpFormatter, add_traceback_flag, enable_cache, metric_writers, one_line, parse_sets,
                     user_path)

COMPARE_EXAMPLES = """examples:
  felix-jax compare                                          # FeLiX vs OORT+Async vs FedBuff, 100% and 50%
  felix-jax compare --scenario tiny --strategies felix,oort-async-oracle --availability avail50 --seeds 0,1,2
  felix-jax compare --set trace_start_s=1800 --availability ref:syn_50,ref:mobiperf_3st_50 --out results/c
  felix-jax compare --strategies felix,oort-async-oracle@oracle_departure=free_slot --sweep concurrency=4,8
  felix-jax compare --seeds 0,1,2 --batch 6                  # 6 experiments at a time, device calls shared
  felix-jax compare --seeds 0,1,2 --batch 3 --executor ray --ray-address auto   # batches as Ray tasks"""


def _compare(args: argparse.Namespace) -> int:
    from ..experiment import get_preset
    from ..experiment.cells import cell_overrides, parse_sweep, sweep_strategies
    from ..experiment.registry import is_file_name, make_trace
    from ..experiment.results import OutputDirError, folder_lock, prepare_out_dir
    from ..traces import REFERENCE_TRACE_NAMES

    sets = parse_sets(args.set or [])
    args.writers = metric_writers(args, "compare")
    for key, flag in (("strategy", "--strategies"), ("availability", "--availability"), ("seed", "--seeds")):
        if key in sets:  # an axis of the matrix: the flag sets it, a --set would be silently overridden
            raise SystemExit(f"felix-jax compare: --set {key}=...: {key} is an axis of the comparison; "
                             f"give it with {flag}")
    try:
        base = get_preset(args.scenario).with_overrides(sets)
    except (KeyError, ValueError) as e:
        raise SystemExit(f"felix-jax compare: {one_line(e)}")
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    regimes = [r.strip() for r in args.availability.split(",") if r.strip()]
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"felix-jax compare: --seeds expects comma-separated integers, got {args.seeds!r}")
    if not (strategies and regimes and seeds):
        raise SystemExit("felix-jax compare: --strategies, --availability and --seeds need at least one entry each")
    if args.batch is not None and args.batch < 1:  # before the results folder is made
        raise SystemExit(f"felix-jax compare: --batch {args.batch}: must be >= 1 experiments")
    if args.ray_max_retries < 0:
        raise SystemExit(f"felix-jax compare: --ray-max-retries {args.ray_max_retries}: must be >= 0")
    try:  # STRATEGY@KEY=VALUE cells, crossed with each --sweep KEY=v1,v2,...
        sweeps = [parse_sweep(spec) for spec in args.sweep or []]
        strategies = sweep_strategies(strategies, sweeps)
        from ..experiment.naming import swap_labels

        # a component --set swaps in (aggregator.name=median) named in the cells it changes: felix@aggregator.name=...
        strategies, args.reference = swap_labels(base, strategies, args.reference)
        from ..experiment.sweep_axes import axis_keys, check_reference

        args.axis_keys = axis_keys([k for k, _ in sweeps])  # swept fields of the scenario's world: an axis
        check_reference(strategies, args.axis_keys, args.reference)  # before anything runs
    except ValueError as e:
        raise SystemExit(f"felix-jax compare: {one_line(e)}")
    given, regimes = regimes, _resolved_regimes(base, regimes)
    for flag, values in (("--strategies", strategies), ("--availability", regimes), ("--seeds", seeds)):
        twice = sorted({str(v) for v in values if values.count(v) > 1})
        if twice:
            raise SystemExit(f"felix-jax compare: {flag} lists {', '.join(twice)} more than once")
    for name in strategies:  # fail before hours of work, not in the middle
        try:
            for seed in seeds:
                base.with_overrides({**cell_overrides(name), "seed": seed})
        except (KeyError, ValueError) as e:
            cell = f"{name}: " if "@" in name else ""  # which cell of a sweep
            raise SystemExit(f"felix-jax compare: {cell}{one_line(e)}")
    for name, rg in zip(given, regimes):  # the name, and the trace file it reads
        try:
            if rg.startswith("ref:") and rg[4:] not in REFERENCE_TRACE_NAMES:
                from ..suggest import known_names

                names = [f"ref:{n}" for n in REFERENCE_TRACE_NAMES]
                raise KeyError(f"unknown reference trace{known_names(rg, names, 'reference traces')}")
            # a trace file at the scenario's population: what it says of its clients (reused, dropped) is said now
            make_trace(rg, base.num_clients if is_file_name(rg) else 1, 0, form="function")
        except USER_ERRORS as e:
            raise SystemExit(f"felix-jax compare: availability {name!r}: {one_line(e)}")
    _check_cell_folders(regimes)
    from ..experiment.inputs import missing_data

    for rg in regimes:  # a data set that is not here: one line naming it and the fetch, before any work
        missing = missing_data(base.with_overrides({"availability": rg}))
        if missing:
            raise SystemExit(f"felix-jax compare: {missing}")
    enable_cache("compare")  # before the results folder is made
    if args.out is not None and not args.out.strip():
        raise SystemExit(f"felix-jax compare: --out {args.out!r}: an empty path; give a folder name")
    from ..experiment.naming import default_compare_dir

    out = user_path(args.out) if args.out else user_path(str(default_compare_dir(base)))
    with contextlib.ExitStack() as held:
        try:  # one writer per folder for the whole comparison, never a run's folder
            held.enter_context(folder_lock(out, "felix-jax compare"))
            prepare_out_dir(out, kind="compare")
        except OutputDirError as e:
            raise SystemExit(f"felix-jax compare: {e}")
        return _compare_locked(args, base, strategies, regimes, seeds, out)


def _resolved_regimes(base, regimes: list[str]) -> list[str]:
    """The regimes as the cells hold them (a trace file by its absolute path: the one key of its rows,
    tables and figures; two names of one file then count as one regime given twice); one line for a
    regime that is no scenario's."""
    from ..experiment.matrix import resolve_regimes

    try:
        return resolve_regimes(base, regimes)
    except (KeyError, ValueError) as e:
        raise SystemExit(f"felix-jax compare: {one_line(e)}")


def _check_cell_folders(regimes: list[str]) -> None:
    """Two regimes whose cells would share one results folder (a trace file's cells are named by its
    file name, not its path) are refused before anything runs: one cell's results would overwrite
    the other's."""
    from ..experiment.cells import cell_dir, regime_label

    seen: dict[str, str] = {}
    for rg in regimes:
        folder = cell_dir(Path("."), "STRATEGY", rg, 0).name
        if folder in seen:
            raise SystemExit(f"felix-jax compare: availability {seen[folder]} and {rg} would share the cell "
                             f"folders runs/{folder.replace('STRATEGY', '<strategy>')} (a trace file's cells are "
                             f"named by its file name, {regime_label(rg)}): give the files different names")
        seen[folder] = rg


def _compare_locked(args, base, strategies, regimes, seeds, out: Path) -> int:
    from ..experiment.stops import StopOnSignals

    # One guard from the first cell to the last figure: a signal while the cells run stops them after their
    # current event (MatrixInterrupted); one that comes after the last cell, as the tables, figures and report
    # are written, lets them finish and then ends the command with its status (with Python's own handler it
    # raised KeyboardInterrupt wherever the interpreter was, often inside jax's garbage-collection callback,
    # where it was printed as "Exception ignored" and dropped). Ray's batches stop at once on Ctrl-C: under
    # Ray the guard starts with the reporting.
    signals = StopOnSignals(True)
    with signals if args.executor != "ray" else contextlib.nullcontext():
        rows = _run_cells(args, base, strategies, regimes, seeds, out, signals)
        with signals:
            _report(args, rows, strategies, regimes, out)
    if signals.signum is not None:
        from ..experiment.matrix import came_after_last_cell

        print(f"felix-jax compare: {came_after_last_cell(signals.signum, out, 'the comparison')}", file=sys.stderr)
        raise SystemExit(128 + signals.signum)
    return 0


def _run_cells(args, base, strategies, regimes, seeds, out: Path, signals) -> list[dict]:
    """Every cell's row, run or kept; one line (and the exit status) for what stops the comparison."""
    from ..experiment.matrix import CellChanged, MatrixInterrupted, run_matrix, stopped_at_once
    from ..experiment.ray_executor import ClusterError

    try:
        from ..experiment.sweep import default_batch

        batch = default_batch() if args.batch is None else args.batch
        return run_matrix(base, strategies, regimes, seeds, out, progress=not args.quiet, resume=not args.overwrite,
                          batch=batch, executor=args.executor, ray_address=args.ray_address, writers=args.writers,
                          ray_max_retries=args.ray_max_retries, stop_on_signals=signals)
    except (*USER_ERRORS, CellChanged, ImportError, ClusterError) as e:  # ImportError: --executor ray without Ray
        more = ""
        if isinstance(e, PluginError) and e.snapshot is not None:  # its cell keeps a stop snapshot
            more = "; its cell stopped with its results so far: once the plugin is fixed, the same command continues it"
        raise SystemExit(f"felix-jax compare: {one_line(e)}{more}")
    except MatrixInterrupted as e:  # the running cells stopped whole, with snapshots: the same command continues
        print(f"felix-jax compare: {e.explain(out)}", file=sys.stderr)
        raise SystemExit(128 + e.signum)
    except KeyboardInterrupt:  # a second interrupt (or Ray's batches, which stop at once): finished cells are on disk
        print(f"felix-jax compare: {stopped_at_once(out)}", file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT)


def _report(args, rows: list[dict], strategies, regimes, out: Path) -> None:
    """The comparison's tables, figures, split and report, from its rows; the table printed."""
    from ..experiment.figures.comparison import plot_comparison
    from ..experiment.matrix import all_kept
    from ..experiment.report import write_report
    from ..experiment.split import write_split_csv
    from ..experiment.sweep_axes import comparison_view, write_comparison_json
    from ..experiment.tables import write_tables

    view = comparison_view(rows, strategies, regimes, args.axis_keys, args.reference)
    write_comparison_json(out, view)  # the report and plot redraw the same view
    table = write_tables(view.rows, view.strategies, view.regimes, out, view.reference)
    figures = plot_comparison(view.rows, view.strategies, view.regimes, out, reference=view.reference)
    split_csv = write_split_csv(rows, out)  # each cell's split of the data, from its partition.json
    if all_kept(rows):  # nothing ran: the table is the earlier one's, say so
        print(f"felix-jax compare: all {len(rows)} cells in {out} had finished earlier: the table below is theirs; "
              "rerun them with --overwrite, or give --out another folder")
    print(table)
    print(f"wrote {out}/summary.csv (a row per run), {out}/summary_pooled.csv (over seeds), {out}/table.txt, "
          + "".join(f"{p}, " for p in [split_csv] if p is not None)
          + ", ".join(str(p) for p in figures) + f", {write_report(out)}")


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``compare`` command and its options."""
    cmp_ = sub.add_parser("compare", help="run strategies x availability regimes x seeds and compare them",
                          formatter_class=HelpFormatter, epilog=COMPARE_EXAMPLES)
    cmp_.add_argument("--scenario", default="quickstart", help="scenario preset (see run --list)")
    cmp_.add_argument("--availability", default="avail100,avail50", help="comma-separated regimes")
    cmp_.add_argument("--strategies", default="felix,oort-async,fedbuff",
                      help="comma-separated strategies; one may carry options of its own, "
                           "STRATEGY@KEY=VALUE[;KEY=VALUE] (e.g. oort-async-oracle@oracle_departure=free_slot)")
    cmp_.add_argument("--sweep", action="append", metavar="KEY=V1,V2",
                      help="cross every strategy with each value of a scenario key (cells named "
                           "STRATEGY@KEY=V; repeatable: every combination)")
    cmp_.add_argument("--reference", default=None, metavar="STRATEGY",
                      help="the strategy every other is compared with (default felix when compared, else the "
                           "first); a sweep over a field of the scenario's world compares at each value")
    cmp_.add_argument("--seeds", default="0", help="comma-separated seeds")
    cmp_.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario field (repeatable)")
    cmp_.add_argument("--out", help="output folder (default results/compare-<scenario>, "
                                    "results/compare-<scenario>-paper_code for the code's reading)")
    cmp_.add_argument("--overwrite", action="store_true",
                      help="rerun every cell (default: keep the cells that finished earlier with the same scenario)")
    cmp_.add_argument("--batch", type=int, default=None, metavar="N",
                      help="run up to N experiments at once in this process, their device calls shared (same "
                           "results as one by one). Experiments share a batch when their dataset, num_train, "
                           "num_test, model, plan and devices agree (and client streams keep every sample); "
                           "default by backend: 1 on CPU, 16 on an accelerator")
    cmp_.add_argument("--executor", choices=("local", "ray"), default="local",
                      help="where batches run: this process, or Ray tasks (one batch each, one per GPU; needs "
                           "the ray extra)")
    cmp_.add_argument("--ray-address", default=None, metavar="ADDR",
                      help="the Ray cluster to use (default: RAY_ADDRESS, else a local instance)")
    cmp_.add_argument("--ray-max-retries", type=int, default=3, metavar="N",
                      help="times Ray runs a batch again elsewhere when its node or worker dies (0: the comparison "
                           "stops with the lost cells named; the same command continues)")
    cmp_.add_argument("--quiet", action="store_true", help="no progress bars")
    cmp_.add_argument("--log-to", default=None, metavar="WRITERS",
                      help="also log every cell to tensorboard and/or mlflow, one run per cell (comma-separated; "
                           "default none)")
    cmp_.set_defaults(func=_compare)
    add_traceback_flag(cmp_)
    return cmp_
