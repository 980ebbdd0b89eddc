"""The paper's CIFAR-10 matrix (strategies x availability regimes), within a time budget.

On a GPU (one H200): ``python benchmarks/paper_matrix.py --scenario cifar10-paper
--budget-s 540 --json $OUT/paper.json``. Runs are ordered regime by regime and
stop starting new ones when the budget is spent (the table says which cells are
missing); each run is capped in virtual hours, so a strategy that stalls cannot
eat the budget. On a CPU the same script runs the small scenario:
``python benchmarks/paper_matrix.py --scenario cifar10-small``.
Needs FELIX_JAX_DATA (CIFAR-10 and the reference traces).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax

from felix_jax.compile_cache import enable_compilation_cache
from felix_jax.experiment import get_preset
from felix_jax.experiment.compare import comparison_table
from felix_jax.experiment.runner import run

PAPER_STRATEGIES = ["felix", "oort-oracle", "oort-async-oracle", "oort-async", "refl", "oort"]
PAPER_REGIMES = ["avail100", "avail90", "avail50", "mobiperf"]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="cifar10-small")
    ap.add_argument("--strategies", default=",".join(PAPER_STRATEGIES))
    ap.add_argument("--availability", default=",".join(PAPER_REGIMES))
    ap.add_argument("--budget-s", type=float, default=float("inf"), help="wall-clock budget for the whole matrix")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", default="results/paper-matrix")
    ap.add_argument("--json", help="write the rows and the table here")
    args = ap.parse_args(argv)
    enable_compilation_cache()
    base = get_preset(args.scenario).with_overrides(dict(kv.split("=", 1) for kv in args.set))
    strategies, regimes = args.strategies.split(","), args.availability.split(",")
    t0, rows, skipped = time.perf_counter(), [], []
    for regime in regimes:
        for strategy in strategies:
            if time.perf_counter() - t0 > args.budget_s:
                skipped.append(f"{strategy}/{regime}")
                continue
            sc = base.with_overrides({"strategy": strategy, "availability": regime})
            out = Path(args.out) / f"{strategy}-{regime}"
            s = run(sc, out).summary
            rows.append({"strategy": strategy, "availability": regime, "seed": sc.seed, "run_dir": str(out), **s})
            print(f"{strategy:>20} {regime:>9}: {s['time_to_target_h'] or float('nan'):7.2f} h to target, "
                  f"{s['bytes_total'] / 1e9:8.3f} GB, final acc {s['final_accuracy']:.3f}, "
                  f"{s['host_seconds']:.0f} s wall ({s['stop_reason']})", flush=True)
    table = comparison_table(rows, strategies, regimes)
    print(table)
    if skipped:
        print(f"not run within the {args.budget_s:.0f} s budget: {', '.join(skipped)}")
    result = {"scenario": base.to_json(), "backend": jax.default_backend(), "device": str(jax.devices()[0]),
              "rows": rows, "table": table, "skipped": skipped, "wall_s": time.perf_counter() - t0}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    return result


if __name__ == "__main__":
    main()
