"""``felix-jax`` command line (host-only): one module per command (``run``, ``compare``, ``demo``,
``plot``, ``report``, ``plot-trace``, ``data``) and :mod:`.common`, what they share (argument helpers, the
one-line errors)."""

from __future__ import annotations

import sys

from ..startup import exit_on_interrupt, is_entry, restore_interrupts

if is_entry(sys.argv[0], "felix-jax"):  # started as the command: a Ctrl-C while jax loads ends it in one line
    exit_on_interrupt("felix-jax")

import argparse  # noqa: E402
import traceback  # noqa: E402

from . import compare, data, demo, plot, plot_trace, report, run  # noqa: E402
from .common import traceback_asked

COMMANDS = (run, compare, demo, plot, report, plot_trace, data)  # in --help's order


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="felix-jax", description="JAX fleet emulator for federated learning under churn")
    sub = ap.add_subparsers(dest="command")
    for command in COMMANDS:
        command.add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    restore_interrupts()  # started: Ctrl-C is the command's to handle from here (experiment/stops.py)
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_parser()
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["run"] + argv
    args = ap.parse_args(argv)
    if args.command == "run":  # --preset defaults to quickstart; --resume refuses one given explicitly
        args.preset_given = args.preset is not None
        args.preset = args.preset or "quickstart"
    try:
        return args.func(args)
    except SystemExit as stop:  # an error reported in one line; its whole stack above it when asked for
        if isinstance(stop.code, str) and stop.__context__ is not None and traceback_asked(args):
            traceback.print_exception(stop.__context__, file=sys.stderr)
        raise

