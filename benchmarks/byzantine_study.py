"""Robust aggregation under churn and attack: FeLiX's selectors with six aggregation rules, honest and with
adversarial clients, and FedProx's partial work against resume.

    python benchmarks/byzantine_study.py                          # every phase, in priority order
    python benchmarks/byzantine_study.py --phases 0,1 --workers 2 # the first phases only
    python benchmarks/byzantine_study.py --table-only             # tabulate what finished

The fleet is ``cifar10-longhorizon``'s (300 clients, the paper's sizes, delays and recorded traces, the
600 s start offset, c = 30, K = 10, the 12,000-image subset, 250 test images, target 0.29), on MobiPerf
(``ref:mobiperf_3st_50``) and 50% (``ref:syn_50``), with a horizon of ``--hours`` virtual hours (default 1.5,
for cost: the preset's is 3; a cell that does not reach the target by then reports its final accuracy).

**Rules** (every one on FeLiX's selectors and TierTrack; each rule's step size is FeLiX's, 0.3):
TierFuse (``felix``), FedBuff's weights (``felix-no-tierfuse``), the coordinate-wise trimmed mean and
median, Multi-Krum and Bulyan. Their parameters follow the threat model, fixed before any cell ran: 30%
of the fleet adversarial is 3 of a buffer of K = 10 if attackers arrive at the fleet's rate, so the trimmed
mean drops 30% at each end and Multi-Krum assumes f = 3 (m = K - f = 7); Bulyan needs K >= 4f + 3, so f = 1
is the most it takes at K = 10. The same configured rules run honest and attacked.

**Settings**: ``honest``; ``sign_flip-30`` (30% of the clients, drawn once from the seed, send -delta);
``sign_flip-10``; ``scale-30`` (30% send 5 x delta: inside the update guard's 10 x median, so the guard
does not catch it). **FedProx** (honest): the proximal term (prox_mu 0.01) with ``interruption=partial`` (a
client that leaves sends the steps it finished) against ``resume``, on two fleets: ``fedprox`` is the
``fedprox-async`` strategy (random clients with no availability knowledge, FedBuff weights), ``fedprox-felix``
FeLiX's selectors, TierTrack and TierFuse (``felix@prox_mu=0.01;interruption=partial`` against
``felix@prox_mu=0.01``).

Each setting is one ``benchmarks/paper_matrix.py`` folder under ``--out`` (resumable: finished cells are
kept; Ctrl-C stops the running cells with snapshots and the same command continues). Phases run in
priority order (``PHASES``): honest and sign_flip-30 for seeds 0 and 1, FedProx, their seed 2, then the scaled
and 10% attacks seed by seed. ``--phases`` picks some. The table (``--out``/study.md, ``--json``): per regime and rule, hours to target
(seeds reached / run) and final accuracy honest and attacked, the paired ratio attacked / honest by seed
(geometric mean, 95% t interval), the paired ratio to TierFuse in the same setting, and the adversaries'
share of the training tasks dispatched and of the aggregation weight (``summary.json``'s ``adversarial_tasks``
over ``dispatched_train``, and ``adversarial_weight_share``).

``--rows-from FILE`` reads the rows an earlier study wrote with ``--json`` (on another machine, say: the cell
folders are not kept with the project) as finished cells: they are not run again, a cell finished under ``--out``
replaces its recorded row, the others are tabulated as recorded (the runs are deterministic on CPU: a rerun cell gives the same
curve). The file must hold the same scenario and settings, and a horizon no longer than ``--hours``: from a
shorter one only the rows of runs that ended before it (target, aggregation limit, diverged) are taken, each
with ``ran_hours``; the cells stopped at that horizon, or stalled, run again. The table counts whole seeds
only (every rule of a setting on both regimes) and names the seeds it leaves out. Figures are drawn from the cells finished
under ``--out`` only (a recorded row has no events to draw).
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("byzantine_study.py")

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import paper_matrix  # noqa: E402

from felix_jax.commands import command_parser, output_file, phase_list, positive_float, run_script  # noqa: E402
from felix_jax.experiment.compare import paired_ratio  # noqa: E402

SCENARIO = "cifar10-longhorizon"
REGIMES = ["ref:mobiperf_3st_50", "ref:syn_50"]
RULES = ["felix", "felix-no-tierfuse", "felix@aggregator.name=trimmed-mean;aggregator.trim=0.3",
         "felix@aggregator.name=median", "felix@aggregator.name=multi-krum;aggregator.f=3",
         "felix@aggregator.name=bulyan;aggregator.f=1"]
RULE_NAMES = {"felix": "TierFuse", "felix-no-tierfuse": "FedBuff weights", RULES[2]: "trimmed mean (30%)",
              RULES[3]: "median", RULES[4]: "Multi-Krum (f = 3)", RULES[5]: "Bulyan (f = 1)"}
FEDPROX = ["fedprox-async", "fedprox-async@interruption=resume"]
# the proximal term and partial work on FeLiX's selectors and TierTrack (fedprox-async draws its clients with no
# availability knowledge, as FedBuff: on these traces its slots fill with tasks waiting on absent clients)
FEDPROX_FELIX = ["felix@prox_mu=0.01;interruption=partial", "felix@prox_mu=0.01"]
SETTINGS = {"honest": [], "sign_flip-30": ["adversary.fraction=0.3", "adversary.kind=sign_flip"],
            "sign_flip-10": ["adversary.fraction=0.1", "adversary.kind=sign_flip"],
            "scale-30": ["adversary.fraction=0.3", "adversary.kind=scale:5"], "fedprox": [], "fedprox-felix": []}
STRATEGIES = {"fedprox": FEDPROX, "fedprox-felix": FEDPROX_FELIX}  # a setting's cells; RULES otherwise
# (setting, seeds), in the order they run: a seed's honest and attacked cells together, so that a study cut
# short holds whole pairs
PHASES = [("honest", "0"), ("sign_flip-30", "0"), ("honest", "1"), ("sign_flip-30", "1"), ("fedprox", "0,1,2"),
          ("fedprox-felix", "0,1"), ("honest", "2"), ("sign_flip-30", "2"), ("fedprox-felix", "2"),
          ("scale-30", "0"), ("sign_flip-10", "0"), ("scale-30", "1"), ("sign_flip-10", "1"), ("scale-30", "2"),
          ("sign_flip-10", "2")]
SEEDS = [0, 1, 2]
# the summary.json counts the tables read, kept with each row in --json (so that --rows-from tabulates them)
SUMMARY_KEEP = ("aggregations", "adversarial_tasks", "dispatched_train", "adversarial_weight_share",
                "adversarial_updates", "adversarial_updates_accepted", "partial_updates", "interrupted_tasks")


def matrix_argv(setting: str, seeds: str, out: Path, workers: int, hours: float, budget_s: float,
                table_only: bool = False, skip: list[tuple[str, str, int]] = ()) -> list[str]:
    strategies = STRATEGIES.get(setting, RULES)
    argv = ["--scenario", SCENARIO, "--strategies", ",".join(strategies), "--regimes", ",".join(REGIMES),
            "--ablations", "", "--seeds", seeds, "--workers", str(workers), "--out", str(out / setting),
            "--set", f"max_virtual_hours={hours:g}"]
    for item in SETTINGS[setting]:
        argv += ["--set", item]
    for st, rg, sd in skip:
        argv += ["--skip-cell", st, rg, str(sd)]
    if table_only:
        return argv + ["--table-only"]
    return argv + (["--budget-s", f"{budget_s:.0f}"] if budget_s < float("inf") else [])


def phase_cells(setting: str, seeds: str) -> list[tuple[str, str, int]]:
    """A phase's cells (strategy, regime as given, seed)."""
    return [(st, rg, int(sd)) for sd in seeds.split(",") for rg in REGIMES for st in STRATEGIES.get(setting, RULES)]


def phase_recorded(setting: str, seeds: str, recorded: dict[str, list[dict]]) -> list[tuple[str, str, int]]:
    """The phase's cells that ``--rows-from`` holds: they are not run again (the runs are deterministic)."""
    held = {(r["strategy"], r["availability"], r["seed"]) for r in recorded.get(setting, [])}
    return [c for c in phase_cells(setting, seeds) if c in held]


def collect(out: Path, hours: float) -> dict[str, list[dict]]:
    """The finished rows of every setting, with each cell's summary.json (its adversarial counts)."""
    rows = {}
    for setting in SETTINGS:
        if not (out / setting).is_dir():
            continue
        base = paper_matrix.get_preset(SCENARIO).with_overrides(
            paper_matrix.parse_sets([f"max_virtual_hours={hours:g}", *SETTINGS[setting]]))
        regimes = paper_matrix.resolve_regimes(base, REGIMES)
        strategies = STRATEGIES.get(setting, RULES)
        cells = [(st, rg, sd) for sd in SEEDS for rg in regimes for st in strategies]
        rows[setting] = paper_matrix.finished_rows(out / setting, base, cells)
    return rows


def recorded_rows(path: Path, hours: float) -> dict[str, list[dict]]:
    """The rows a study wrote with ``--json`` to ``path``, each with its kept summary counts as ``_summary``.
    Refused in one line when the file is another study's: another scenario, horizon or setting, or a row
    that is none of the study's cells."""
    if not path.is_file():
        raise FileNotFoundError(f"--rows-from {path}: no such file (a study's --json output)")
    try:
        doc = json.loads(path.read_text())
        recorded = doc["rows"]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"--rows-from {path}: not a study's --json output ({err})") from None
    if doc.get("scenario") != SCENARIO:
        raise ValueError(f"--rows-from {path}: its scenario is {doc.get('scenario')!r}, this study's {SCENARIO!r}")
    ran = doc.get("hours")
    if not isinstance(ran, (int, float)) or ran > hours:
        raise ValueError(f"--rows-from {path}: its cells ran {ran} virtual hours, --hours is {hours:g}: "
                         "a row is read for the horizon it ran or a longer one")
    out = {}
    for setting, rows in recorded.items():
        if setting not in SETTINGS:
            raise ValueError(f"--rows-from {path}: setting {setting!r} is not one of this study's ({', '.join(SETTINGS)})")
        if list(doc.get("settings", {}).get(setting, [])) != SETTINGS[setting]:
            raise ValueError(f"--rows-from {path}: setting {setting!r} ran with {doc.get('settings', {}).get(setting)}, "
                             f"this study's is {SETTINGS[setting]}")
        strategies = STRATEGIES.get(setting, RULES)
        for r in rows:
            if r.get("strategy") not in strategies or r.get("availability") not in REGIMES or r.get("seed") not in SEEDS:
                raise ValueError(f"--rows-from {path}: {setting} row {r.get('strategy')!r} on {r.get('availability')!r}, "
                                 f"seed {r.get('seed')!r} is not one of this study's cells")
        if ran < hours:  # a longer horizon: only the runs that ended before the shorter one, for their own reason
            rows = [r | {"ran_hours": r.get("ran_hours", ran)} for r in rows if ended_before_horizon(r)]
        out[setting] = [{**r, "recorded_in": str(path), "_summary": {k: r.get(k) for k in SUMMARY_KEEP}} for r in rows]
    return out


def ended_before_horizon(row: dict) -> bool:
    """A run that reached the target, reached its aggregation limit or diverged before its horizon is the same
    run under a longer one (the horizon only stops it; checked cell by cell in BENCHMARKS.md). A run stopped at
    its horizon is not, nor a stalled one (no task came back within the horizon: a longer one may bring its
    client back)."""
    reason = str(row.get("stop_reason") or "")
    return reason in ("target", "max_aggregations") or reason.startswith("diverged")


def merged(finished: dict[str, list[dict]], recorded: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Each setting's rows: the cells finished under --out, then the recorded rows of the cells not among them."""
    out = {}
    for setting in SETTINGS:
        here = finished.get(setting, [])
        have = {(r["strategy"], r["availability"], r["seed"]) for r in here}
        rows = here + [r for r in recorded.get(setting, []) if (r["strategy"], r["availability"], r["seed"]) not in have]
        if rows:
            out[setting] = rows
    return out


def whole_seeds(rows_by: dict[str, list[dict]]) -> tuple[dict[str, list[dict]], list[str]]:
    """Each setting's rows of the seeds that hold every cell of it (every rule on both regimes), and a note
    for each seed left out: a table over part of a seed would count only the cells that finished (from a
    shorter horizon, only those that ended before it: the ones that reached the target)."""
    whole, partial = {}, []
    for setting, rows in rows_by.items():
        cells = len(STRATEGIES.get(setting, RULES)) * len(REGIMES)
        by_seed = {}
        for r in rows:
            by_seed.setdefault(r["seed"], []).append(r)
        keep = [r for sd, rs in sorted(by_seed.items()) if len(rs) == cells for r in rs]
        partial += [f"{setting} seed {sd}, {len(rs)} of {cells} cells" for sd, rs in sorted(by_seed.items())
                    if len(rs) != cells]
        if keep:
            whole[setting] = keep
    return whole, partial


def _seeds_note(have: int, of: int) -> str:
    """A mean over fewer seeds than the cell ran says so (a recorded row may lack a count)."""
    return "" if have == of else f" ({have} of {of} seeds)"


def _hours(rows, st, rg):
    return {r["seed"]: r.get("time_to_target_h") for r in rows if r["strategy"] == st and r["availability"] == rg}


def _paired(a: dict, b: dict) -> str:
    """a / b paired by seed over the seeds both reached: geometric mean [95% t interval] (n)."""
    ratios = [a[s] / b[s] for s in sorted(set(a) & set(b)) if a[s] is not None and b[s] is not None]
    p = paired_ratio(ratios)
    if p is None:
        return "-"
    if p["n"] < 2:
        return f"x{p['geomean']:.2f} (n=1)"
    return f"x{p['geomean']:.2f} [{p['ci95_low']:.2f}, {p['ci95_high']:.2f}] (n={p['n']})"


def _reached(h: dict) -> str:
    got = [v for v in h.values() if v is not None]
    if not h:
        return "-"
    mean = f" {np.mean(got):.2f} h" if got else ""
    return f"{len(got)}/{len(h)}{mean}"


def _diverged(rows, st, rg) -> str:
    """How many of the cell's seeds stopped as diverged (the update guard rejected every update of 5 buffers in
    a row), as a suffix; empty when none did."""
    n = sum(1 for r in rows if r["strategy"] == st and r["availability"] == rg
            and str(r.get("stop_reason") or "").startswith("diverged"))
    return f", {n} diverged" if n else ""


def _mean(rows, st, rg, key: str) -> str:
    """The mean over the cell's seeds of a summary.json count (aggregations, partial updates, ...)."""
    mine = [r["_summary"].get(key) for r in rows if r["strategy"] == st and r["availability"] == rg]
    vals = [v for v in mine if v is not None]
    return f"{np.mean(vals):,.0f}{_seeds_note(len(vals), len(mine))}" if vals else "-"


def _final(rows, st, rg) -> str:
    acc = [r["final_accuracy"] for r in rows if r["strategy"] == st and r["availability"] == rg
           and r.get("final_accuracy") is not None]
    return f"{np.mean(acc):.3f}" if acc else "-"


def _share(rows, st, rg) -> str:
    """The adversaries' share of the training tasks dispatched, then of the aggregation weight, means over
    the seeds (the first is the fleet's and the trace's doing, the second the rule's)."""
    mine = [r["_summary"] for r in rows if r["strategy"] == st and r["availability"] == rg]
    tasks = [s["adversarial_tasks"] / s["dispatched_train"] for s in mine
             if s.get("adversarial_tasks") is not None and s.get("dispatched_train")]
    weight = [s["adversarial_weight_share"] for s in mine if s.get("adversarial_weight_share") is not None]
    if not tasks and not weight:
        return "-"
    return " / ".join(f"{100 * np.mean(v):.0f}%{_seeds_note(len(v), len(mine))}" if v else "-" for v in (tasks, weight))


def study_table(rows_by: dict[str, list[dict]], hours: float) -> str:
    honest = rows_by.get("honest", [])
    lines = []
    regimes = sorted({r["availability"] for rows in rows_by.values() for r in rows}, key=str)
    for setting in [s for s in SETTINGS if s not in ("honest", *STRATEGIES) and s in rows_by]:
        attacked = rows_by[setting]
        lines += [f"### {setting} against honest (horizon {hours:g} h; hours to target: seeds reached / run, "
                  "mean over those that reached)", "",
                  "| regime | rule | honest: reached, hours | final acc | attacked: reached, hours | final acc "
                  "| attacked / honest, paired | attacked / TierFuse attacked, paired | adversarial share: tasks / weight |",
                  "|---|---|---|---:|---|---:|---|---|---:|"]
        for rg in regimes:
            for st in RULES:
                h, a = _hours(honest, st, rg), _hours(attacked, st, rg)
                if not h and not a:
                    continue
                lines.append(f"| {paper_matrix.regime_label(rg)} | {RULE_NAMES[st]} | {_reached(h)} | "
                             f"{_final(honest, st, rg)} | {_reached(a)}{_diverged(attacked, st, rg)} | {_final(attacked, st, rg)} | "
                             f"{_paired(a, h)} | "
                             f"{'-' if st == 'felix' else _paired(a, _hours(attacked, 'felix', rg))} | "
                             f"{_share(attacked, st, rg)} |")
        lines.append("")
    if "honest" in rows_by and not any(s in rows_by for s in SETTINGS if s not in ("honest", *STRATEGIES)):
        lines += ["### honest", "", "| regime | rule | reached, hours | final acc |", "|---|---|---|---:|"]
        for rg in regimes:
            for st in RULES:
                h = _hours(honest, st, rg)
                if h:
                    lines.append(f"| {paper_matrix.regime_label(rg)} | {RULE_NAMES[st]} | {_reached(h)} | "
                                 f"{_final(honest, st, rg)} |")
        lines.append("")
    pairs = [(s, title) for s, title in (
        ("fedprox", "fedprox-async (random clients, no availability knowledge, FedBuff weights)"),
        ("fedprox-felix", "FeLiX's selectors, TierTrack and TierFuse")) if s in rows_by]
    if pairs:
        lines += [f"### FedProx (prox_mu 0.01): partial work against resume (honest, horizon {hours:g} h)", "",
                  "| fleet | regime | partial: reached, hours | final acc | aggregations | partial updates | "
                  "resume: reached, hours | final acc | aggregations | interrupted tasks | partial / resume, paired |",
                  "|---|---|---|---:|---:|---:|---|---:|---:|---:|---|"]
        for setting, title in pairs:
            fp, (partial, resume) = rows_by[setting], STRATEGIES[setting]
            for rg in regimes:
                p, r = _hours(fp, partial, rg), _hours(fp, resume, rg)
                if p or r:
                    lines.append(f"| {title} | {paper_matrix.regime_label(rg)} | {_reached(p)} | "
                                 f"{_final(fp, partial, rg)} | {_mean(fp, partial, rg, 'aggregations')} | "
                                 f"{_mean(fp, partial, rg, 'partial_updates')} | {_reached(r)} | "
                                 f"{_final(fp, resume, rg)} | {_mean(fp, resume, rg, 'aggregations')} | "
                                 f"{_mean(fp, resume, rg, 'interrupted_tasks')} | {_paired(p, r)} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = command_parser(__doc__)
    ap.add_argument("--workers", type=int, default=2, help="cells run at a time (processes)")
    ap.add_argument("--out", default="results/byzantine-study", help="the study's folder (one matrix per setting)")
    ap.add_argument("--hours", type=positive_float, default=1.5, help="virtual hours each cell may run")
    ap.add_argument("--budget-s", type=positive_float, default=float("inf"), help="stop starting cells after this long")
    ap.add_argument("--phases", default=None,
                    help=f"comma-separated phase numbers (0-{len(PHASES) - 1}) to run; default: all, in order")
    ap.add_argument("--table-only", action="store_true", help="run nothing: tabulate the cells finished under --out")
    ap.add_argument("--json", type=output_file, default=None, help="write the table and the rows here")
    ap.add_argument("--rows-from", default=None, metavar="FILE",
                    help="an earlier study's --json: its rows count as finished cells where --out has none")
    args = ap.parse_args(argv)
    chosen = phase_list(args.phases, len(PHASES))
    out = Path(args.out)
    recorded = recorded_rows(Path(args.rows_from), args.hours) if args.rows_from else {}
    if args.table_only and not out.is_dir() and not recorded:
        raise FileNotFoundError(f"--out {args.out}: no such folder: --table-only tabulates the cells the study "
                                "finished there (run it without --table-only first, or give --rows-from)")
    t0 = time.time()
    if not args.table_only:
        for i in chosen:
            setting, seeds = PHASES[i]
            left = args.budget_s - (time.time() - t0)
            if left <= 0:
                break
            print(f"== phase {i}: {setting}, seeds {seeds}", flush=True)
            skip = phase_recorded(setting, seeds, recorded)
            if len(skip) == len(phase_cells(setting, seeds)):
                print(f"every cell of it is recorded in {args.rows_from}: nothing to run", flush=True)
                continue
            if skip:
                print(f"{len(skip)} of its cells recorded in {args.rows_from} (not run again)", flush=True)
            paper_matrix.main(matrix_argv(setting, seeds, out, args.workers, args.hours, left, skip=skip))
    finished = collect(out, args.hours) if out.is_dir() else {}
    rows_by = merged(finished, recorded)
    whole, partial = whole_seeds(rows_by)
    table = study_table(whole, args.hours)
    if partial:
        table += ("\nNot in the table (a seed counts only with every cell of its setting): "
                  + "; ".join(partial) + ". The same command runs the rest.\n")
    print(table)
    n_recorded = sum(1 for rows in rows_by.values() for r in rows if "recorded_in" in r)
    if n_recorded:
        print(f"{n_recorded} rows read from {args.rows_from} (cells not finished under {args.out}); figures are "
              f"drawn from the {sum(map(len, finished.values()))} cells finished there")
    for setting, rows in finished.items():  # each setting's curves, every rule drawn (paper_matrix's own draws its main)
        strategies = STRATEGIES.get(setting, RULES)
        regimes = list(dict.fromkeys(r["availability"] for r in rows))
        figures = paper_matrix.draw_figures(rows, strategies, regimes, out / setting, main=strategies)
        if figures:
            print(f"{setting}: " + ", ".join(str(f) for f in figures))
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.md").write_text(table + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"scenario": SCENARIO, "hours": args.hours, "rules": RULES, "settings": SETTINGS, "table": table,
             "rows": {s: [{k: v for k, v in r.items() if k not in ("_summary", "recorded_in")} |
                          {k: r["_summary"].get(k) for k in SUMMARY_KEEP}
                          for r in rows] for s, rows in rows_by.items()}}, indent=1, default=str))
    return {"table": table, "rows": rows_by}


if __name__ == "__main__":
    run_script("byzantine_study.py", main)
