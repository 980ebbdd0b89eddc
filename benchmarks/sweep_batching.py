"""Sweep batches against separate processes: N experiments of one shape in one process with
their device calls shared (``felix_jax.experiment.sweep``), and the same N experiments as N
processes.

    python benchmarks/sweep_batching.py                                  # quickstart shape, N = 1, 4, 16
    python benchmarks/sweep_batching.py --preset tiny --ns 1,4 --set max_aggregations=20 --json results/sweep.json

Experiments cycle through --strategies and take seeds 0..N-1. Every measurement runs in a
fresh process (``--child``), so compilations are counted from zero. Per N it prints and
writes: training tasks per device call, device calls (train + eval) per experiment-
aggregation, host milliseconds per event per experiment (the batch's event loops, from its
first shared flush to its last experiment's end, less its shared device calls and test
evaluations, over all experiments' events), XLA compilations of the process,
the batch's wall time, and the wall time of N separate processes (``--separate-workers`` at
a time; 0 skips them). The results must be the same either way: the batch's metrics.csv
files are compared with the separate runs'.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("sweep_batching.py")

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from felix_jax.commands import command_parser, parse_sets, run_script  # noqa: E402

HERE = Path(__file__).resolve()


def scenarios(preset: str, n: int, strategies: list[str], sets: dict):
    from felix_jax.experiment import get_preset

    base = get_preset(preset).with_overrides(sets)
    return [base.with_overrides({"strategy": strategies[i % len(strategies)], "seed": i}) for i in range(n)]


def child(args) -> dict:
    """One measurement in this (fresh) process: a batch of N, or one separate run."""
    from felix_jax.compile_cache import enable_compilation_cache
    from felix_jax.experiment.results import compile_count
    from felix_jax.experiment.runner import run
    from felix_jax.experiment.sweep import SweepJob, run_sweep

    if args.cache:
        enable_compilation_cache(args.cache)
    sets = parse_sets(args.set)
    out = Path(args.out)
    t0 = time.perf_counter()
    if args.child == "batch":
        scs = scenarios(args.preset, args.n, args.strategies.split(","), sets)
        results = run_sweep([SweepJob(sc, out / f"e{i}") for i, sc in enumerate(scs)], batch=args.n, plot=False,
                            log=lambda _line: None)
        wall = time.perf_counter() - t0
        last = max(results, key=lambda r: r.summary["batch"].get("loop_seconds", 0.0))
        batch = last.summary["batch"]  # the last to finish saw every shared call
        calls = sum(batch.get(k, {}).get("calls", 0) for k in ("train", "eval"))
        device_s = sum(batch.get(k, {}).get("seconds", 0.0) for k in ("train", "eval")) + batch["test_seconds"]
        events = sum(r.summary["events"] for r in results)
        aggregations = sum(r.summary["aggregations"] for r in results)
        return {"n": args.n, "wall_s": wall, "compilations": compile_count(),
                "train_tasks_per_call": batch["train"]["mean_tasks_per_call"],
                "experiments_per_call": batch["train"]["mean_experiments_per_call"],
                "calls_per_experiment_aggregation": calls / max(aggregations, 1),
                "host_ms_per_event": 1000 * (batch["loop_seconds"] - device_s) / max(events, 1), "events": events,
                "aggregations": aggregations}
    sc = scenarios(args.preset, args.index + 1, args.strategies.split(","), sets)[args.index]
    result = run(sc, out / f"e{args.index}", plot=False)
    return {"wall_s": time.perf_counter() - t0, "compilations": compile_count(),
            "events": result.summary["events"]}


def _spawn(argv: list[str]) -> dict:
    proc = subprocess.run([sys.executable, str(HERE), *argv], capture_output=True, text=True,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if proc.returncode:
        raise RuntimeError(f"sweep_batching child {argv} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    ap = command_parser(__doc__)
    ap.add_argument("--preset", default="quickstart", help="the preset the runs start from")
    ap.add_argument("--ns", default="1,4,16", help="batch sizes to measure")
    ap.add_argument("--strategies", default="felix,oort-async,fedbuff", help="comma-separated strategies")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
        help="a scenario field or policy option (repeatable)")
    ap.add_argument("--separate-workers", type=int, default=2,
                    help="separate processes run at a time (0: do not run them)")
    ap.add_argument("--json", help="write the results as JSON here")
    ap.add_argument("--child", choices=("batch", "one"), help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return {}
    import jax

    common = ["--preset", args.preset, "--strategies", args.strategies] + [f"--set={kv}" for kv in args.set]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.ns.split(",")):
            batch_dir, solo_dir = Path(tmp) / f"batch{n}", Path(tmp) / f"solo{n}"
            row = _spawn(common + ["--child", "batch", "--n", str(n), "--out", str(batch_dir)])
            if args.separate_workers > 0:
                t0 = time.perf_counter()
                with ThreadPoolExecutor(args.separate_workers) as pool:
                    solos = list(pool.map(lambda i: _spawn(common + ["--child", "one", "--index", str(i),
                                                                     "--out", str(solo_dir)]), range(n)))
                row["separate_wall_s"] = time.perf_counter() - t0
                row["separate_compilations"] = sum(s["compilations"] for s in solos)
                row["same_results"] = all((batch_dir / f"e{i}" / "metrics.csv").read_bytes()
                                          == (solo_dir / f"e{i}" / "metrics.csv").read_bytes() for i in range(n))
            rows.append(row)
            print(f"N={n}: done in {row['wall_s']:.0f} s", file=sys.stderr, flush=True)
    solo = rows[0]
    print(f"{args.preset} ({', '.join(args.set) or 'preset budget'}), {jax.default_backend()}, "
          f"{os.cpu_count()} cores; strategies {args.strategies}, seeds 0..N-1")
    print(f"{'N':>3} {'tasks/call':>10} {'exps/call':>9} {'calls/exp-agg':>13} {'host ms/ev/exp':>14} "
          f"{'x solo':>6} {'XLA comp.':>9} {'batch s':>8} {'separate s':>10} {'same':>5}")
    for r in rows:
        print(f"{r['n']:>3} {r['train_tasks_per_call']:>10.1f} {r['experiments_per_call']:>9.1f} "
              f"{r['calls_per_experiment_aggregation']:>13.2f} {r['host_ms_per_event']:>14.2f} "
              f"{r['host_ms_per_event'] / solo['host_ms_per_event']:>6.2f} {r['compilations']:>9} "
              f"{r['wall_s']:>8.1f} {r.get('separate_wall_s', float('nan')):>10.1f} "
              f"{str(r.get('same_results', '-')):>5}")
    result = {"preset": args.preset, "sets": args.set, "strategies": args.strategies, "backend": jax.default_backend(),
              "device": str(jax.devices()[0]), "cores": os.cpu_count(), "rows": rows}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    run_script("sweep_batching.py", main)
