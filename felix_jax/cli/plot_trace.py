"""``felix-jax plot-trace``: an availability trace's tier shares over time and a client raster
(host-only)."""

from __future__ import annotations

import argparse
import math

from .common import USER_ERRORS, HelpFormatter, add_traceback_flag, one_line, user_path

PLOT_TRACE_EXAMPLES = """examples:
  felix-jax plot-trace avail50                               # avail50-trace.png: 100 clients, 24 h
  felix-jax plot-trace my_trace.csv --out figures/mine.png
  felix-jax plot-trace ref:mobiperf_3st_50 --clients 100     # the paper's trace, shipped with felix-jax"""


def _plot_trace(args: argparse.Namespace) -> int:
    from ..experiment.figures.trace import plot_trace

    if args.out is not None and not args.out.strip():
        raise SystemExit(f"felix-jax plot-trace: --out {args.out!r}: an empty path; give a file name")
    if not (math.isfinite(args.slot_s) and args.slot_s > 0):
        raise SystemExit(f"felix-jax plot-trace: --slot-s {args.slot_s}: must be a finite number > 0")
    from ..experiment.registry import is_file_name

    trace = str(user_path(args.trace)) if is_file_name(args.trace) else args.trace  # a file: absolute at the edge
    out = None if args.out is None else user_path(args.out)
    try:
        path = plot_trace(trace, out, clients=args.clients, seed=args.seed, slot_s=args.slot_s, hours=args.hours)
    except (*USER_ERRORS, ValueError) as e:
        raise SystemExit(f"felix-jax plot-trace: {one_line(e)}")
    print(f"wrote {path}")
    return 0


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``plot-trace`` command and its options."""
    trace = sub.add_parser("plot-trace", help="draw an availability trace: tier shares over time and a client raster",
                           formatter_class=HelpFormatter, epilog=PLOT_TRACE_EXAMPLES)
    trace.add_argument("trace", metavar="FILE_OR_REGIME",
                       help="a trace file (.csv, .npz, FedScale .json/.pkl) or a regime (avail50, mobiperf, "
                            "ref:NAME; see run --list)")
    trace.add_argument("--out", help="the figure (default <name>-trace.png in this folder)")
    trace.add_argument("--clients", type=int, metavar="N",
                       help="clients to draw (default: a file's own, 100 for a synthetic regime; a trace with "
                            "fewer is cycled, as a run does)")
    trace.add_argument("--hours", type=float, metavar="H",
                       help="hours to draw (default: a file's duration, 24 for a synthetic regime)")
    trace.add_argument("--seed", type=int, default=0, help="seed of a synthetic regime's slots")
    trace.add_argument("--slot-s", type=float, default=600.0, metavar="S",
                       help="slot length of a synthetic regime (a scenario's slot_s)")
    trace.set_defaults(func=_plot_trace)
    add_traceback_flag(trace)
    return trace
