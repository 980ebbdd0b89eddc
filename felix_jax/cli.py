"""``felix-jax`` command line (host-only): ``run``, ``compare``, ``demo``, ``plot``, ``report``, ``plot-trace``."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import traceback
from pathlib import Path

from .options import OptionError
from .fleet.lifecycle import UnsettledTaskError
from .fleet.simulator import PolicyError
from .fleet.snapshot import SnapshotError, SnapshotWriteError
from .plugin_calls import PluginError
from .traces import DataFileError

# what a run or its inputs may raise that is the user's to fix: reported in one line, no traceback
# (the whole stack on request: --traceback or FELIX_JAX_TRACEBACK=1)
USER_ERRORS = (OSError, KeyError, DataFileError, OptionError, SnapshotError, PolicyError, UnsettledTaskError,
               PluginError)
TRACEBACK_ENV = "FELIX_JAX_TRACEBACK"


def _one_line(e: BaseException) -> str:
    """The message of a user error, without the exception's repr noise (an OSError's errno), in the
    command line's words where the error has them (``cli_message``: ``FELIX_JAX_DATA``, not ``path=``)."""
    if getattr(e, "cli_message", None):
        return e.cli_message
    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    return str(e.args[0]) if e.args else str(e) or type(e).__name__


def _parse_sets(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _print_readings() -> None:
    """The two readings' switches side by side, with the authors' file:line each reproduces."""
    import dataclasses

    from .fleet.reading import SWITCH_SOURCES, Reading
    from .options import to_json

    text, code = Reading.paper(), Reading.paper_code()
    print("readings (--set semantics=paper|paper_code; one switch on top: --set reading.KEY=V; "
          "'as_ran': each strategy's own, none: the scenario field's; docs/readings.md):")
    print(f"  {'switch':<32} {'paper':<14} {'paper_code':<18} source")
    for f in dataclasses.fields(Reading):
        if f.name == "semantics":
            continue
        a, b = to_json(getattr(text, f.name)), to_json(getattr(code, f.name))
        print(f"  {f.name:<32} {str(a):<14} {str(b):<18} {SWITCH_SOURCES.get(f.name, '')}")
    from .policies.selectors.oort_math import OortConfig

    sync = code.selector_options("sync")
    for key, value in code.selector_options("async").items():
        source = next((v for k, v in SWITCH_SOURCES.items() if k.startswith("selector.") and key in k), "")
        shown = value if sync[key] == value else f"{value} (sync: {sync[key]})"
        print(f"  {'selector.' + key:<32} {str(to_json(getattr(OortConfig(), key))):<14} {str(shown):<18} {source}")


def _print_listing(preset: str = "quickstart") -> None:
    from .experiment import PRESETS, STRATEGIES
    from .experiment.registry import AVAILABILITY, DEVICE_PROFILES, MODELS
    from .policies import AGGREGATOR_OPTIONS, SELECTOR_OPTIONS

    import dataclasses
    import typing

    from .experiment import Scenario
    from .experiment.scenario import FIELD_HELP

    from .experiment import get_preset

    chosen = get_preset(preset)  # what `run --preset PRESET` runs: its values where they differ
    print(f"scenario fields (--set FIELD=V or a JSON file of fields; type = default [preset {preset}'s value where "
          f"it differs; another preset's: run --preset NAME --list]: meaning):")
    hints = typing.get_type_hints(Scenario)
    for f in dataclasses.fields(Scenario):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        kind = getattr(hints[f.name], "__name__", None) or str(hints[f.name]).replace("typing.", "")
        value = getattr(chosen, f.name)
        differs = f" [{preset}: {value!r}]" if value != default else ""
        print(f"  {f.name:<20} {kind} = {default!r}{differs}: {FIELD_HELP.get(f.name, '')}")
    print("presets:")
    for name, sc in PRESETS.items():
        print(f"  {name:<16} {sc.dataset}, {sc.model}, {sc.num_clients} clients, strategy {sc.strategy}, "
              f"availability {sc.availability}, target {sc.target_accuracy}")
    print("strategies:")
    for name, st in STRATEGIES.items():
        print(f"  {name:<16} {st.description}")
    print("availability regimes:", ", ".join(AVAILABILITY), "(and ref:NAME for a shared reference trace)")
    print("device profiles:", ", ".join(DEVICE_PROFILES))
    print("models:", ", ".join(MODELS))
    print("policy options (--set selector.KEY=V, eval_selector.KEY=V, aggregator.KEY=V; a strategy's own defaults "
          "are in its description and in config.json):")
    for kind, specs in (("selector", SELECTOR_OPTIONS), ("aggregator", AGGREGATOR_OPTIONS)):
        for name, spec in specs.items():
            lines = spec.describe()
            print(f"  {kind} {name}:" + (" no options" if not lines else ""))
            for line in lines:
                print(f"      {line}")
    _print_readings()
    from .data.streams import StreamConfig
    from .fleet.update_guard import UpdateGuardConfig
    from .options import OptionSpec

    for field, config, what in (("update_guard", UpdateGuardConfig, "dropping bad client updates"),
                                ("stream", StreamConfig, "client data streams: arrivals, drift, delayed labels")):
        print(f"{field} options (--set {field}.KEY=V; {what}):")
        for line in OptionSpec(config).describe():
            print(f"      {line}")


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
    from .experiment import Scenario, get_preset
    from .experiment.results import OutputDirError, folder_lock, prepare_out_dir, remove_if_unused

    if args.list:
        from .experiment.plugin_listing import describe_plugin_entries, plugin_entries

        try:
            plugins = _parse_sets(args.set or []).get("plugins", "")
            entries = plugin_entries(plugins) if plugins else None  # listed with the built-in ones below
            _print_listing(args.preset)
        except (KeyError, ValueError) as e:
            raise SystemExit(f"felix-jax run: {_one_line(e)}")
        if entries is not None:
            print("\n".join(describe_plugin_entries(plugins, entries)))
        return 0
    _check_run_arguments(args)  # before anything is written
    args.writers = _writers(args, "run")
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
            raise SystemExit(f"felix-jax run: cannot resume {out}: {_one_line(e)}")
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
            sets = _parse_sets(args.set or [])
            scenario = scenario.with_overrides(sets)
            from .experiment.own_data import own_data_defaults

            # a user's NPZ with the default preset: a model that takes its inputs, its name (said in one line)
            scenario, fitted = own_data_defaults(scenario, sets, chosen=args.preset_given or bool(args.config))
        except (KeyError, ValueError) as e:
            raise SystemExit(f"felix-jax run: {_one_line(e)}")
        if fitted:
            print(fitted, flush=True)
        from .experiment.naming import default_run_dir

        out = Path(args.out) if args.out else default_run_dir(scenario)  # the reading in it, where not the default
    _check_devices(scenario)
    _enable_cache("run")  # before the results folder is made: a cache that cannot be used leaves nothing
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


def _enable_cache(command: str) -> None:
    """The persistent XLA cache, or one line naming its folder when that cannot be used."""
    from .compile_cache import enable_compilation_cache

    try:
        enable_compilation_cache()
    except OSError as e:
        raise SystemExit(f"felix-jax {command}: {_one_line(e)}")


def _run_locked(args, scenario, out: Path, created: bool, snapshots: dict) -> int:
    from .experiment.naming import reading_label
    from .experiment.results import OutputDirError, holds_run_results, remove_if_unused
    from .experiment.runner import run

    print(f"felix-jax run: {scenario.name} | strategy {scenario.strategy} | availability {scenario.availability} "
          f"| reading {reading_label(scenario)} | {scenario.num_clients} clients | results -> {out}", flush=True)
    replacing = not args.resume and holds_run_results(out)  # written aside, swapped in once finished
    kept = f"; the earlier results in {out} are kept" if replacing else ""
    try:
        result = run(scenario, out, progress=not args.quiet, stop_on_signals=True, resume=bool(args.resume),
                     wall_budget_s=args.wall_budget_s, writers=args.writers, **snapshots)
    except PluginError as e:
        if created and e.stopped_after is None and e.no_snapshot is None:  # it failed while the run was built
            remove_if_unused(out)
        raise SystemExit(f"felix-jax run: {_plugin_stop(e, out, kept, _traceback_asked(args))}")
    except (*USER_ERRORS, OutputDirError) as e:
        if created:  # refused before it wrote anything: leave no empty folder
            remove_if_unused(out)
        if isinstance(e, SnapshotWriteError) and e.kept and not replacing:  # the run stops at its last snapshot
            kept = f"; continue it from there with: felix-jax run --resume {out}"
        raise SystemExit(f"felix-jax run: {_one_line(e)}{kept}")
    except KeyboardInterrupt:  # a second interrupt: stopped at once, metrics.csv holds what was reached
        print("felix-jax run: interrupted twice, stopped at once; " + (
              f"the earlier results in {out} are kept" if replacing else
              f"{out}/metrics.csv holds the checkpoints so far"), file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT)
    print(_summary_table(result.summary))
    print(f"results written to {out}/ (config.json, metrics.csv, summary.json, accuracy.png)")
    if result.interrupted_by is not None:
        name = signal.Signals(result.interrupted_by).name
        more = f"; continue it with: felix-jax run --resume {out}"
        print(f"felix-jax run: interrupted by {name} after {result.summary['aggregations']} aggregations; "
              f"the results above are complete up to then{more}", file=sys.stderr)
        raise SystemExit(128 + result.interrupted_by)
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


def _traceback_asked(args: argparse.Namespace) -> bool:
    """Whether the whole stack of an error was asked for (``--traceback`` or ``FELIX_JAX_TRACEBACK``)."""
    return bool(getattr(args, "traceback", False)) or os.environ.get(TRACEBACK_ENV, "").strip() not in ("", "0")


def _writers(args: argparse.Namespace, command: str) -> tuple:
    """``--log-to``: the metric writers, or one line naming the extra to install (before any work)."""
    from .experiment.writers.feed import make_writers

    try:
        return make_writers(args.log_to)
    except OptionError as e:
        raise SystemExit(f"felix-jax {command}: {_one_line(e)}")


def _compare(args: argparse.Namespace) -> int:
    from .experiment import get_preset
    from .experiment.cells import cell_overrides, parse_sweep, sweep_strategies
    from .experiment.registry import make_trace
    from .experiment.results import OutputDirError, folder_lock, prepare_out_dir
    from .traces import REFERENCE_TRACE_NAMES

    sets = _parse_sets(args.set or [])
    args.writers = _writers(args, "compare")
    for key, flag in (("strategy", "--strategies"), ("availability", "--availability"), ("seed", "--seeds")):
        if key in sets:  # an axis of the matrix: the flag sets it, a --set would be silently overridden
            raise SystemExit(f"felix-jax compare: --set {key}=...: {key} is an axis of the comparison; "
                             f"give it with {flag}")
    try:
        base = get_preset(args.scenario).with_overrides(sets)
    except (KeyError, ValueError) as e:
        raise SystemExit(f"felix-jax compare: {_one_line(e)}")
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    regimes = [r.strip() for r in args.availability.split(",") if r.strip()]
    try:  # STRATEGY@KEY=VALUE cells, crossed with each --sweep KEY=v1,v2,...
        sweeps = [parse_sweep(spec) for spec in args.sweep or []]
        strategies = sweep_strategies(strategies, sweeps)
        from .experiment.sweep_axes import axis_keys, check_reference

        args.axis_keys = axis_keys([k for k, _ in sweeps])  # swept fields of the scenario's world: an axis
        check_reference(strategies, args.axis_keys, args.reference)  # before anything runs
    except ValueError as e:
        raise SystemExit(f"felix-jax compare: {_one_line(e)}")
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"felix-jax compare: --seeds expects comma-separated integers, got {args.seeds!r}")
    if not (strategies and regimes and seeds):
        raise SystemExit("felix-jax compare: --strategies, --availability and --seeds need at least one entry each")
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
            raise SystemExit(f"felix-jax compare: {cell}{_one_line(e)}")
    for rg in regimes:  # the name, and the trace file it reads
        try:
            if rg.startswith("ref:") and rg[4:] not in REFERENCE_TRACE_NAMES:
                from .suggest import known_names

                names = [f"ref:{n}" for n in REFERENCE_TRACE_NAMES]
                raise KeyError(f"unknown reference trace{known_names(rg, names, 'reference traces')}")
            make_trace(rg, 1, 0)
        except USER_ERRORS as e:
            raise SystemExit(f"felix-jax compare: availability {rg!r}: {_one_line(e)}")
    _check_cell_folders(base, regimes)
    _enable_cache("compare")  # before the results folder is made
    if args.out is not None and not args.out.strip():
        raise SystemExit(f"felix-jax compare: --out {args.out!r}: an empty path; give a folder name")
    from .experiment.naming import default_compare_dir

    out = Path(args.out) if args.out else default_compare_dir(base)
    with contextlib.ExitStack() as held:
        try:  # one writer per folder for the whole comparison, never a run's folder
            held.enter_context(folder_lock(out, "felix-jax compare"))
            prepare_out_dir(out, kind="compare")
        except OutputDirError as e:
            raise SystemExit(f"felix-jax compare: {e}")
        return _compare_locked(args, base, strategies, regimes, seeds, out)


def _check_cell_folders(base, regimes: list[str]) -> None:
    """Two regimes whose cells would share one results folder (a trace file's cells are named by its
    file name, not its path) are refused before anything runs: one cell's results would overwrite
    the other's."""
    from .experiment.cells import cell_dir

    seen: dict[str, tuple[str, str]] = {}
    for rg in regimes:
        resolved = base.with_overrides({"availability": rg}).availability  # a trace file by its absolute path
        folder = cell_dir(Path("."), "STRATEGY", resolved, 0).name
        if folder in seen:
            other, other_resolved = seen[folder]
            same = " (the same file)" if other_resolved == resolved else ""
            raise SystemExit(f"felix-jax compare: availability {other} and {rg}{same} would share the cell "
                             f"folders runs/{folder.replace('STRATEGY', '<strategy>')} (a trace file's cells are "
                             "named by its file name): give the files different names")
        seen[folder] = (rg, resolved)


def _compare_locked(args, base, strategies, regimes, seeds, out: Path) -> int:
    from .experiment.figures.comparison import plot_comparison
    from .experiment.matrix import CellChanged, all_kept, run_matrix
    from .experiment.ray_executor import ClusterError
    from .experiment.report import write_report
    from .experiment.tables import write_tables

    try:
        from .experiment.sweep import default_batch

        batch = default_batch() if args.batch is None else args.batch
        if batch < 1:
            raise OptionError(f"--batch must be >= 1 experiments, got {batch}")
        if args.ray_max_retries < 0:
            raise OptionError(f"--ray-max-retries must be >= 0, got {args.ray_max_retries}")
        rows = run_matrix(base, strategies, regimes, seeds, out, progress=not args.quiet, resume=not args.overwrite,
                          batch=batch, executor=args.executor, ray_address=args.ray_address, writers=args.writers,
                          ray_max_retries=args.ray_max_retries)
    except (*USER_ERRORS, CellChanged, ImportError, ClusterError) as e:  # ImportError: --executor ray without Ray
        more = ""
        if isinstance(e, PluginError) and e.snapshot is not None:  # its cell keeps a stop snapshot
            more = "; its cell stopped with its results so far: once the plugin is fixed, the same command continues it"
        raise SystemExit(f"felix-jax compare: {_one_line(e)}{more}")
    except KeyboardInterrupt:  # finished cells are on disk; the same command resumes from them
        print(f"felix-jax compare: interrupted; finished cells are kept in {out}/runs, and the same command "
              "continues from them", file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT)
    from .experiment.sweep_axes import comparison_view, write_comparison_json

    view = comparison_view(rows, strategies, regimes, args.axis_keys, args.reference)
    write_comparison_json(out, view)  # the report and plot redraw the same view
    table = write_tables(view.rows, view.strategies, view.regimes, out, view.reference)
    figures = plot_comparison(view.rows, view.strategies, view.regimes, out, reference=view.reference)
    from .experiment.split import write_split_csv

    split_csv = write_split_csv(rows, out)  # each cell's split of the data, from its partition.json
    if all_kept(rows):  # nothing ran: the table is the earlier one's, say so
        print(f"felix-jax compare: all {len(rows)} cells in {out} had finished earlier: the table below is theirs; "
              "rerun them with --overwrite, or give --out another folder")
    print(table)
    print(f"wrote {out}/summary.csv (a row per run), {out}/summary_pooled.csv (over seeds), {out}/table.txt, "
          + "".join(f"{p}, " for p in [split_csv] if p is not None)
          + ", ".join(str(p) for p in figures) + f", {write_report(out)}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import DemoConfig, run_demo

    try:
        cfg = DemoConfig(rounds=args.rounds, seed=args.seed)
    except ValueError as e:
        raise SystemExit(f"felix-jax demo: {_one_line(e)}")
    target = None
    if args.json is not None:  # checked before the demo runs, not after
        target = Path(args.json)
        if not args.json.strip() or target.is_dir():
            raise SystemExit(f"felix-jax demo: --json {args.json!r}: give a file name")
        if not target.parent.is_dir():
            raise SystemExit(f"felix-jax demo: --json {args.json}: the folder {target.parent} does not exist")
    _enable_cache("demo")
    result = run_demo(cfg)
    if target is not None:
        try:  # strict JSON: a number that is not finite is written as null
            target.write_text(json.dumps(_finite_or_none(result), indent=2, default=str, allow_nan=False))
        except OSError as e:
            raise SystemExit(f"felix-jax demo: cannot write --json {target}: {_one_line(e)}")
    return 0


def _finite_or_none(value):
    """``value`` with every float that is NaN or infinite replaced by None (JSON's null)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


def _replot_run(run_dir: Path) -> Path:
    """``accuracy.png`` of a run folder, from its ``metrics.csv`` (and ``config.json`` for the title)."""
    import types

    from .experiment.results import plot_accuracy, read_metrics_csv, run_title

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
    from .experiment.figures.comparison import plot_comparison
    from .experiment.tables import rows_from_summary_csv

    folder = Path(args.dir)
    try:
        if (folder / "summary.csv").is_file() and (folder / "runs").is_dir():
            _check_summary_csv(folder / "summary.csv")
            rows = rows_from_summary_csv(folder)
            if not rows:
                raise SystemExit(f"felix-jax plot: {folder}/summary.csv holds no runs")
            from .experiment.sweep_axes import read_view

            view = read_view(folder, rows)  # the axes and reference compare recorded
            figures = [_replot_run(Path(r["run_dir"])) for r in rows if (Path(r["run_dir"]) / "metrics.csv").is_file()]
            figures += plot_comparison(view.rows, view.strategies, view.regimes, folder, reference=view.reference)
        elif (folder / "metrics.csv").is_file():
            figures = [_replot_run(folder)]
        else:
            raise SystemExit(f"felix-jax plot: {folder} is neither a run folder (metrics.csv) nor a compare folder "
                             "(summary.csv and runs/)")
    except (*USER_ERRORS, ValueError) as e:  # a missing or malformed results file
        raise SystemExit(f"felix-jax plot: {_one_line(e)}")
    print("wrote " + ", ".join(str(p) for p in figures))
    return 0


def _report(args: argparse.Namespace) -> int:
    from .experiment.report import ReportError, write_report

    try:
        path = write_report([Path(d) for d in args.dir], args.out)
    except (*USER_ERRORS, ReportError, ValueError) as e:
        raise SystemExit(f"felix-jax report: {_one_line(e)}")
    print(f"wrote {path}")
    return 0


def _plot_trace(args: argparse.Namespace) -> int:
    from .experiment.figures.trace import plot_trace

    if args.out is not None and not args.out.strip():
        raise SystemExit(f"felix-jax plot-trace: --out {args.out!r}: an empty path; give a file name")
    if not (math.isfinite(args.slot_s) and args.slot_s > 0):
        raise SystemExit(f"felix-jax plot-trace: --slot-s {args.slot_s}: must be a finite number > 0")
    try:
        path = plot_trace(args.trace, args.out, clients=args.clients, seed=args.seed, slot_s=args.slot_s,
                          hours=args.hours)
    except (*USER_ERRORS, ValueError) as e:
        raise SystemExit(f"felix-jax plot-trace: {_one_line(e)}")
    print(f"wrote {path}")
    return 0


def _check_summary_csv(path: Path) -> None:
    """A comparison's ``summary.csv`` as :func:`rows_from_summary_csv` reads it: the columns a plot
    needs, and a number (a whole, finite one for the integer columns) in every numeric field; a
    :class:`DataFileError` naming the file, the line and the column otherwise."""
    import csv

    from .experiment.tables import INT_COLUMNS, SUMMARY_COLUMNS, TEXT_COLUMNS

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


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """--help shows each option's default and keeps the examples' line breaks; an option whose help
    says its default itself, or whose default is None or a flag's False, gets no "(default: ...)"."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


RUN_EXAMPLES = """examples:
  felix-jax run                                              # the quickstart preset, FedBuff, 100%
  felix-jax run --preset tiny --set strategy=felix --set availability=avail50
  felix-jax run --preset cifar10-longhorizon --set availability=ref:mobiperf_3st_50 --out results/lh
  felix-jax run --config results/lh/config.json --out results/lh-again   # rerun exactly
  felix-jax run --set strategy=felix --snapshot-every 50 --out results/r; felix-jax run --resume results/r
  felix-jax run --list                                       # every field, preset, strategy and option"""

PLOT_TRACE_EXAMPLES = """examples:
  felix-jax plot-trace avail50                               # avail50-trace.png: 100 clients, 24 h
  felix-jax plot-trace my_trace.csv --out figures/mine.png
  felix-jax plot-trace ref:mobiperf_3st_50 --clients 100     # needs FELIX_JAX_DATA"""

COMPARE_EXAMPLES = """examples:
  felix-jax compare                                          # FeLiX vs OORT+Async vs FedBuff, 100% and 50%
  felix-jax compare --scenario tiny --strategies felix,oort-async-oracle --availability avail50 --seeds 0,1,2
  felix-jax compare --set trace_start_s=1800 --availability ref:syn_50,ref:mobiperf_3st_50 --out results/c
  felix-jax compare --strategies felix,oort-async-oracle@oracle_departure=free_slot --sweep concurrency=4,8
  felix-jax compare --seeds 0,1,2 --batch 6                  # 6 experiments at a time, device calls shared
  felix-jax compare --seeds 0,1,2 --batch 3 --executor ray --ray-address auto   # batches as Ray tasks"""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="felix-jax", description="JAX fleet emulator for federated learning under churn")
    sub = ap.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run one experiment (default: the quickstart preset)",
                         formatter_class=_HelpFormatter, epilog=RUN_EXAMPLES)
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
    cmp_ = sub.add_parser("compare", help="run strategies x availability regimes x seeds and compare them",
                          formatter_class=_HelpFormatter, epilog=COMPARE_EXAMPLES)
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
    demo = sub.add_parser("demo", help="FedAvg rounds of one vectorized cohort each: throughput and accuracy",
                          formatter_class=_HelpFormatter,
                          description="Synchronous FedAvg on the embedded digits without the fleet (no availability, "
                                      "no virtual clock): each round trains its sampled clients in one vectorized "
                                      "cohort call; prints samples trained per second and test accuracy.")
    demo.add_argument("--rounds", type=int, default=12, help="FedAvg rounds to run")
    demo.add_argument("--seed", type=int, default=0, help="seed of the partition, client sampling and model init")
    demo.add_argument("--json", help="write the demo's numbers (throughput, accuracy per round) to this file")
    demo.set_defaults(func=_demo)
    plot = sub.add_parser("plot", help="redraw the figures of a run or compare results folder from its saved files")
    plot.add_argument("dir", help="a run folder (metrics.csv) or a compare folder (summary.csv and runs/)")
    plot.set_defaults(func=_plot)
    report = sub.add_parser("report", help="one self-contained HTML page of a comparison or a run (table, "
                                           "figures, the split, settings, warnings), or of several overlaid")
    report.add_argument("dir", nargs="+", help="a compare folder (summary.csv and runs/) or a run folder "
                                               "(metrics.csv); several: their runs overlaid on one page")
    report.add_argument("--out", help="the page (default DIR/report.html; several folders: overlay-report.html)")
    report.set_defaults(func=_report)
    trace = sub.add_parser("plot-trace", help="draw an availability trace: tier shares over time and a client raster",
                           formatter_class=_HelpFormatter, epilog=PLOT_TRACE_EXAMPLES)
    trace.add_argument("trace", metavar="FILE_OR_REGIME",
                       help="a trace file (.csv, .npz, FedScale .json/.pkl) or a regime (avail50, mobiperf, "
                            "ref:NAME; see run --list)")
    trace.add_argument("--out", help="the figure (default <name>-trace.png in this folder)")
    trace.add_argument("--clients", type=int, metavar="N",
                       help="clients to draw (default: a file's own, 100 for a synthetic regime; a trace with "
                            "fewer is cycled, as a run does)")
    trace.add_argument("--hours", type=float, metavar="H",
                       help="hours to draw (default: a file's duration, 24 for a synthetic regime)")
    trace.add_argument("--seed", type=int, default=0, help="seed of a synthetic regime's slots")
    trace.add_argument("--slot-s", type=float, default=600.0, metavar="S",
                       help="slot length of a synthetic regime (a scenario's slot_s)")
    trace.set_defaults(func=_plot_trace)
    for command in (run, cmp_, demo, plot, trace):
        command.add_argument("--traceback", action="store_true",
                             help=f"with an error, print its whole stack above the one-line message (or set "
                                  f"{TRACEBACK_ENV}=1)")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_parser()
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["run"] + argv
    args = ap.parse_args(argv)
    if args.command == "run":  # --preset defaults to quickstart; --resume refuses one given explicitly
        args.preset_given = args.preset is not None
        args.preset = args.preset or "quickstart"
    try:
        return args.func(args)
    except SystemExit as stop:  # an error reported in one line; its whole stack above it when asked for
        if isinstance(stop.code, str) and stop.__context__ is not None and _traceback_asked(args):
            traceback.print_exception(stop.__context__, file=sys.stderr)
        raise


if __name__ == "__main__":
    sys.exit(main())
