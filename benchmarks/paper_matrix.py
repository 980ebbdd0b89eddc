"""The paper's CIFAR-10 comparison on its own recorded traces, with the ablations that
take FeLiX's gain apart; resumable, with the paper's ratios beside ours.

    python benchmarks/paper_matrix.py                       # cifar10-fidelity, 3 seeds, main + ablations
    python benchmarks/paper_matrix.py --seeds 0 --workers 8 # 8 cells at a time (a many-core GPU host)
    python benchmarks/paper_matrix.py --scenario cifar10-paper --regimes ref:syn_50 --budget-s 540

Main matrix: FeLiX, OORT*, OORT+Async*, OORT+Async and REFL* on the four recorded regimes
(``ref:syn_0`` = the paper's 100%, ``ref:syn_20`` = 90%, ``ref:syn_50`` = 50%,
``ref:mobiperf_3st_50`` = MobiPerf; tables and figures show them so, ``100% (ref:syn_0)``).
Ablations on 50% and MobiPerf: FeLiX without the eval selector, with FedBuff weights, with TierFuse
normalised by the sum of weights; OORT+Async(*) with FeLiX's step size (FedBuff weights rescaled to
TierFuse's total), OORT+Async with TierTrack; OORT* and OORT+Async* running FedScale's Oort.

Every cell is a folder under ``--out``/runs; a rerun skips cells that finished
(same scenario), so a killed matrix continues. Ctrl-C or SIGTERM (with any ``--workers``)
starts no other cell and stops each running one after its current event with its results and a
snapshot; the same command then continues them. Each running cell prints a progress line as it
goes; the matrix's ETA honours ``--budget-s`` and ``--cell-budget-s``. Cells that do not fit
``--budget-s`` are listed as not run; ``--skip-cell STRATEGY REGIME SEED`` leaves out a cell whose result is
held elsewhere. Writes ``--out``/table.md, ``--out``/figures (the accuracy curves,
bytes, distributions and the paper's diagnostic figures 13-15) and ``--json`` (rows, table).
Needs CIFAR-10 (``felix-jax data fetch cifar10``, once; the paper's traces ship with felix-jax), or Speech
Commands for the speech preset (``felix-jax data fetch speech_commands``). ``--scenario speech-longhorizon
--regimes ref:mobiperf_3st_50 --ablation-regimes ref:mobiperf_3st_50`` runs the speech comparison
(the paper's Fig. 10: MobiPerf only); the paper column then holds Fig. 10's ratios.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("paper_matrix.py")

import contextlib
import json
import signal
import sys
import time
from pathlib import Path

import jax
import numpy as np

from felix_jax.commands import (command_parser, comma_list, output_file, parse_sets, positive_float, positive_int,
                                run_script, seed_list)
from felix_jax.compile_cache import enable_compilation_cache
from felix_jax.experiment import get_preset
from felix_jax.experiment.cells import paper_regime, regime_label
from felix_jax.experiment.compare import (SUMMARY_COLUMNS, cell_dir, cell_overrides, finished_summary,
                                          plot_comparison, run_matrix)
from felix_jax.experiment.inputs import missing_data
from felix_jax.experiment.matrix import MatrixInterrupted, came_after_last_cell, resolve_regimes, stopped_at_once
from felix_jax.experiment.paper_figures import plot_paper_figures
from felix_jax.experiment.stops import StopOnSignals
from felix_jax.experiment.sweep import default_batch

MAIN_STRATEGIES = ["felix", "oort-oracle", "oort-async-oracle", "oort-async", "refl"]
ABLATIONS = ["felix-no-eval", "felix-no-tierfuse", "felix-normalized", "oort-async-step-matched",
             "oort-async-oracle-step-matched", "oort-async-tiertrack", "oort-oracle-fedscale",
             "oort-async-oracle-fedscale"]
# the paper's four recorded regimes, named as the paper names them by felix_jax/experiment/cells.py (PAPER_REGIMES)
REGIMES = ["ref:syn_0", "ref:syn_20", "ref:syn_50", "ref:mobiperf_3st_50"]
PAPER_RUNS = {*REGIMES, "mobiperf"}  # the traces the paper's hours are for (``mobiperf`` is ref:mobiperf_3st_50)
ABLATION_REGIMES = ["ref:syn_50", "ref:mobiperf_3st_50"]
# the paper's reference settings, by the paper's regime names: hours to 70% on CIFAR-10 in the paper (None: not
# reported; "stuck": never reached)
PAPER_HOURS = {
    "felix": {"100%": 6.6, "90%": 6.5, "50%": 6.2, "MobiPerf": 9.3},
    "oort-oracle": {"100%": 9.1, "90%": 8.4, "50%": 9.3, "MobiPerf": 15.0},
    "oort-async-oracle": {"100%": 8.9, "90%": 8.6, "50%": 9.4, "MobiPerf": 15.4},
    "oort-async": {"100%": 8.4, "90%": 15.5, "50%": "stuck", "MobiPerf": None},
}


# Google Speech under MobiPerf (the paper's Fig. 10 and its text): FeLiX ~11.1 h; "oracle-assisted OORT
# variants and REFL finish in ~15.9-16.3 h" - one range for the three, which the paper calls x1.45-1.48
# (the hours give x1.43-1.47); OORT+Async without the oracle is not reported
PAPER_HOURS_SPEECH = {
    "felix": {"MobiPerf": 11.1},
    "oort-oracle": {"MobiPerf": (15.9, 16.3)},
    "oort-async-oracle": {"MobiPerf": (15.9, 16.3)},
    "refl": {"MobiPerf": (15.9, 16.3)},
}
PAPER_HOURS_BY_DATASET = {"speech_commands": PAPER_HOURS_SPEECH, "speech_commands35": PAPER_HOURS_SPEECH,
                          "speech_commands_tfds": PAPER_HOURS_SPEECH}


def paper_hours(dataset: str = "cifar10") -> dict:
    """The paper's hours to target for the data set's modality (CIFAR-10's unless it is speech)."""
    return PAPER_HOURS_BY_DATASET.get(dataset, PAPER_HOURS)


def paper_key(regime: str) -> str | None:
    """The paper's name of a regime its hours are for (``100%``, ``90%``, ``50%``, ``MobiPerf``), else None."""
    return paper_regime(regime) if regime in PAPER_RUNS else None


def paper_ratio(strategy: str, label: str | None, dataset: str = "cifar10") -> str:
    """The paper's hours to target over FeLiX's on the regime the paper calls ``label`` (``paper_key``)."""
    table = paper_hours(dataset)
    hours = table.get(strategy.partition("@")[0], {}).get(label)
    ref = table["felix"].get(label)
    if ref is None:  # a regime the paper did not run
        return "-"
    if hours is None:
        return "-" if strategy != "felix" else "x1.00"
    if hours == "stuck":
        return "stuck"
    if isinstance(hours, tuple):  # a range the paper gives for several strategies at once
        return f"x{hours[0] / ref:.2f}-{hours[1] / ref:.2f}"
    return f"x{hours / ref:.2f}"


def last_mean_accuracy(run_dir: str, window: int = 20) -> float:
    """Mean test accuracy of a run's last ``window`` checkpoints (the paper's smoothing)."""
    data = np.genfromtxt(Path(run_dir) / "metrics.csv", delimiter=",", names=True)
    return float(np.mean(np.atleast_1d(data["accuracy"])[-window:]))


def fidelity_table(rows: list[dict], strategies: list[str], regimes: list[str], dataset: str = "cifar10") -> str:
    """Markdown: per regime and strategy, hours to target over the seeds that reached it (how many
    of those run; mean, sample std, 95% Student t interval), the ratio of means to FeLiX, FeLiX's
    ratios seed by seed and the seeds it won, the paper's ratio, and GB split train / eval / control;
    footnotes say how each is computed, and a warning line follows when a cell ran fewer than 3 seeds."""
    from felix_jax.experiment.compare import few_seeds_warning, paired_text, pool_cells

    def num(x):
        return "-" if x is None else f"{x:.2f}"

    cells = pool_cells(rows, strategies, regimes, reference="felix")
    pooled = {(p["strategy"], p["availability"]): p for p in cells}
    lines = ["| regime | strategy | reached | hours to target (mean) | std | 95% CI | x FeLiX | paired x FeLiX [95% CI] "
             "| per-seed x FeLiX | FeLiX wins | paper | GB train / eval, control MB | last-20 acc at end | aggregations | end (h) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for rg in regimes:
        label = regime_label(rg)
        ref = pooled.get(("felix", rg))
        for st in strategies:
            cell = [r for r in rows if r["strategy"] == st and r["availability"] == rg]
            if not cell:
                continue
            p = pooled[st, rg]
            text = num(p["hours_mean"]) if p["reached"] else "not reached"
            ci = "-" if p["hours_ci95_low"] is None else f"[{p['hours_ci95_low']:.2f}, {p['hours_ci95_high']:.2f}]"
            whole = (p["reached"] == p["seeds"] and ref is not None and ref["reached"] == ref["seeds"]
                     and ref["hours_mean"])
            ratio = f"x{p['hours_mean'] / ref['hours_mean']:.2f}" if whole else "-"
            vs = p["versus_reference"]
            per_seed = "-" if vs is None else ", ".join("-" if x is None else f"{x:.2f}" for _, x in vs["ratios"])
            s = [r["_summary"] for r in cell]
            gb = [np.mean([x[k] for x in s]) / 1e9 for k in ("bytes_train", "bytes_eval")]
            control_mb = np.mean([x["control_bytes"] for x in s]) / 1e6
            acc = np.mean([last_mean_accuracy(r["run_dir"]) for r in cell])
            aggs = np.mean([x["aggregations"] for x in s])
            end_h = np.mean([x["end_time_s"] for x in s]) / 3600
            cut = sum(r["_summary"].get("stop_reason") == "wall_budget" for r in cell)
            reached = f"{p['reached']}/{p['seeds']}" + (f" ({cut} cut)" if cut else "")
            paired = paired_text(p)
            lines.append(f"| {label} | {st} | {reached} | {text} | {num(p['hours_std'])} | {ci} | {ratio} | {paired} "
                         f"| {per_seed} "
                         f"| {p['ref_wins'] or '-'} | {paper_ratio(st, paper_key(rg), dataset)} "
                         f"| {gb[0]:.2f} / {gb[1]:.2f}, {control_mb:.3f} | {acc:.3f} | {aggs:.0f} | {end_h:.2f} |")
    lines += ["", "Hours over the seeds that reached the target (reached: of the seeds run); std: the sample std "
              "(ddof=1); 95% CI: the Student t interval on the log scale, exp(mean(log h) -+ t(0.975, n-1) * "
              "std(log h) / sqrt(n)), never below zero; both - for fewer than 2 seeds. x FeLiX: ratio of means (only "
              "where every seed of both reached the target); paired x FeLiX: the geometric mean of the per-seed "
              "ratios with the Student t interval of their logs, over the n seeds both reached; "
              "per-seed x FeLiX: hours / FeLiX's hours seed by seed (- where not both reached it); FeLiX wins: seeds "
              "where FeLiX reached the target first, or alone, of the seeds both ran."]
    warning = few_seeds_warning(cells)
    if warning:
        lines += ["", warning]
    return "\n".join(lines)


def _mean_of(summaries: list[dict], key: str, scale: float = 1.0) -> str:
    vals = [x.get(key) for x in summaries if x.get(key) is not None]
    return "-" if not vals else f"{np.mean(vals) * scale:.3g}"


def diagnostics_table(rows: list[dict], strategies: list[str], regimes: list[str]) -> str:
    """Markdown, the paper's diagnostics per regime and strategy (means over seeds): the mean utility
    and duration of the clients a strategy picked for training (Fig. 13), what the eval tier did
    (Fig. 14: evals per aggregation, on AVL_EVAL / AVL_TRAIN clients, the share of train picks on a
    utility an eval refreshed, utility age at a pick), the weights of fresh and late updates
    (Fig. 15), and the interval between aggregations."""
    lines = ["| regime | strategy | picked U | picked duration s | evals/agg | evals on EVAL / TRAIN | "
             "picks on eval U | U age P50 / P95 | late share | weight fresh / late | agg interval P50 / P95 s "
             "| detached |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for rg in regimes:
        label = regime_label(rg)
        for st in strategies:
            s = [r["_summary"] for r in rows if r["strategy"] == st and r["availability"] == rg]
            if not s:
                continue
            m = lambda k, scale=1.0: _mean_of(s, k, scale)  # noqa: E731
            lines.append(f"| {label} | {st} | {m('picked_utility_mean')} | {m('picked_duration_mean_s')} "
                         f"| {m('evals_per_aggregation')} | {m('evals_on_avl_eval')} / {m('evals_on_avl_train')} "
                         f"| {m('train_picks_eval_utility_share')} | {m('utility_age_p50')} / {m('utility_age_p95')} "
                         f"| {m('late_update_share')} | {m('agg_weight_fresh_mean')} / {m('agg_weight_late_mean')} "
                         f"| {m('agg_interval_p50_s')} / {m('agg_interval_p95_s')} | {m('detached_tasks')} |")
    return "\n".join(lines)


def finished_rows(out: Path, base, cells: list[tuple[str, str, int]]) -> list[dict]:
    """Rows of the asked-for ``cells`` (strategy spec, regime, seed) that finished under ``out/runs`` with
    exactly that cell's scenario, labelled by their spec as a run labels them. A folder of another
    scenario (another reading, a flipped switch, another horizon) is not read as this cell."""
    rows = []
    for spec, regime, seed in cells:
        sc = base.with_overrides({**cell_overrides(spec), "availability": regime, "seed": seed})
        run_dir = cell_dir(out, spec, regime, seed)
        summary = finished_summary(sc, run_dir)
        if summary is None:
            continue
        rows.append({**{k: summary.get(k) for k in SUMMARY_COLUMNS if k in summary},
                     "strategy": spec, "availability": regime, "seed": seed, "run_dir": str(run_dir),
                     "_summary": summary})
    return rows


def draw_figures(rows: list[dict], strategies: list[str], regimes: list[str], out: Path,
                 main: list[str] | None = None) -> list[Path]:
    """Under ``out``/figures: the accuracy curves, bytes and distributions of compare
    (accuracy.png, bytes.png, cdfs.png) and the paper's diagnostic figures (selection.png,
    eval_tier.png, late_weights.png: felix_jax/experiment/figures/paper.py). The accuracy curves are the
    ``main`` matrix's strategies (the ``--strategies`` given; default :data:`MAIN_STRATEGIES`), not the
    ablations'."""
    if not rows:
        return []
    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    have = {r["strategy"] for r in rows}
    strategies = [st for st in strategies if st in have]
    main = [st for st in strategies if st in (MAIN_STRATEGIES if main is None else main)]
    return plot_comparison(rows, main or strategies, regimes, fig_dir, paper_ratios=paper_ratios(strategies, regimes)) + \
        plot_paper_figures(rows, strategies, regimes, fig_dir, label=regime_label)


def along_the_curve(rows: list[dict], strategies: list[str], regimes: list[str], out: Path) -> str:
    """table.md's lines after the table: the power lines and the speed-up along the learning curve
    (``--out``/speedup_vs_target.csv; felix_jax/experiment/curve.py), against FeLiX."""
    from felix_jax.experiment.tables import curve_lines, power_lines

    if not rows or not any(r["strategy"] == "felix" for r in rows):
        return ""
    lines = power_lines(rows, strategies, regimes, "felix") + curve_lines(rows, strategies, regimes, "felix", out)
    return "" if not lines else "\n\n" + "\n".join(f"- {line.strip()}" for line in lines)


def paper_ratios(strategies: list[str], regimes: list[str], dataset: str = "cifar10") -> dict:
    """(strategy, regime) -> the paper's hours over FeLiX's, where it gives both (marked on
    speedup_vs_target.png)."""
    table = paper_hours(dataset)
    out = {}
    for st in strategies:
        for rg in regimes:
            label = paper_key(rg)
            hours, ref = table.get(st.partition("@")[0], {}).get(label), table["felix"].get(label)
            if st != "felix" and isinstance(hours, float) and isinstance(ref, float):
                out[st, rg] = hours / ref
    return out


def main(argv=None) -> dict:
    ap = command_parser(__doc__)
    ap.add_argument("--scenario", default="cifar10-fidelity", help="the preset every cell starts from")
    ap.add_argument("--strategies", default=",".join(MAIN_STRATEGIES),
                    help="comma-separated strategies of the main matrix (felix-jax run --list)")
    ap.add_argument("--regimes", default=",".join(REGIMES),
                    help="comma-separated availability regimes of the main matrix")
    ap.add_argument("--ablations", default=",".join(ABLATIONS), help="comma-separated; empty for none")
    ap.add_argument("--ablation-regimes", default=",".join(ABLATION_REGIMES),
                    help="comma-separated regimes the ablations run on")
    ap.add_argument("--extra-cell", nargs=2, action="append", default=[], metavar=("STRATEGY", "REGIME"),
                    help="one more cell per seed, e.g. oort-async-oracle@oracle_departure=free_slot "
                         "ref:mobiperf_3st_50 (a variant: scenario overrides for that cell only)")
    ap.add_argument("--skip-cell", nargs=3, action="append", default=[], metavar=("STRATEGY", "REGIME", "SEED"),
                    help="a cell not to run (its result is held elsewhere, e.g. a study's recorded row); repeatable")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds, each a whole matrix")
    ap.add_argument("--workers", type=int, default=1, help="cells run at a time (processes)")
    ap.add_argument("--batch", type=positive_int, default=None,
                    help="cells per sweep batch in one process, their device calls shared (default by "
                         "backend: 1 on CPU, 16 on an accelerator; scenarios that cannot share go apart)")
    ap.add_argument("--executor", choices=("local", "ray"), default="local",
                    help="where batches run: this process, or Ray tasks (one batch each; the ray extra)")
    ap.add_argument("--ray-address", default=None, help="the Ray cluster (default: RAY_ADDRESS or a local one)")
    ap.add_argument("--budget-s", type=positive_float, default=float("inf"), help="stop starting cells after this long")
    ap.add_argument("--cell-budget-s", type=positive_float, default=None,
                    help="stop each cell after this much wall time (stop reason wall_budget; the table says so)")
    ap.add_argument("--snapshot-minutes", type=positive_float, default=None,
                    help="each cell snapshots every M minutes of wall time: a matrix killed outright resumes its "
                         "running cells from there (not with --batch or --executor ray)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a scenario field or policy option for every cell (repeatable)")
    ap.add_argument("--out", default="results/paper-matrix", help="the comparison's folder (cells in OUT/runs)")
    ap.add_argument("--json", type=output_file, help="write the rows and the table here")
    ap.add_argument("--table-only", action="store_true",
                    help="run nothing: tabulate the cells these arguments ask for that finished under "
                         "--out/runs with exactly their scenario")
    args = ap.parse_args(argv)
    base = get_preset(args.scenario).with_overrides(parse_sets(args.set))
    split = lambda text: comma_list(text, "a list")  # noqa: E731
    strategies, regimes = comma_list(args.strategies, "--strategies"), comma_list(args.regimes, "--regimes")
    seeds = seed_list(args.seeds)
    ablations, ablation_regimes = split(args.ablations), split(args.ablation_regimes)
    # a trace file by its absolute path, as the cells hold it: their rows, tables and figures are keyed by it
    regimes, ablation_regimes = resolve_regimes(base, regimes), resolve_regimes(base, ablation_regimes)
    args.extra_cell = [(st, *resolve_regimes(base, [rg])) for st, rg in args.extra_cell]
    cells = []  # seed by seed, so a budget that runs out leaves whole seeds
    for sd in seeds:
        cells += [(st, rg, sd) for rg in regimes for st in strategies]
        cells += [(st, rg, sd) for rg in ablation_regimes for st in ablations]
        cells += [(st, rg, sd) for st, rg in args.extra_cell]
    skip = set()
    for st, rg, sd in args.skip_cell:
        if not sd.lstrip("-").isdigit():
            raise ValueError(f"--skip-cell {st} {rg} {sd}: the seed is not an integer")
        cell = (st, *resolve_regimes(base, [rg]), int(sd))
        if cell not in cells:  # a typo would otherwise skip nothing and rerun the cell it meant
            raise ValueError(f"--skip-cell {st} {rg} {sd}: not one of the cells these arguments ask for")
        skip.add(cell)
    cells = [c for c in cells if c not in skip]
    if not cells:
        raise ValueError("every cell these arguments ask for is given as --skip-cell: nothing to run")
    # every cell's scenario checked before any work: a typo in one line
    scenarios = [base.with_overrides({**cell_overrides(st), "availability": rg})
                 for st, rg in dict.fromkeys((st, rg) for st, rg, _ in cells)]
    if args.table_only and not Path(args.out).is_dir():
        raise FileNotFoundError(f"--out {args.out}: no such folder: --table-only tabulates the cells a matrix "
                                "finished there (run it without --table-only first)")
    if not args.table_only:  # a data set that is not here is said now (the file, the fetch), not by the first cell
        missing = next(filter(None, map(missing_data, scenarios)), None)
        if missing:
            raise ValueError(missing)
    enable_compilation_cache()
    out = Path(args.out)
    every = list(dict.fromkeys(strategies + ablations + [st for st, _ in args.extra_cell]))
    all_regimes = list(dict.fromkeys(regimes + ablation_regimes + [rg for _, rg in args.extra_cell]))
    if args.table_only:
        rows = finished_rows(out, base, cells)
        table = fidelity_table(rows, every, all_regimes, base.dataset) + along_the_curve(rows, every, all_regimes, out)
        diagnostics = diagnostics_table(rows, every, all_regimes)
        print(table + "\n\n" + diagnostics)
        (out / "table.md").write_text(table + "\n\n" + diagnostics + "\n")
        figures = draw_figures(rows, every, all_regimes, out, main=strategies)
        print("figures: " + ", ".join(str(f) for f in figures))
        return {"rows": rows, "table": table, "diagnostics": diagnostics}
    t0 = time.perf_counter()
    batch = default_batch() if args.batch is None else args.batch
    # one guard from the first cell to the last figure: a signal after the last cell lets the tables and
    # figures finish, then ends the script with its status (Ray's batches stop at once: guarded from the tables)
    signals = StopOnSignals(True)
    with signals if args.executor != "ray" else contextlib.nullcontext():
        try:
            rows = run_matrix(base, [], [], [], out, workers=args.workers, cells=cells,
                              deadline=time.time() + args.budget_s, plot=False, cell_budget_s=args.cell_budget_s,
                              batch=1 if args.workers > 1 and args.batch is None else batch, executor=args.executor,
                              ray_address=args.ray_address, snapshot_minutes=args.snapshot_minutes,
                              stop_on_signals=signals)
        except MatrixInterrupted as e:  # the running cells stopped whole, with snapshots: the same command continues
            print(f"paper_matrix.py: {e.explain(out)}", file=sys.stderr)
            raise SystemExit(128 + e.signum)
        except KeyboardInterrupt:  # a second signal: stopped at once
            print(f"paper_matrix.py: {stopped_at_once(out)}", file=sys.stderr)
            raise SystemExit(128 + signal.SIGINT)
        with signals:
            finished = {(r["strategy"], r["availability"], r["seed"]) for r in rows}
            skipped = [f"{st}/{rg}/seed{sd}" for st, rg, sd in cells if (st, rg, sd) not in finished]
            out.mkdir(parents=True, exist_ok=True)
            table = (fidelity_table(rows, every, all_regimes, base.dataset)
                     + along_the_curve(rows, every, all_regimes, out))
            diagnostics = diagnostics_table(rows, every, all_regimes)
            print(table + "\n\n" + diagnostics)
            if skipped:
                print(f"not run within the {args.budget_s:.0f} s budget: {', '.join(skipped)}")
            (out / "table.md").write_text(table + "\n\n" + diagnostics + "\n")
            figures = draw_figures(rows, every, all_regimes, out, main=strategies)
            print("figures: " + ", ".join(str(f) for f in figures))
            result = {"scenario": base.to_json(), "backend": jax.default_backend(), "device": str(jax.devices()[0]),
                      "rows": [{k: v for k, v in r.items() if k != "_summary"} for r in rows], "table": table,
                      "diagnostics": diagnostics, "skipped": skipped, "wall_s": time.perf_counter() - t0}
            if args.json:
                Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    if signals.signum is not None:
        print(f"paper_matrix.py: {came_after_last_cell(signals.signum, out, 'the matrix')}", file=sys.stderr)
        raise SystemExit(128 + signals.signum)
    return result


if __name__ == "__main__":
    run_script("paper_matrix.py", main)
