"""Strategies under client-data drift and label delay: FeLiX against OORT+Async(*), FedBuff and
REFL, and FeLiX without its eval selector / without TierFuse, on a streaming preset under
no drift, gradual drift (rotation) and a sudden shift (the preset's surge of new classes), each
with and without label delay.

    python benchmarks/drift_matrix.py                      # digits-drift, seeds 0,1 (~20 min on 2 cores)
    python benchmarks/drift_matrix.py --preset cifar10-drift --seeds 0 --workers 4

Per cell: the first time the target is reached (the run goes on past it), the test accuracy's
time-mean over the run (on the live class mix), the adaptation lag after the surge's start
(the time until accuracy is back at the target), the utility age at selection (rounds) and the
aggregations. Cells are run by ``run_matrix`` (resumable: finished cells are kept). Prints a
markdown table and writes ``--out``/table.md and ``--json``.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("drift_matrix.py")

import json
from pathlib import Path

import numpy as np

from felix_jax.commands import command_parser, parse_sets, run_script, seed_list
from felix_jax.compile_cache import enable_compilation_cache
from felix_jax.experiment import get_preset
from felix_jax.experiment.compare import run_matrix

STRATEGIES = ["felix", "oort-async", "oort-async-oracle", "fedbuff", "refl", "felix-no-eval", "felix-no-tierfuse"]
DRIFTS = {"none": {"stream.drift": "none"}, "rotation": {"stream.drift": "rotation", "stream.period_hours": None},
          "surge": {}}  # surge: the preset's own shift


def variants(base, delay_hours: float) -> dict[str, dict]:
    """(drift, delay) -> scenario overrides. Rotation turns one class per a third of the run."""
    out = {}
    for drift, over in DRIFTS.items():
        over = dict(over)
        if "stream.period_hours" in over:
            over["stream.period_hours"] = str(base.max_virtual_hours / 3)
        for delay in (0.0, delay_hours):
            out[f"{drift}, delay {delay * 60:g} min"] = {**over, "stream.label_delay_hours": str(delay)}
    return out


def _mean(values):
    values = [v for v in values if v is not None]
    return (float(np.mean(values)), len(values)) if values else (None, 0)


def table(rows: list[dict], strategies: list[str], labels: list[str]) -> str:
    lines = ["| drift, label delay | strategy | reached | first at target (min) | accuracy time-mean | "
             "lag after the surge (min) | utility age P50 | aggregations |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for label in labels:
        for st in strategies:
            cell = [r for r in rows if r["variant"] == label and r["strategy"] == st]
            if not cell:
                continue
            s = [r["_summary"] for r in cell]
            ttt, n = _mean([x["time_to_target_s"] for x in s])
            acc, _ = _mean([x.get("accuracy_time_mean") for x in s])
            lags = [x["adaptation_lags"][0]["lag_s"] for x in s if x.get("adaptation_lags")]
            lag, nl = _mean(lags)
            lag_text = "-" if not lags else ("never" if lag is None else f"{lag / 60:.1f}" +
                                            (f" ({nl}/{len(lags)})" if nl < len(lags) else ""))
            age, _ = _mean([x.get("utility_age_p50") for x in s])
            aggs, _ = _mean([x["aggregations"] for x in s])
            lines.append(f"| {label} | {st} | {n}/{len(cell)} | {'-' if ttt is None else f'{ttt / 60:.1f}'} | "
                         f"{acc:.3f} | {lag_text} | {'-' if age is None else f'{age:.0f}'} | {aggs:.0f} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = command_parser(__doc__)
    ap.add_argument("--preset", default="digits-drift", help="the preset the runs start from")
    ap.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated strategies")
    ap.add_argument("--seeds", default="0,1", help="comma-separated seeds")
    ap.add_argument("--delay-hours", type=float, default=None,
                    help="the label delay of the delayed variants (default: a sixth of the run)")
    ap.add_argument("--workers", type=int, default=1, help="cells run at a time (processes)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
        help="a scenario field or policy option (repeatable)")
    ap.add_argument("--out", default="results/drift-matrix", help="the results folder")
    ap.add_argument("--json", help="write the rows and the table here")
    args = ap.parse_args(argv)
    enable_compilation_cache()
    base = get_preset(args.preset).with_overrides(parse_sets(args.set))
    if base.resolve_stream().drift != "surge":
        raise SystemExit(f"drift_matrix: preset {args.preset} has no surge to compare against (stream.drift)")
    strategies = [s for s in args.strategies.split(",") if s]
    seeds = seed_list(args.seeds)
    delay = args.delay_hours if args.delay_hours is not None else base.max_virtual_hours / 6
    rows = []
    out = Path(args.out)
    for i, (label, over) in enumerate(variants(base, delay).items()):
        sc = base.with_overrides(over)
        got = run_matrix(sc, strategies, [sc.availability], seeds, out / f"variant{i}", progress=False,
                         workers=args.workers, plot=False, log=lambda _: None)
        rows += [{**r, "variant": label} for r in got]
        print(f"{label}: {len(got)} cells", flush=True)
    labels = list(variants(base, delay))
    text = table(rows, strategies, labels)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(text + "\n")
    result = {"preset": args.preset, "scenario": base.to_json(), "seeds": seeds, "table": text,
              "rows": [{k: v for k, v in r.items() if k != "_summary"} | {"summary": r["_summary"]} for r in rows]}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    return result


if __name__ == "__main__":
    run_script("drift_matrix.py", main)
