"""What the metric writers cost a run: host milliseconds per event with and without them, in one process.

    python benchmarks/writer_overhead.py [--preset tiny] [--strategy felix] [--availability avail50]
        [--aggregations 60] [--reps 3] [--writers tensorboard,mlflow] [--json out.json]

Runs the same scenario ``--reps`` times each way, alternating (these machines are shared and noisy:
compare the ratio, not absolute times), each into a fresh results folder: with no writer, and with
``--writers`` (``felix-jax run --log-to``; MLflow into its default sqlite store in the folder). Prints
host ms per event in the event loop (where the writers are fed every checkpoint; median over reps),
the whole ``run()`` call's wall seconds (which adds each writer's opening and closing: for MLflow,
making a new store and logging the artifacts), and the ratios; the results are the same either
way (the writers record, they decide nothing), which it checks.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("writer_overhead.py")

import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from felix_jax.commands import command_parser, output_file, run_script
from felix_jax.experiment import get_preset
from felix_jax.experiment.runner import run
from felix_jax.experiment.writers import make_writers


def one_run(sc, folder: Path, writers) -> tuple[float, float, str]:
    if folder.exists():
        shutil.rmtree(folder)
    t0 = time.perf_counter()
    result = run(sc, folder, plot=False, writers=writers)
    wall = time.perf_counter() - t0
    s = result.summary
    return s["host_ms_per_event"], wall, (folder / "metrics.csv").read_text()


def main(argv=None) -> dict:
    ap = command_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="tiny", help="the preset the runs start from")
    ap.add_argument("--strategy", default="felix", help="the strategy measured")
    ap.add_argument("--availability", default="avail50", help="the availability regime")
    ap.add_argument("--aggregations", type=int, default=60, help="aggregations per run (max_aggregations)")
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions (after one warm-up)")
    ap.add_argument("--writers", default="tensorboard,mlflow",
        help="comma-separated metric writers (tensorboard, mlflow)")
    ap.add_argument("--json", type=output_file, help="write the results as JSON here")
    args = ap.parse_args(argv)
    writers = make_writers(args.writers)  # a missing extra: one line, before anything runs
    sc = get_preset(args.preset).with_overrides({"strategy": args.strategy, "availability": args.availability,
                                                 "max_aggregations": str(args.aggregations),
                                                 "target_accuracy": "none"})
    root = Path(tempfile.mkdtemp(prefix="writer-overhead-"))
    try:
        one_run(sc, root / "warm", ())  # compiles: not timed
        ms = {"off": [], "on": []}
        walls = {"off": [], "on": []}
        metrics = {}
        for rep in range(args.reps):
            for key, ws in (("off", ()), ("on", writers)):
                t, wall, metrics[key] = one_run(sc, root / f"{key}{rep}", ws)
                ms[key].append(t)
                walls[key].append(wall)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    same = metrics["on"] == metrics["off"]
    on, off = float(np.median(ms["on"])), float(np.median(ms["off"]))
    won, woff = float(np.median(walls["on"])), float(np.median(walls["off"]))
    label = "+".join(w.kind for w in writers) or "none"
    print(f"{'writers':<24} {'host ms/event (median)':>24} {'run() wall s (median)':>22}  reps (ms/event)")
    print(f"{'none':<24} {off:>24.3f} {woff:>22.2f}  {', '.join(f'{x:.3f}' for x in ms['off'])}")
    print(f"{label:<24} {on:>24.3f} {won:>22.2f}  {', '.join(f'{x:.3f}' for x in ms['on'])}")
    print(f"ratio with/without: host ms/event x{on / off:.3f}, run() wall x{won / woff:.3f}; "
          f"same metrics.csv: {same}")
    out = {"scenario": sc.to_json(), "writers": label, "ms_per_event_off": ms["off"], "ms_per_event_on": ms["on"],
           "wall_s_off": walls["off"], "wall_s_on": walls["on"], "ratio_ms_per_event": on / off,
           "ratio_wall": won / woff, "same_results": same}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    return out


if __name__ == "__main__":
    run_script("writer_overhead.py", main)
