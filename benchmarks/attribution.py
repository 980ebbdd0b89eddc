"""What moves FeLiX's as-run lead toward the paper's? The measurement changed one step at a time.

    python benchmarks/attribution.py [--workers 2]            # run the cells (resumable), then the table
    python benchmarks/attribution.py --table-only             # tabulate what finished
    python benchmarks/attribution.py --check                  # the measurement's own check on real runs
    python benchmarks/attribution.py --workers 15 --cell-budget-s 360   # every cell cut after 360 s of wall time

The as-run reading (``semantics=paper_code``, ``reading.small_clients=zero_step_reference``), FeLiX
against OORT+Async* and OORT*, MobiPerf first, then 50%, seeds 0-4, every run going on past its target
(``stop_at_target=false``) to a 3-virtual-hour horizon (fixed by cost, before any cell ran: a FeLiX cell
evaluates ~2,700 test checkpoints of 10,000 images) and keeping every checkpoint's per-sample test
correctness (``test_hits=true``). The steps:

* (a) today's long-horizon cell: ``cifar10-longhorizon`` measured on its 250 test images: read from the
  (b) runs' per-sample record, the very rows ``num_test=250`` draws (the test subset does not feed back,
  so the runs are the same version by version; ``--check`` shows it on real runs);
* (b) + the full test set: the same runs on all 10,000 test images;
* (c) + the paper's data: ``cifar10-paperdata`` (all 50,000 training images at the paper's own per-client
  sizes; its target fixed by the long-horizon rule on a centralized reference before any cell ran).

At each step: FeLiX's paired ratio [95% interval] at the step's target and along the learning curve
(``felix_jax.experiment.curve``), and a power line (seeds a +-10% interval needs). Each finished cell is
also kept compact in ``benchmarks/attribution/cells/`` (checkpoint times and correct counts on both test
sets), so that the table, and a later resume, need not the results folders.

``--cell-budget-s`` cuts each cell after that much wall time (stop reason ``wall_budget``), for a machine
lent for minutes: a cut cell's curve ends where it got to, which is exact up to there (a checkpoint's
accuracy and a level's crossing depend on nothing later), and the table names every cut cell with the
virtual hours it reached. A level a cut cell did not reach is not counted (the ratio at it is over the
seeds that reached it, and the reached/seeds counts say so). The next time the cells run, a cut cell
runs again from the start (its cut run folder, if there, removed first); its compact curve is replaced
only by one that got further.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("attribution.py")

import json
import shutil
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent / "attribution"
CELLS = HERE / "cells"  # where finished cells are kept compact (--cells)
STRATEGIES = ["felix", "oort-async-oracle", "oort-oracle"]
NAMES = {"felix": "FeLiX", "oort-async-oracle": "OORT+Async*", "oort-oracle": "OORT*"}
REGIMES = {"ref:mobiperf_3st_50": "MobiPerf", "ref:syn_50": "50%"}
PAPER = {("oort-async-oracle", "MobiPerf"): 15.4 / 9.3, ("oort-oracle", "MobiPerf"): 15.0 / 9.3,
         ("oort-async-oracle", "50%"): 9.4 / 6.2, ("oort-oracle", "50%"): 9.3 / 6.2}
HORIZON_H = 3.0
AS_RUN = {"semantics": "paper_code", "reading.small_clients": "zero_step_reference", "stop_at_target": "false",
          "max_virtual_hours": str(HORIZON_H), "test_hits": "true", "num_test": "none"}
# run folders: (preset, what it measures); the steps read them
FOLDERS = {"longhorizon": "cifar10-longhorizon", "paperdata": "cifar10-paperdata"}
STEPS = [("a", "longhorizon", 250, "today's long-horizon cell (250 test images)"),
         ("b", "longhorizon", None, "+ the full 10,000-image test set"),
         ("c", "paperdata", None, "+ the paper's data (50,000 images at its per-client sizes)")]
CIFAR_TRAIN, CIFAR_TEST = 50_000, 10_000


def base_scenario(folder: str):
    import felix_jax.experiment as fx

    return fx.get_preset(FOLDERS[folder]).with_overrides(AS_RUN)


def cell_order(seeds: list[int], regimes: list[str], folders: list[str],
               strategies: list[str] = STRATEGIES) -> list[tuple[str, str, str, int]]:
    """(folder, strategy, regime, seed) in priority order: MobiPerf first, a whole seed at a time, then
    the paper's data, then 50%."""
    return [(fo, st, rg, sd) for rg in regimes for fo in folders for sd in seeds for st in strategies]


def compact_path(cells: Path, folder: str, strategy: str, regime: str, seed: int) -> Path:
    return cells / f"{folder}-{strategy}-{REGIMES.get(regime, regime).replace('%', 'pct')}-seed{seed}.npz"


def compact(cells: Path, folder: str, strategy: str, regime: str, seed: int, run_dir: Path) -> Path:
    """Keeps a finished cell's curve: checkpoint times, the correct counts on the whole test set and on
    the rows ``num_test=250`` draws, the stop rule's window and the run's summary."""
    from felix_jax.experiment.curve import read_curve
    from felix_jax.experiment.test_hits import num_test_rows, read_test_hits

    hits = read_test_hits(run_dir)
    correct = hits.correct()
    times, acc, window, _ = read_curve(run_dir)
    # every cell is the as-run reading, whose stop rule waits for a full window (reading.stop_window_fill);
    # taken from the reading as it resolves now, so a run recorded before the switch reads the same rule
    from felix_jax.experiment.resolution import stop_rule

    full_window = stop_rule(base_scenario(folder)).full_window
    if not np.array_equal(correct.sum(1) / hits.num_test, acc):
        raise SystemExit(f"attribution: {run_dir}: test_hits.npz does not give metrics.csv's accuracies")
    sc = json.loads((run_dir / "config.json").read_text())["scenario"]
    rows250 = num_test_rows(sc.get("num_train"), 250, CIFAR_TRAIN, CIFAR_TEST)
    summary = json.loads((run_dir / "summary.json").read_text())
    path = compact_path(cells, folder, strategy, regime, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, time_s=times, correct_full=correct.sum(1).astype(np.uint16),
                        correct_250=correct[:, rows250].sum(1).astype(np.uint16), num_test=hits.num_test,
                        window=window, full_window=full_window, summary=json.dumps({k: summary.get(k) for k in (
                            "aggregations", "stop_reason", "end_time_s", "time_to_target_s", "staleness_p99",
                            "host_seconds")}))
    return path


def load_curves(cells: Path, seeds, regimes, folders) -> dict:
    """(step, strategy, regime, seed) -> (times, accuracies, window, full_window) of every compact cell."""
    curves = {}
    for fo, st, rg, sd in cell_order(seeds, regimes, folders):
        path = compact_path(cells, fo, st, rg, sd)
        if not path.is_file():
            continue
        with np.load(path) as z:
            t, window = z["time_s"], int(z["window"])
            full = bool(z["full_window"]) if "full_window" in z.files else False
            for step, folder, subset, _ in STEPS:
                if folder != fo:
                    continue
                acc = z["correct_250"] / 250 if subset == 250 else z["correct_full"] / int(z["num_test"])
                curves[step, st, rg, sd] = (t, acc, window, full)
    return curves


def cut_cells(cells: Path, seeds, regimes, folders) -> dict:
    """(folder, strategy, regime, seed) -> virtual hours reached, for every compact cell that the wall
    budget cut before its horizon (stop reason ``wall_budget``)."""
    cut = {}
    for key in cell_order(seeds, regimes, folders):
        path = compact_path(cells, *key)
        if not path.is_file():
            continue
        with np.load(path) as z:
            summary = json.loads(str(z["summary"])) if "summary" in z.files else {}
        if (summary or {}).get("stop_reason") == "wall_budget":
            cut[key] = float(summary.get("end_time_s") or 0.0) / 3600
    return cut


def cells_to_run(cells: Path, folder: str, seeds, regimes, strategies) -> tuple[list, dict]:
    """The (strategy, regime, seed) cells of ``folder`` still to run, in order - those with no compact
    cell and those the wall budget cut - and the cut ones' virtual hours (:func:`cut_cells`)."""
    cut_before = cut_cells(cells, seeds, regimes, [folder])
    todo = [(st, rg, sd) for f, st, rg, sd in cell_order(seeds, regimes, [folder], strategies)
            if not compact_path(cells, f, st, rg, sd).is_file() or (f, st, rg, sd) in cut_before]
    return todo, cut_before


def step_target(step: str) -> float:
    folder = next(f for s, f, _, _ in STEPS if s == step)
    return float(base_scenario(folder).target_accuracy)


def attribution_table(curves: dict, seeds: list[int], regimes: list[str], cut: dict | None = None) -> tuple[str, dict]:
    """Markdown: per step, regime and baseline, the paired ratio at the step's target and along the curve;
    ``cut`` (:func:`cut_cells`) names the cells the wall budget cut, with the virtual hours each reached."""
    from felix_jax.experiment.curve import crossing_times, power_line, speedup_along_curve
    from felix_jax.experiment.stats import paired_ratio

    lines = ["| step | regime | baseline | seeds | FeLiX h at target | baseline h | paired x FeLiX at target [95% CI] "
             "(n) | per seed | power | along the curve: x at the lowest / highest level all seeds reach | "
             "range over levels | paper |",
             "|---|---|---|---:|---:|---:|---:|---|---|---|---|---:|"]
    data = {}
    targets = {}
    for step, _, _, label in STEPS:
        for rg in regimes:
            rl = REGIMES[rg]
            got = {k[1:]: v for k, v in curves.items() if k[0] == step and k[2] == rg}
            if not got:
                continue
            target = targets.setdefault(step, step_target(step))
            rows = [{"strategy": st, "availability": rg, "seed": sd} for (st, _, sd) in got]
            curve = speedup_along_curve(rows, STRATEGIES, [rg], "felix", curves=got)
            hit = {k: crossing_times(v[0], v[1], [target], *v[2:])[0] / 3600 for k, v in got.items()}
            for st in STRATEGIES[1:]:
                common = [sd for sd in seeds if (st, rg, sd) in got and ("felix", rg, sd) in got]
                if not common:
                    continue
                ratios = [hit[st, rg, sd] / hit["felix", rg, sd] for sd in common
                          if np.isfinite(hit[st, rg, sd]) and np.isfinite(hit["felix", rg, sd])]
                pr = paired_ratio(ratios)
                fh = [hit["felix", rg, sd] for sd in common if np.isfinite(hit["felix", rg, sd])]
                bh = [hit[st, rg, sd] for sd in common if np.isfinite(hit[st, rg, sd])]
                sel = [r for r in curve if r["strategy"] == st and r["n"] == r["seeds"] and r["ratio_geomean"]]
                along = "-" if not sel else (f"x{sel[0]['ratio_geomean']:.2f} at {sel[0]['target']:.2f} / "
                                             f"x{sel[-1]['ratio_geomean']:.2f} at {sel[-1]['target']:.2f}")
                rng = "-" if not sel else (f"x{min(r['ratio_geomean'] for r in sel):.2f}-"
                                           f"{max(r['ratio_geomean'] for r in sel):.2f} ({len(sel)} levels)")
                at = "-" if pr is None else (f"x{pr['geomean']:.2f}" + (
                    f" [{pr['ci95_low']:.2f}, {pr['ci95_high']:.2f}]" if pr["ci95_low"] else "") + f" ({pr['n']})")
                per_seed = ", ".join(f"{r:.2f}" for r in ratios) or "-"
                power = power_line(ratios) or "-"
                fmean = f"{np.mean(fh):.2f}" if fh else "-"
                bmean = f"{np.mean(bh):.2f}" if bh else "-"
                lines.append(f"| ({step}) {label} | {rl} | {NAMES[st]} | {len(common)} | "
                             f"{fmean} ({len(fh)}/{len(common)}) | "
                             f"{bmean} ({len(bh)}/{len(common)}) | {at} | {per_seed} | "
                             f"{power.replace('sd of log ratio', 'sd')} | {along} | {rng} | x{PAPER[st, rl]:.2f} |")
                data[f"{step}/{rl}/{st}"] = {"target": target, "seeds": common, "ratios": ratios, "paired": pr,
                                             "curve": [r for r in curve if r["strategy"] == st]}
    lines += ["", "Targets: " + ", ".join(f"({k}) {v}" for k, v in targets.items()) + " (the step's preset's). Hours: virtual hours to the target by the paper's rule (the mean of the last 20 "
              "test accuracies and the last one reach it), mean over the seeds that reached it (reached / seeds). "
              f"Every run went on to {HORIZON_H:g} virtual hours unless the wall budget cut it (listed below). Paired: the geometric mean of the per-seed ratios "
              "(baseline hours / FeLiX's) with the 95% Student t interval of their logs; the rule waits for 20 "
              "accuracies, as the authors' stop script does (reading.stop_window_fill=full). Power: the sample sd of "
              "the log ratios and about how many seeds a 95% interval within +-10% needs. Along the curve: the "
              "paired ratio at every level of 0.01 from the first above the untrained model's to the highest "
              "level every seed of FeLiX and the baseline reached (felix_jax.experiment.curve). Paper: its hours "
              "to 70% (Table / Fig. 11)."]
    if cut:
        lines += ["", f"Cut by the wall budget before {HORIZON_H:g} virtual hours ({len(cut)} cells; a curve ends where "
                  "its cell got to, and a level it did not reach by then is left out, not counted as missed): "
                  + "; ".join(f"{fo} {NAMES.get(st, st)} {REGIMES.get(rg, rg)} seed {sd} at {h:.2f} h"
                              for (fo, st, rg, sd), h in sorted(cut.items()))]
    return "\n".join(lines), data


def check(out: Path, aggregations: int) -> dict:
    """The measurement on real runs: one as-run FeLiX MobiPerf cell of ``aggregations`` aggregations three
    ways - ``num_test=250``; all 10,000 images by the plain evaluation; all 10,000 with ``test_hits`` -
    and whether the per-sample record gives the first two exactly, and the same times to every level."""
    import csv

    from felix_jax.experiment.curve import crossing_times
    from felix_jax.experiment.runner import run
    from felix_jax.experiment.test_hits import num_test_rows, read_test_hits, subset_accuracies

    base = base_scenario("longhorizon").with_overrides(
        {"strategy": "felix", "availability": "ref:mobiperf_3st_50", "max_aggregations": str(aggregations)})
    runs = {"250": {"num_test": "250", "test_hits": "false"}, "plain": {"test_hits": "false"}, "hits": {}}
    metrics = {}
    for name, sets in runs.items():
        d = out / f"check-{name}"
        shutil.rmtree(d, ignore_errors=True)
        t0 = time.perf_counter()
        run(base.with_overrides(sets), d, progress=False)
        print(f"check: {name} ran in {time.perf_counter() - t0:.0f} s", flush=True)
        with open(d / "metrics.csv") as f:
            metrics[name] = [(float(r["time_s"]), float(r["accuracy"])) for r in csv.DictReader(f)]
    hits = read_test_hits(out / "check-hits")
    full = subset_accuracies(hits)
    sub = subset_accuracies(hits, num_test_rows(base.num_train, 250, CIFAR_TRAIN, CIFAR_TEST))
    grid = np.round(np.arange(0.10, 0.40, 0.01), 2)
    times = np.array([t for t, _ in metrics["hits"]])

    def same_times(acc, other):
        a, b = crossing_times(times, acc, grid), crossing_times(times, other, grid)
        return bool(np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(a[~np.isnan(a)], b[~np.isnan(b)]))

    result = {
        "aggregations": aggregations, "checkpoints": len(full),
        "trajectories_equal": len({tuple(t for t, _ in m) for m in metrics.values()}) == 1,
        "full_equals_plain": bool(np.array_equal(full, [a for _, a in metrics["plain"]])),
        "subset_equals_num_test_250": bool(np.array_equal(sub, [a for _, a in metrics["250"]])),
        "times_to_levels_equal_plain": same_times(full, np.array([a for _, a in metrics["plain"]])),
        "times_to_levels_equal_250": same_times(sub, np.array([a for _, a in metrics["250"]])),
        "mean_gap_250_minus_full": float(np.mean(sub - full))}
    print(json.dumps(result, indent=1))
    return result


def main(argv=None) -> dict:
    from felix_jax.commands import command_parser, output_file, positive_float, seed_list

    ap = command_parser(__doc__)
    ap.add_argument("--workers", type=int, default=2, help="cells run at once, in processes")
    ap.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds")
    ap.add_argument("--regimes", default=",".join(REGIMES), help="comma-separated regimes")
    ap.add_argument("--strategies", default=",".join(STRATEGIES),
                    help="comma-separated strategies to run (the table reads every finished cell)")
    ap.add_argument("--folders", default=",".join(FOLDERS),
                    help="run folders to run, in order: longhorizon (steps a, b), paperdata (c)")
    ap.add_argument("--out", default="results/attribution", help="results folder")
    ap.add_argument("--budget-s", type=positive_float, default=float("inf"),
                    help="stop starting cells after this many seconds")
    ap.add_argument("--cell-budget-s", type=positive_float, default=None,
                    help="cut each cell after this many seconds of wall time (the table names the cut cells)")
    ap.add_argument("--table-only", action="store_true", help="keep the finished cells compact and tabulate them")
    ap.add_argument("--check", type=int, nargs="?", const=60, default=None, metavar="AGGREGATIONS",
                    help="the measurement's check on real runs, over this many aggregations (default 60), and stop")
    ap.add_argument("--json", type=output_file, default=str(HERE / "attribution.json"),
                    help="the table's JSON; its markdown beside it, .md")
    ap.add_argument("--cells", default=str(CELLS), help="where finished cells are kept compact")
    args = ap.parse_args(argv)
    cells = Path(args.cells)
    out = Path(args.out)
    seeds = seed_list(args.seeds)
    regimes = [r for r in args.regimes.split(",") if r.strip()]
    folders = [f for f in args.folders.split(",") if f.strip()]
    strategies = [s for s in args.strategies.split(",") if s.strip()]
    for name, given, known in (("regime", regimes, REGIMES), ("folder", folders, FOLDERS),
                               ("strategy", strategies, NAMES)):
        bad = [g for g in given if g not in known]
        if bad:
            raise SystemExit(f"attribution: unknown {name} {bad[0]!r}; known: {', '.join(known)}")
    if args.check is not None:
        result = check(out, args.check)
        (HERE / "check.json").write_text(json.dumps(result, indent=1) + "\n")
        return result
    from felix_jax.compile_cache import enable_compilation_cache
    from felix_jax.experiment.cells import cell_dir
    from felix_jax.experiment.matrix import finished_summary, run_matrix

    if not args.table_only:
        enable_compilation_cache()  # the cells' processes inherit it: a program compiled once serves them all
    t0 = time.time()
    for fo in folders:
        base = base_scenario(fo)
        todo, cut_before = cells_to_run(cells, fo, seeds, regimes, strategies)
        if not args.table_only and todo and time.time() - t0 < args.budget_s:
            print(f"== {fo}: {len(todo)} cells ({sum((fo, *c) in cut_before for c in todo)} cut before, "
                  "run again)", flush=True)
            for st, rg, sd in todo:  # a cut run counts as finished to the matrix: it starts again from nothing
                run_dir = cell_dir(out / fo, st, rg, sd)
                done = finished_summary(base.with_overrides({"strategy": st, "availability": rg, "seed": str(sd)}),
                                        run_dir)
                if (fo, st, rg, sd) in cut_before and (done or {}).get("stop_reason") == "wall_budget":
                    shutil.rmtree(run_dir)
            run_matrix(base, STRATEGIES, regimes, seeds, out / fo, cells=todo, workers=args.workers,
                       deadline=t0 + args.budget_s, plot=False, snapshot_minutes=5.0, progress=False,
                       cell_budget_s=args.cell_budget_s)
        for st, rg, sd in todo:  # whatever finished, now or before, kept compact
            run_dir = cell_dir(out / fo, st, rg, sd)
            sc = base.with_overrides({"strategy": st, "availability": rg, "seed": str(sd)})
            summary = finished_summary(sc, run_dir)
            if summary is None:
                continue
            kept = cut_before.get((fo, st, rg, sd))
            if kept is not None and summary.get("stop_reason") == "wall_budget" \
                    and float(summary.get("end_time_s") or 0.0) / 3600 <= kept:
                continue  # cut again, no further than the curve kept
            compact(cells, fo, st, rg, sd, run_dir)
    cut = cut_cells(cells, seeds, regimes, folders)
    table, data = attribution_table(load_curves(cells, seeds, regimes, folders), seeds, regimes, cut)
    print(table)
    Path(args.json).with_suffix(".md").write_text(table + "\n")
    Path(args.json).write_text(json.dumps({"horizon_h": HORIZON_H, "as_run": AS_RUN, "table": table, "cells": data,
                                           "cut_h": {"/".join(map(str, k)): h for k, h in cut.items()}},
                                          indent=1, default=str) + "\n")
    return {"table": table, "data": data}


if __name__ == "__main__":
    from felix_jax.commands import run_script

    run_script("attribution.py", main)
