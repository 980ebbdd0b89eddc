"""Batched test evaluation: the same run at eval_batch 1 (a test-set evaluation, and a wait for
its result, after every aggregation) and at larger batches. Checks that every result is the
same, and reports the evaluation calls and the wall time each took.

    python benchmarks/eval_batching.py                                   # quickstart, FeLiX, 1 / 4 / 16
    python benchmarks/eval_batching.py --preset cifar10-fidelity --set availability=ref:syn_0 \\
        --set max_aggregations=60 --set target_accuracy=none --json results/eval_batching.json

Runs go one after another in this process, the eager one first and again last (its second
wall time is the one compared: compilation is out of both). Prints a table and writes --json.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("eval_batching.py")

import json
import time
from pathlib import Path

import jax

from felix_jax.commands import command_parser, parse_sets, run_script
from felix_jax.compile_cache import enable_compilation_cache
from felix_jax.experiment import get_preset
from felix_jax.experiment.runner import run

RESULT_KEYS = ("time_to_target_s", "aggregations", "final_accuracy", "best_accuracy", "bytes_total", "end_time_s",
               "stop_reason")


def measure(sc, batch: int) -> dict:
    t0 = time.perf_counter()
    res = run(sc.with_overrides({"eval_batch": str(batch)}), plot=False)
    wall = time.perf_counter() - t0
    return {"eval_batch": batch, "wall_s": wall, "host_seconds": res.summary["host_seconds"],
            "test_eval_calls": res.summary["test_eval_calls"], "events": res.summary["events"],
            "checkpoints": [(c.time_s, c.version, c.accuracy, c.loss) for c in res.record.checkpoints],
            **{k: res.summary[k] for k in RESULT_KEYS}}


def main(argv=None) -> dict:
    ap = command_parser(__doc__)
    ap.add_argument("--preset", default="quickstart", help="the preset the runs start from")
    ap.add_argument("--strategy", default="felix", help="the strategy measured")
    ap.add_argument("--batches", default="4,16", help="eval_batch values compared with 1")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
        help="a scenario field or policy option (repeatable)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    enable_compilation_cache()
    sc = get_preset(args.preset).with_overrides({"strategy": args.strategy,
                                                  **parse_sets(args.set)})
    batches = [int(b) for b in args.batches.split(",")]
    measure(sc, 1)  # compiles the eager path
    rows = [measure(sc, b) for b in batches] + [measure(sc, 1)]
    eager = rows[-1]
    for r in rows:
        r["same_results"] = (r["checkpoints"] == eager["checkpoints"]
                             and all(r[k] == eager[k] for k in RESULT_KEYS))
        r["wall_vs_eager"] = r["wall_s"] / eager["wall_s"]
    print(f"{args.preset} / {args.strategy} on {sc.availability}, {jax.default_backend()}: "
          f"{eager['aggregations']} aggregations, stop {eager['stop_reason']}")
    print(f"{'eval_batch':>10} {'eval calls':>10} {'events':>7} {'wall s':>8} {'x eager':>8} {'same results':>13}")
    for r in [rows[-1]] + rows[:-1]:
        print(f"{r['eval_batch']:>10} {r['test_eval_calls']:>10} {r['events']:>7} {r['wall_s']:>8.1f} "
              f"{r['wall_vs_eager']:>8.2f} {str(r['same_results']):>13}")
    result = {"preset": args.preset, "strategy": args.strategy, "scenario": sc.to_json(),
              "backend": jax.default_backend(), "device": str(jax.devices()[0]),
              "rows": [{k: v for k, v in r.items() if k != "checkpoints"} for r in rows]}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    if not all(r["same_results"] for r in rows):
        raise SystemExit("eval_batching: a batched run's results differ from the eager run's")
    return result


if __name__ == "__main__":
    run_script("eval_batching.py", main)
