"""``felix-jax`` command line (host-only)."""

from __future__ import annotations

import argparse
import sys


def _demo(args: argparse.Namespace) -> int:
    from .compile_cache import enable_compilation_cache
    from .demo import DemoConfig, run_demo

    enable_compilation_cache()
    run_demo(DemoConfig(rounds=args.rounds, seed=args.seed))
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="felix-jax", description="JAX fleet emulator for federated learning under churn")
    sub = ap.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="train a cohort on the embedded digits and print throughput and accuracy")
    demo.add_argument("--rounds", type=int, default=12)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if not getattr(args, "func", None):
        args = ap.parse_args(["demo"] + list(argv or sys.argv[1:]))
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
