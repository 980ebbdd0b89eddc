"""What the per-event log costs: host milliseconds per event with and without it, in one process.

    python benchmarks/event_log_overhead.py [--preset quickstart] [--strategy felix] [--availability avail50]
        [--aggregations 40] [--reps 3] [--json out.json]

Runs the same scenario ``--reps`` times each way, alternating (these machines are shared and noisy:
compare the ratio, not absolute times): with the simulator's event log as built, and with its
``_log`` replaced by a no-op. Prints host ms per event (median over reps) and the ratio; the
results are the same either way (the log records, it decides nothing), which it checks.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("event_log_overhead.py")

import json
from pathlib import Path

import numpy as np

from felix_jax.commands import command_parser, output_file, run_script
from felix_jax.experiment import get_preset
from felix_jax.experiment.runner import build_simulator


def one_run(sc, log: bool):
    sim = build_simulator(sc)
    if not log:
        sim._log = lambda *a, **k: None
    rec = sim.run()
    return 1000 * rec.host_seconds / max(rec.events_processed, 1), rec


def main(argv=None) -> dict:
    ap = command_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="quickstart", help="the preset the runs start from")
    ap.add_argument("--strategy", default="felix", help="the strategy measured")
    ap.add_argument("--availability", default="avail50", help="the availability regime")
    ap.add_argument("--aggregations", type=int, default=40, help="aggregations per run (max_aggregations)")
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions (after one warm-up)")
    ap.add_argument("--json", type=output_file, help="write the results as JSON here")
    args = ap.parse_args(argv)
    sc = get_preset(args.preset).with_overrides({"strategy": args.strategy, "availability": args.availability,
                                                 "max_aggregations": str(args.aggregations),
                                                 "target_accuracy": "none"})
    one_run(sc, True)  # compiles: not timed
    ms = {True: [], False: []}
    recs = {}
    for _ in range(args.reps):
        for log in (False, True):
            t, recs[log] = one_run(sc, log)
            ms[log].append(t)
    same = recs[True].aggregation_times == recs[False].aggregation_times
    on, off = float(np.median(ms[True])), float(np.median(ms[False]))
    print(f"{'event log':<10} {'host ms/event (median)':>24}  reps")
    print(f"{'off':<10} {off:>24.3f}  {', '.join(f'{x:.3f}' for x in ms[False])}")
    print(f"{'on':<10} {on:>24.3f}  {', '.join(f'{x:.3f}' for x in ms[True])}")
    print(f"ratio on/off: x{on / off:.3f}; events per run {recs[True].events_processed}, "
          f"rows logged {len(recs[True].accounting.events)}; same results: {same}")
    out = {"scenario": sc.to_json(), "ms_per_event_off": ms[False], "ms_per_event_on": ms[True], "ratio": on / off,
           "rows": len(recs[True].accounting.events), "events": recs[True].events_processed, "same_results": same}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    return out


if __name__ == "__main__":
    run_script("event_log_overhead.py", main)
