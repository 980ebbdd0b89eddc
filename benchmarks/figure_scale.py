"""A run's per-client figures as the population grows: ``participation.png`` (updates per client, and
when they entered an aggregation) and ``partition.png`` (samples per client), drawn from synthetic
counts in seconds at any size (docs/results.md, "participation.png").

Each population's updates are drawn Zipf-skewed over its clients (``--updates`` of them, at uniform
virtual hours over a day), its split uniform in 1..29 samples a client; the figures are written to a
temporary folder. "stats s": the fairness indices summary.json holds (Gini, Jain, top 10%), which the
figure prints; "MB": the peak resident memory while drawing, above the memory before it (the synthetic
arrays included).

    python benchmarks/figure_scale.py                               # 10^3 .. 10^7 clients, 10^6 updates
    python benchmarks/figure_scale.py --populations 100000 --updates 6 --out fig.json
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("figure_scale.py")

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from felix_jax.commands import command_parser, output_file, positive_int, run_script
from felix_jax.memory import peak_resident_bytes, reset_peak_resident, resident_bytes


def measure(num_clients: int, updates: int, folder: Path, seed: int = 0) -> dict:
    """Seconds and memory of the two figures for ``num_clients`` clients and ``updates`` updates."""
    from felix_jax.experiment.event_log import _participation
    from felix_jax.experiment.figures.run import MAX_CLIENT_BARS, MAX_RASTER_MARKS, participation_figure
    from felix_jax.experiment.figures.split import split_figure

    rng = np.random.default_rng(seed)
    clients = (rng.zipf(1.3, updates) * 7919 % num_clients).astype(np.int64)
    hours = np.sort(rng.uniform(0.0, 24.0, updates))
    samples = rng.integers(1, 30, num_clients)
    reset_peak_resident()
    before = resident_bytes() or 0
    t0 = time.perf_counter()
    counts = np.bincount(clients, minlength=num_clients)
    stats = _participation(counts)
    t1 = time.perf_counter()
    participation_figure(counts, stats, hours, clients, folder / f"participation-{num_clients}.png", "synthetic")
    t2 = time.perf_counter()
    summary = {"min": int(samples.min()), "median": float(np.median(samples)), "max": int(samples.max())}
    split_figure(samples, None, summary, folder / f"partition-{num_clients}.png", "synthetic")
    t3 = time.perf_counter()
    peak = peak_resident_bytes() or before
    return {"clients": num_clients, "updates": updates, "stats_s": round(t1 - t0, 3),
            "participation_s": round(t2 - t1, 3), "partition_s": round(t3 - t2, 3),
            "peak_mb_above": round((peak - before) / 2 ** 20, 1),
            "participation": ("histogram" if num_clients > MAX_CLIENT_BARS else "bars") + " + "
                             + ("2-D histogram" if updates > MAX_RASTER_MARKS else "marks")}


def main(argv=None) -> list[dict]:
    parser = command_parser(__doc__)
    parser.add_argument("--populations", type=positive_int, nargs="+", default=[10 ** 3, 10 ** 5, 10 ** 6, 10 ** 7],
                        help="clients, one row each")
    parser.add_argument("--updates", type=positive_int, default=10 ** 6, help="aggregated updates drawn per population")
    parser.add_argument("--seed", type=int, default=0, help="the synthetic draws' seed")
    parser.add_argument("--out", type=output_file, default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401  (imported before the first row: its import is not a row's time)

    rows = []
    print(f"{'clients':>12} {'updates':>10} {'stats s':>8} {'participation s':>16} {'partition s':>12} "
          f"{'MB':>8}  drawn as")
    with tempfile.TemporaryDirectory() as folder:
        for n in args.populations:
            row = measure(n, args.updates, Path(folder), args.seed)
            rows.append(row)
            print(f"{n:>12,} {row['updates']:>10,} {row['stats_s']:>8.2f} {row['participation_s']:>16.2f} "
                  f"{row['partition_s']:>12.2f} {row['peak_mb_above']:>8.1f}  {row['participation']}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows}, indent=2))
    return rows


if __name__ == "__main__":
    run_script("figure_scale.py", main)
