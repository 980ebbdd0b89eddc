"""``felix-jax run``: one experiment, from a preset or a config file, resumable from its snapshots
(host-only)."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import sys
from pathlib import Path

from ..fleet.snapshot import SnapshotWriteError
from ..plugin_calls import PluginError
from .common import (TRACEBACK_ENV, USER_ERRORS, HelpFormatter, add_traceback_flag, enable_cache, metric_writers,
                     one_line, parse_sets, traceback_asked, user_path)
from .listing import print_listing

RUN_EXAMPLES = """examples:
  felix-jax run                                              # the quickstart preset, FedBuff, 100%
  felix-jax run --preset tiny --set strategy=felix --set availability=avail50
  felix-jax run --preset cifar10-longhorizon --set availability=ref:mobiperf_3st_50 --out results/lh
  felix-jax run --config results/lh/config.json --out results/lh-again   # rerun exactly
  felix-jax run --set strategy=felix --snapshot-every 50 --out results/r; felix-jax run --resume results/r
  felix-jax run --list                                       # every field, preset, strategy and option"""


def _summary_table(summary: dict) -> str:
    def fmt(v, unit=""):
        if v is None:
            return "-"
        return f"{v:,.3f}{unit}" if isinstance(v, float) else f"{v:,}{unit}"

    rows = [
        ("stop reason", summary["stop_reason"]),
        ("time to target", fmt(summary["time_to_target_h"], " h")),
        ("final / best accuracy", f"{fmt(summary['final_accuracy'])} / {fmt(summary['best_accuracy'])}"),
        ("aggregations", fmt(summary["aggregations"])),
        ("virtual time", fmt(summary["end_time_s"] / 3600, " h")),
        ("bytes total", f"{summary['bytes_total'] / 1e6:,.1f} MB (train {summary['bytes_train'] / 1e6:,.1f}, "
                        f"eval {summary['bytes_eval'] / 1e6:,.1f}, control {summary['control_bytes'] / 1e6:,.3f})"),
        ("agg interval P50 / P95", f"{fmt(summary['agg_interval_p50_s'], ' s')} / {fmt(summary['agg_interval_p95_s'], ' s')}"),
        ("staleness P50 / P90", f"{fmt(summary['staleness_p50'])} / {fmt(summary['staleness_p90'])}"),
        ("tasks: train / eval", f"{summary['dispatched_train']} / {summary['dispatched_eval']}"),
        ("interrupted / timeouts / discarded", f"{summary['interrupted_tasks']} / {summary['timeouts']} / "
                                               f"{summary['discarded_updates']}"),
        ("host time", f"{summary['host_seconds']:.1f} s ({summary['host_ms_per_event']:.2f} ms/event, "
                      f"mean flush {summary['flush_tasks_mean']:.1f} tasks)"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def _check_run_arguments(args: argparse.Namespace) -> None:
    """The run's own arguments, refused in one line before any folder or file is written."""
    for flag, value in (("--out", args.out), ("--resume", args.resume), ("--config", args.config)):
        if value is not None and not value.strip():  # "" would silently mean the default (or a new run)
            raise SystemExit(f"felix-jax run: {flag} {value!r}: an empty path; give a folder or file name")
    if args.config is not None and args.preset_given:
        raise SystemExit(f"felix-jax run: --config {args.config} and --preset {args.preset}: a run takes its "
                         "scenario from one of them (override fields with --set)")
    if args.snapshot_every is not None and args.snapshot_every < 1:
        raise SystemExit(f"felix-jax run: --snapshot-every {args.snapshot_every}: must be a whole number of "
                         "aggregations >= 1")
    for flag, value in (("--snapshot-minutes", args.snapshot_minutes), ("--wall-budget-s", args.wall_budget_s)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise SystemExit(f"felix-jax run: {flag} {value}: must be a finite number > 0")


def _check_devices(scenario) -> None:
    """``devices`` against the devices jax sees (known only here, not when the scenario is built)."""
    if scenario.devices is not None:
        import jax

        seen = len(jax.devices())
        if scenario.devices > seen:
            raise SystemExit(f"felix-jax run: devices={scenario.devices}: jax sees {seen} device"
                             f"{'s' if seen != 1 else ''} ({jax.default_backend()}); use devices <= {seen} "
                             "or none for all")


def _run(args: argparse.Namespace) -> int:
    from ..experiment import Scenario, get_preset
    from ..experiment.results import OutputDirError, folder_lock, prepare_out_dir, remove_if_unused

    if args.list:
        from ..experiment.plugin_listing import describe_plugin_entries, plugin_entries

        try:
            plugins = parse_sets(args.set or []).get("plugins", "")
            entries = plugin_entries(plugins) if plugins else None  # listed with the built-in ones below
            print_listing(args.preset)
        except (KeyError, ValueError) as e:
            raise SystemExit(f"felix-jax run: {one_line(e)}")
        if entries is not None:
            print("\n".join(describe_plugin_entries(plugins, entries)))
        return 0
    _check_run_arguments(args)  # before anything is written
    for flag in ("out", "resume", "config"):  # absolute from here on: joined, recorded and printed as such
        if getattr(args, flag) is not None:
            setattr(args, flag, str(user_path(getattr(args, flag))))
    args.writers = metric_writers(args, "run")
    snapshots = {"snapshot_every": args.snapshot_every, "snapshot_minutes": args.snapshot_minutes}
    if args.resume:
        if args.set or args.config or args.out or args.overwrite or args.preset_given:
            raise SystemExit("felix-jax run: --resume DIR continues the run in DIR as it was configured: "
                             "no --preset, --set, --config, --out or --overwrite with it")
        out = Path(args.resume)
        try:
            scenario = Scenario.from_file(out / "config.json")
            saved = json.loads((out / "config.json").read_text())
        except (OSError, ValueError) as e:
            raise SystemExit(f"felix-jax run: cannot resume {out}: {one_line(e)}")
        recorded = saved.get("snapshot") or {}  # a run that never snapshotted on a schedule: null
        for key, name, kind in (("snapshot_every", "every_aggregations", int),
                                ("snapshot_minutes", "every_minutes", (int, float))):
            value = recorded.get(name) if isinstance(recorded, dict) else recorded
            if value is not None and (isinstance(value, bool) or not isinstance(value, kind) or not value > 0):
                raise SystemExit(f"felix-jax run: cannot resume {out}: {out / 'config.json'}: snapshot.{name} is "
                                 f"{value!r}, expected a number > 0 or null (the section is {recorded!r})")
            if snapshots[key] is None:  # keep snapshotting as the run did
                snapshots[key] = value
    else:
        try:
            scenario = Scenario.from_file(args.config) if args.config else get_preset(args.preset)
            sets = parse_sets(args.set or [])
            scenario = scenario.with_overrides(sets)
            from ..experiment.own_data import own_data_defaults

            # a user's NPZ with the default preset: a model that takes its inputs, its name (said in one line)
            scenario, fitted = own_data_defaults(scenario, sets, chosen=args.preset_given or bool(args.config))
        except (KeyError, ValueError) as e:
            raise SystemExit(f"felix-jax run: {one_line(e)}")
        if fitted:
            print(fitted, flush=True)
        from ..experiment.naming import default_run_dir

        # the reading in the default name, where not the default
        out = Path(args.out) if args.out else user_path(str(default_run_dir(scenario)))
    from ..experiment.inputs import missing_data

    missing = missing_data(scenario)  # before any work: one line naming the file and the command that gets it
    if missing:
        raise SystemExit(f"felix-jax run: {missing}")
    _check_devices(scenario)
    enable_cache("run")  # before the results folder is made: a cache that cannot be used leaves nothing
    created = not out.exists()
    with contextlib.ExitStack() as held:
        try:  # before any training: one writer per folder, one that can take the results and holds no other run's
            held.enter_context(folder_lock(out, "felix-jax run"))
            prepare_out_dir(out, clear=args.overwrite, refuse_existing=not args.resume)
        except OutputDirError as e:
            if created:
                remove_if_unused(out)
            raise SystemExit(f"felix-jax run: {e}")
        return _run_locked(args, scenario, out, created, snapshots)


def _run_locked(args, scenario, out: Path, created: bool, snapshots: dict) -> int:
    from ..experiment.naming import reading_label, strategy_label
    from ..experiment.results import OutputDirError, holds_earlier_run, remove_if_unused
    from ..experiment.resolution import run_warnings
    from ..experiment.runner import run

    said = run_warnings(scenario)

    def header() -> None:  # once the fleet is built and its memory plan made: a refusal is the only line
        print(f"felix-jax run: {scenario.name} | strategy {strategy_label(scenario)} | availability "
              f"{scenario.availability} | reading {reading_label(scenario)} | {scenario.num_clients} clients | "
              f"results -> {out}", flush=True)
        for warning in said:  # once, here and in summary.json
            print(f"felix-jax run: warning: {warning}", file=sys.stderr, flush=True)

    # written aside, swapped in once finished; only an earlier run's files are said to be kept (not a lone log)
    replacing = not args.resume and holds_earlier_run(out)
    kept = f"; the earlier results in {out} are kept" if replacing else ""
    try:
        if args.config:  # a rerun of a recorded run reads its files as they are now: say which changed
            from ..experiment.inputs import warn_changed_inputs

            warn_changed_inputs(args.config)
        from ..experiment.stops import StopOnSignals

        # one guard for the whole run: a signal while the finished run writes its files waits for them
        with StopOnSignals(True) as signals:
            result = run(scenario, out, progress=not args.quiet, stop_on_signals=signals, resume=bool(args.resume),
                         wall_budget_s=args.wall_budget_s, writers=args.writers, scenario_file=args.config,
                         on_built=header, **snapshots)
    except PluginError as e:
        if created and e.stopped_after is None and e.no_snapshot is None:  # it failed while the run was built
            remove_if_unused(out)
        raise SystemExit(f"felix-jax run: {_plugin_stop(e, out, kept, traceback_asked(args))}")
    except (*USER_ERRORS, OutputDirError) as e:
        if created:  # refused before it wrote anything: leave no empty folder
            remove_if_unused(out)
        if isinstance(e, SnapshotWriteError) and e.kept and not replacing:  # the run stops at its last snapshot
            kept = f"; continue it from there with: felix-jax run --resume {out}"
        raise SystemExit(f"felix-jax run: {one_line(e)}{kept}")
    except KeyboardInterrupt:  # a second interrupt: stopped at once, metrics.csv holds what was reached
        print("felix-jax run: interrupted twice, stopped at once; " + (
              f"the earlier results in {out} are kept" if replacing else
              f"{out}/metrics.csv holds the checkpoints so far"), file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT)
    except BaseException:  # anything else (a bug: its traceback follows) leaves no empty folder either
        if created:
            remove_if_unused(out)
        raise
    print(_summary_table(result.summary))
    print(f"results written to {out}/ (config.json, metrics.csv, summary.json, accuracy.png)")
    for warning in result.summary.get("warnings", []):  # those of the run's end (its peak memory over its budget)
        if warning not in said:
            print(f"felix-jax run: warning: {warning}", file=sys.stderr, flush=True)
    if result.interrupted_by is not None:
        name = signal.Signals(result.interrupted_by).name
        more = f"; continue it with: felix-jax run --resume {out}"
        print(f"felix-jax run: interrupted by {name} after {result.summary['aggregations']} aggregations; "
              f"the results above are complete up to then{more}", file=sys.stderr)
        raise SystemExit(128 + result.interrupted_by)
    if signals.signum is not None:  # it came after the last event: the run finished, its files are whole
        print(f"felix-jax run: {signal.Signals(signals.signum).name} came as the finished run wrote its results; "
              f"they are complete in {out}", file=sys.stderr)
        raise SystemExit(128 + signals.signum)
    if result.summary["stop_reason"].startswith("diverged"):
        raise SystemExit(f"felix-jax run: {result.summary['stop_reason']}")
    return 0


def _plugin_stop(e: PluginError, out: Path, kept: str, traceback_asked: bool) -> str:
    """What a plugin's error stopped, in one line: the plugin, the call, its file:line and the
    exception; what the run kept and how to continue it once the plugin is fixed."""
    whole = "" if traceback_asked else f" (the whole stack: --traceback or {TRACEBACK_ENV}=1)"
    if e.snapshot is not None:  # stopped like an interrupted run: results so far and a stop snapshot
        aggregations = f"{e.stopped_after} aggregation{'' if e.stopped_after == 1 else 's'}"
        return (f"{e}; the run stopped after {aggregations}: its results so far and a stop "
                f"snapshot are in {out}; fix the plugin, then continue with: felix-jax run --resume {out}{whole}")
    if e.no_snapshot is not None:
        so_far = kept or f"; its checkpoints so far are in {out / 'metrics.csv'}"
        return f"{e}; no stop snapshot: {e.no_snapshot}{so_far}{whole}"
    return f"{e}{kept}{whole}"


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``run`` command and its options."""
    run = sub.add_parser("run", help="run one experiment (default: the quickstart preset)",
                         formatter_class=HelpFormatter, epilog=RUN_EXAMPLES)
    run.add_argument("--preset", default=None, help="scenario preset (default quickstart; see --list)")
    run.add_argument("--config", help="a JSON file of scenario fields (instead of --preset)")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario field (repeatable)")
    run.add_argument("--out", help="results folder (default results/<name>-<strategy>-<availability>-seed<k>; "
                                   "a reading other than the paper's text before the seed: ...-paper_code-seed<k>)")
    run.add_argument("--list", action="store_true", help="list presets, strategies and availability regimes")
    run.add_argument("--overwrite", action="store_true",
                     help="replace the results of an earlier run in --out (refused otherwise)")
    run.add_argument("--snapshot-every", type=int, metavar="N",
                     help="also write a snapshot to OUT/snapshot every N aggregations (a stop by signal or wall "
                          "budget always writes one)")
    run.add_argument("--snapshot-minutes", type=float, metavar="M", help="also every M minutes of wall time")
    run.add_argument("--resume", metavar="DIR",
                     help="continue the run in DIR from its last snapshot; the finished results equal an "
                          "uninterrupted run's")
    run.add_argument("--wall-budget-s", type=float, metavar="S",
                     help="stop after S seconds of wall time (stop reason wall_budget, and a snapshot: "
                          "--resume continues it)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--log-to", default=None, metavar="WRITERS",
                     help="also log the checkpoints to tensorboard and/or mlflow (comma-separated; the extras of "
                          "the same names; default none; docs/results.md)")
    run.set_defaults(func=_run)
    add_traceback_flag(run)
    return run
