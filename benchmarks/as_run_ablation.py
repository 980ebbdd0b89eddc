"""Which of the code's five major differences moves which ratio: one group of switches at a time,
flipped from the as-run reading back to the paper's text (docs/readings.md).

    python benchmarks/as_run_ablation.py --seeds 0 [--workers 2] [--out results/longhorizon-paper-code]
    python benchmarks/as_run_ablation.py --seeds 0,1,2 --table-only

Runs, through benchmarks/paper_matrix.py (same folders, resumable, finished cells skipped), the
``cifar10-longhorizon`` preset in ``semantics=paper_code`` with a 6 h horizon (the as-run clock runs
at about half the speed of the text's: 5.0 s per FeLiX aggregation at 100% against ~2.5), for
FeLiX, OORT+Async* and OORT* on MobiPerf and 50%: the as-run cells, and for each group below the
same cells with that group flipped back to the text. Prints hours to target (mean over the seeds
that reached it, reached/seeds) and FeLiX's speed-up over each baseline, per group; writes
``--out``/ablation.md and ``--json``.

Groups (the audit's five differences that matter most):

* ``selection`` (A4-A8, A5): sorted explored T_pref, Oort's two-way pacer, clip 0.9, cut-off 0.05,
  durations = modelled work;
* ``utility`` (A1-A3): U on the batch's scale, un-augmented, one step for small clients, clean evals;
* ``server`` (C1-C3): a free server;
* ``oracle`` (F2, C7): oracle clients follow the trace, the oracle keeps a departed client's slot;
* ``lifecycle`` (E1): tasks pause while the client is away and resume on its return.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("as_run_ablation.py")

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import paper_matrix  # noqa: E402
from felix_jax.commands import command_parser, output_file, positive_float, run_script  # noqa: E402

SCENARIO = "cifar10-longhorizon"
BASE_SETS = ["semantics=paper_code", "max_virtual_hours=6"]
STRATEGIES = ["felix", "oort-async-oracle", "oort-oracle"]
REGIMES = {"ref:mobiperf_3st_50": "MobiPerf", "ref:syn_50": "50%"}
FLIPS = {
    "selection": "selector.t_pref_over=explored;selector.pacer_rule=oort;selector.clip_bound=0.9;"
                 "selector.cut_off=0.05;reading.duration_source=work",
    "utility": "reading.utility_scale=batch;reading.utility_augmented=false;reading.small_clients=one_step;"
               "reading.eval_utility=fresh",
    "server": "reading.server_per_message_s=0;reading.server_per_aggregation_s=0",
    "oracle": "reading.oracle_clients=follow_trace;reading.oracle_departure=keep_slot",
    "lifecycle": "reading.interruption=resume",
}
# a group that cannot change a strategy's run is not run for it (FeLiX has no oracle)
SKIP = {("oracle", "felix")}


def cells(regimes=tuple(REGIMES)) -> list[tuple[str, str]]:
    out = []
    for regime in regimes:
        for flip, overrides in FLIPS.items():
            out += [(f"{st}@{overrides}", regime) for st in STRATEGIES if (flip, st) not in SKIP]
    return out


def _hours(rows: list[dict], spec: str, regime: str) -> tuple[float | None, int, int, dict]:
    """Mean hours over the seeds that reached the target, reached, run, and each seed's hours (None:
    not reached)."""
    mine = [r for r in rows if r["strategy"] == spec and r["availability"] == regime]
    per_seed = {r.get("seed"): (None if r.get("time_to_target_h") in (None, "") else r["time_to_target_h"])
                for r in mine}
    hit = [h for h in per_seed.values() if h is not None]
    return (sum(hit) / len(hit) if hit else None), len(hit), len(mine), per_seed


def _per_seed(felix: dict, other: dict) -> str:
    """The baseline's hours over FeLiX's, seed by seed ("-": one of them did not reach the target), and the
    seeds FeLiX wins (a seed only FeLiX reached counts as its win) of those both ran."""
    seeds = sorted(set(felix) & set(other), key=str)
    if not seeds:
        return "-"
    shown, wins = [], 0
    for seed in seeds:
        a, b = felix[seed], other[seed]
        shown.append("-" if a is None or b is None else f"{b / a:.2f}")
        wins += (a is not None and (b is None or b > a))
    return f"{', '.join(shown)} ({wins}/{len(seeds)})"


def ablation_table(rows: list[dict]) -> str:
    lines = ["| regime | flipped back to the text | FeLiX h | OORT+Async* h | OORT* h | x vs OORT+Async* | x vs OORT* "
             "| per seed vs OORT+Async* (FeLiX wins) | per seed vs OORT* (FeLiX wins) |",
             "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for regime, label in REGIMES.items():
        for flip in ["none (as run)"] + list(FLIPS):
            got = {}
            for st in STRATEGIES:
                spec = st if flip == "none (as run)" or (flip, st) in SKIP else f"{st}@{FLIPS[flip]}"
                got[st] = _hours(rows, spec, regime)

            def cell(h):
                return "-" if h[2] == 0 else ("not reached" if h[0] is None else f"{h[0]:.2f}") + f" ({h[1]}/{h[2]})"

            def ratio(st):
                a, b = got["felix"][0], got[st][0]
                return "-" if a is None or b is None else f"x{b / a:.2f}"

            lines.append(f"| {label} | {flip} | {cell(got['felix'])} | {cell(got['oort-async-oracle'])} | "
                         f"{cell(got['oort-oracle'])} | {ratio('oort-async-oracle')} | {ratio('oort-oracle')} | "
                         f"{_per_seed(got['felix'][3], got['oort-async-oracle'][3])} | "
                         f"{_per_seed(got['felix'][3], got['oort-oracle'][3])} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = command_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0", help="comma-separated seeds")
    ap.add_argument("--workers", type=int, default=1, help="cells run at a time (processes)")
    ap.add_argument("--out", default="results/longhorizon-paper-code", help="the results folder")
    ap.add_argument("--budget-s", type=positive_float, default=float("inf"),
                    help="stop starting cells after this many seconds")
    ap.add_argument("--regimes", default=",".join(REGIMES), help="comma-separated subset of " + ", ".join(REGIMES))
    ap.add_argument("--table-only", action="store_true", help="run nothing: tabulate the cells finished under --out")
    ap.add_argument("--json", type=output_file, help="write the results as JSON here")
    args = ap.parse_args(argv)
    regimes = [r for r in args.regimes.split(",") if r]
    unknown = [r for r in regimes if r not in REGIMES]
    if unknown:
        raise SystemExit(f"as_run_ablation: unknown regime(s) {', '.join(unknown)}; known: {', '.join(REGIMES)}")
    argv_matrix = ["--scenario", SCENARIO, "--strategies", ",".join(STRATEGIES), "--regimes", ",".join(regimes),
                   "--ablations", "", "--seeds", args.seeds, "--out", args.out, "--workers", str(args.workers),
                   *(["--budget-s", str(args.budget_s)] if args.budget_s < float("inf") else [])]
    for s in BASE_SETS:
        argv_matrix += ["--set", s]
    for spec, regime in cells(regimes):
        argv_matrix += ["--extra-cell", spec, regime]
    if args.table_only:
        argv_matrix.append("--table-only")
    result = paper_matrix.main(argv_matrix)
    table = ablation_table(result["rows"])
    print(table)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "ablation.md").write_text(table + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"table": table, "rows": result["rows"]}, indent=2, default=str))
    return {"table": table, "rows": result["rows"]}


if __name__ == "__main__":
    run_script("as_run_ablation.py", main)
