"""What client streams cost a training task: the same tasks on static client data and on a
stream that holds the very same samples at the task's time (nothing arrived yet, no drift),
so both do the same steps on the same data and only the stream view (the usable mask over the
client's row, its compaction, the per-position labels) differs.

    python benchmarks/stream_overhead.py                      # quickstart (paper CNN), 32 tasks
    python benchmarks/stream_overhead.py --preset tiny --tasks 8,32 --reps 9 --json results/stream_overhead.json

The two engines are timed alternately, call by call (compiled first); the ratio of medians is
the overhead. Prints a table and writes --json.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("stream_overhead.py")

import json
import time
from pathlib import Path

import jax
import numpy as np

from felix_jax.commands import command_parser, run_script
from felix_jax.compile_cache import enable_compilation_cache
from felix_jax.experiment import get_preset
from felix_jax.experiment.runner import build_simulator

# a stream whose only event is beyond any run: the stream code path on the static data
STATIC_LIKE = {"stream.drift": "surge", "stream.start_hours": "1000", "stream.live_eval": "false"}


def main(argv=None) -> dict:
    ap = command_parser(__doc__)
    ap.add_argument("--preset", default="quickstart", help="the preset the runs start from")
    ap.add_argument("--tasks", default="32", help="comma-separated task counts per training call")
    ap.add_argument("--reps", type=int, default=7, help="timed repetitions (after one warm-up)")
    ap.add_argument("--json", help="write the results as JSON here")
    args = ap.parse_args(argv)
    enable_compilation_cache()
    base = get_preset(args.preset)
    engines = {"static": build_simulator(base), "stream": build_simulator(base.with_overrides(STATIC_LIKE))}
    assert engines["static"].engine.streams is None and engines["stream"].engine.streams is not None
    rows = []
    for k in (int(x) for x in args.tasks.split(",")):
        clients = np.arange(k) % engines["static"].engine.data.num_clients
        times = {name: [] for name in engines}
        for rep in range(args.reps + 1):
            for name, sim in engines.items():
                store = sim.executor.store
                t0 = time.perf_counter()
                out = sim.engine.train(store.stacked, np.zeros(k, np.int32), clients, np.arange(k) + 1000 * rep,
                                       np.zeros(k))
                jax.block_until_ready(out.parts)
                if rep:  # rep 0 compiles
                    times[name].append(time.perf_counter() - t0)
        med = {name: float(np.median(v)) for name, v in times.items()}
        rows.append({"tasks": k, "static_s": med["static"], "stream_s": med["stream"],
                     "overhead": med["stream"] / med["static"] - 1})
    print(f"{args.preset}, {jax.default_backend()}: median seconds per training call")
    print(f"{'tasks':>6} {'static':>9} {'stream':>9} {'overhead':>9}")
    for r in rows:
        print(f"{r['tasks']:>6} {r['static_s']:>9.3f} {r['stream_s']:>9.3f} {r['overhead']:>+9.1%}")
    result = {"preset": args.preset, "backend": jax.default_backend(), "reps": args.reps, "rows": rows}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    run_script("stream_overhead.py", main)
