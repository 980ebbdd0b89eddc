"""The as-run calibration: the paper's printed facts against both readings (docs/readings.md).

    python benchmarks/as_run_calibration.py [--aggregations 400] [--workers 2] [--json out.json]
    python benchmarks/as_run_calibration.py --fit          # refit the one free parameter
    python benchmarks/as_run_calibration.py --cells oort-oracle/mobiperf,felix/mobiperf --readings paper_code \\
        --set reading.train_overhead_s=0.2 --set reading.train_overhead_spread_s=0.6   # D1's 2026 range per task

Short capped runs (cadence, staleness, picks and weights do not need the learner to converge)
of the ``cifar10-longhorizon`` preset, seed 0, each cell in the paper's reading (``semantics=paper``)
and in its code's reading (``semantics=paper_code``); then, for every calibration fact the
authors' printed outputs and the paper give (docs/readings.md, "Calibration facts"), the paper's
value, each reading's and their ratio to the paper's. One row is the fit, every other is a check:

* fitted: ``reading.server_per_aggregation_s`` (the inline test evaluation's blocking time) so that
  FeLiX on ``ref:syn_0`` from t = 0 takes ~5.0 s of virtual time per aggregation (the authors'
  47,855 updates / 10 per aggregation over the paper's 6.6 h). ``--fit`` finds it by the secant
  method on that one number and prints it; it is then written into
  ``felix_jax/fleet/reading.py`` (``PAPER_CODE_AGGREGATION_S``) by hand.
* checked: OORT+Async* on syn_0 (~4.6 s per aggregation), FeLiX's eval tasks per aggregation
  (~4.3), the staleness of FeLiX with FedBuff weights on syn_50 (mean 5.25, median 2, p90 5,
  p99 20), the weight medians (TierFuse 0.82, FedBuff 0.58) and Fig. 15's shares (TierFuse >= 0.8
  for over 90% of updates, FedBuff for under 10%), Fig. 13's medians of the last 200 picks (FeLiX
  11.2 s / utility 122; OORT 10.9 s / 118, compared with OORT+Async*), Fig. 12's P50 / P95
  aggregation interval of OORT+Async with TierTrack on syn_50 (4.9 / 21 s) and OORT* on MobiPerf
  (~21 s per round).

Cadence and interval figures skip the first ``--warmup`` aggregations (exploration). Needs
CIFAR-10 in the data home (``felix-jax data fetch cifar10`` once, or ``FELIX_JAX_DATA``); the paper's
traces ship with felix-jax.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("as_run_calibration.py")

import json
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from felix_jax.commands import command_parser, output_file, run_script  # noqa: E402

PRESET = "cifar10-longhorizon"
# name -> (strategy, availability, overrides); syn_0 from t = 0, as the fit asks; the others from the preset's
# start (one slot in, past the traces' all-available head)
CELLS = {
    "felix/syn_0": ("felix", "ref:syn_0", {"trace_start_s": "0"}),
    "oort-async-oracle/syn_0": ("oort-async-oracle", "ref:syn_0", {"trace_start_s": "0"}),
    "felix/syn_50": ("felix", "ref:syn_50", {}),
    "felix-no-tierfuse/syn_50": ("felix-no-tierfuse", "ref:syn_50", {}),
    "oort-async-tiertrack/syn_50": ("oort-async-tiertrack", "ref:syn_50", {}),
    "oort-oracle/mobiperf": ("oort-oracle", "ref:mobiperf_3st_50", {}),
    "felix/mobiperf": ("felix", "ref:mobiperf_3st_50", {}),  # FeLiX's cadence beside OORT*'s rounds (no fact)
}
SYNC_CELLS = {"oort-oracle/mobiperf"}  # rounds of ~20 s: fewer of them
TARGET_S_PER_AGG = 5.0  # the one number the free parameter is fitted on
FIT_CELL = "felix/syn_0"


def _scenario(cell: str, semantics: str, aggregations: int, extra: dict | None = None):
    from felix_jax.experiment import get_preset

    strategy, availability, overrides = CELLS[cell]
    cap = max(aggregations // 3, 60) if cell in SYNC_CELLS else aggregations
    return get_preset(PRESET).with_overrides({
        "strategy": strategy, "availability": availability, "semantics": semantics, "target_accuracy": "none",
        "max_aggregations": str(cap), "max_virtual_hours": "48", **overrides, **(extra or {})})


def measure(cell: str, semantics: str, aggregations: int, warmup: int, extra: dict | None = None) -> dict:
    """One capped run's calibration metrics (a process of its own: jax state stays apart)."""
    from felix_jax.experiment.runner import run

    t0 = time.perf_counter()
    result = run(_scenario(cell, semantics, aggregations, extra), out_dir=None, progress=False, plot=False)
    rec, acct = result.record, result.record.accounting
    times = np.asarray(rec.aggregation_times[1:], float)  # [0] is the start
    w = min(warmup, max(len(times) - 2, 0))
    steady = np.diff(times[w:]) if len(times) - w >= 2 else np.zeros(0)
    staleness = np.asarray(acct.staleness, float)
    weights = np.asarray(acct.agg_weights, float)
    picks_d = np.asarray(acct.picked_duration_s[-200:], float)
    picks_u = np.asarray(acct.picked_utility[-200:], float)
    q = lambda a, p: float(np.percentile(a, p)) if a.size else float("nan")  # noqa: E731
    return {
        "cell": cell, "semantics": semantics, "aggregations": len(times), "end_h": rec.end_time_s / 3600,
        "s_per_aggregation": float(steady.mean()) if steady.size else float("nan"),
        "interval_p50_s": q(steady, 50), "interval_p95_s": q(steady, 95),
        "evals_per_aggregation": acct.dispatched_eval / max(len(times), 1),
        "staleness_mean": float(staleness.mean()) if staleness.size else float("nan"),
        "staleness_p50": q(staleness, 50), "staleness_p90": q(staleness, 90), "staleness_p99": q(staleness, 99),
        "weight_p50": q(weights, 50), "share_weight_ge_0.8": float((weights >= 0.8).mean()) if weights.size else None,
        "picked_duration_p50_s": q(picks_d, 50), "picked_utility_p50": q(picks_u, 50),
        "wall_s": time.perf_counter() - t0,
    }


# (fact, the paper's value, cell, metric); a "share" fact's paper value is a bound (Fig. 15: over / under it)
FACTS = [
    ("FeLiX s per aggregation, syn_0 [fitted]", 5.0, "felix/syn_0", "s_per_aggregation"),
    ("OORT+Async* s per aggregation, syn_0", 4.6, "oort-async-oracle/syn_0", "s_per_aggregation"),
    ("FeLiX eval tasks per aggregation, syn_0", 4.3, "felix/syn_0", "evals_per_aggregation"),
    ("FedBuff-weights staleness mean, syn_50", 5.25, "felix-no-tierfuse/syn_50", "staleness_mean"),
    ("FedBuff-weights staleness median, syn_50", 2.0, "felix-no-tierfuse/syn_50", "staleness_p50"),
    ("FedBuff-weights staleness p90, syn_50", 5.0, "felix-no-tierfuse/syn_50", "staleness_p90"),
    ("FedBuff-weights staleness p99, syn_50", 20.0, "felix-no-tierfuse/syn_50", "staleness_p99"),
    ("TierFuse weight median, syn_50", 0.82, "felix/syn_50", "weight_p50"),
    ("FedBuff weight median, syn_50", 0.58, "felix-no-tierfuse/syn_50", "weight_p50"),
    ("TierFuse share of weights >= 0.8 (Fig. 15: over 0.9)", 0.9, "felix/syn_50", "share_weight_ge_0.8"),
    ("FedBuff share of weights >= 0.8 (Fig. 15: under 0.1)", 0.1, "felix-no-tierfuse/syn_50", "share_weight_ge_0.8"),
    ("FeLiX picks: median duration s, syn_0 (Fig. 13)", 11.2, "felix/syn_0", "picked_duration_p50_s"),
    ("FeLiX picks: median utility, syn_0 (Fig. 13)", 122.0, "felix/syn_0", "picked_utility_p50"),
    ("OORT picks: median duration s (Fig. 13; ours OORT+Async*)", 10.9, "oort-async-oracle/syn_0",
     "picked_duration_p50_s"),
    ("OORT picks: median utility (Fig. 13; ours OORT+Async*)", 118.1, "oort-async-oracle/syn_0",
     "picked_utility_p50"),
    ("OORT+Async+TierTrack P50 interval s, syn_50 (Fig. 12)", 4.9, "oort-async-tiertrack/syn_50", "interval_p50_s"),
    ("OORT+Async+TierTrack P95 interval s, syn_50 (Fig. 12)", 21.0, "oort-async-tiertrack/syn_50", "interval_p95_s"),
    ("OORT* s per round, MobiPerf", 21.0, "oort-oracle/mobiperf", "s_per_aggregation"),
]


def table(results: dict) -> str:
    def fmt(v):
        return "-" if v is None or (isinstance(v, float) and not np.isfinite(v)) else f"{v:.3g}"

    def ratio(v, paper, metric):
        if metric.startswith("share") or v is None or not np.isfinite(v) or paper == 0:
            return "-"  # a bound, not a value: no ratio
        return f"x{v / paper:.2f}"

    lines = ["| calibration fact | paper | described reading | ratio | as-run reading | ratio |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, paper, cell, metric in FACTS:
        a = results.get(("paper", cell), {}).get(metric)
        b = results.get(("paper_code", cell), {}).get(metric)
        lines.append(f"| {name} | {fmt(paper)} | {fmt(a)} | {ratio(a, paper, metric)} | {fmt(b)} | "
                     f"{ratio(b, paper, metric)} |")
    return "\n".join(lines)


def fit(aggregations: int, warmup: int, tol: float = 0.05) -> tuple[float, list]:
    """The secant method on ``server_per_aggregation_s`` for FeLiX syn_0 at TARGET_S_PER_AGG."""
    trials = []

    def cadence(x: float) -> float:
        m = measure(FIT_CELL, "paper_code", aggregations, warmup, {"reading.server_per_aggregation_s": repr(x)})
        trials.append((x, m["s_per_aggregation"]))
        print(f"  server_per_aggregation_s = {x:.3f}: {m['s_per_aggregation']:.3f} s per aggregation", flush=True)
        return m["s_per_aggregation"] - TARGET_S_PER_AGG

    x0, x1 = 0.5, 2.0
    f0, f1 = cadence(x0), cadence(x1)
    for _ in range(6):
        if abs(f1) <= tol or f1 == f0:
            break
        x0, x1, f0 = x1, max(0.0, x1 - f1 * (x1 - x0) / (f1 - f0)), f1
        f1 = cadence(x1)
    return x1, trials


def main(argv=None) -> dict:
    ap = command_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--aggregations", type=int, default=400, help="cap per async cell (sync: a third, >= 60)")
    ap.add_argument("--warmup", type=int, default=50, help="aggregations left out of cadence and intervals")
    ap.add_argument("--workers", type=int, default=2, help="cells run at a time (processes)")
    ap.add_argument("--cells", default=",".join(CELLS), help="comma-separated subset of the cells")
    ap.add_argument("--fit", action="store_true", help="refit server_per_aggregation_s and print it")
    ap.add_argument("--json", type=output_file, help="write the metrics, the table (and the fit) here")
    ap.add_argument("--readings", default="paper,paper_code", help="comma-separated subset of paper, paper_code")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a scenario field or reading.KEY switch on top of the as-run cells (repeatable), e.g. "
                         "reading.small_clients=zero_step_reference; never on the fit")
    args = ap.parse_args(argv)
    readings = [r for r in args.readings.split(",") if r]
    if not readings or any(r not in ("paper", "paper_code") for r in readings):
        raise SystemExit(f"as_run_calibration: --readings takes paper and/or paper_code, got {args.readings!r}")
    extra = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"as_run_calibration: --set takes KEY=VALUE, got {item!r}")
        extra[key] = value
    if extra and args.fit:
        raise SystemExit("as_run_calibration: --set changes the as-run cells, and the fit is made on the bundle alone")
    out: dict = {"preset": PRESET, "aggregations": args.aggregations, "warmup": args.warmup,
                 "machine": platform.processor() or platform.machine()}
    if args.fit:
        value, trials = fit(args.aggregations, args.warmup)
        print(f"fitted server_per_aggregation_s = {value:.3f} (FeLiX syn_0 at {TARGET_S_PER_AGG} s per aggregation)")
        out["fit"] = {"server_per_aggregation_s": value, "trials": trials, "target_s_per_aggregation": TARGET_S_PER_AGG}
    else:
        cells = [c for c in args.cells.split(",") if c]
        jobs = [(c, s) for c in cells for s in readings]
        t0 = time.perf_counter()
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            futures = {job: pool.submit(measure, job[0], job[1], args.aggregations, args.warmup,
                                        extra if job[1] == "paper_code" else None) for job in jobs}
            results = {(s, c): f.result() for (c, s), f in futures.items()}
        text = table(results)
        print(text)
        out.update({"metrics": [results[k] for k in sorted(results)], "table": text, "as_run_set": extra,
                    "wall_s": time.perf_counter() - t0})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    return out


if __name__ == "__main__":
    run_script("as_run_calibration.py", main)
