"""Interrupt and resume at scale: a fleet-scale run stopped by a real SIGINT, then resumed, against
the same run uninterrupted (docs/architecture.md "The server view at scale").

Three processes, one after another, each on ``fleet_scale.py``'s scenario (the tiny MLP on a shared
pool, FeLiX by default): the uninterrupted run; a run that this script sends SIGINT once it reports
model version ``--at`` (the run stops after the current event and writes a snapshot, as Ctrl-C
does); and ``resume=True`` on that folder. The finished folders' ``metrics.csv`` and ``events.csv``
(every dispatch, reply, timeout and aggregation) must be byte-identical. It prints a table (seconds,
peak RSS, snapshot size per stage) and writes JSON.

    python benchmarks/interrupt_resume.py --clients 10000000 --aggregations 60 --at 30 --out resume.json
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("interrupt_resume.py")

import argparse
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from felix_jax.commands import command_parser, output_file, run_script  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = ("metrics.csv", "events.csv")


def child(args) -> int:
    """One stage in this process: ``run`` (to the end), ``cut`` (until SIGINT) or ``resume``."""
    sys.path.insert(0, HERE)
    from fleet_scale import fleet_scenario

    from felix_jax.experiment.runner import run
    from felix_jax.fleet.simulator import FleetSimulator

    sc = fleet_scenario(args.clients, args.concurrency, args.aggregations, args.strategy, args.seed, args.dataset,
                        args.availability, args.slot_s)
    if args.stage == "cut":  # report each model version on stdout; the parent sends SIGINT at --at
        original = FleetSimulator._checkpoint

        def reporting(self):
            original(self)
            print(f"version {self.version}", flush=True)

        FleetSimulator._checkpoint = reporting
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job starts with it ignored
    t0 = time.perf_counter()
    result = run(sc, args.dir, plot=False, stop_on_signals=args.stage == "cut", resume=args.stage == "resume")
    print(json.dumps({"stage": args.stage, "seconds": time.perf_counter() - t0,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "stop_reason": result.record.stop_reason, "interrupted_by": result.interrupted_by,
                      "aggregations": len(result.record.aggregation_times) - 1}), flush=True)
    return 0


def _last_json(text: str) -> dict:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"a stage printed no result:\n{text[-2000:]}")


def _digest(folder: str) -> dict:
    out = {}
    for name in FILES:
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = hashlib.sha1(f.read()).hexdigest()
    return out


def _folder_mb(folder: str) -> float:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(folder) for f in fs) / 2 ** 20


def main(argv=None) -> int:
    ap = command_parser(__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100_000, help="clients in the fleet (num_clients)")
    ap.add_argument("--concurrency", type=int, default=1_000, help="tasks in flight (concurrency)")
    ap.add_argument("--aggregations", type=int, default=40, help="aggregations per run (max_aggregations)")
    ap.add_argument("--at", type=int, default=None, help="model version to interrupt at (default: half way)")
    ap.add_argument("--strategy", default="felix", help="the strategy measured")
    ap.add_argument("--availability", default="avail50", help="the availability regime")
    ap.add_argument("--slot-s", type=float, default=600.0, help="slot length of a synthetic regime in seconds (slot_s)")
    ap.add_argument("--seed", type=int, default=0, help="the runs' seed")
    ap.add_argument("--dataset", default=None, help="data set (default: the 8x8 digits, written to a temp .npz)")
    ap.add_argument("--out", type=output_file, default=None, help="JSON file for the result")
    ap.add_argument("--stage", default=None, help=argparse.SUPPRESS)  # child process
    ap.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.stage:
        return child(args)
    at = args.at if args.at is not None else max(1, args.aggregations // 2)
    if not 0 < at < args.aggregations:
        ap.error(f"--at must lie strictly between 0 and --aggregations ({args.aggregations}), got {at}")
    tmp = tempfile.TemporaryDirectory()
    if args.dataset is None:
        sys.path.insert(0, HERE)
        from fleet_scale import digits8_npz

        args.dataset = digits8_npz(os.path.join(tmp.name, "digits8.npz"))
    common = [sys.executable, os.path.abspath(__file__), "--clients", str(args.clients), "--concurrency",
              str(args.concurrency), "--aggregations", str(args.aggregations), "--strategy", args.strategy,
              "--availability", args.availability, "--slot-s", str(args.slot_s), "--seed", str(args.seed),
              "--dataset", args.dataset]
    ref, cut = os.path.join(tmp.name, "ref"), os.path.join(tmp.name, "cut")
    stages = {}

    def stage(name, folder):
        p = subprocess.run([*common, "--stage", name, "--dir", folder], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"stage {name} failed ({p.returncode}):\n{p.stderr[-3000:]}")
        stages[name] = _last_json(p.stdout)
        print(f"{name:>7}: {stages[name]['seconds']:7.1f} s, peak RSS {stages[name]['peak_rss_mb']:8.0f} MB",
              flush=True)

    stage("run", ref)
    # the interrupted run: SIGINT once it reports version `at`
    t0 = time.perf_counter()
    p = subprocess.Popen([*common, "--stage", "cut", "--dir", cut], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    sent_at = None
    for line in p.stdout:
        if line.startswith("version ") and int(line.split()[1]) >= at and sent_at is None:
            p.send_signal(signal.SIGINT)
            sent_at = int(line.split()[1])
        elif line.startswith("{"):
            stages["cut"] = json.loads(line)
    err = p.stderr.read()
    p.wait()
    if sent_at is None:
        raise RuntimeError(f"the run ended before version {at}; nothing was interrupted:\n{err[-2000:]}")
    stages.setdefault("cut", {"stage": "cut"})
    stages["cut"].update({"seconds": time.perf_counter() - t0, "returncode": p.returncode, "signal_at": sent_at,
                          "snapshot_mb": _folder_mb(os.path.join(cut, "snapshot"))
                          if os.path.isdir(os.path.join(cut, "snapshot")) else None})
    print(f"    cut: SIGINT at version {sent_at}, stopped ({stages['cut'].get('stop_reason')}) after "
          f"{stages['cut'].get('aggregations')} aggregations, exit {p.returncode}, snapshot "
          f"{stages['cut']['snapshot_mb'] or 0:.0f} MB", flush=True)
    if stages["cut"].get("stop_reason") != "interrupted":
        raise RuntimeError(f"the signalled run did not stop on the signal: {stages['cut']}")
    stage("resume", cut)
    a, b = _digest(ref), _digest(cut)
    row = {"clients": args.clients, "concurrency": args.concurrency, "aggregations": args.aggregations,
           "strategy": args.strategy, "availability": args.availability, "slot_s": args.slot_s, "seed": args.seed,
           "interrupted_at_version": sent_at, "stages": stages, "uninterrupted": a, "resumed": b,
           "equal": a == b}
    print(f"metrics.csv and events.csv equal to the uninterrupted run's: {a == b}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(row, f, indent=1)
    return 0 if a == b else 1


if __name__ == "__main__":
    sys.exit(run_script("interrupt_resume.py", main))
