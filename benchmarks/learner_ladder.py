"""Does FeLiX's lead grow with the learner? ``cifar10-longhorizon``'s fleet with three learners.

    python benchmarks/learner_ladder.py --targets          # step 1: each learner's target, from the references
    python benchmarks/learner_ladder.py [--workers 2]      # step 2: the federated cells, in priority order
    python benchmarks/learner_ladder.py --table-only       # tabulate what finished

The fleet is ``cifar10-longhorizon``'s, unchanged (300 clients, the paper's sizes, delays and
traces, the 600 s start offset, c = 30, K = 10, the 12,000-image subset, 250 test images); only the
learner changes, along a ladder of parameter counts:

* ``cifar_cnn_tiny`` (11,546 parameters, the preset's), ``cifar_cnn_narrow`` (44,842) and
  ``cifar_cnn`` (537,610, the paper's CNN).

**Targets, fixed before any federated cell.** Each learner's target follows the preset's own rule:
the mean over seeds 0-2 of a centralized reference's test accuracy after one epoch over the subset
(``benchmarks/centralized_reference.py --preset cifar10-fidelity --model M --steps 375
--eval-every 375 --seed S --json benchmarks/learner_ladder/reference_M_seedS.json``), rounded to two
decimals. ``cifar10-fidelity`` is the preset the rule was first applied on (the tiny learner's 0.320,
0.292, 0.248 -> 0.29): the same 12,000 training images (the subset's first draw), 500 test images
(the long-horizon runs test on a 250-image draw). ``--targets`` reads those files and writes ``benchmarks/learner_ladder/targets.json``; the
federated step refuses to start without it, and never recomputes it.

**Cells.** FeLiX, OORT+Async* and OORT* on MobiPerf (``ref:mobiperf_3st_50``) and 50%
(``ref:syn_50``), in two readings:

* ``as-run``: ``semantics=paper_code``, ``reading.small_clients=zero_step_reference`` (the paper's own
  57 zero-step clients) and a 6 h horizon (BENCHMARKS.md's as-run tables);
* ``described``: the paper's text, the preset's 3 h horizon.

Each (learner, reading) is a ``benchmarks/paper_matrix.py`` folder under ``--out`` (resumable:
finished cells are kept, a killed ladder continues). Cells run in priority order (``PHASES``): the paper's
CNN's FeLiX and OORT+Async* cells in the as-run reading, seed 0, first (the longest: 2 CPU cores
run them for about an hour each), then seed 0 of the as-run reading for the other learners, OORT*
with the paper's CNN, the described reading's seed 0, then seeds 1-2; ``--budget-s`` stops
starting cells after that long. ``gpu_fidelity.sh`` runs the whole ladder on a GPU.

The table (``--out``/ladder.md, ``--json``): per learner, reading and regime, each strategy's hours
to target (seeds reached / run), FeLiX's ratio over each baseline (the ratio of means, the paired
geometric mean with its 95% interval, per-seed ratios and the seeds FeLiX wins) with the paper's
ratio beside it, aggregations to target, FeLiX's staleness mean / p99 and its picks' median utility.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("learner_ladder.py")

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import paper_matrix  # noqa: E402

from felix_jax.commands import command_parser, output_file, phase_list, positive_float, run_script  # noqa: E402
from felix_jax.experiment.compare import paired_ratio  # noqa: E402

HERE = Path(__file__).resolve().parent / "learner_ladder"
SCENARIO = "cifar10-longhorizon"
REFERENCE_PRESET = "cifar10-fidelity"  # the rule's data: the same training subset, 500 test images
LEARNERS = {"cifar_cnn_tiny": "tiny (11,546)", "cifar_cnn_narrow": "narrow (44,842)", "cifar_cnn": "paper CNN (537,610)"}
STRATEGIES = ["felix", "oort-async-oracle", "oort-oracle"]
REGIMES = {"ref:mobiperf_3st_50": "MobiPerf", "ref:syn_50": "50%"}
READINGS = {
    "as-run": ["semantics=paper_code", "reading.small_clients=zero_step_reference", "max_virtual_hours=6"],
    "described": [],
}
SNAPSHOT_MINUTES = 10  # a cell of the paper's CNN runs for hours on 2 cores: a killed ladder resumes it from here
REFERENCE_SEEDS = (0, 1, 2)
REFERENCE_STEPS = 375  # one epoch of the 12,000-image subset at batch 32
# (learners, readings, strategies, seeds), run in this order: what the conclusion needs first
PHASES = [
    (["cifar_cnn"], ["as-run"], ["felix", "oort-async-oracle"], [0]),
    (["cifar_cnn_tiny", "cifar_cnn_narrow"], ["as-run"], STRATEGIES, [0]),
    (["cifar_cnn"], ["as-run"], ["oort-oracle"], [0]),
    (["cifar_cnn_tiny", "cifar_cnn_narrow"], ["described"], STRATEGIES, [0]),
    (["cifar_cnn_tiny", "cifar_cnn_narrow"], ["as-run"], STRATEGIES, [1, 2]),
    (["cifar_cnn_tiny", "cifar_cnn_narrow"], ["described"], STRATEGIES, [1, 2]),
    (["cifar_cnn"], ["described"], STRATEGIES, [0]),
    (["cifar_cnn"], ["as-run", "described"], STRATEGIES, [1, 2]),
]
# the paper's ratios (its hours to 70%: baseline / FeLiX), MobiPerf and 50%
PAPER = {"MobiPerf": {"oort-async-oracle": 15.4 / 9.3, "oort-oracle": 15.0 / 9.3},
         "50%": {"oort-async-oracle": 9.4 / 6.2, "oort-oracle": 9.3 / 6.2}}
NAMES = {"felix": "FeLiX", "oort-async-oracle": "OORT+Async*", "oort-oracle": "OORT*"}


def reference_target(accuracies: list[float]) -> float:
    """The preset's rule: the mean of the references' accuracies after one epoch, to two decimals."""
    if len(accuracies) != len(REFERENCE_SEEDS):
        raise ValueError(f"the rule takes one accuracy per seed {REFERENCE_SEEDS}, got {len(accuracies)}")
    return round(float(np.mean(accuracies)), 2)


def compute_targets(folder: Path = HERE) -> dict:
    """Read every learner's reference runs and apply the rule; refuses a missing or mismatched file."""
    out = {}
    for model in LEARNERS:
        accs = []
        for seed in REFERENCE_SEEDS:
            path = folder / f"reference_{model}_seed{seed}.json"
            if not path.exists():
                raise SystemExit(f"learner_ladder: {path} is missing: run benchmarks/centralized_reference.py "
                                 f"--preset {REFERENCE_PRESET} --model {model} --steps {REFERENCE_STEPS} --eval-every "
                                 f"{REFERENCE_STEPS} --seed {seed} --json {path}")
            ref = json.loads(path.read_text())
            if ref["model"] != model or ref["seed"] != seed or ref["preset"] != REFERENCE_PRESET:
                raise SystemExit(f"learner_ladder: {path} holds {ref['model']} seed {ref['seed']} on {ref['preset']}")
            row = [r for r in ref["rows"] if r["steps"] == REFERENCE_STEPS]
            if not row:
                raise SystemExit(f"learner_ladder: {path} has no accuracy after {REFERENCE_STEPS} steps")
            accs.append(float(row[0]["accuracy"]))
        out[model] = {"target_accuracy": reference_target(accs), "accuracy_after_one_epoch": accs,
                      "num_params": ref["num_params"]}
    return out


def load_targets(folder: Path = HERE) -> dict:
    path = folder / "targets.json"
    if not path.exists():
        raise SystemExit(f"learner_ladder: {path} is missing: run `python benchmarks/learner_ladder.py --targets` "
                         "(and commit it) before any federated cell")
    return json.loads(path.read_text())["targets"]


def matrix_argv(model: str, reading: str, strategies: list[str], seeds: list[int], target: float, out: Path,
                workers: int, budget_s: float) -> list[str]:
    """benchmarks/paper_matrix.py's arguments for one (learner, reading) folder."""
    argv = ["--scenario", SCENARIO, "--strategies", ",".join(strategies), "--regimes", ",".join(REGIMES),
            "--ablations", "", "--seeds", ",".join(map(str, seeds)), "--workers", str(workers),
            *(["--budget-s", str(budget_s)] if budget_s < float("inf") else []),  # inf: paper_matrix's default
            "--out", str(out / f"{model}-{reading}"),
            "--snapshot-minutes", str(SNAPSHOT_MINUTES),
            "--set", f"model={model}", "--set", f"target_accuracy={target}"]
    for kv in READINGS[reading]:
        argv += ["--set", kv]
    return argv


def _distribution_stats(run_dir: str) -> tuple[float | None, float | None]:
    """Staleness mean and p99 over every aggregated update of a run (its distributions.json)."""
    path = Path(run_dir) / "distributions.json"
    if not path.exists():
        return None, None
    st = np.asarray(json.loads(path.read_text()).get("staleness") or [], float)
    return (float(st.mean()), float(np.percentile(st, 99))) if st.size else (None, None)


def _hours(rows: list[dict], st: str, rg: str) -> dict:
    mine = [r for r in rows if r["strategy"] == st and r["availability"] == rg]
    per_seed = {r["seed"]: (None if r.get("time_to_target_h") in (None, "") else float(r["time_to_target_h"]))
                for r in mine}
    hit = [h for h in per_seed.values() if h is not None]
    return {"rows": mine, "per_seed": per_seed, "reached": len(hit), "run": len(mine),
            "mean": float(np.mean(hit)) if hit else None}


def _versus(felix: dict, other: dict) -> str:
    """Ratio of means; paired geometric mean [95% CI] (n); per-seed ratios (FeLiX wins)."""
    seeds = sorted(set(felix["per_seed"]) & set(other["per_seed"]))
    if not seeds:
        return "-"
    ratios, wins, shown = [], 0, []
    for s in seeds:
        a, b = felix["per_seed"][s], other["per_seed"][s]
        shown.append("-" if a is None or b is None else f"{b / a:.2f}")
        wins += a is not None and (b is None or b > a)
        if a is not None and b is not None:
            ratios.append(b / a)
    means = (f"x{other['mean'] / felix['mean']:.2f}" if felix["mean"] and other["mean"] is not None
             and felix["reached"] == felix["run"] and other["reached"] == other["run"] else "-")
    pr = paired_ratio(ratios)
    paired = "-" if pr is None else (f"x{pr['geomean']:.2f}" + ("" if pr["ci95_low"] is None else
                                     f" [{pr['ci95_low']:.2f}, {pr['ci95_high']:.2f}]") + f" (n={pr['n']})")
    return f"{means}; {paired}; {', '.join(shown)} ({wins}/{len(seeds)})"


def ladder_table(rows_by: dict, targets: dict) -> str:
    """Markdown: one line per (learner, reading, regime)."""
    lines = ["| learner | target | reading | regime | FeLiX h | OORT+Async* h | OORT* h | vs OORT+Async*: means; "
             "paired [95% CI]; per seed (FeLiX wins) | paper | vs OORT*: means; paired; per seed | paper "
             "| aggregations to target F / OA* / O* | FeLiX staleness mean / p99 | FeLiX picks' median U |",
             "|---|---:|---|---|---:|---:|---:|---|---:|---|---:|---:|---:|---:|"]
    for model, label in LEARNERS.items():
        for reading in READINGS:
            rows = rows_by.get((model, reading), [])
            for rg, rl in REGIMES.items():
                got = {st: _hours(rows, st, rg) for st in STRATEGIES}
                if not any(g["run"] for g in got.values()):
                    continue

                def cell(g):
                    if not g["run"]:
                        return "-"
                    return ("not reached" if g["mean"] is None else f"{g['mean']:.2f}") + f" ({g['reached']}/{g['run']})"

                def aggs(g):
                    hit = [r["_summary"]["aggregations"] for r in g["rows"] if r.get("time_to_target_h") not in (None, "")]
                    return f"{np.mean(hit):.0f}" if hit else "-"

                f = got["felix"]
                stats = [_distribution_stats(r["run_dir"]) for r in f["rows"]]
                sm = [s[0] for s in stats if s[0] is not None]
                sp = [s[1] for s in stats if s[1] is not None]
                pu = [r["_summary"].get("picked_utility_p50") for r in f["rows"]]
                pu = [x for x in pu if x is not None]
                stale = "-" if not sm else f"{np.mean(sm):.2f} / {np.mean(sp):.0f}"
                util = "-" if not pu else f"{np.mean(pu):.1f}"
                vs = {st: (_versus(f, got[st]) if f["run"] and got[st]["run"] else "-") for st in STRATEGIES[1:]}
                lines.append(f"| {label} | {targets[model]['target_accuracy']:.2f} | {reading} | {rl} | {cell(f)} "
                             f"| {cell(got['oort-async-oracle'])} | {cell(got['oort-oracle'])} "
                             f"| {vs['oort-async-oracle']} | x{PAPER[rl]['oort-async-oracle']:.2f} "
                             f"| {vs['oort-oracle']} | x{PAPER[rl]['oort-oracle']:.2f} "
                             f"| {' / '.join(aggs(got[st]) for st in STRATEGIES)} | {stale} | {util} |")
    lines += ["", "Hours to each learner's target (seeds that reached it / seeds run). means: the baseline's mean "
              "hours over FeLiX's (only where every seed of both reached the target); paired: the geometric mean of "
              "the per-seed ratios with a 95% Student t interval on their logs (seeds where both reached it, n); "
              "per seed: baseline hours / FeLiX's (- where not both reached it); FeLiX wins: seeds where it reached "
              "the target first, or alone. Staleness over every aggregated update of FeLiX's runs; median U of "
              "FeLiX's training picks (the selector's view), both means over seeds."]
    return "\n".join(lines)


def collect(out: Path, targets: dict, seeds: list[int]) -> dict:
    """Every finished cell of the ladder, by (learner, reading)."""
    import felix_jax.experiment as fx

    rows_by = {}
    for model in LEARNERS:
        for reading, sets in READINGS.items():
            base = fx.get_preset(SCENARIO).with_overrides(
                {"model": model, "target_accuracy": str(targets[model]["target_accuracy"]),
                 **dict(kv.split("=", 1) for kv in sets)})
            cells = [(st, rg, sd) for sd in seeds for rg in REGIMES for st in STRATEGIES]
            rows_by[model, reading] = paper_matrix.finished_rows(out / f"{model}-{reading}", base, cells)
    return rows_by


def main(argv=None) -> dict:
    ap = command_parser(__doc__)
    ap.add_argument("--targets", action="store_true", help="compute targets.json from the reference runs, and stop")
    ap.add_argument("--workers", type=int, default=2, help="cells run at a time (processes)")
    ap.add_argument("--out", default="results/learner-ladder",
                    help="the ladder's folder (one comparison folder per model and reading)")
    ap.add_argument("--budget-s", type=positive_float, default=float("inf"), help="stop starting cells after this long")
    ap.add_argument("--phases", default=None,
                    help=f"comma-separated phase numbers (0-{len(PHASES) - 1}) to run; default: all, in order")
    ap.add_argument("--table-only", action="store_true",
                    help="run nothing: tabulate the cells finished under --out")
    ap.add_argument("--json", type=output_file, default=None, help="write the table and the rows here")
    args = ap.parse_args(argv)
    chosen = phase_list(args.phases, len(PHASES))
    if args.table_only and not Path(args.out).is_dir():
        raise FileNotFoundError(f"--out {args.out}: no such folder: --table-only tabulates the cells the ladder "
                                "finished there (run it without --table-only first)")
    if args.targets:
        targets = compute_targets()
        (HERE / "targets.json").write_text(json.dumps(
            {"rule": f"mean over seeds {list(REFERENCE_SEEDS)} of the test accuracy after {REFERENCE_STEPS} steps "
                     "(one epoch), to two decimals", "scenario": SCENARIO,
             "reference_preset": REFERENCE_PRESET, "targets": targets}, indent=1) + "\n")
        for model, t in targets.items():
            print(f"{model}: {t['num_params']:,} params, one-epoch accuracies "
                  f"{', '.join(f'{a:.3f}' for a in t['accuracy_after_one_epoch'])} -> target {t['target_accuracy']:.2f}")
        return {"targets": targets}
    targets = load_targets()
    out = Path(args.out)
    t0 = time.time()
    if not args.table_only:
        for i in chosen:
            models, readings, strategies, seeds = PHASES[i]
            for model in models:
                for reading in readings:
                    left = args.budget_s - (time.time() - t0)
                    if left <= 0:
                        break
                    print(f"== phase {i}: {model} {reading} {','.join(strategies)} seeds {seeds}", flush=True)
                    paper_matrix.main(matrix_argv(model, reading, strategies, seeds,
                                                  targets[model]["target_accuracy"], out, args.workers, left))
    rows_by = collect(out, targets, [0, 1, 2])
    table = ladder_table(rows_by, targets)
    print(table)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ladder.md").write_text(table + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"targets": targets, "table": table,
             "rows": {f"{m}/{r}": [{k: v for k, v in row.items() if k != "_summary"} for row in rows]
                      for (m, r), rows in rows_by.items()}}, indent=1, default=str))
    return {"table": table, "rows": rows_by}


if __name__ == "__main__":
    run_script("learner_ladder.py", main)
