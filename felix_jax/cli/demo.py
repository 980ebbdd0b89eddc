"""``felix-jax demo``: FedAvg rounds of one vectorized cohort each, without the fleet (host-only)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from .common import HelpFormatter, add_traceback_flag, enable_cache, one_line

def _demo(args: argparse.Namespace) -> int:
    from ..demo import DemoConfig, run_demo

    try:
        cfg = DemoConfig(rounds=args.rounds, seed=args.seed)
    except ValueError as e:
        raise SystemExit(f"felix-jax demo: {one_line(e)}")
    target = None
    if args.json is not None:  # checked before the demo runs, not after
        target = Path(args.json)
        if not args.json.strip() or target.is_dir():
            raise SystemExit(f"felix-jax demo: --json {args.json!r}: give a file name")
        if not target.parent.is_dir():
            raise SystemExit(f"felix-jax demo: --json {args.json}: the folder {target.parent} does not exist")
    enable_cache("demo")
    result = run_demo(cfg)
    if target is not None:
        try:  # strict JSON: a number that is not finite is written as null
            target.write_text(json.dumps(_finite_or_none(result), indent=2, default=str, allow_nan=False))
        except OSError as e:
            raise SystemExit(f"felix-jax demo: cannot write --json {target}: {one_line(e)}")
    return 0


def _finite_or_none(value):
    """``value`` with every float that is NaN or infinite replaced by None (JSON's null)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``demo`` command and its options."""
    demo = sub.add_parser("demo", help="FedAvg rounds of one vectorized cohort each: throughput and accuracy",
                          formatter_class=HelpFormatter,
                          description="Synchronous FedAvg on the embedded digits without the fleet (no availability, "
                                      "no virtual clock): each round trains its sampled clients in one vectorized "
                                      "cohort call; prints samples trained per second and test accuracy.")
    demo.add_argument("--rounds", type=int, default=12, help="FedAvg rounds to run")
    demo.add_argument("--seed", type=int, default=0, help="seed of the partition, client sampling and model init")
    demo.add_argument("--json", help="write the demo's numbers (throughput, accuracy per round) to this file")
    demo.set_defaults(func=_demo)
    add_traceback_flag(demo)
    return demo
